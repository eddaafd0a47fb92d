"""Watchers: what statewarden looks at to see trouble coming.

``logtail`` follows the Hermes log files and cuts them into records (``records``), which
``rules`` turns into signals;
``journal`` follows the Hermes units' journal; ``files`` watches state.db and its
sidecars. Each watcher produces signals and observations (``statewarden.incidents.signals``).
"""
