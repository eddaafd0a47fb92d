"""What one pass over ``/proc`` found, told per database: a :class:`HolderScan` each.

Each process that holds a bundle file becomes a :class:`Holder` (its command line,
cgroup and unit, parents, descriptor and map counts, locks and lock state); one that
could not be read is listed as uninspectable, and a holder through its locks alone
where ``other_users: locks`` lets the lock check stand for a read. Every reason the scan
may have missed a holder becomes a problem (it is then incomplete).
"""

from __future__ import annotations

from statewarden.holders import processes as P
from statewarden.holders.locks import Locks, LockTable
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
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from statewarden.config_literals import OtherUsersPolicy
    from statewarden.holders.bundle import Bundle, Hit
    from statewarden.holders.holdings import Holdings, ProcessReader

# What a process holds of a target when it holds nothing there (read, never written).
_NONE: dict[tuple[int, str, bool], int] = {}


class Findings:
    """One pass's processes, locks and doubts, to be told per database."""

    def __init__(
        self,
        reader: ProcessReader,
        locks: Locks,
        entries: list[Holdings],
        *,
        other_users: OtherUsersPolicy,
        exempt_comms: frozenset[str],
        parent_depth: int,
        processes: int,
        mode: str,
        vanished: list[int],
        restricted: str | None,
        hidden: list[int],
        coverage: dict[str, int],
    ) -> None:
        self.reader = reader  # names an unreadable holder left unnamed
        self.proc = reader.proc
        self.locks = locks
        self.entries = entries
        self.other_users = other_users
        self.exempt_comms = exempt_comms
        self.parent_depth = parent_depth
        self.processes = processes
        self.mode = mode
        self.vanished = vanished
        self.restricted = restricted
        self.hidden = hidden
        self.coverage = coverage

    def for_database(self, index: int, target: Bundle) -> HolderScan:
        """The scan of the ``index``-th database: its holders, and what may be missed."""
        scan = HolderScan(
            db=target.db,
            files=dict(target.ids),
            holders=[],
            problems=[],
            uninspectable=[],
            vanished=list(self.vanished),
            processes=self.processes,
            mode=self.mode,
            other_users=self.other_users,
            coverage=dict(self.coverage),
        )
        if target.ids[DB_FILE] is None:
            scan.notes.append(f"{target.db} does not exist; looking for holders of old inodes only")
        self._doubts(index, scan)
        locks = self.locks
        table = locks if isinstance(locks, LockTable) else None
        by_locks = self.other_users == "locks" and table is not None
        checked = "locks" if by_locks else None
        owners = table.owned if table is not None else {}
        exempt_comms = self.exempt_comms
        for entry in self.entries:
            pid = entry.pid
            mine = {k: v for k, v in entry.fds.items() if k[0] == index} if entry.fds else _NONE
            mapped = {k: v for k, v in entry.maps.items() if k[0] == index} if entry.maps else _NONE
            owned = owners.get((pid, index), ())
            if entry.error:
                if owned:
                    self.reader.name(entry)  # a holder through its locks: shown by name
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
                        found = self._holder(entry, index, _NONE, _NONE, via=VIA_LOCKS)
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
                scan.holders.append(self._holder(entry, index, mine, mapped))
            except (FileNotFoundError, ProcessLookupError):
                scan.vanished.append(pid)  # exited after it was read: holds nothing now
            except OSError as exc:
                scan.problems.append(f"pid {pid} ({entry.comm}): holder details unreadable: {exc}")
        return scan

    def _doubts(self, index: int, scan: HolderScan) -> None:
        """The problems of the whole pass that may hide a holder of this database."""
        locks = self.locks
        if not isinstance(locks, LockTable):
            scan.problems.append(f"locks could not be read, so lost locks cannot be seen: {locks}")
        else:
            # No readable descriptor carries it: a holder no one can name.
            unread = any(e.error for e in self.entries)
            for what in locks.ownerless.get(index, []):
                scan.problems.append(
                    f"a lock ({what}) names no owner (an open file description lock) and"
                    " a process that could not be read may hold it"
                    if unread
                    else f"a lock ({what}) names no owner (an open file description lock)"
                    " and no descriptor of a process this scan read carries it: a process"
                    " outside this PID namespace may hold it"
                )
        if self.restricted:
            scan.problems.append(self.restricted)
        if self.hidden:
            scan.problems.append(
                f"/proc does not list pid(s) {', '.join(map(str, self.hidden))}, which own locks"
                f" in {self.proc}/locks: this /proc hides processes, so a holder may be missed"
            )

    def _holder(
        self,
        entry: Holdings,
        index: int,
        fds: dict[Hit, int],
        maps: dict[Hit, int],
        *,
        via: str = VIA_DESCRIPTORS,
    ) -> Holder:
        """A holder from what was read of it: descriptors and maps, or only its locks."""
        pid, proc, locks = entry.pid, self.proc, self.locks
        by_locks = via == VIA_LOCKS
        try:
            argv = P.read_cmdline(pid, proc)
            cgroup = P.systemd_cgroup_path(P.read_cgroup(pid, proc))
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
            uid=_uid_or_none(pid, proc),
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
            exe=P.read_exe(pid, proc),
            start_ticks=entry.start_ticks,
            started=P.start_time(entry.start_ticks),
            ssh_connection=P.read_environ_var(pid, "SSH_CONNECTION", proc),
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


def _uid_or_none(pid: int, proc: str) -> int | None:
    try:
        return P.read_uid(pid, proc)
    except OSError:
        return None
