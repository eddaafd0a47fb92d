"""The incremental scan's cache: what each process held when it was last read.

Holders are kept with what they hold, other processes with their descriptor count
only. An incremental scan reads again new pids, current holders and processes that
could not be inspected; another process only when an open event says a bundle file was
opened (``opens.py``) or the round-robin of ``refresh_per_scan`` reaches it, and then only
if its descriptor count changed. The old inodes a holder keeps open (``stale_ids``) live
here too: they are what the lock check may match an old inode against.
"""

from __future__ import annotations

import os

from statewarden.holders.holdings import Holdings, ProcessReader

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

DEFAULT_REFRESH_PER_SCAN = 128


class ProcessCache:
    """Every listed process by pid, as it was last read (or found unreadable)."""

    def __init__(self, refresh_per_scan: int = DEFAULT_REFRESH_PER_SCAN) -> None:
        self.refresh_per_scan = refresh_per_scan
        self.entries: dict[int, Holdings] = {}
        self._rr = 0

    def to_read(
        self, pids: list[int], *, full: bool, opened: bool, reader: ProcessReader
    ) -> list[int]:
        """The pids of this listing to read: all of them on a full scan; otherwise the
        new ones, the holders, the unreadable, and those whose count says they changed
        (when something was opened, or in this scan's round-robin share). Forgets the
        pids that are gone."""
        if full:
            self.entries.clear()
        for gone in set(self.entries) - set(pids):
            del self.entries[gone]
        refresh = self._refresh_set(pids) if not full else set()
        return [
            pid
            for pid in pids
            if (cached := self.entries.get(pid)) is None
            or cached.error
            or cached.fds
            or cached.maps
            or ((opened or pid in refresh) and reader.fd_count_changed(cached))
        ]  # the rest: known non-holders, and nothing says they changed

    def store(self, results: Iterable[tuple[int, Holdings | None]], vanished: list[int]) -> None:
        """Keep what was read; a process that vanished is dropped and listed in ``vanished``."""
        for pid, entry in results:
            if entry is None:
                self.entries.pop(pid, None)
                vanished.append(pid)
            else:
                self.entries[pid] = entry

    def holding(self) -> list[Holdings]:
        """By pid, the processes that hold a bundle file or could not be read."""
        return [e for _, e in sorted(self.entries.items()) if e.error or e.fds or e.maps]

    def coverage(self, *, by_locks: bool) -> dict[str, int]:
        """How each process of the last listing was covered: read, through locks, or not."""
        out = {"read": 0, "locks_only": 0, "kernel_threads": 0, "uncovered": 0}
        for e in self.entries.values():
            if e.kernel_thread:
                out["kernel_threads"] += 1
            elif not e.error:
                out["read"] += 1
            elif by_locks:
                out["locks_only"] += 1
            else:
                out["uncovered"] += 1
        return out

    def _refresh_set(self, pids: list[int]) -> set[int]:
        if self.refresh_per_scan <= 0 or not pids:
            return set()
        pids = sorted(pids)
        start = self._rr % len(pids)
        chosen = pids[start : start + self.refresh_per_scan]
        self._rr = start + len(chosen)
        return set(chosen)


def list_pids(proc: str) -> list[int]:
    """Every pid ``proc`` lists."""
    return [int(n) for n in os.listdir(proc) if n.isdigit()]
