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
else:  # the same names, typed, for mypy (tests/project/test_layers.py holds them to HOMES)
    from statewarden.watch.events import FileEvents as FileEvents
    from statewarden.watch.holders import LOG_STALE_KEYS as LOG_STALE_KEYS
    from statewarden.watch.holders import HolderWatcher as HolderWatcher
    from statewarden.watch.holders import describe as describe
    from statewarden.watch.journal import JOURNAL_REMEDY as JOURNAL_REMEDY
    from statewarden.watch.journal import JournalFollower as JournalFollower
    from statewarden.watch.monitor import Guard as Guard
    from statewarden.watch.monitor import TargetMonitor as TargetMonitor
    from statewarden.watch.mounts import MountWatcher as MountWatcher
    from statewarden.watch.status import DatabaseStatus as DatabaseStatus
    from statewarden.watch.status import FilesystemFacts as FilesystemFacts
    from statewarden.watch.status import database_status as database_status
    from statewarden.watch.status import status_all as status_all
    from statewarden.watch.units import UnitWatcher as UnitWatcher
