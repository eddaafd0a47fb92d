"""The holder watcher: who holds each database, compared with the last scan.

One :class:`~statewarden.holders.scan.HolderScanner` serves every database (one pass over
``/proc``, incremental between full scans). Each scan is diffed with the previous one:

- a holder arriving or leaving -> a timeline observation (pid, kind, unit, command),
  plus "N processes hold state.db (...)" when the count changes;
- a holder on an old or deleted state.db / -wal / -shm inode -> ``stale_holder``
  (stories 6 and 7: its writes no longer reach the database everyone else uses);
- a holder with the files open but no SQLite lock -> ``lost_locks``;
- more holders than ``holders.max_writers`` -> ``multi_writer`` (advisory);
- a holder whose kind is not in ``holders.expected_kinds`` -> ``unexpected_holder``.

Each state signal clears when its condition is gone (the pid left or is healthy).
The scan itself is blocking work: the daemon runs :meth:`HolderWatcher.scan` in a
worker thread and :meth:`HolderWatcher.diff` on the loop.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from statewarden.config import DEFAULT_OTHER_USERS, OtherUsersPolicy
from statewarden.holders.opens import OpenWatch
from statewarden.holders.scan import LOCK_LOST, SUFFIXES, Holder, HolderScan, HolderScanner
from statewarden.incidents.signals import Observation, Signal

Found = Signal | Observation


def describe(h: Holder) -> str:
    unit = h.unit or "no unit"
    orphan = ", orphan" if h.orphan else ""
    command = " ".join(h.cmdline)[:120] or f"[{h.comm}]"
    return f"pid {h.pid} ({h.kind}, {unit}{orphan}): {command}"


def _inode(path: Path) -> int:
    try:
        return os.stat(path).st_ino
    except OSError:
        return 0


class HolderWatcher:
    def __init__(
        self,
        dbs: list[Path],
        *,
        max_writers: int,
        expected_kinds: tuple[str, ...],
        exempt_comms: tuple[str, ...] = (),
        other_users: OtherUsersPolicy = DEFAULT_OTHER_USERS,
    ) -> None:
        self.exempt_comms = exempt_comms
        self.other_users: OtherUsersPolicy = other_users
        self.scanner = self._scanner(dbs)
        self._opens = OpenWatch()
        self._inodes: tuple[int, ...] = ()
        self.max_writers = max_writers
        self.expected_kinds = frozenset(expected_kinds)
        self.last: dict[str, HolderScan] = {}
        self._seen: dict[str, dict[tuple[int, int], Holder]] = {}
        self._flagged: dict[tuple[str, str], set[str]] = {}
        self._first = True

    def set_dbs(self, dbs: list[Path]) -> None:
        if [str(d) for d in dbs] != [str(d) for d in self.scanner.dbs]:
            self.scanner = self._scanner(dbs)
            self._first = True

    def _scanner(self, dbs: list[Path]) -> HolderScanner:
        return HolderScanner(dbs, exempt_comms=self.exempt_comms, other_users=self.other_users)

    def opened(self) -> bool:
        """True if one of the databases' files may have been opened since the last call.

        Hermes opens state.db when a process starts its connection, so an IN_OPEN there is
        the moment a new holder appears. A replaced file is watched again by its new inode.
        """
        files = [db.with_name(db.name + sfx) for db in self.scanner.dbs for sfx in SUFFIXES]
        inodes = tuple(_inode(f) for f in files)
        self._opens.watch(files, rearm=inodes != self._inodes)
        self._inodes = inodes
        return self._opens.poll()

    def scan(self) -> list[HolderScan]:
        """Blocking: one incremental scan (a full one the first time)."""
        return self.scanner.scan(full=self._first)

    def _state(self, db: str, kind: str, now: float, live: dict[str, str]) -> list[Found]:
        """Signals for ``kind`` keyed by pid; clears for pids flagged before but not now."""
        out: list[Found] = []
        before = self._flagged.get((db, kind), set())
        for key, summary in live.items():
            out.append(
                Signal(kind, db, summary, now, key=key, source="holders", evidence=(summary,))
            )
        for key in sorted(before - set(live)):
            out.append(
                Signal(kind, db, "condition cleared", now, key=key, source="holders", clears=True)
            )
        self._flagged[(db, kind)] = set(live)
        return out

    def diff(self, scans: list[HolderScan], now: float | None = None) -> list[Found]:
        now = time.time() if now is None else now
        self._first = False
        out: list[Found] = []
        for scan in scans:
            db = str(scan.db)
            self.last[db] = scan
            current = {(h.pid, h.start_ticks): h for h in scan.holders}
            before = self._seen.get(db)
            if before is not None:
                for key in sorted(set(current) - set(before)):
                    h = current[key]
                    out.append(
                        Observation(
                            "holder_arrived",
                            db,
                            f"{describe(h)} opened state.db",
                            now,
                            {"pid": h.pid, "kind": h.kind, "unit": h.unit},
                        )
                    )
                for key in sorted(set(before) - set(current)):
                    h = before[key]
                    out.append(
                        Observation(
                            "holder_left",
                            db,
                            f"pid {h.pid} ({h.kind}) closed state.db",
                            now,
                            {"pid": h.pid, "kind": h.kind},
                        )
                    )
            if before is None or len(before) != len(current):
                kinds = ", ".join(sorted(h.kind for h in current.values())) or "none"
                out.append(
                    Observation(
                        "holders",
                        db,
                        f"{len(current)} processes hold state.db ({kinds})",
                        now,
                        {"count": len(current)},
                    )
                )
            self._seen[db] = current
            holders = list(current.values())
            out += self._state(
                db,
                "stale_holder",
                now,
                {
                    str(h.pid): f"{describe(h)} still holds an old or deleted "
                    f"{', '.join(h.stale_files)} inode: its writes no longer reach the live "
                    "database"
                    for h in holders
                    if h.stale
                },
            )
            out += self._state(
                db,
                "lost_locks",
                now,
                {
                    str(
                        h.pid
                    ): f"{describe(h)} has state.db open but lost its SQLite locks: another "
                    "process closing the database can delete -wal/-shm under it"
                    for h in holders
                    if h.lock_state == LOCK_LOST
                },
            )
            out += self._state(
                db,
                "unexpected_holder",
                now,
                {
                    str(
                        h.pid
                    ): f"{describe(h)} holds state.db and is not a kind expected here ({h.kind})"
                    for h in holders
                    if h.kind not in self.expected_kinds
                },
            )
            many = {}
            if len(holders) > self.max_writers:
                many[""] = (
                    f"{len(holders)} processes hold state.db at once (more than "
                    f"{self.max_writers}): " + "; ".join(describe(h) for h in holders)
                )
            out += self._state(db, "multi_writer", now, many)
        return out
