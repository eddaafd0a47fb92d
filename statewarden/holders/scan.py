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
from statewarden.holders import processes as P
from statewarden.holders.locks import (
    LockKey,
    Locks,
    LockTable,
    ReadAhead,
    attribute,
    fd_locks,
    read_locks,
)
from statewarden.holders.report import (
    DB_FILE,
    FILE_NAMES,
    LOCK_HELD,
    LOCK_LOST,
    LOCK_NONE,
    LOCK_UNKNOWN,
    SHM_FILE,
    VIA_DESCRIPTORS,
    VIA_LOCKS,
    Holder,
    HolderScan,
    LockInfo,
    age_seconds,
)
from statewarden.record import FrozenRecord, Record
from statewarden.sidecars import BUNDLE_SUFFIXES, sidecar_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    from typing import Any

    from statewarden.config_literals import OtherUsersPolicy
    from statewarden.holders.opens import OpenWatch
    from statewarden.mounts import Mount

__all__ = [
    "FILE_NAMES",
    "LOCK_HELD",
    "LOCK_LOST",
    "LOCK_NONE",
    "LOCK_UNKNOWN",
    "VIA_DESCRIPTORS",
    "VIA_LOCKS",
    "Holder",
    "HolderScan",
    "HolderScanner",
    "LockInfo",
    "age_seconds",
    "scan_holders",
]

DEFAULT_REFRESH_PER_SCAN = 128
DEFAULT_PARENT_DEPTH = 16
# Threads reading /proc in a scan of at least PARALLEL_MIN_PROCESSES processes: at most
# this many, and no more than the processors the load average leaves idle (a thread
# waiting for a processor shortens nothing and costs the interpreter lock's hand-overs).
DEFAULT_SCAN_WORKERS = min(4, os.cpu_count() or 1)
PARALLEL_MIN_PROCESSES = 256
# Processes (by comm) that may stay uninspectable without making a scan incomplete
# under ``other_users: fail``, e.g. a sandbox's own init that denies ptrace access even
# to root. They are still listed under ``uninspectable`` with ``exempt: true``.
DEFAULT_EXEMPT_COMMS: tuple[str, ...] = ()
_DELETED = " (deleted)"
# What a process holds of a target when it holds nothing there (read, never written).
_NONE: dict[tuple[int, str, bool], int] = {}


class _Target(FrozenRecord):
    __slots__ = ("db", "dir_real", "ids", "name_bytes", "names", "real")
    db: str  # as the caller named it (what the report shows)
    real: str  # the file SQLite opens for it: symlinks followed, as SQLite follows them
    dir_real: str
    ids: dict[str, tuple[int, int] | None]  # file name -> (dev, ino) now
    names: dict[str, str]  # actual file name on disk -> name in FILE_NAMES
    name_bytes: bytes  # the database's file name, as memory maps spell it

    def __init__(
        self,
        db: str,
        real: str,
        ids: dict[str, tuple[int, int] | None],
        names: dict[str, str],
        name_bytes: bytes,
    ) -> None:
        self._set(
            db=db,
            real=real,
            dir_real=os.path.dirname(real),
            ids=ids,
            names=names,
            name_bytes=name_bytes,
        )


class _Entry(Record):
    """What one process instance was found holding, cached by (pid, start time)."""

    __slots__ = (
        "comm",
        "error",
        "fd_count",
        "fds",
        "kernel_thread",
        "maps",
        "named",
        "ofd",
        "pid",
        "ppid",
        "stale_ids",
        "start_ticks",
        "uid",
    )

    def __init__(
        self,
        *,
        pid: int,
        start_ticks: int = 0,
        comm: str = "?",
        ppid: int = 0,
        fd_count: int = 0,
        fds: dict[tuple[int, str, bool], int] | None = None,
        maps: dict[tuple[int, str, bool], int] | None = None,
        error: str | None = None,
        kernel_thread: bool = False,
        uid: int | None = None,
        named: bool = False,
    ) -> None:
        self.pid = pid
        self.start_ticks = start_ticks
        self.comm = comm
        self.ppid = ppid
        self.fd_count = fd_count  # descriptors listed in /proc/<pid>/fd when read
        # (target index, file name, stale) -> count
        self.fds: dict[tuple[int, str, bool], int] = {} if fds is None else fds
        self.maps: dict[tuple[int, str, bool], int] = {} if maps is None else maps
        self.error = error  # why it could not be inspected
        self.kernel_thread = kernel_thread  # PF_KTHREAD: left out of the scan
        self.uid = uid  # of a process that could not be read: who owns its /proc entry
        # (dev, ino) -> (target index, file name) of old or deleted inodes it holds
        self.stale_ids: dict[tuple[int, int], tuple[int, str]] = {}
        # (fd, (target index, file name, stale), lock) of each OFD lock its descriptors carry
        self.ofd: list[tuple[int, tuple[int, str, bool], LockKey]] = []
        self.named = named  # its stat was read (or tried): comm, ppid and start time are known


class _Vanished(Exception):
    pass


def _stat_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class HolderScanner:
    """Scans ``/proc`` for the holders of one or more databases, with a cache.

    ``scan(full=True)`` reads every process; ``scan(full=False)`` reads only what
    changed since the last scan (module docstring). One scanner serves many
    databases with one pass over ``/proc``.
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
        self.refresh_per_scan = refresh_per_scan
        self.parent_depth = parent_depth
        self.exempt_comms = frozenset(exempt_comms)
        self.other_users = other_users
        self._cache: dict[int, _Entry] = {}
        self._restricted: str | None = None
        self._targets_key: tuple[Any, ...] | None = None
        self._rr = 0
        self._opens: OpenWatch | None = None
        if watch_opens:  # inotify, for incremental scans; a one-shot scan skips its set-up
            from statewarden.holders.opens import OpenWatch  # noqa: PLC0415

            self._opens = OpenWatch()
        self.workers = workers
        self.parallel_min_processes = parallel_min_processes
        # False: a process that cannot be read and holds no lock keeps "?" for its name,
        # parent and start time (one read of /proc/<pid>/stat each spared), for a report
        # that only counts such processes. One that holds a lock is named all the same.
        self.name_unreadable = name_unreadable
        # True for a command a user waits on: /proc/locks is read in a thread while the
        # processes are read, which takes the kernel's wait for its first reader off the
        # scan's wall time (locks.ReadAhead). The daemon's scans need not hurry.
        self.read_locks_ahead = read_locks_ahead
        try:
            # Linux >= 6.2 reports the descriptor count as the size of /proc/<pid>/fd.
            self._fd_count_supported = os.stat(f"{proc}/self/fd").st_size > 0
        except OSError:
            self._fd_count_supported = False
        self._euid = os.geteuid()
        # Another uid's /proc/<pid>/fd opens only to root or with capabilities: without
        # them, a process whose /proc entry someone else owns is known unreadable from
        # one stat (the kernel's own rule), not from a failing listdir.
        self._reads_all = self._euid == 0 or P.has_any_capability(
            (P.CAP_DAC_OVERRIDE, P.CAP_DAC_READ_SEARCH, P.CAP_SYS_PTRACE), proc
        )

    # -- public ---------------------------------------------------------------

    def scan(self, *, full: bool = True) -> list[HolderScan]:
        targets = [self._target(db) for db in self.dbs]
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
        devs |= {d[0] for d in (_stat_id(t.dir_real) for t in targets) if d}
        if full or replaced:
            self._restricted = restricted_proc(self.proc)
        pids = self._list_pids()
        vanished: list[int] = []
        if full:
            self._cache.clear()
        for gone in set(self._cache) - set(pids):
            del self._cache[gone]
        refresh = self._refresh_set(pids) if not full else set()
        todo = [
            pid
            for pid in pids
            if (cached := self._cache.get(pid)) is None
            or cached.error
            or cached.fds
            or cached.maps
            or ((opened or pid in refresh) and self._fd_count_changed(cached))
        ]  # the rest: known non-holders, and nothing says they changed
        ahead = ReadAhead(self.proc) if self.read_locks_ahead else None
        try:
            self._store(self._inspect_all(todo, targets, devs), vanished)
            locks = self._read_locks(targets)
        finally:
            if ahead is not None:
                ahead.stop()
        hidden: list[int] = []
        if isinstance(locks, LockTable):
            newborn, hidden = self._unlisted(locks, set(pids), targets)
            if newborn:  # started after /proc was listed, and already locks a target
                self._store(self._inspect_all(newborn, targets, devs), vanished)
                pids += [p for p in newborn if p in self._cache]
            if self._attribute(locks):
                # An OFD lock taken after its process was read, or by a process started
                # since the listing: read the holders and the newcomers once more.
                listed = set(pids)
                new = [p for p in self._list_pids() if p not in listed]
                again = [e.pid for e in self._cache.values() if e.fds] + new
                self._store(self._inspect_all(again, targets, devs), vanished)
                pids += [p for p in new if p in self._cache]
                locks = self._read_locks(targets)
                if isinstance(locks, LockTable):
                    self._attribute(locks)
        mode = "full" if full else "incremental"
        entries = [e for _, e in sorted(self._cache.items()) if e.error or e.fds or e.maps]
        coverage = self._coverage(locks)
        return [
            self._result(
                i,
                t,
                locks,
                entries,
                vanished=vanished,
                n=len(pids),
                mode=mode,
                hidden=hidden,
                coverage=coverage,
            )
            for i, t in enumerate(targets)
        ]

    def files(self) -> list[str]:
        """Each database's bundle (the file, -wal, -shm, -journal) where SQLite keeps it:
        through a symlink to the database file, next to the file it leads to
        (``_target``). What an open watch on the databases watches."""
        return [
            sidecar_name(os.path.realpath(db), sfx) for db in self.dbs for sfx in BUNDLE_SUFFIXES
        ]

    def _store(self, results: Iterable[tuple[int, _Entry | None]], vanished: list[int]) -> None:
        for pid, entry in results:
            if entry is None:
                self._cache.pop(pid, None)
                vanished.append(pid)
            else:
                self._cache[pid] = entry

    def _attribute(self, locks: LockTable) -> bool:
        """Match each ownerless OFD lock to a readable descriptor that carries it
        (``locks.attribute``); True if a lock is left that no readable descriptor carries."""
        carriers: dict[LockKey, list[tuple[int, int]]] = {}
        for e in self._cache.values():
            for fd, _hit, key in e.ofd:
                carriers.setdefault(key, []).append((e.pid, fd))
        return attribute(locks, carriers)

    def _unlisted(
        self, locks: LockTable, listed: set[int], targets: list[_Target]
    ) -> tuple[list[int], list[int]]:
        """Lock owners ``/proc`` did not list: (started since, with a lock on a target; hidden).

        A process that exits releases its locks before it leaves ``/proc``, so an owner
        that is still in ``/proc/locks`` on a second reading but has no ``/proc/<pid>``
        is hidden from this scan (``hidepid``), not gone.
        """
        on_targets = {pid for pid, _ in locks.owned}
        newborn: list[int] = []
        missing: list[int] = []
        for pid in sorted(locks.pids - listed):
            if os.path.isdir(f"{self.proc}/{pid}"):
                if pid in on_targets:
                    newborn.append(pid)
            else:
                missing.append(pid)
        if not missing:
            return newborn, []
        again = self._read_locks(targets)
        still = again.pids if isinstance(again, LockTable) else set(missing)
        return newborn, [p for p in missing if p in still]

    def _coverage(self, locks: Locks) -> dict[str, int]:
        """How each process of the last listing was covered: read, through locks, or not."""
        out = {"read": 0, "locks_only": 0, "kernel_threads": 0, "uncovered": 0}
        by_locks = self.other_users == "locks" and isinstance(locks, LockTable)
        for e in self._cache.values():
            if e.kernel_thread:
                out["kernel_threads"] += 1
            elif not e.error:
                out["read"] += 1
            elif by_locks:
                out["locks_only"] += 1
            else:
                out["uncovered"] += 1
        return out

    def close(self) -> None:
        """Release the inotify descriptor (the scanner can still scan, without it)."""
        if self._opens is not None:
            self._opens.close()
            self._opens = None

    # -- reading /proc --------------------------------------------------------

    def _target(self, db: str) -> _Target:
        # SQLite follows a symlink to the database file and names -wal and -shm after the
        # file it leads to (unixFullPathname): a --db that is a link still finds them.
        real = os.path.realpath(db)
        ids = {
            name: _stat_id(sidecar_name(real, suffix))
            for name, suffix in zip(FILE_NAMES, BUNDLE_SUFFIXES, strict=True)
        }
        base = os.path.basename(real)
        names = {
            base + suffix: name for name, suffix in zip(FILE_NAMES, BUNDLE_SUFFIXES, strict=True)
        }
        return _Target(db=db, real=real, ids=ids, names=names, name_bytes=os.fsencode(base))

    def _list_pids(self) -> list[int]:
        return [int(n) for n in os.listdir(self.proc) if n.isdigit()]

    def _refresh_set(self, pids: list[int]) -> set[int]:
        if self.refresh_per_scan <= 0 or not pids:
            return set()
        pids = sorted(pids)
        start = self._rr % len(pids)
        chosen = pids[start : start + self.refresh_per_scan]
        self._rr = start + len(chosen)
        return set(chosen)

    def _inspect_all(
        self, todo: list[int], targets: list[_Target], devs: set[int]
    ) -> Iterator[tuple[int, _Entry | None]]:
        """Inspect ``todo``; on a big host in worker threads (reading /proc releases the GIL)."""

        def chunk(items: list[int]) -> list[tuple[int, _Entry | None]]:
            out: list[tuple[int, _Entry | None]] = []
            for pid in items:
                try:
                    out.append((pid, self._inspect(pid, targets, devs)))
                except _Vanished:
                    out.append((pid, None))
            return out

        # Threads pay when processes are read (descriptors, maps); a scan that cannot read
        # other users' processes gives each of them one stat, which a thread only slows.
        if not self._reads_all:
            yield from self._inspect_as_user(todo, targets, devs)
            return
        if len(todo) < self.parallel_min_processes:
            yield from chunk(todo)
            return
        workers = self.workers if self.workers is not None else idle_workers()
        if workers <= 1:
            yield from chunk(todo)
            return
        size = -(-len(todo) // (workers * 4))
        parts = [todo[i : i + size] for i in range(0, len(todo), size)]
        from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 - big scans only

        with ThreadPoolExecutor(workers, thread_name_prefix="holders") as pool:
            for result in pool.map(chunk, parts):
                yield from result

    def _inspect_as_user(
        self, todo: list[int], targets: list[_Target], devs: set[int]
    ) -> list[tuple[int, _Entry | None]]:
        """Inspect ``todo`` without the right to read other users' processes.

        One stat of ``/proc/<pid>/fd`` each gives the owner and (Linux >= 6.2) the
        descriptor count (see :meth:`_owned_by_another`). Another user's process with
        descriptors is then known: unreadable, not a kernel thread, checked through
        ``/proc/locks`` later. The rest (this user's processes, one without descriptors,
        one named in the report, one the stat could not see) go on as :meth:`_inspect`
        would take them, from what the stat said.
        """
        proc, euid = self.proc, self._euid
        counted, named = self._fd_count_supported, self._names_needed()
        out: list[tuple[int, _Entry | None]] = []
        for pid in todo:
            base = f"{proc}/{pid}"
            try:
                st = os.stat(base + "/fd")
            except OSError:
                st = None  # gone, or closed by hidepid: _inspect tells which
            try:
                if st is None:
                    entry = self._inspect(pid, targets, devs)
                elif st.st_uid == euid:
                    entry = self._inspect(pid, targets, devs, mine=True)
                else:
                    entry = _Entry(
                        pid=pid,
                        uid=st.st_uid,
                        fd_count=st.st_size if counted else 0,
                        error=f"{base}/fd: Permission denied",
                    )
                    if named or not entry.fd_count:
                        entry = self._inspect(pid, targets, devs, unreadable=entry)
            except _Vanished:
                out.append((pid, None))
                continue
            out.append((pid, entry))
        return out

    def _fd_count_changed(self, cached: _Entry) -> bool:
        """True unless ``/proc/<pid>/fd`` still counts the descriptors it had (one stat)."""
        if not self._fd_count_supported:
            return True
        try:
            return os.stat(f"{self.proc}/{cached.pid}/fd").st_size != cached.fd_count
        except OSError:
            return True

    def _names_needed(self) -> bool:
        """Whether every unreadable process is named (``name_unreadable``, or a policy that
        reports them one by one: ``other_users: fail``, ``exempt_comms`` matched by name)."""
        return self.name_unreadable or self.other_users != "locks" or bool(self.exempt_comms)

    def _name(self, entry: _Entry) -> None:
        """Read the name, parent and start time of an unreadable process left unnamed.

        A failed read leaves "?", as it does during the scan (one that has exited is
        found gone when its holder's details are read).
        """
        if entry.named:
            return
        entry.named = True
        try:
            st = P.read_stat(entry.pid, self.proc)
        except OSError:
            return
        entry.start_ticks, entry.comm, entry.ppid = st.start_ticks, st.comm, st.ppid

    def _owned_by_another(self, base: str, entry: _Entry) -> bool:
        """True if another uid owns the process (its descriptors cannot be listed); one stat.

        ``/proc/<pid>/fd`` has the owner of ``/proc/<pid>`` and, since Linux 6.2, the
        descriptor count as its size, for every process (none for a kernel thread or a
        zombie): the count tells the two apart from a live process without a read of
        ``stat``. Sets the entry's ``uid`` and ``fd_count`` of such a process.
        """
        try:
            st = os.stat(f"{base}/fd")
        except (FileNotFoundError, ProcessLookupError) as exc:
            raise _Vanished from exc
        except PermissionError:  # hidepid=1 closes the folder: its owner, and no count
            try:
                st = os.stat(base)
            except (FileNotFoundError, ProcessLookupError) as exc:
                raise _Vanished from exc
            if st.st_uid == self._euid:
                return False
            entry.uid = st.st_uid
            return True
        if st.st_uid == self._euid:
            return False
        entry.uid = st.st_uid
        entry.fd_count = st.st_size if self._fd_count_supported else 0
        return True

    def _inspect(
        self,
        pid: int,
        targets: list[_Target],
        devs: set[int],
        *,
        mine: bool = False,
        unreadable: _Entry | None = None,
    ) -> _Entry:
        """What ``pid`` holds. ``stat`` is read only for holders and failures (cost).

        ``mine``: its owner is known to be this user; ``unreadable``: known to be another
        user's, with what its ``/proc/<pid>/fd`` said (:meth:`_inspect_as_user`).
        """
        if unreadable is not None:
            entry = unreadable
        else:
            entry = self._files(pid, targets, devs, owner_known=mine)
        if entry.error and entry.fd_count and not self._names_needed():
            return entry  # another user's process with descriptors: not a kernel thread
        # No descriptors at all (or none readable) may be a kernel thread: its flags say.
        if entry.fds or entry.maps or entry.error or not entry.fd_count:
            entry.named = True
            try:
                st = P.read_stat(pid, self.proc)
            except (FileNotFoundError, ProcessLookupError) as exc:
                raise _Vanished from exc
            except OSError as exc:
                entry.error = entry.error or f"{self.proc}/{pid}/stat: {exc.strerror}"
                return entry
            if st.kernel_thread:
                return _Entry(
                    pid=pid,
                    start_ticks=st.start_ticks,
                    comm=st.comm,
                    ppid=st.ppid,
                    kernel_thread=True,
                    named=True,
                )
            if st.state in ("Z", "X") and not entry.error:
                raise _Vanished  # exited while being read
            entry.start_ticks, entry.comm, entry.ppid = st.start_ticks, st.comm, st.ppid
            if entry.error and entry.uid is None:
                entry.uid = _owner(pid, self.proc)
        return entry

    def _files(
        self, pid: int, targets: list[_Target], devs: set[int], *, owner_known: bool = False
    ) -> _Entry:
        base = f"{self.proc}/{pid}"
        entry = _Entry(pid=pid)
        if not self._reads_all and not owner_known and self._owned_by_another(base, entry):
            entry.error = f"{base}/fd: Permission denied"
            return entry
        try:
            fds = os.listdir(f"{base}/fd")
            entry.fd_count = len(fds)
        except (FileNotFoundError, ProcessLookupError) as exc:
            entry.error = self._gone_or(pid, f"{base}/fd", exc)
            return entry
        except OSError as exc:
            entry.error = f"{base}/fd: {exc.strerror or exc}"
            return entry
        for fd in fds:
            path = f"{base}/fd/{fd}"
            try:
                fst = os.stat(path)
            except FileNotFoundError:
                continue  # closed since it was listed
            except PermissionError as exc:
                entry.error = f"{path}: {exc.strerror}"
                return entry
            except OSError as exc:
                # ESTALE / EIO: the file is gone from under the descriptor; its name
                # still says whether it was one of ours.
                try:
                    hit = self._stale_name(os.readlink(path), targets)
                except OSError:
                    entry.error = f"{path}: {exc.strerror or exc}"
                    return entry
                if hit is not None:
                    entry.fds[hit] = entry.fds.get(hit, 0) + 1
                continue
            if fst.st_dev not in devs:
                continue
            hit = self._match(fst, path, targets)
            if hit is not None:
                entry.fds[hit] = entry.fds.get(hit, 0) + 1
                if hit[2]:
                    entry.stale_ids[(fst.st_dev, fst.st_ino)] = (hit[0], hit[1])
                fd_no = int(fd)
                entry.ofd.extend((fd_no, hit, key) for key in fd_locks(f"{base}/fdinfo/{fd}"))
        try:
            maps = P.read_file(f"{base}/maps")
        except (FileNotFoundError, ProcessLookupError) as exc:
            entry.error = self._gone_or(pid, f"{base}/maps", exc)
            return entry
        except OSError as exc:
            entry.error = f"{base}/maps: {exc.strerror or exc}"
            return entry
        if any(t.name_bytes in maps for t in targets):
            self._match_maps(maps, targets, entry)
        return entry

    def _gone_or(self, pid: int, what: str, exc: OSError) -> str:
        """Raise :class:`_Vanished` if the process exited mid-read, else say what failed.

        A process that has exited (or become a zombie) has closed every file; one that
        still runs but whose entry could not be read counts against completeness.
        """
        try:
            again = P.read_stat(pid, self.proc)
        except OSError:
            raise _Vanished from exc
        if again.state in ("Z", "X"):
            raise _Vanished from exc
        return f"{what}: vanished while the process still runs ({exc.strerror or exc})"

    def _match(
        self, fst: os.stat_result, link: str, targets: list[_Target]
    ) -> tuple[int, str, bool] | None:
        key = (fst.st_dev, fst.st_ino)
        for i, t in enumerate(targets):
            for name, fid in t.ids.items():
                if fid == key:
                    return (i, name, False)
        if fst.st_nlink:
            # Linked somewhere: not a deleted or replaced bundle file (a file renamed
            # away, e.g. into quarantine, no longer carries a bundle name either).
            return None
        try:
            where = os.readlink(link)
        except OSError:
            return None
        return self._stale_name(where, targets)

    @staticmethod
    def _stale_name(where: str, targets: list[_Target]) -> tuple[int, str, bool] | None:
        if where.endswith(_DELETED):
            where = where[: -len(_DELETED)]
        folder, _, base = where.rpartition("/")
        for i, t in enumerate(targets):
            if folder == t.dir_real and base in t.names:
                return (i, t.names[base], True)
        return None

    def _match_maps(self, maps: bytes, targets: list[_Target], entry: _Entry) -> None:
        wanted: dict[tuple[str, int], tuple[int, str]] = {}
        for i, t in enumerate(targets):
            for name, fid in t.ids.items():
                if fid:
                    dev = f"{os.major(fid[0]):02x}:{os.minor(fid[0]):02x}"
                    wanted[(dev, fid[1])] = (i, name)
        seen: set[tuple[str, int]] = set()
        for raw in maps.splitlines():
            if not any(t.name_bytes in raw for t in targets):
                continue
            parts = raw.decode("utf-8", "replace").split(None, 5)
            if len(parts) < 6:
                continue
            key = (parts[3], int(parts[4]))
            if key in seen:
                continue  # one file mapped in several regions counts once
            seen.add(key)
            hit: tuple[int, str, bool] | None = None
            if key in wanted:
                i, name = wanted[key]
                hit = (i, name, False)
            else:
                hit = self._stale_name(parts[5], targets)
                if hit is not None:
                    maj, _, mnr = parts[3].partition(":")
                    fid = (os.makedev(int(maj, 16), int(mnr, 16)), key[1])
                    entry.stale_ids[fid] = (hit[0], hit[1])
            if hit is not None:
                entry.maps[hit] = entry.maps.get(hit, 0) + 1

    def _read_locks(self, targets: list[_Target]) -> Locks:
        """Every lock owner, and what each owns on the targets' files, current or old
        (``locks.read_locks``); or why ``/proc/locks`` could not be read."""
        by_id: dict[tuple[int, int, int], tuple[int, str, bool]] = {}
        # An old inode only while a process this scan read holds it (unlinked, or renamed
        # away): a number remembered from before may name a stranger's file by now.
        for entry in self._cache.values():
            for old, (i, name) in entry.stale_ids.items():
                if i < len(targets):
                    by_id[(os.major(old[0]), os.minor(old[0]), old[1])] = (i, name, True)
        for i, t in enumerate(targets):
            for name, fid in t.ids.items():
                if fid:
                    by_id[(os.major(fid[0]), os.minor(fid[0]), fid[1])] = (i, name, False)
        return read_locks(self.proc, by_id)

    # -- building the result ----------------------------------------------------

    def _result(
        self,
        index: int,
        target: _Target,
        locks: Locks,
        entries: list[_Entry],
        *,
        vanished: list[int],
        n: int,
        mode: str,
        hidden: list[int],
        coverage: dict[str, int],
    ) -> HolderScan:
        scan = HolderScan(
            db=target.db,
            files=dict(target.ids),
            holders=[],
            problems=[],
            uninspectable=[],
            vanished=list(vanished),
            processes=n,
            mode=mode,
            other_users=self.other_users,
            coverage=dict(coverage),
        )
        if target.ids[DB_FILE] is None:
            scan.notes.append(f"{target.db} does not exist; looking for holders of old inodes only")
        table = locks if isinstance(locks, LockTable) else None
        if table is None:
            scan.problems.append(f"locks could not be read, so lost locks cannot be seen: {locks}")
        else:
            # No readable descriptor carries it: a holder no one can name.
            unread = any(e.error for e in entries)
            for what in table.ownerless.get(index, []):
                scan.problems.append(
                    f"a lock ({what}) names no owner (an open file description lock) and"
                    " a process that could not be read may hold it"
                    if unread
                    else f"a lock ({what}) names no owner (an open file description lock)"
                    " and no descriptor of a process this scan read carries it: a process"
                    " outside this PID namespace may hold it"
                )
        if self._restricted:
            scan.problems.append(self._restricted)
        if hidden:
            scan.problems.append(
                f"/proc does not list pid(s) {', '.join(map(str, hidden))}, which own locks in"
                f" {self.proc}/locks: this /proc hides processes, so a holder may be missed"
            )
        by_locks = self.other_users == "locks" and table is not None
        checked = "locks" if by_locks else None
        owners = table.owned if table is not None else {}
        exempt_comms = self.exempt_comms
        for entry in entries:
            pid = entry.pid
            mine = {k: v for k, v in entry.fds.items() if k[0] == index} if entry.fds else _NONE
            mapped = {k: v for k, v in entry.maps.items() if k[0] == index} if entry.maps else _NONE
            owned = owners.get((pid, index), ())
            if entry.error:
                if owned:
                    self._name(entry)  # a holder through its locks: shown by name
                uid = entry.uid
                exempt = entry.comm in exempt_comms
                scan.uninspectable.append(
                    {
                        "pid": pid,
                        "uid": uid,
                        "comm": entry.comm,
                        "reason": entry.error,
                        "exempt": exempt,
                        "checked": checked,
                        "holds_lock": bool(owned) if table is not None else None,
                    }
                )
                if not exempt and not by_locks:
                    scan.problems.append(
                        f"pid {pid} ({entry.comm}, uid {uid if uid is not None else '?'})"
                        f" could not be inspected: {entry.error}"
                    )
                if owned and not mine and not mapped:
                    # Its locks are all that can be seen of it: a holder through /proc/locks.
                    try:
                        found = self._holder(entry, index, _NONE, _NONE, locks, via=VIA_LOCKS)
                        scan.holders.append(found)
                    except (FileNotFoundError, ProcessLookupError):
                        scan.vanished.append(pid)
                    except OSError as exc:
                        scan.problems.append(f"pid {pid}: holder details unreadable: {exc}")
                    continue
                # What was found before the failure is still shown (as a holder).
            if not mine and not mapped:
                continue
            try:
                scan.holders.append(self._holder(entry, index, mine, mapped, locks))
            except (FileNotFoundError, ProcessLookupError):
                scan.vanished.append(pid)  # exited after it was read: holds nothing now
            except OSError as exc:
                scan.problems.append(f"pid {pid} ({entry.comm}): holder details unreadable: {exc}")
        return scan

    def _holder(
        self,
        entry: _Entry,
        index: int,
        fds: dict[tuple[int, str, bool], int],
        maps: dict[tuple[int, str, bool], int],
        locks: Locks,
        *,
        via: str = VIA_DESCRIPTORS,
    ) -> Holder:
        """A holder from what was read of it: descriptors and maps, or only its locks."""
        pid = entry.pid
        by_locks = via == VIA_LOCKS
        try:
            argv = P.read_cmdline(pid, self.proc)
            cgroup = P.systemd_cgroup_path(P.read_cgroup(pid, self.proc))
        except PermissionError:
            if not by_locks:
                raise
            argv, cgroup = [], None  # hidden further than its stat (hidepid)
        unit = P.unit_from_cgroup(cgroup)
        parents = self._parents(entry.ppid)
        counts: dict[str, int] = {} if by_locks else dict.fromkeys(FILE_NAMES[:3], 0)
        mapcounts: dict[str, int] = {}
        stale: set[str] = set()
        for (_, name, is_stale), c in fds.items():
            if is_stale:
                stale.add(name)
            else:
                counts[name] = counts.get(name, 0) + c
        for (_, name, is_stale), c in maps.items():
            if is_stale:
                stale.add(name)
            else:
                mapcounts[name] = mapcounts.get(name, 0) + c
        owned: list[LockInfo] = []
        if isinstance(locks, LockTable):
            for name, is_stale, kind, mode, start, end in locks.owned.get((pid, index), []):
                if not is_stale:
                    owned.append(LockInfo(name, kind, mode, start, end))
                elif by_locks:
                    stale.add(name)  # a lock on an old inode: it holds that file
            # Its OFD locks, from its descriptors (once per range: dup'd ones repeat it).
            for _fd, (i, name, is_stale), key in entry.ofd:
                ofd = LockInfo(name, "OFDLCK", key[3], key[4], key[5])
                if i == index and not is_stale and ofd not in owned:
                    owned.append(ofd)
        wal_conn = bool(counts.get(SHM_FILE) or mapcounts.get(SHM_FILE))
        if not isinstance(locks, LockTable):
            lock_state = LOCK_UNKNOWN
        elif any(lk.file == DB_FILE for lk in owned):
            lock_state = LOCK_HELD
        elif counts.get(DB_FILE) and wal_conn:
            lock_state = LOCK_LOST
        else:
            lock_state = LOCK_NONE
        parent_is_manager = bool(parents) and bool(
            parents[0].get("user_manager") or parents[0].get("system_manager")
        )
        orphan = entry.ppid == 1 or bool(parents and parents[0].get("user_manager"))
        if orphan and parent_is_manager and unit and unit.endswith(".service"):
            # The manager's direct child in a service is that unit's main process (until
            # systemd says otherwise: holders_with_units() refines it with MainPID).
            orphan = False
        return Holder(
            pid=pid,
            ppid=entry.ppid,
            uid=_uid_or_none(pid, self.proc),
            comm=entry.comm,
            kind=P.classify(argv),
            unit=unit,
            cgroup=cgroup,
            orphan=orphan,
            fds=counts,
            maps=mapcounts,
            stale_files=sorted(stale, key=FILE_NAMES.index),
            locks=owned,
            lock_state=lock_state,
            cmdline=argv,
            exe=P.read_exe(pid, self.proc),
            start_ticks=entry.start_ticks,
            started=P.start_time(entry.start_ticks),
            ssh_connection=P.read_environ_var(pid, "SSH_CONNECTION", self.proc),
            parents=parents,
            via=via,
        )

    def _parents(self, ppid: int) -> list[dict[str, Any]]:
        chain: list[dict[str, Any]] = []
        pid = ppid
        while pid > 0 and len(chain) < self.parent_depth:
            try:
                st = P.read_stat(pid, self.proc)
                argv = P.read_cmdline(pid, self.proc)
            except OSError:
                chain.append({"pid": pid, "comm": None, "cmdline": None})
                break
            item: dict[str, Any] = {"pid": pid, "comm": st.comm, "cmdline": " ".join(argv)}
            if P.is_user_manager(argv, st.comm):
                item["user_manager"] = True
            elif pid == 1 and st.comm == "systemd":
                item["system_manager"] = True
            chain.append(item)
            pid = st.ppid
        return chain


def idle_workers(limit: int = DEFAULT_SCAN_WORKERS) -> int:
    """Threads for a big scan: up to ``limit``, as many as the processors the last
    minute's load average leaves idle, at least one."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return limit
    return max(1, min(limit, int((os.cpu_count() or 1) - load + 0.5)))


def _owner(pid: int, proc: str) -> int | None:
    """The owner of ``/proc/<pid>``: the process's effective uid (root's for one that made
    itself non-dumpable). One ``stat``, where ``status`` would be a read of a page."""
    try:
        return os.stat(f"{proc}/{pid}").st_uid
    except OSError:
        return None


def _uid_or_none(pid: int, proc: str) -> int | None:
    try:
        return P.read_uid(pid, proc)
    except OSError:
        return None


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
