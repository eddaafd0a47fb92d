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
    "read_environ_var": "processes",
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
else:  # the same names, typed, for mypy (tests/project/test_layers.py holds them to HOMES)
    from statewarden.holders.heartbeats import apply_heartbeats as apply_heartbeats
    from statewarden.holders.locks import ReadAhead as ReadAhead
    from statewarden.holders.opens import OpenWatch as OpenWatch
    from statewarden.holders.processes import human_age as human_age
    from statewarden.holders.processes import read_cmdline as read_cmdline
    from statewarden.holders.processes import read_environ_var as read_environ_var
    from statewarden.holders.processes import read_stat as read_stat
    from statewarden.holders.processes import read_uid as read_uid
    from statewarden.holders.processes import short_command as short_command
    from statewarden.holders.report import DB_FILE as DB_FILE
    from statewarden.holders.report import SHM_FILE as SHM_FILE
    from statewarden.holders.report import VIA_DESCRIPTORS as VIA_DESCRIPTORS
    from statewarden.holders.report import WAL_FILE as WAL_FILE
    from statewarden.holders.report import Holder as Holder
    from statewarden.holders.report import HolderScan as HolderScan
    from statewarden.holders.scan import LOCK_LOST as LOCK_LOST
    from statewarden.holders.scan import VIA_LOCKS as VIA_LOCKS
    from statewarden.holders.scan import HolderScanner as HolderScanner
    from statewarden.holders.scan import age_seconds as age_seconds
    from statewarden.holders.units import annotate as annotate
    from statewarden.holders.units import systemd_view as systemd_view
