"""The holder watcher: who holds each database, compared with the last scan.

One :class:`~statewarden.holders.scan.HolderScanner` serves every database (one pass over
``/proc``, incremental between full scans). Each scan is diffed with the previous one:

- a holder arriving or leaving -> a timeline observation (pid, kind, unit, command),
  plus "N processes hold state.db (...)" when the count changes;
- a holder on an old or deleted state.db / -wal / -shm inode -> ``stale_holder``
  (docs/stories.md stories 6 and 7: its writes no longer reach the database everyone else uses);
- a holder with the files open but no SQLite lock -> ``lost_locks``;
- more holders than ``holders.max_writers`` -> ``multi_writer`` (advisory);
- a holder whose kind is not in ``holders.expected_kinds``, seen holding the database
  for ``holders.unexpected_after`` (a minute: a script that reads for a few seconds is
  no holder worth an alert yet) -> ``unexpected_holder``;
- a maintenance run's own process (its pid from the run lock, and that pid's children,
  given to :meth:`HolderWatcher.diff` as ``exempt``) is none of ``lost_locks``,
  ``unexpected_holder`` or ``multi_writer``: it holds the database to repair it;
- statewarden's own processes (``own_pid``: the daemon, and every process it started,
  known by the pid chain, never by name) are no holder at all: its verification reads
  the database and starts checker children, and none of that is news or an incident
  (a process merely named statewarden, started by someone else, is a holder like any);
- a ``stale_holder`` incident raised from a Hermes log line (``LOG_STALE_KEYS``: Hermes
  said a process holds a deleted or replaced inode; the daemon names each open one with
  :meth:`HolderWatcher.awaiting_proof`) clears at the first complete scan that proves no
  process holds one: every holder read through its descriptors, none stale
  (statewarden's own processes included in that proof);
- the open watch (inotify ``IN_OPEN``, ``holders/opens.py``) unavailable, the user's
  inotify instances or watches used up -> ``watcher_degraded`` (every process is then
  read at each scan instead: slower, nothing missed), cleared when it works again.

The per-holder rules are the table ``HOLDER_RULES`` (kind, condition, summary); each
state signal clears when its condition is gone (the pid left or is healthy).
The scan itself is blocking work: the daemon runs :meth:`HolderWatcher.scan` in a
worker thread and :meth:`HolderWatcher.diff` on the loop.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from statewarden.config import DEFAULT_OTHER_USERS, HoldersConfig, OtherUsersPolicy
from statewarden.holders import (
    LOCK_LOST,
    VIA_DESCRIPTORS,
    Holder,
    HolderScan,
    HolderScanner,
    OpenWatch,
)
from statewarden.incidents import Found, Observation, Signal
from statewarden.kinds import KINDS


def describe(h: Holder) -> str:
    unit = h.unit or "no unit"
    orphan = ", orphan" if h.orphan else ""
    command = " ".join(h.cmdline)[:120] or f"[{h.comm}]"
    return f"pid {h.pid} ({h.kind}, {unit}{orphan}): {command}"


@dataclass(frozen=True)
class HolderRule:
    """One state a holder can be in, and the incident kind it is, keyed by pid."""

    kind: str
    applies: Callable[[Holder, frozenset[str]], bool]  # (holder, expected kinds)
    says: str  # formatted with {holder}, {stale_files} and {kind}

    def summary(self, h: Holder) -> str:
        return self.says.format(
            holder=describe(h), stale_files=", ".join(h.stale_files), kind=h.kind
        )


# The per-holder state rules, in the order their signals are given. Each clears for a
# pid once that pid is gone or no longer in the state.
HOLDER_RULES: tuple[HolderRule, ...] = (
    HolderRule(
        "stale_holder",
        lambda h, _expected: h.stale,
        "{holder} still holds an old or deleted {stale_files} inode: its writes no "
        "longer reach the live database",
    ),
    HolderRule(
        "lost_locks",
        lambda h, _expected: h.lock_state == LOCK_LOST,
        "{holder} has state.db open but lost its SQLite locks: another process closing "
        "the database can delete -wal/-shm under it",
    ),
    HolderRule(
        "unexpected_holder",
        lambda h, expected: h.kind not in expected,
        "{holder} holds state.db and is not a kind expected here ({kind})",
    ),
)


# The keys of the ``stale_holder`` incidents Hermes' own log lines raise
# (``watch/rules.py``: "state.db was replaced underneath the gateway", the deleted
# -wal/-shm generation). No watcher flags them by pid; a scan proving the condition gone
# clears them.
LOG_STALE_KEYS = ("db_replaced", "deleted_sidecar")


# What a maintenance run's own process never is (it holds the database to repair it):
# a view of the kinds table.
MAINTENANCE_EXEMPT = frozenset(n for n, k in KINDS.items() if k.maintenance_process_exempt)


def _inode(path: str) -> int:
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
        own_pid: int | None = None,
        unexpected_after: float = 0.0,
    ) -> None:
        """``own_pid``: the watching process (the daemon); it and its descendants are
        never holders (None: every process is). ``unexpected_after``: how long a holder
        of an unexpected kind must be seen before it is ``unexpected_holder``."""
        self.own_pid = own_pid
        self.unexpected_after = unexpected_after
        self._first_seen: dict[tuple[str, int, int], float] = {}  # (db, pid, ticks) -> when
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
        self._degraded_reported: str | None = None
        # (db, key) of the log-raised stale_holder incidents open, awaiting a scan's proof
        self._log_stale: set[tuple[str, str]] = set()

    def set_dbs(self, dbs: list[Path]) -> None:
        if [str(d) for d in dbs] != [str(d) for d in self.scanner.dbs]:
            self.scanner = self._scanner(dbs)
            self._first = True

    def configure(self, holders: HoldersConfig) -> None:
        """A reloaded ``holders`` section: it applies from the next scan."""
        self.max_writers = holders.max_writers
        self.expected_kinds = frozenset(holders.expected_kinds)
        self.exempt_comms = holders.exempt_comms
        self.other_users = holders.other_users
        self.scanner.exempt_comms = frozenset(holders.exempt_comms)
        self.scanner.other_users = holders.other_users

    def _scanner(self, dbs: list[Path]) -> HolderScanner:
        return HolderScanner(dbs, exempt_comms=self.exempt_comms, other_users=self.other_users)

    def opened(self) -> bool:
        """True if one of the databases' files may have been opened since the last call.

        Hermes opens state.db when a process starts its connection, so an IN_OPEN there is
        the moment a new holder appears. A replaced file is watched again by its new inode.
        """
        files = self.scanner.files()
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

    def diff(
        self,
        scans: list[HolderScan],
        now: float | None = None,
        exempt: frozenset[int] = frozenset(),
    ) -> list[Found]:
        """What changed since the last scan: observations, then state signals.

        ``exempt``: the pids of maintenance runs (a holder that is one, or a child of
        one, raises only ``stale_holder``)."""
        now = time.time() if now is None else now
        self._first = False
        out: list[Found] = []
        for scan in scans:
            db = str(scan.db)
            out += self._stale_proven_gone(scan, now)
            scan.holders = [h for h in scan.holders if not self._own(h)]
            self.last[db] = scan
            current = {(h.pid, h.start_ticks): h for h in scan.holders}
            out += _comings_and_goings(db, self._seen.get(db), current, now)
            self._seen[db] = current
            seen_long = self._seen_for(db, current, now)
            holders = list(current.values())
            others = [h for h in holders if h.pid not in exempt and h.ppid not in exempt]
            for rule in HOLDER_RULES:
                judged = holders if rule.kind not in MAINTENANCE_EXEMPT else others
                if rule.kind == "unexpected_holder":
                    judged = [h for h in judged if (h.pid, h.start_ticks) in seen_long]
                live = {
                    str(h.pid): rule.summary(h)
                    for h in judged
                    if rule.applies(h, self.expected_kinds)
                }
                out += self._state(db, rule.kind, now, live)
            out += self._state(db, "multi_writer", now, self._too_many(others))
        return out + self._open_watch_signals(now)

    def _seen_for(
        self, db: str, current: dict[tuple[int, int], Holder], now: float
    ) -> set[tuple[int, int]]:
        """The holders of ``db`` seen for at least ``unexpected_after`` (first seen is
        remembered while they hold it)."""
        for key in [k for k in self._first_seen if k[0] == db and k[1:] not in current]:
            del self._first_seen[key]
        out = set()
        for pid, ticks in current:
            since = self._first_seen.setdefault((db, pid, ticks), now)
            if now - since >= self.unexpected_after:
                out.add((pid, ticks))
        return out

    def _own(self, h: Holder) -> bool:
        """True for the watching process itself and any process it started (its pid
        among the holder's parents)."""
        me = self.own_pid
        if me is None:
            return False
        return me in (h.pid, h.ppid) or any(p.get("pid") == me for p in h.parents)

    def awaiting_proof(self, db: str, key: str) -> None:
        """A ``stale_holder`` incident Hermes' log raised (``key`` in ``LOG_STALE_KEYS``)
        is open on ``db``: the next scan that proves the condition gone clears it."""
        if key in LOG_STALE_KEYS:
            self._log_stale.add((db, key))

    def _stale_proven_gone(self, scan: HolderScan, now: float) -> list[Found]:
        """Clears for the log-raised ``stale_holder`` incidents awaiting proof on
        ``scan.db`` when the scan proves the condition gone: complete, every holder read
        through its descriptors (one seen only by its locks could hold a deleted inode
        unseen), none on an old or deleted inode."""
        db = str(scan.db)
        waiting = sorted(key for d, key in self._log_stale if d == db)
        if not waiting:
            return []
        if not scan.complete or any(h.stale or h.via != VIA_DESCRIPTORS for h in scan.holders):
            return []
        self._log_stale -= {(db, key) for key in waiting}
        summary = (
            "no process holds an old or deleted state.db, -wal or -shm inode "
            f"(holder scan: {len(scan.holders)} holder(s), every one on the live files)"
        )
        return [
            Signal("stale_holder", db, summary, now, key=key, source="holders", clears=True)
            for key in waiting
        ]

    @property
    def open_watch_degraded(self) -> str | None:
        """Why the open watch has no inotify (every process is read instead), or None."""
        return self._opens.degraded

    def _open_watch_signals(self, now: float) -> list[Found]:
        """``watcher_degraded`` while the open watch has no inotify; cleared when back."""
        why = self._opens.degraded
        if why == self._degraded_reported:
            return []
        before, self._degraded_reported = self._degraded_reported, why
        if why is not None:
            summary = (
                f"holder open watch: {why}. Every process is read at each holder "
                "scan instead (nothing is missed)"
            )
            return [
                Signal(
                    "watcher_degraded",
                    "*",
                    summary,
                    now,
                    key="holder_opens",
                    source="holders",
                    evidence=(why,),
                )
            ]
        if before is None:
            return []
        return [
            Signal(
                "watcher_degraded",
                "*",
                "holder open watch (inotify) works again",
                now,
                key="holder_opens",
                source="holders",
                clears=True,
            )
        ]

    def _too_many(self, holders: list[Holder]) -> dict[str, str]:
        """``multi_writer``, for the whole database (key ""), when it has too many holders."""
        if len(holders) <= self.max_writers:
            return {}
        return {
            "": f"{len(holders)} processes hold state.db at once (more than "
            f"{self.max_writers}): " + "; ".join(describe(h) for h in holders)
        }


def _comings_and_goings(
    db: str,
    before: dict[tuple[int, int], Holder] | None,
    current: dict[tuple[int, int], Holder],
    now: float,
) -> list[Found]:
    """Timeline observations: holders that arrived or left, and the count when it changed.

    ``before`` is None on the first scan of ``db``: everyone there is not news, only the
    count is.
    """
    out: list[Found] = []
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
    return out
