"""Who holds a state.db: every process with a descriptor or a mapping on its files.

A holder is found by matching ``(st_dev, st_ino)`` of ``state.db``, ``-wal``, ``-shm``
and ``-journal`` against every ``/proc/<pid>/fd/*`` (``stat`` follows the magic link
to the open file without opening it) and every ``/proc/<pid>/maps`` line (SQLite
mmaps ``-shm``). Nothing here opens a database file (docs/safety.md rule 2).

A descriptor on the same device whose link names one of those files but whose inode
is not the current one is **stale**: an old or deleted state.db / -wal / -shm still
written through (docs/stories.md stories 6 and 7).

Locks come from ``/proc/locks``. A SQLite connection in WAL mode keeps a SHARED lock
on the database file for as long as it is open (bytes 1073741826..1073742335, and
byte 128 of ``-shm``); the last connection to close takes EXCLUSIVE and deletes
``-wal`` / ``-shm``. A process with the WAL files open but no lock on the database
has **lost its locks** (closing any descriptor on a file drops the process's POSIX
locks on it, docs/stories.md story 7), so another process's close can delete the files under it.

Kernel threads (``PF_KTHREAD`` in ``/proc/<pid>/stat``) hold no files: they are left
out, neither inspected nor uninspectable, only counted.

A process whose descriptors cannot be read (another user's, EACCES; root's PID 1 in
some containers, even for root) is handled by the ``other_users`` policy. ``locks``
(the default): it is looked up in ``/proc/locks``, readable by everyone, against the
current and the remembered old inodes of the database's files; every SQLite connection
holds a lock there for as long as it is open. One that owns a lock is a holder
(``via: locks``, with what can still be read: uid, comm, command line, cgroup, parent,
start time); one that owns none is counted. ``fail``: it makes the scan incomplete.
What the lock check cannot see is a process of another user holding a plain
descriptor with no lock (no SQLite connection).

Open file description (OFD) locks, which every writer of Hermes since 0.20 adds beside
SQLite's own (docs/hermes.md), name no owner in ``/proc/locks`` (pid -1). Each one is
attributed to a descriptor through the ``lock:`` lines of ``/proc/<pid>/fdinfo/<fd>`` of
the processes that could be read, counting open file descriptions once (descriptors that
share one, after ``dup`` or ``fork``, are told apart with ``kcmp``; where the kernel cannot
say, they count as one). Such a lock counts as a lock of its holder (no ``LOST-LOCKS``
while it covers the range). Only a lock no readable descriptor carries is "ownerless",
and an ownerless lock makes the scan incomplete: an unreadable process, or one outside
this PID namespace, may hold it. An OFD lock taken between the read of its process and
the read of ``/proc/locks`` is caught by reading the holders once more.

An old inode (a replaced or deleted state.db, -wal or -shm) counts only while it can be
shown to be the same file: held open and unlinked by a process this scan read. Inode
numbers are reused: a number the files once had, remembered from an earlier scan, may
name a stranger's file by now, so it is never matched on its own.

Fail closed (docs/safety.md rule 1), whatever the policy: the scan is ``complete: false`` when
``/proc/locks`` cannot be read, when /proc is mounted ``hidepid`` (other users'
processes hidden; root sees them all), or when ``/proc/locks`` names an owner that
``/proc`` does not list (a hidden process: an owner that exits releases its locks
before it leaves /proc). A process that exits while it is read holds nothing any more
and is listed under ``vanished``.

Incremental scans reuse a cache: holders keyed by (pid, start time), other processes
by pid and descriptor count (their start time is not read at all: it is most of the
cost of a full scan and tells nothing about a process holding nothing). They read
again: new pids, current holders, and processes that could not be inspected. Other
processes are looked at only when an inotify ``IN_OPEN`` watch (``opens.py``) says
someone opened a target file since the last scan, plus a round-robin of
``refresh_per_scan`` of them per scan; "looked at" is one ``stat`` of
``/proc/<pid>/fd``, whose size is the descriptor count (Linux >= 6.2; older kernels
read the process again), and a process is read again only if its count changed. A
non-holder can only become one by opening a file (an event), by being new (a new
pid), or by receiving a descriptor over a socket (its count changes; found by the
round-robin within ``ceil(processes / refresh_per_scan)`` scans). Replaced target
files force a full scan. Maintenance decisions use full scans.

On a host with at least ``parallel_min_processes`` processes a scan that can read every
process (root, or the capabilities to) reads /proc in ``workers`` threads (the reads
release the GIL): by default as many as the load average leaves processors idle, up to
``DEFAULT_SCAN_WORKERS``. One that cannot stats most processes once each, in one thread.
"""

from __future__ import annotations

import os

from statewarden.config_literals import DEFAULT_OTHER_USERS
from statewarden.holders.bundle import bundle_files, bundle_of, stat_id
from statewarden.holders.findings import Findings
from statewarden.holders.holdings import (
    DEFAULT_SCAN_WORKERS,
    PARALLEL_MIN_PROCESSES,
    ProcessReader,
    idle_workers,
)
from statewarden.holders.incremental import DEFAULT_REFRESH_PER_SCAN, ProcessCache, list_pids
from statewarden.holders.lock_owners import LockOwners
from statewarden.holders.locks import LockTable, ReadAhead
from statewarden.holders.report import (
    FILE_NAMES,
    LOCK_HELD,
    LOCK_LOST,
    LOCK_NONE,
    LOCK_UNKNOWN,
    VIA_DESCRIPTORS,
    VIA_LOCKS,
    Holder,
    HolderScan,
    LockInfo,
    age_seconds,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

    from statewarden.config_literals import OtherUsersPolicy
    from statewarden.holders.opens import OpenWatch
    from statewarden.mounts import Mount

__all__ = [
    "DEFAULT_SCAN_WORKERS",
    "FILE_NAMES",
    "LOCK_HELD",
    "LOCK_LOST",
    "LOCK_NONE",
    "LOCK_UNKNOWN",
    "PARALLEL_MIN_PROCESSES",
    "VIA_DESCRIPTORS",
    "VIA_LOCKS",
    "Holder",
    "HolderScan",
    "HolderScanner",
    "LockInfo",
    "age_seconds",
    "idle_workers",
    "scan_holders",
]

DEFAULT_PARENT_DEPTH = 16
# Processes (by comm) that may stay uninspectable without making a scan incomplete
# under ``other_users: fail``, e.g. a sandbox's own init that denies ptrace access even
# to root. They are still listed under ``uninspectable`` with ``exempt: true``.
DEFAULT_EXEMPT_COMMS: tuple[str, ...] = ()


class HolderScanner:
    """Scans ``/proc`` for the holders of one or more databases, with a cache.

    ``scan(full=True)`` reads every process; ``scan(full=False)`` reads only what
    changed since the last scan (module docstring). One scanner serves many
    databases with one pass over ``/proc``. Its parts: a :class:`ProcessReader` reads
    what each process holds, a :class:`ProcessCache` keeps it between scans,
    :class:`LockOwners` checks ``/proc/locks``, and :class:`Findings` tells the result
    per database.
    """

    def __init__(
        self,
        dbs: Sequence[str | os.PathLike[str]],
        *,
        proc: str = "/proc",
        refresh_per_scan: int = DEFAULT_REFRESH_PER_SCAN,
        parent_depth: int = DEFAULT_PARENT_DEPTH,
        exempt_comms: Iterable[str] = DEFAULT_EXEMPT_COMMS,
        other_users: OtherUsersPolicy = DEFAULT_OTHER_USERS,
        watch_opens: bool = True,
        workers: int | None = None,
        parallel_min_processes: int = PARALLEL_MIN_PROCESSES,
        name_unreadable: bool = True,
        read_locks_ahead: bool = False,
    ) -> None:
        # Absolute paths, as strings (no pathlib on `statewardenctl holders`' path)
        self.dbs = [os.path.abspath(os.path.expanduser(os.fspath(d))) for d in dbs]
        self.proc = proc
        self.parent_depth = parent_depth
        # Both may be set again between scans (a reloaded policy).
        self.exempt_comms = frozenset(exempt_comms)
        self.other_users = other_users
        self._cache = ProcessCache(refresh_per_scan)
        self._lock_owners = LockOwners(proc)
        self._restricted: str | None = None
        self._targets_key: tuple[Any, ...] | None = None
        self._opens: OpenWatch | None = None
        if watch_opens:  # inotify, for incremental scans; a one-shot scan skips its set-up
            from statewarden.holders.opens import OpenWatch  # noqa: PLC0415

            self._opens = OpenWatch()
        # False: a process that cannot be read and holds no lock keeps "?" for its name,
        # parent and start time (one read of /proc/<pid>/stat each spared), for a report
        # that only counts such processes. One that holds a lock is named all the same.
        self.name_unreadable = name_unreadable
        # True for a command a user waits on: /proc/locks is read in a thread while the
        # processes are read, which takes the kernel's wait for its first reader off the
        # scan's wall time (locks.ReadAhead). The daemon's scans need not hurry.
        self.read_locks_ahead = read_locks_ahead
        self._reader = ProcessReader(
            proc,
            names_needed=self._names_needed(),
            workers=workers,
            parallel_min_processes=parallel_min_processes,
        )

    # -- public ---------------------------------------------------------------

    def scan(self, *, full: bool = True) -> list[HolderScan]:
        targets = [bundle_of(db) for db in self.dbs]
        key = tuple((t.dir_real, tuple(sorted(t.ids.items()))) for t in targets)
        replaced = key != self._targets_key
        if replaced:
            full = True
            self._targets_key = key
        # Read the open events before the processes: an open after this is seen next time.
        opened = True
        if self._opens is not None:
            self._opens.watch(self.files(), rearm=replaced)
            opened = self._opens.poll()
        devs = {i[0] for t in targets for i in t.ids.values() if i}
        # A deleted file keeps the device of its folder: stale holders are found there.
        devs |= {d[0] for d in (stat_id(t.dir_real) for t in targets) if d}
        if full or replaced:
            self._restricted = restricted_proc(self.proc)
        pids = list_pids(self.proc)
        vanished: list[int] = []
        cache, owners, read = self._cache, self._lock_owners, self._reader.read_all
        self._reader.names_needed = self._names_needed()
        todo = cache.to_read(pids, full=full, opened=opened, reader=self._reader)
        ahead = ReadAhead(self.proc) if self.read_locks_ahead else None
        try:
            cache.store(read(todo, targets, devs), vanished)
            locks = owners.read(targets, cache.entries.values())
        finally:
            if ahead is not None:
                ahead.stop()
        hidden: list[int] = []
        if isinstance(locks, LockTable):
            newborn, hidden = owners.unlisted(locks, set(pids), targets, cache.entries.values())
            if newborn:  # started after /proc was listed, and already locks a target
                cache.store(read(newborn, targets, devs), vanished)
                pids += [p for p in newborn if p in cache.entries]
            if owners.attribute(locks, cache.entries.values()):
                # An OFD lock taken after its process was read, or by a process started
                # since the listing: read the holders and the newcomers once more.
                listed = set(pids)
                new = [p for p in list_pids(self.proc) if p not in listed]
                again = [e.pid for e in cache.entries.values() if e.fds] + new
                cache.store(read(again, targets, devs), vanished)
                pids += [p for p in new if p in cache.entries]
                locks = owners.read(targets, cache.entries.values())
                if isinstance(locks, LockTable):
                    owners.attribute(locks, cache.entries.values())
        findings = Findings(
            self._reader,
            locks,
            cache.holding(),
            other_users=self.other_users,
            exempt_comms=self.exempt_comms,
            parent_depth=self.parent_depth,
            processes=len(pids),
            mode="full" if full else "incremental",
            vanished=vanished,
            restricted=self._restricted,
            hidden=hidden,
            coverage=cache.coverage(
                by_locks=self.other_users == "locks" and isinstance(locks, LockTable)
            ),
        )
        return [findings.for_database(i, t) for i, t in enumerate(targets)]

    def files(self) -> list[str]:
        """Each database's bundle (the file, -wal, -shm, -journal) where SQLite keeps it:
        through a symlink to the database file, next to the file it leads to
        (``bundle.bundle_of``). What an open watch on the databases watches."""
        return bundle_files(self.dbs)

    def close(self) -> None:
        """Release the inotify descriptor (the scanner can still scan, without it)."""
        if self._opens is not None:
            self._opens.close()
            self._opens = None

    def _names_needed(self) -> bool:
        """Whether every unreadable process is named (``name_unreadable``, or a policy that
        reports them one by one: ``other_users: fail``, ``exempt_comms`` matched by name)."""
        return self.name_unreadable or self.other_users != "locks" or bool(self.exempt_comms)


def restricted_proc(proc: str = "/proc") -> str | None:
    """Why ``proc`` may hide other users' processes from this one, or None.

    ``hidepid=1`` (``noaccess``), ``2`` (``invisible``) and ``4`` (``ptraceable``) hide
    or close other users' ``/proc/<pid>`` to everyone but root and the members of the
    mount's ``gid=`` group: for anyone else a scan through such a /proc cannot be complete.
    """
    if os.geteuid() == 0:
        return None
    from statewarden.mounts import read_mounts  # noqa: PLC0415 - root never reads them

    real = os.path.realpath(proc)
    found: Mount | None = None
    for m in read_mounts():
        if m.mount_point == real and m.fstype == "proc":
            found = m  # a later mount on the same point hides an earlier one
    if found is None:
        return None
    options = dict(opt.partition("=")[::2] for opt in found.super_options.split(","))
    hidepid = options.get("hidepid", "0")
    if hidepid in ("0", "off"):
        return None
    gid = options.get("gid", "")
    if gid.isdigit() and int(gid) in {os.getegid(), *os.getgroups()}:
        return None  # the group hidepid exempts
    return (
        f"{proc} is mounted with hidepid={hidepid}: other users' processes are hidden"
        " from this scan, so a holder may be missed"
    )


def scan_holders(dbs: Iterable[str | os.PathLike[str]], *, full: bool = True) -> list[HolderScan]:
    """One full scan of ``/proc`` for the holders of ``dbs``."""
    return HolderScanner(list(dbs)).scan(full=full)
