"""What a holder scan reports: one record per holder, one per database, and their JSON.

The scanner (``holders.py``) fills these; the CLI, the daemon's holder watcher and
maintenance read them. ``flags`` are the words the user sees: ``STALE`` (holds an old
or deleted inode of a bundle file), ``LOST-LOCKS`` (a WAL connection without its
SHARED lock on the database), ``NO-LOCK`` (the database open with no lock at all).
"""

from __future__ import annotations

import time

from statewarden.holders.processes import as_datetime
from statewarden.record import FrozenRecord, Record
from statewarden.sidecars import JOURNAL_SUFFIX, SHM_SUFFIX, WAL_SUFFIX
from statewarden.targets import DB_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:
    import datetime as dt
    from typing import Any

# How a holder's files are named in reports, whatever the database's own file name.
DB_FILE = DB_NAME
WAL_FILE = DB_NAME + WAL_SUFFIX
SHM_FILE = DB_NAME + SHM_SUFFIX
JOURNAL_FILE = DB_NAME + JOURNAL_SUFFIX
FILE_NAMES = (DB_FILE, WAL_FILE, SHM_FILE, JOURNAL_FILE)  # in the order of BUNDLE_SUFFIXES
LOCK_HELD = "held"
LOCK_LOST = "lost"
LOCK_NONE = "none"
LOCK_UNKNOWN = "unknown"  # /proc/locks could not be read
# How a holder was found: its descriptors and maps were read, or (a process that could
# not be read) only its locks in /proc/locks were seen.
VIA_DESCRIPTORS = "descriptors"
VIA_LOCKS = "locks"


class LockInfo(FrozenRecord):
    """One ``/proc/locks`` entry a holder owns on one of the bundle's files."""

    __slots__ = ("end", "file", "kind", "mode", "start")
    file: str
    kind: str  # POSIX, FLOCK, OFDLCK
    mode: str  # READ, WRITE
    start: int
    end: str  # a number or EOF

    def __init__(self, file: str, kind: str, mode: str, start: int, end: str) -> None:
        self._set(file=file, kind=kind, mode=mode, start=start, end=end)

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "kind": self.kind,
            "mode": self.mode,
            "start": self.start,
            "end": self.end,
        }


class Holder(Record):
    """A process holding one or more of a database's files."""

    __slots__ = (
        "cgroup",
        "cmdline",
        "comm",
        "exe",
        "fds",
        "kind",
        "kind_evidence",
        "lock_state",
        "locks",
        "main_pid_of_unit",
        "maps",
        "orphan",
        "parents",
        "pid",
        "ppid",
        "ssh_connection",
        "stale_files",
        "start_ticks",
        "started",
        "uid",
        "unit",
        "via",
    )

    def __init__(
        self,
        *,
        pid: int,
        ppid: int,
        uid: int | None,
        comm: str,
        kind: str,
        unit: str | None,
        cgroup: str | None,
        orphan: bool,
        fds: dict[str, int],
        maps: dict[str, int],
        stale_files: list[str],
        locks: list[LockInfo],
        lock_state: str,
        cmdline: list[str],
        exe: str | None,
        start_ticks: int,
        started: float,
        ssh_connection: str | None,
        parents: list[dict[str, Any]],
        main_pid_of_unit: bool | None = None,
        via: str = VIA_DESCRIPTORS,
        kind_evidence: str | None = None,
    ) -> None:
        self.pid = pid
        self.ppid = ppid
        self.uid = uid
        self.comm = comm
        self.kind = kind
        self.unit = unit
        self.cgroup = cgroup
        self.orphan = orphan
        self.fds = fds
        self.maps = maps
        self.stale_files = stale_files
        self.locks = locks
        self.lock_state = lock_state
        self.cmdline = cmdline
        self.exe = exe
        self.start_ticks = start_ticks
        self.started = started  # seconds since the epoch
        self.ssh_connection = ssh_connection
        self.parents = parents
        self.main_pid_of_unit = main_pid_of_unit
        self.via = via
        # What says its kind, when not its command line (holders/heartbeats.py)
        self.kind_evidence = kind_evidence

    @property
    def started_at(self) -> dt.datetime:
        """When it started, as an aware datetime (UTC)."""
        return as_datetime(self.started)

    @property
    def stale(self) -> bool:
        return bool(self.stale_files)

    @property
    def flags(self) -> list[str]:
        out = []
        if self.stale:
            out.append("STALE")
        if self.lock_state == LOCK_LOST:
            out.append("LOST-LOCKS")
        elif self.lock_state == LOCK_NONE and self.fds.get("state.db"):
            out.append("NO-LOCK")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "ppid": self.ppid,
            "uid": self.uid,
            "comm": self.comm,
            "kind": self.kind,
            "unit": self.unit,
            "orphan": self.orphan,
            "stale": self.stale,
            "stale_files": list(self.stale_files),
            "locks": [lk.to_json() for lk in self.locks],
            "lock_state": self.lock_state,
            "flags": self.flags,
            "fds": dict(self.fds),
            "maps": dict(self.maps),
            "cmdline": list(self.cmdline),
            "exe": self.exe,
            "started_at": self.started_at.isoformat(timespec="seconds"),
            "ssh_connection": self.ssh_connection,
            "parents": list(self.parents),
            "main_pid_of_unit": self.main_pid_of_unit,
            "via": self.via,
            "kind_evidence": self.kind_evidence,
        }


class HolderScan(Record):
    """The holders of one database, as found by one scan."""

    __slots__ = (
        "coverage",
        "db",
        "files",
        "holders",
        "mode",
        "notes",
        "other_users",
        "problems",
        "processes",
        "uninspectable",
        "vanished",
    )

    def __init__(
        self,
        *,
        db: str,
        files: dict[str, tuple[int, int] | None],
        holders: list[Holder],
        problems: list[str],
        uninspectable: list[dict[str, Any]],
        vanished: list[int],
        processes: int,
        mode: str,
        notes: list[str] | None = None,
        other_users: str = "locks",
        coverage: dict[str, int] | None = None,
    ) -> None:
        self.db = db
        self.files = files
        self.holders = holders
        self.problems = problems
        self.uninspectable = uninspectable
        self.vanished = vanished
        self.processes = processes
        self.mode = mode
        self.notes: list[str] = [] if notes is None else notes
        self.other_users = other_users
        # processes read, checked through /proc/locks only, kernel threads left out,
        # and unreadable ones that count against completeness
        self.coverage: dict[str, int] = {} if coverage is None else coverage

    @property
    def complete(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "complete": self.complete,
            "db": self.db,
            "scan": self.mode,
            "processes": self.processes,
            "other_users": self.other_users,
            "coverage": dict(self.coverage),
            "files": {
                k: (None if v is None else {"dev": v[0], "ino": v[1]})
                for k, v in self.files.items()
            },
            "holders": [h.to_json() for h in self.holders],
            "problems": list(self.problems),
            "uninspectable": list(self.uninspectable),
            "vanished": list(self.vanished),
            "notes": list(self.notes),
        }


def age_seconds(holder: Holder, now: float | None = None) -> float:
    now = time.time() if now is None else now
    return now - holder.started
