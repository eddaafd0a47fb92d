"""What one process holds of the databases' bundles: its descriptors and memory maps.

:class:`ProcessReader` reads ``/proc/<pid>/fd``, the ``fdinfo`` of each descriptor on a
bundle file (the OFD locks it carries) and ``/proc/<pid>/maps``, into a
:class:`Holdings`. ``stat`` is read only for holders and failures (most of the cost of
a full scan). A process whose descriptors cannot be read (another user's) is known
from one ``stat`` of its ``/proc/<pid>/fd`` where the kernel's own rule says so. On a
big host, when every process can be read, the reads run in worker threads (they
release the GIL). A process that exits while it is read raises :class:`_Vanished`.
"""

from __future__ import annotations

import os

from statewarden.holders import processes as P
from statewarden.holders.bundle import Bundle, Hit, match_descriptor, match_maps, stale_name
from statewarden.holders.locks import LockKey, fd_locks
from statewarden.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

# Threads reading /proc in a scan of at least PARALLEL_MIN_PROCESSES processes: at most
# this many, and no more than the processors the load average leaves idle (a thread
# waiting for a processor shortens nothing and costs the interpreter lock's hand-overs).
DEFAULT_SCAN_WORKERS = min(4, os.cpu_count() or 1)
PARALLEL_MIN_PROCESSES = 256


class Holdings(Record):
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
        fds: dict[Hit, int] | None = None,
        maps: dict[Hit, int] | None = None,
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
        self.fds: dict[Hit, int] = {} if fds is None else fds
        self.maps: dict[Hit, int] = {} if maps is None else maps
        self.error = error  # why it could not be inspected
        self.kernel_thread = kernel_thread  # PF_KTHREAD: left out of the scan
        self.uid = uid  # of a process that could not be read: who owns its /proc entry
        # (dev, ino) -> (target index, file name) of old or deleted inodes it holds
        self.stale_ids: dict[tuple[int, int], tuple[int, str]] = {}
        # (fd, (target index, file name, stale), lock) of each OFD lock its descriptors carry
        self.ofd: list[tuple[int, Hit, LockKey]] = []
        self.named = named  # its stat was read (or tried): comm, ppid and start time are known


class _Vanished(Exception):
    """The process exited while it was read: it holds nothing now."""


class ProcessReader:
    """Reads what processes hold of the bundles, each from its own ``/proc/<pid>``.

    ``names_needed``: every unreadable process is named (its ``stat`` read), for a
    report that lists them one by one; otherwise one that holds no lock keeps "?".
    """

    def __init__(
        self,
        proc: str,
        *,
        names_needed: bool,
        workers: int | None,
        parallel_min_processes: int,
    ) -> None:
        self.proc = proc
        self.names_needed = names_needed
        self.workers = workers
        self.parallel_min_processes = parallel_min_processes
        try:
            # Linux >= 6.2 reports the descriptor count as the size of /proc/<pid>/fd.
            self.fd_count_supported = os.stat(f"{proc}/self/fd").st_size > 0
        except OSError:
            self.fd_count_supported = False
        self.euid = os.geteuid()
        # Another uid's /proc/<pid>/fd opens only to root or with capabilities: without
        # them, a process whose /proc entry someone else owns is known unreadable from
        # one stat (the kernel's own rule), not from a failing listdir.
        self.reads_all = self.euid == 0 or P.has_any_capability(
            (P.CAP_DAC_OVERRIDE, P.CAP_DAC_READ_SEARCH, P.CAP_SYS_PTRACE), proc
        )

    def read_all(
        self, todo: list[int], bundles: list[Bundle], devs: set[int]
    ) -> Iterator[tuple[int, Holdings | None]]:
        """Inspect ``todo`` (None: vanished); on a big host in worker threads (reading
        /proc releases the GIL)."""

        def chunk(items: list[int]) -> list[tuple[int, Holdings | None]]:
            out: list[tuple[int, Holdings | None]] = []
            for pid in items:
                try:
                    out.append((pid, self.inspect(pid, bundles, devs)))
                except _Vanished:
                    out.append((pid, None))
            return out

        # Threads pay when processes are read (descriptors, maps); a scan that cannot read
        # other users' processes gives each of them one stat, which a thread only slows.
        if not self.reads_all:
            yield from self._inspect_as_user(todo, bundles, devs)
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
        self, todo: list[int], bundles: list[Bundle], devs: set[int]
    ) -> list[tuple[int, Holdings | None]]:
        """Inspect ``todo`` without the right to read other users' processes.

        One stat of ``/proc/<pid>/fd`` each gives the owner and (Linux >= 6.2) the
        descriptor count (see :meth:`_owned_by_another`). Another user's process with
        descriptors is then known: unreadable, not a kernel thread, checked through
        ``/proc/locks`` later. The rest (this user's processes, one without descriptors,
        one named in the report, one the stat could not see) go on as :meth:`inspect`
        would take them, from what the stat said.
        """
        proc, euid = self.proc, self.euid
        counted, named = self.fd_count_supported, self.names_needed
        out: list[tuple[int, Holdings | None]] = []
        for pid in todo:
            base = f"{proc}/{pid}"
            try:
                st = os.stat(base + "/fd")
            except OSError:
                st = None  # gone, or closed by hidepid: inspect tells which
            try:
                if st is None:
                    entry = self.inspect(pid, bundles, devs)
                elif st.st_uid == euid:
                    entry = self.inspect(pid, bundles, devs, mine=True)
                else:
                    entry = Holdings(
                        pid=pid,
                        uid=st.st_uid,
                        fd_count=st.st_size if counted else 0,
                        error=f"{base}/fd: Permission denied",
                    )
                    if named or not entry.fd_count:
                        entry = self.inspect(pid, bundles, devs, unreadable=entry)
            except _Vanished:
                out.append((pid, None))
                continue
            out.append((pid, entry))
        return out

    def fd_count_changed(self, cached: Holdings) -> bool:
        """True unless ``/proc/<pid>/fd`` still counts the descriptors it had (one stat)."""
        if not self.fd_count_supported:
            return True
        try:
            return os.stat(f"{self.proc}/{cached.pid}/fd").st_size != cached.fd_count
        except OSError:
            return True

    def name(self, entry: Holdings) -> None:
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

    def _owned_by_another(self, base: str, entry: Holdings) -> bool:
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
            if st.st_uid == self.euid:
                return False
            entry.uid = st.st_uid
            return True
        if st.st_uid == self.euid:
            return False
        entry.uid = st.st_uid
        entry.fd_count = st.st_size if self.fd_count_supported else 0
        return True

    def inspect(
        self,
        pid: int,
        bundles: list[Bundle],
        devs: set[int],
        *,
        mine: bool = False,
        unreadable: Holdings | None = None,
    ) -> Holdings:
        """What ``pid`` holds. ``stat`` is read only for holders and failures (cost).

        ``mine``: its owner is known to be this user; ``unreadable``: known to be another
        user's, with what its ``/proc/<pid>/fd`` said (:meth:`_inspect_as_user`).
        """
        if unreadable is not None:
            entry = unreadable
        else:
            entry = self._files(pid, bundles, devs, owner_known=mine)
        if entry.error and entry.fd_count and not self.names_needed:
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
                return Holdings(
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
                entry.uid = owner(pid, self.proc)
        return entry

    def _files(
        self, pid: int, bundles: list[Bundle], devs: set[int], *, owner_known: bool = False
    ) -> Holdings:
        base = f"{self.proc}/{pid}"
        entry = Holdings(pid=pid)
        if not self.reads_all and not owner_known and self._owned_by_another(base, entry):
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
                    hit = stale_name(os.readlink(path), bundles)
                except OSError:
                    entry.error = f"{path}: {exc.strerror or exc}"
                    return entry
                if hit is not None:
                    entry.fds[hit] = entry.fds.get(hit, 0) + 1
                continue
            if fst.st_dev not in devs:
                continue
            hit = match_descriptor(fst, path, bundles)
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
        if any(t.name_bytes in maps for t in bundles):
            match_maps(maps, bundles, entry.maps, entry.stale_ids)
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


def idle_workers(limit: int = DEFAULT_SCAN_WORKERS) -> int:
    """Threads for a big scan: up to ``limit``, as many as the processors the last
    minute's load average leaves idle, at least one."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return limit
    return max(1, min(limit, int((os.cpu_count() or 1) - load + 0.5)))


def owner(pid: int, proc: str) -> int | None:
    """The owner of ``/proc/<pid>``: the process's effective uid (root's for one that made
    itself non-dumpable). One ``stat``, where ``status`` would be a read of a page."""
    try:
        return os.stat(f"{proc}/{pid}").st_uid
    except OSError:
        return None
