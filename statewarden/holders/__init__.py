"""The holders engine: who holds a database, and which unit each holder belongs to.

``processes`` reads one process from ``/proc`` and names its kind; ``scan`` finds every
holder of a database (descriptors, maps, ``/proc/locks``, stale inodes), incrementally,
from its parts: ``bundle`` (which file of a database a descriptor or a map names),
``holdings`` (what one process holds), ``incremental`` (the cache between scans),
``lock_owners`` (the lock check) and ``findings`` (the result per database);
``locks`` reads ``/proc/locks`` and the OFD locks descriptors carry; ``opens`` turns
inotify open events into cheap re-scans; ``report`` holds the records and their JSON;
``units`` confirms each holder's unit with the user manager.
"""

from statewarden.public import public_face

TYPE_CHECKING = False  # without importing typing: `statewardenctl holders` starts faster

# The names other parts use, and the module each lives in ("": the submodule itself).
HOMES = {
    "apply_heartbeats": "heartbeats",
    "OpenWatch": "opens",
    "ReadAhead": "locks",
    "human_age": "processes",
    "read_cmdline": "processes",
    "read_stat": "processes",
    "read_uid": "processes",
    "short_command": "processes",
    "DB_FILE": "report",
    "SHM_FILE": "report",
    "WAL_FILE": "report",
    "VIA_DESCRIPTORS": "report",
    "Holder": "report",
    "HolderScan": "report",
    "HolderScanner": "scan",
    "LOCK_LOST": "scan",
    "VIA_LOCKS": "scan",
    "age_seconds": "scan",
    "annotate": "units",
    "systemd_view": "units",
}
__all__ = list(HOMES)
if not TYPE_CHECKING:  # mypy reads each name in its home module, typed
    __getattr__ = public_face(__name__, HOMES)
