"""The databases the daemon watches: discovery, a monitor and a journal follower each,
and the mount checks.

:meth:`WatchedDatabases.rescan` discovers the Hermes homes and profiles (see
``statewarden.targets``) and starts watching a database that appeared: its monitor
(files and logs, ``statewarden.watch.monitor``) and, with ``watch.journal``, a
follower of its gateway unit's journal. A database no longer discovered is let go.
Each appearance, disappearance and the lack of any Hermes home is logged once.

Everything found is handed to ``on_found``. Every raw read of a database file
(``status``'s header read, a mount check, a ``check``'s copy) holds
:attr:`WatchedDatabases.source_reads`, so none overlaps another one: docs/safety.md
rule 2 holds per process, as closing a descriptor would drop the locks of a
SQLite connection this process has open on the same file.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statewarden.config import Config, state_dir
from statewarden.incidents import Found, Signal
from statewarden.logs import get_logger
from statewarden.mounts import Mount, read_mounts
from statewarden.targets import Target, discover
from statewarden.watch import (
    DatabaseStatus,
    JournalFollower,
    MountWatcher,
    TargetMonitor,
    database_status,
)

NOT_FOLLOWED = "not followed"


class WatchedDatabases:
    def __init__(self, config: Config, on_found: Callable[[Found], None]) -> None:
        self.config = config
        self.on_found = on_found
        self.log = get_logger()
        self.monitors: dict[str, TargetMonitor] = {}
        self.journals: dict[str, tuple[JournalFollower, asyncio.Task[None]]] = {}
        self.source_reads = threading.Lock()
        self.mounts = MountWatcher()
        self._newer_schema: set[str] = set()  # databases with a schema_newer incident open
        self._present: dict[str, bool] = {}
        self._announced_empty = False
        self._last_rescan = 0.0

    # -------------------------------------------------------------- discovery

    def rescan_due(self, now_monotonic: float) -> bool:
        return now_monotonic - self._last_rescan >= self.config.discovery.rescan_interval

    def rescan(self) -> list[Target]:
        """Discover targets; start watching new ones; log what appeared or went away."""
        self._last_rescan = time.monotonic()
        targets = discover(self.config)
        if not targets and not self._announced_empty:
            self.log.warning(
                "no Hermes home found; waiting for one to appear",
                looked_for=str(self.config.discovery.hermes_home or "$HERMES_HOME or ~/.hermes"),
                rescan_interval_s=self.config.discovery.rescan_interval,
            )
        self._announced_empty = not targets
        current = {str(t.db): t for t in targets}
        for key, t in current.items():
            exists = t.db.exists()
            if key not in self.monitors:
                self.monitors[key] = TargetMonitor(t, self.config)
                self.log.info(
                    "watching database",
                    profile=t.name,
                    db=key,
                    present=exists,
                    gateway_unit=t.gateway_unit,
                )
            elif exists and not self._present.get(key):
                self.log.info("database appeared", profile=t.name, db=key)
            elif not exists and self._present.get(key):
                self.log.warning("database disappeared", profile=t.name, db=key)
            self._present[key] = exists
        for key in list(self.monitors):
            if key not in current:
                gone = self.monitors.pop(key)
                gone.close()
                self._stop_journal(key)
                self._present.pop(key, None)
                self.log.info("no longer watching database", profile=gone.target.name, db=key)
        if self.config.watch.journal:
            for key, m in self.monitors.items():
                if key not in self.journals:
                    self._start_journal(key, m)
        return targets

    def reconfigure(self, config: Config) -> None:
        """A reloaded config: used by the next rescan; WAL thresholds apply at once."""
        self.config = config
        for m in self.monitors.values():
            m.files.wal_warn_bytes = config.watch.wal_warn_bytes
            m.files.wal_growth_window_s = config.watch.wal_growth_window

    def targets(self) -> list[Target]:
        return [m.target for m in self.monitors.values()]

    def paths(self) -> list[Path]:
        return [m.target.db for m in self.monitors.values()]

    def log_dirs(self) -> set[str]:
        """The logs directories that exist, for file events.

        Only those: Hermes writes -wal/-shm on every commit, and following those events
        costs more than the 1 s poll of a few stats. New holders are seen through inotify
        IN_OPEN on the database files (``HolderWatcher.opened``).
        """
        dirs = {str(m.target.logs_dir) for m in self.monitors.values()}
        return {d for d in dirs if os.path.isdir(d)}

    def db_for_unit(self, unit: str) -> str:
        """The database a Hermes unit writes: its target's, the only one, or "*" (all)."""
        for key, m in self.monitors.items():
            if m.target.gateway_unit == unit:
                return key
        return next(iter(self.monitors)) if len(self.monitors) == 1 else "*"

    # -------------------------------------------------------------- polling

    def poll(self, now: float) -> None:
        """Every database's watchers once; what they find goes to ``on_found``."""
        for m in list(self.monitors.values()):
            for found in m.poll(now):
                self.on_found(found)

    def next_wake_s(self) -> float | None:
        """The soonest any monitor wants polling again (a log record completing)."""
        waits = [w for m in self.monitors.values() if (w := m.next_wake_s()) is not None]
        return min(waits) if waits else None

    # -------------------------------------------------------------- journal followers

    def _start_journal(self, key: str, m: TargetMonitor) -> None:
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]

        def on_entry(entry: dict[str, Any]) -> None:
            for found in m.journal_entry(entry):
                self.on_found(found)

        follower = JournalFollower(
            [m.target.gateway_unit], state_dir(self.config) / f"journal-{digest}.cursor", on_entry
        )
        self.journals[key] = (follower, asyncio.get_running_loop().create_task(follower.run()))

    def _stop_journal(self, key: str) -> asyncio.Task[None] | None:
        entry = self.journals.pop(key, None)
        if entry is None:
            return None
        entry[1].cancel()
        return entry[1]

    def journal_status(self, key: str) -> str:
        journal = self.journals.get(key)
        return journal[0].status if journal else NOT_FOLLOWED

    # -------------------------------------------------------------- reads of the files

    async def status_of(self, t: Target, mounts: list[Mount]) -> DatabaseStatus:
        """``database_status`` in a worker thread, never while another raw read runs."""

        def read() -> DatabaseStatus:
            with self.source_reads:
                return database_status(t, mounts)

        return await asyncio.to_thread(read)

    async def check_mounts(self) -> None:
        """Each present database's filesystem, through the mount watcher; and its schema:
        one newer than statewarden knows is a ``schema_newer`` incident (info)."""
        mounts = await asyncio.to_thread(read_mounts)
        for m in list(self.monitors.values()):
            if m.target.db.exists():
                st = await self.status_of(m.target, mounts)
                for sig in self.mounts.check(str(m.target.db), st):
                    self.on_found(sig)
                self._schema_signal(str(m.target.db), st)

    def _schema_signal(self, db: str, st: DatabaseStatus) -> None:
        """``schema_newer`` while the schema is newer than known; cleared when it is not."""
        if st.schema_note is not None:
            self._newer_schema.add(db)
            self.on_found(
                Signal(
                    "schema_newer",
                    db,
                    st.schema_note,
                    source="status",
                    key="schema",
                    evidence=(st.schema_note,),
                )
            )
        elif db in self._newer_schema:
            self._newer_schema.discard(db)
            summary = f"schema_version {st.schema_version} is one statewarden knows"
            self.on_found(
                Signal("schema_newer", db, summary, source="status", key="schema", clears=True)
            )

    # -------------------------------------------------------------- stop

    def close(self) -> list[asyncio.Task[None]]:
        """Stop the journal followers (their tasks, cancelled, are returned to await)
        and close the monitors (log offsets saved)."""
        tasks = [t for key in list(self.journals) if (t := self._stop_journal(key)) is not None]
        for m in self.monitors.values():
            m.close()
        return tasks
