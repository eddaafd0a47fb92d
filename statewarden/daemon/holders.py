"""When the daemon scans for holders.

A holder scan reads ``/proc`` (in a worker thread, so log detection is never delayed
by it) and covers every watched database at once. It runs every
``watch.holders_interval``, and within ``EVENT_HOLDER_SCAN_GAP_S`` after a database
file was opened (a new holder, seen by inotify ``IN_OPEN``) or a sidecar came, went
or was replaced (a holder may now be on an old inode). One scan runs at a time.

Its failures are reported like a failing watcher's, once, under the database ``"*"``.
The pids holding a maintenance run's lock (``maintenance.ledger.lock_holder``) are given
to the diff: the run's own process is not a holder incident. The daemon itself and the
processes it started (a verification's checker child) are no holder at all: the watcher
knows them by the daemon's pid (``own_pid``), not by their name.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from statewarden.config import Config
from statewarden.holders import HolderScan
from statewarden.incidents import Found, Incident, Observation, Signal
from statewarden.watch import LOG_STALE_KEYS, Guard, HolderWatcher

EVENT_HOLDER_SCAN_GAP_S = 0.5  # file events trigger a holder re-scan at most this often
# Observations after which a holder may be on an old inode: a scan is due soon.
BUNDLE_CHANGES = frozenset(
    {"sidecar_created", "sidecar_deleted", "file_replaced", "db_created", "db_deleted"}
)


def _log_raised_stale(found: Found) -> bool:
    """A ``stale_holder`` signal a Hermes log line raised (no watcher flags it by pid)."""
    return (
        isinstance(found, Signal)
        and found.kind == "stale_holder"
        and not found.clears
        and found.key in LOG_STALE_KEYS
    )


class HolderScans:
    def __init__(
        self,
        config: Config,
        on_found: Callable[[Found], None],
        maintenance_pids: Callable[[], frozenset[int]] = frozenset,
    ) -> None:
        self.config = config
        self.on_found = on_found
        self.maintenance_pids = maintenance_pids  # blocking (reads /proc/locks)
        self.watcher = HolderWatcher(
            [],
            max_writers=config.holders.max_writers,
            expected_kinds=tuple(config.holders.expected_kinds),
            exempt_comms=config.holders.exempt_comms,
            other_users=config.holders.other_users,
            own_pid=os.getpid(),
            unexpected_after=config.holders.unexpected_after,
        )
        self.guard = Guard("holders", "*", lambda _now: [])
        self.task: asyncio.Task[None] | None = None
        self._scanned_at = 0.0  # monotonic
        self._has_dbs = False
        self._event = False
        self.scans_done = 0  # scans that ran without failing, since start

    def set_dbs(self, dbs: list[Path]) -> None:
        self.watcher.set_dbs(dbs)
        self._has_dbs = bool(dbs)

    def reconfigure(self, config: Config) -> None:
        """A reloaded config: the scan interval applies from the next wake, the holders
        section (policy, expected kinds, writers) from the next scan."""
        self.config = config
        self.watcher.configure(config.holders)

    @property
    def last(self) -> dict[str, HolderScan]:
        """The latest scan of each database."""
        return self.watcher.last

    def notice(self, found: Found) -> None:
        """Note a finding that makes a scan due soon; a ``stale_holder`` signal from a
        Hermes log line awaits the scan that proves it gone (and makes one due)."""
        if isinstance(found, Observation) and found.what in BUNDLE_CHANGES:
            self._event = True
        elif _log_raised_stale(found):
            assert isinstance(found, Signal)
            self.watcher.awaiting_proof(found.db, found.key)
            self._event = True

    def open_at_start(self, incidents: Iterable[Incident]) -> None:
        """The incidents open when the daemon starts: each log-raised ``stale_holder``
        awaits a scan's proof as if its line had just been read."""
        for inc in incidents:
            if inc.state == "open" and inc.kind == "stale_holder":
                self.watcher.awaiting_proof(inc.db, inc.key)

    async def scan(self) -> None:
        """One holder scan in a worker thread (it reads /proc), diffed on the loop."""
        self._scanned_at = time.monotonic()
        if not self._has_dbs:
            return
        now = time.time()
        if not self.guard.due(now):
            return
        try:
            scans, exempt = await asyncio.to_thread(self._scan_once)
            found = self.watcher.diff(scans, now, exempt)
        except Exception as exc:  # noqa: BLE001 - reported like any failing watcher
            found = self.guard.failed(exc, now)
        else:
            found = self.guard.succeeded(found, now)
            self.scans_done += 1
        for f in found:
            self.on_found(f)

    def _scan_once(self) -> tuple[list[HolderScan], frozenset[int]]:
        """In the worker thread: the scan, and the maintenance runs' pids right after it
        (a run that holds its lock now held it for the scan too, or just began)."""
        scans = self.watcher.scan()
        return scans, self.maintenance_pids()

    def schedule(self, polled_at: float) -> None:
        """Start a scan in the background if one is due and none is running.

        ``polled_at`` is the monotonic time of the poll just done.
        """
        since = polled_at - self._scanned_at
        if self.watcher.opened():
            self._event = True
        due = since >= self.config.watch.holders_interval or (
            self._event and since >= EVENT_HOLDER_SCAN_GAP_S
        )
        if due and (self.task is None or self.task.done()):
            self._event = False
            self.task = asyncio.create_task(self.scan())
