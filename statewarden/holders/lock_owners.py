"""The lock check: who owns a lock on the bundles, as ``/proc/locks`` tells it.

It sees the holders whose descriptors cannot be read (another user's processes, under
``other_users: locks``), attributes each ownerless OFD lock to a readable descriptor
that carries it, and finds the owners ``/proc`` did not list: started since the
listing, or hidden (``hidepid``). An old inode counts only while a process this scan
read holds it (``Holdings.stale_ids``): a number remembered from before may name a
stranger's file by now.
"""

from __future__ import annotations

import os

from statewarden.holders.locks import LockKey, Locks, LockTable, attribute, read_locks

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from statewarden.holders.bundle import Bundle, Hit
    from statewarden.holders.holdings import Holdings


class LockOwners:
    """Reads ``/proc/locks`` for the bundles' files, current and held-open old ones."""

    def __init__(self, proc: str) -> None:
        self.proc = proc

    def read(self, bundles: list[Bundle], entries: Iterable[Holdings]) -> Locks:
        """Every lock owner, and what each owns on the bundles' files, current or old
        (``locks.read_locks``); or why ``/proc/locks`` could not be read."""
        by_id: dict[tuple[int, int, int], Hit] = {}
        # An old inode only while a process this scan read holds it (unlinked, or renamed
        # away): a number remembered from before may name a stranger's file by now.
        for entry in entries:
            for old, (i, name) in entry.stale_ids.items():
                if i < len(bundles):
                    by_id[(os.major(old[0]), os.minor(old[0]), old[1])] = (i, name, True)
        for i, t in enumerate(bundles):
            for name, fid in t.ids.items():
                if fid:
                    by_id[(os.major(fid[0]), os.minor(fid[0]), fid[1])] = (i, name, False)
        return read_locks(self.proc, by_id)

    @staticmethod
    def attribute(locks: LockTable, entries: Iterable[Holdings]) -> bool:
        """Match each ownerless OFD lock to a readable descriptor that carries it
        (``locks.attribute``); True if a lock is left that no readable descriptor carries."""
        carriers: dict[LockKey, list[tuple[int, int]]] = {}
        for e in entries:
            for fd, _hit, key in e.ofd:
                carriers.setdefault(key, []).append((e.pid, fd))
        return attribute(locks, carriers)

    def unlisted(
        self,
        locks: LockTable,
        listed: set[int],
        bundles: list[Bundle],
        entries: Iterable[Holdings],
    ) -> tuple[list[int], list[int]]:
        """Lock owners ``/proc`` did not list: (started since, with a lock on a bundle; hidden).

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
        again = self.read(bundles, entries)
        still = again.pids if isinstance(again, LockTable) else set(missing)
        return newborn, [p for p in missing if p in still]
