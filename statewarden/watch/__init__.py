"""Watchers: what statewarden looks at to see trouble coming.

``logtail`` follows the Hermes log files and cuts them into records (``records``), which
``rules`` turns into signals; its parts: ``log_reader`` (one open file cut into records),
``rotation`` (one log across the files it has been) and ``replays`` (copies and history
dropped);
``journal`` follows the Hermes units' journal; ``files`` watches state.db and its
sidecars; ``status`` reads the facts about each database without harm
(``statewardenctl status``). Each watcher produces signals and observations
(``statewarden.incidents.signals``).
"""

from typing import TYPE_CHECKING

from statewarden.public import public_face

# The names other parts use, and the module each lives in ("": the submodule itself).
HOMES = {
    "FileEvents": "events",
    "HolderWatcher": "holders",
    "describe": "holders",
    "LOG_STALE_KEYS": "holders",
    "JOURNAL_REMEDY": "journal",
    "JournalFollower": "journal",
    "Guard": "monitor",
    "TargetMonitor": "monitor",
    "MountWatcher": "mounts",
    "DatabaseStatus": "status",
    "FilesystemFacts": "status",
    "database_status": "status",
    "status_all": "status",
    "UnitWatcher": "units",
}
__all__ = list(HOMES)
if not TYPE_CHECKING:  # mypy reads each name in its home module, typed
    __getattr__ = public_face(__name__, HOMES)
