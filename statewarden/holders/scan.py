"""Who holds a state.db: every process with a descriptor or a mapping on its files.

A holder is found by matching ``(st_dev, st_ino)`` of ``state.db``, ``-wal``, ``-shm``
and ``-journal`` against every ``/proc/<pid>/fd/*`` (``stat`` follows the magic link
to the open file without opening it) and every ``/proc/<pid>/maps`` line (SQLite
mmaps ``-shm``). Nothing here opens a database file (DESIGN.md rule 2).

A descriptor on the same device whose link names one of those files but whose inode
is not the current one is **stale**: an old or deleted state.db / -wal / -shm still
written through (HERMES.md stories 6 and 7).

Locks come from ``/proc/locks``. A SQLite connection in WAL mode keeps a SHARED lock
on the database file for as long as it is open (bytes 1073741826..1073742335, and
byte 128 of ``-shm``); the last connection to close takes EXCLUSIVE and deletes
``-wal`` / ``-shm``. A process with the WAL files open but no lock on the database
has **lost its locks** (closing any descriptor on a file drops the process's POSIX
locks on it, story 7), so another process's close can delete the files under it.

Fail closed (rule 1): a process whose descriptors or maps cannot be read (another
user's process, EACCES) makes the scan ``complete: false`` with the reason. A process
that exits while it is read holds nothing any more and is listed under ``vanished``.

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

On a host with at least ``parallel_min_processes`` processes a scan reads /proc in
``workers`` threads (the reads release the GIL).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statewarden.holders import processes as P
from statewarden.holders.opens import OpenWatch
from statewarden.holders.report import (
    DB_FILE,
    FILE_NAMES,
    LOCK_HELD,
    LOCK_LOST,
    LOCK_NONE,
    LOCK_UNKNOWN,
    SHM_FILE,
    Holder,
    HolderScan,
    LockInfo,
    age_seconds,
)
from statewarden.sidecars import BUNDLE_SUFFIXES, sidecar

__all__ = [
    "FILE_NAMES",
    "LOCK_HELD",
    "LOCK_LOST",
    "LOCK_NONE",
    "LOCK_UNKNOWN",
    "Holder",
    "HolderScan",
    "HolderScanner",
    "LockInfo",
    "age_seconds",
    "scan_holders",
]

DEFAULT_REFRESH_PER_SCAN = 128
DEFAULT_PARENT_DEPTH = 16
# Threads reading /proc in a scan of at least PARALLEL_MIN_PROCESSES processes.
DEFAULT_SCAN_WORKERS = min(4, os.cpu_count() or 1)
PARALLEL_MIN_PROCESSES = 256
# Processes (by comm) that may stay uninspectable without making a scan incomplete,
# e.g. a sandbox's own init that denies ptrace access even to root. They are still
# listed under ``uninspectable`` with ``exempt: true``. Empty: nothing is exempt.
DEFAULT_EXEMPT_COMMS: tuple[str, ...] = ()
_DELETED = " (deleted)"


@dataclass(frozen=True)
class _Target:
    db: Path
    dir_real: str
    ids: dict[str, tuple[int, int] | None]  # file name -> (dev, ino) now
    names: dict[str, str]  # actual file name on disk -> name in FILE_NAMES


@dataclass
class _Entry:
    """What one process instance was found holding, cached by (pid, start time)."""

    pid: int
    start_ticks: int
    comm: str
    ppid: int
    fd_count: int  # descriptors listed in /proc/<pid>/fd when read
    # (target index, file name, stale) -> count
    fds: dict[tuple[int, str, bool], int]
    maps: dict[tuple[int, str, bool], int]
    error: str | None = None  # why it could not be inspected


# (pid, target index) -> (file name, kind, mode, start, end) of each lock it owns
_Locks = dict[tuple[int, int], list[tuple[str, str, str, int, str]]]


class _Vanished(Exception):
    pass


def _stat_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _real_dir(db: Path) -> str:
    return os.path.realpath(db.parent)


class HolderScanner:
    """Scans ``/proc`` for the holders of one or more databases, with a cache.

    ``scan(full=True)`` reads every process; ``scan(full=False)`` reads only what
    changed since the last scan (module docstring). One scanner serves many
    databases with one pass over ``/proc``.
    """

    def __init__(
        self,
        dbs: Sequence[Path],
        *,
        proc: str = "/proc",
        refresh_per_scan: int = DEFAULT_REFRESH_PER_SCAN,
        parent_depth: int = DEFAULT_PARENT_DEPTH,
        exempt_comms: Iterable[str] = DEFAULT_EXEMPT_COMMS,
        watch_opens: bool = True,
        workers: int = DEFAULT_SCAN_WORKERS,
        parallel_min_processes: int = PARALLEL_MIN_PROCESSES,
    ) -> None:
        self.dbs = [Path(os.path.abspath(os.path.expanduser(str(d)))) for d in dbs]
        self.proc = proc
        self.refresh_per_scan = refresh_per_scan
        self.parent_depth = parent_depth
        self.exempt_comms = frozenset(exempt_comms)
        self._cache: dict[int, _Entry] = {}
        self._targets_key: tuple[Any, ...] | None = None
        self._rr = 0
        self._opens = OpenWatch() if watch_opens else None
        self.workers = workers
        self.parallel_min_processes = parallel_min_processes
        try:
            # Linux >= 6.2 reports the descriptor count as the size of /proc/<pid>/fd.
            self._fd_count_supported = os.stat(f"{proc}/self/fd").st_size > 0
        except OSError:
            self._fd_count_supported = False

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
            files = [sidecar(t.db, sfx) for t in targets for sfx in BUNDLE_SUFFIXES]
            self._opens.watch(files, rearm=replaced)
            opened = self._opens.poll()
        devs = {i[0] for t in targets for i in t.ids.values() if i}
        # A deleted file keeps the device of its folder: stale holders are found there.
        devs |= {d[0] for d in (_stat_id(t.db.parent) for t in targets) if d}
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
        for pid, entry in self._inspect_all(todo, targets, devs):
            if entry is None:
                self._cache.pop(pid, None)
                vanished.append(pid)
            else:
                self._cache[pid] = entry
        locks = self._read_locks(targets)
        mode = "full" if full else "incremental"
        entries = [e for _, e in sorted(self._cache.items()) if e.error or e.fds or e.maps]
        return [
            self._result(i, t, locks, entries, vanished=vanished, n=len(pids), mode=mode)
            for i, t in enumerate(targets)
        ]

    def close(self) -> None:
        """Release the inotify descriptor (the scanner can still scan, without it)."""
        if self._opens is not None:
            self._opens.close()
            self._opens = None

    # -- reading /proc --------------------------------------------------------

    def _target(self, db: Path) -> _Target:
        ids = {name: _stat_id(sidecar(db, suffix))
               for name, suffix in zip(FILE_NAMES, BUNDLE_SUFFIXES, strict=True)}  # fmt: skip
        names = {db.name + suffix: name
                 for name, suffix in zip(FILE_NAMES, BUNDLE_SUFFIXES, strict=True)}  # fmt: skip
        return _Target(db=db, dir_real=_real_dir(db), ids=ids, names=names)

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

        if self.workers <= 1 or len(todo) < self.parallel_min_processes:
            yield from chunk(todo)
            return
        size = -(-len(todo) // (self.workers * 4))
        parts = [todo[i : i + size] for i in range(0, len(todo), size)]
        with ThreadPoolExecutor(self.workers, thread_name_prefix="holders") as pool:
            for result in pool.map(chunk, parts):
                yield from result

    def _fd_count_changed(self, cached: _Entry) -> bool:
        """True unless ``/proc/<pid>/fd`` still counts the descriptors it had (one stat)."""
        if not self._fd_count_supported:
            return True
        try:
            return os.stat(f"{self.proc}/{cached.pid}/fd").st_size != cached.fd_count
        except OSError:
            return True

    def _inspect(self, pid: int, targets: list[_Target], devs: set[int]) -> _Entry:
        """What ``pid`` holds. ``stat`` is read only for holders and failures (cost)."""
        entry = self._files(pid, targets, devs)
        if entry.fds or entry.maps or entry.error:
            try:
                st = P.read_stat(pid, self.proc)
            except (FileNotFoundError, ProcessLookupError) as exc:
                raise _Vanished from exc
            except OSError as exc:
                entry.error = entry.error or f"{self.proc}/{pid}/stat: {exc.strerror}"
                return entry
            if st.state in ("Z", "X") and not entry.error:
                raise _Vanished  # exited while being read
            entry.start_ticks, entry.comm, entry.ppid = st.start_ticks, st.comm, st.ppid
        return entry

    def _files(self, pid: int, targets: list[_Target], devs: set[int]) -> _Entry:
        base = f"{self.proc}/{pid}"
        entry = _Entry(pid, 0, "?", 0, 0, {}, {})
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
        try:
            maps = P.read_file(f"{base}/maps")
        except (FileNotFoundError, ProcessLookupError) as exc:
            entry.error = self._gone_or(pid, f"{base}/maps", exc)
            return entry
        except OSError as exc:
            entry.error = f"{base}/maps: {exc.strerror or exc}"
            return entry
        if any(t.db.name.encode() in maps for t in targets):
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
            if not any(t.db.name.encode() in raw for t in targets):
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
                entry.maps[hit] = entry.maps.get(hit, 0) + 1

    def _read_locks(self, targets: list[_Target]) -> _Locks | str:
        """``(pid, target index)`` -> locks it owns on that target's current files.

        Returns why, instead, when ``/proc/locks`` cannot be read.
        """
        by_id: dict[tuple[int, int, int], tuple[int, str]] = {}
        for i, t in enumerate(targets):
            for name, fid in t.ids.items():
                if fid:
                    by_id[(os.major(fid[0]), os.minor(fid[0]), fid[1])] = (i, name)
        out: _Locks = {}
        try:
            text = P.read_file(f"{self.proc}/locks").decode("ascii", "replace")
        except OSError as exc:
            return f"{self.proc}/locks: {exc.strerror or exc}"
        for line in text.splitlines():
            parts = line.split()
            if len(parts) < 8 or parts[1] == "->":
                continue  # a waiter, not an owner
            try:
                pid = int(parts[4])
                maj, mnr, ino = parts[5].split(":")
                key = (int(maj, 16), int(mnr, 16), int(ino))
            except ValueError:
                continue
            if key not in by_id:
                continue
            i, name = by_id[key]
            out.setdefault((pid, i), []).append((name, parts[1], parts[3], int(parts[6]), parts[7]))
        return out

    # -- building the result ----------------------------------------------------

    def _result(
        self,
        index: int,
        target: _Target,
        locks: _Locks | str,
        entries: list[_Entry],
        *,
        vanished: list[int],
        n: int,
        mode: str,
    ) -> HolderScan:
        scan = HolderScan(
            db=target.db, files=dict(target.ids), holders=[], problems=[], uninspectable=[],
            vanished=list(vanished), processes=n, mode=mode,
        )  # fmt: skip
        if target.ids["state.db"] is None:
            scan.notes.append(f"{target.db} does not exist; looking for holders of old inodes only")
        if isinstance(locks, str):
            scan.problems.append(f"locks could not be read, so lost locks cannot be seen: {locks}")
        for entry in entries:
            pid = entry.pid
            if entry.error:
                uid = _uid_or_none(pid, self.proc)
                exempt = entry.comm in self.exempt_comms
                scan.uninspectable.append(
                    {"pid": pid, "uid": uid, "comm": entry.comm, "reason": entry.error,
                     "exempt": exempt}
                )  # fmt: skip
                if not exempt:
                    scan.problems.append(
                        f"pid {pid} ({entry.comm}, uid {uid if uid is not None else '?'})"
                        f" could not be inspected: {entry.error}"
                    )
                # What was found before the failure is still shown (as a holder).
            mine = {k: v for k, v in entry.fds.items() if k[0] == index}
            mapped = {k: v for k, v in entry.maps.items() if k[0] == index}
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
        locks: _Locks | str,
    ) -> Holder:
        pid = entry.pid
        argv = P.read_cmdline(pid, self.proc)
        cgroup = P.systemd_cgroup_path(P.read_cgroup(pid, self.proc))
        unit = P.unit_from_cgroup(cgroup)
        parents = self._parents(entry.ppid)
        counts = dict.fromkeys(FILE_NAMES[:3], 0)
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
        owned = (
            [] if isinstance(locks, str) else [LockInfo(*lk) for lk in locks.get((pid, index), [])]
        )
        wal_conn = bool(counts.get(SHM_FILE) or mapcounts.get(SHM_FILE))
        if isinstance(locks, str):
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
            started_at=P.started_at(entry.start_ticks),
            ssh_connection=P.read_environ_var(pid, "SSH_CONNECTION", self.proc),
            parents=parents,
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


def _uid_or_none(pid: int, proc: str) -> int | None:
    try:
        return P.read_uid(pid, proc)
    except OSError:
        return None


def scan_holders(dbs: Iterable[Path], *, full: bool = True) -> list[HolderScan]:
    """One full scan of ``/proc`` for the holders of ``dbs``."""
    return HolderScanner(list(dbs)).scan(full=full)
