"""Maintenance the daemon starts by itself: resume interrupted runs, repair in windows.

A run is always a ``statewardenctl maintenance`` subprocess, exactly what a user would
run, so it holds the same per-database lock, writes the same run ledger, and cannot
break the daemon's own rule 2 (the daemon reads database headers and opens read-only
connections; the run copies and fences files). Its JSON report is logged.

- At start-up, a database whose ledger records an unfinished run gets ``--resume``:
  the interrupted run is rolled forward or back, and the units it stopped run again.
- Every ``maintenance.snapshot_interval`` (default a day), one verified snapshot of each
  database (``statewardenctl snapshots take --idle``: nice 19, idle I/O) when
  ``maintenance.snapshots`` is on; a database with none yet gets its first
  :data:`FIRST_SNAPSHOT_AFTER_S` after the daemon first sees it (not in the same breath
  as its first verification). Never while a run is in progress on it; a snapshot that
  fails its check is tried again only after the next interval (verification raises the
  damage).
- ``maintenance.auto_repair``: ``never``; ``immediately`` (as soon as an open incident
  of a kind in ``maintenance.repair_kinds`` names the database); ``in_window`` (the
  same, inside a window of ``maintenance.windows`` that stays open long enough for the
  run's estimate: a run that would not finish before the window ends is not started).
  A run is not repeated for the same incident occurrence (its id and count).

Every run, whoever started it, is watched the same way (:meth:`AutoMaintenance.muted`):
a database whose run ledger is unfinished while its lock is held has a run in
progress (``ledger.in_progress``); its holder and unit alerts stay muted until
:data:`QUIET_AFTER_S` after the run ends (the units it started again settle). A run
killed with ``kill -9`` holds no lock, so it mutes nothing. The outcome each run leaves
(``outcomes.py``) is collected with :meth:`AutoMaintenance.outcomes`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from statewarden.config import Config, state_dir
from statewarden.errors import StatewardenError
from statewarden.incidents import Incident
from statewarden.maintenance import outcomes
from statewarden.maintenance.ledger import in_progress, unfinished
from statewarden.maintenance.plan import RECOVER_BYTES_PER_S
from statewarden.maintenance.snapshots import newest_of
from statewarden.maintenance.windows import fits, parse_windows
from statewarden.recovery import bundle_bytes
from statewarden.targets import Target

# Stop, settle, swap and start of the units, on top of two recovers (pre-build and
# catch-up), for the "fits in the window" estimate.
RUN_OVERHEAD_S = 120.0
# Holder and unit alerts stay muted this long after a run ends: the units it started
# again come up, and what its stops caused clears, before anything is sent.
QUIET_AFTER_S = 30.0

# A database with no snapshot yet gets its first this long after it is first seen.
FIRST_SNAPSHOT_AFTER_S = 300.0

LogFn = Callable[..., None]


def estimate_s(target: Target) -> float:
    """A generous estimate of a repair run's length (pre-build + catch-up + overhead)."""
    return RUN_OVERHEAD_S + 2 * bundle_bytes(target.db) / RECOVER_BYTES_PER_S


class AutoMaintenance:
    """The daemon's side of maintenance: which runs to start, and the runs in flight."""

    def __init__(self, config: Config, log: Any) -> None:
        self.config = config
        self.log = log
        self.windows = parse_windows(config.maintenance.windows)
        self.running: dict[str, asyncio.Task[None]] = {}
        self.last: dict[str, dict[str, Any]] = {}
        self._done_for: set[tuple[int, int]] = set()
        self._snapshot_at: dict[str, float] = {}  # db -> its last snapshot (or try)
        self.last_snapshot: dict[str, dict[str, Any]] = {}
        self.in_progress: dict[str, str] = {}  # db -> run id of the run in progress
        self._ended: dict[str, float] = {}  # db -> when its run was seen to end

    def reconfigure(self, config: Config) -> None:
        self.config = config
        self.windows = parse_windows(config.maintenance.windows)

    def muted(self, targets: Sequence[Target], now: float | None = None) -> set[str]:
        """The databases whose holder and unit alerts are muted now: a run is in progress
        on them (any process's), or ended less than :data:`QUIET_AFTER_S` ago."""
        now = time.time() if now is None else now
        sdir = state_dir(self.config)
        out: set[str] = set()
        for t in targets:
            key = str(t.db)
            try:
                record = in_progress(sdir, Path(os.path.abspath(t.db)))
            except (OSError, StatewardenError):
                record = None
            if record is not None:
                if key not in self.in_progress:
                    self.log.info(
                        "maintenance run in progress; holder and unit alerts muted",
                        db=key,
                        run_id=record.run_id,
                        pid=record.begin.get("pid"),
                        action=record.begin.get("action"),
                    )
                self.in_progress[key] = record.run_id
                self._ended.pop(key, None)
            elif key in self.in_progress:
                run_id = self.in_progress.pop(key)
                self._ended[key] = now
                self.log.info("maintenance run ended", db=key, run_id=run_id)
            elif key in self._ended and now - self._ended[key] >= QUIET_AFTER_S:
                del self._ended[key]
            if key in self.in_progress or key in self._ended:
                out.add(key)
        return out

    def outcomes(self) -> list[tuple[Path, dict[str, Any]]]:
        """The outcomes runs left for the alerts, oldest first (remove each with
        :func:`outcomes.done` once its notification is queued)."""
        return outcomes.pending(state_dir(self.config))

    def status(self) -> dict[str, Any]:
        return {
            "auto_repair": self.config.maintenance.auto_repair,
            "windows": list(self.config.maintenance.windows),
            "running": sorted(self.running),
            "last": self.last,
            "last_snapshot": self.last_snapshot,
            "in_progress": dict(self.in_progress),
        }

    async def resume_unfinished(self, targets: Sequence[Target]) -> None:
        """Take up each run a kill left unfinished. Several at once are the runs of one
        ``--all-profiles`` stop (or of profiles that share a gateway): they are resumed
        together, ``--all-profiles --resume``, so what they stopped starts once, after
        every one of them is rolled back or forward, never while another profile's swap
        is still half done."""
        pending = [t for t in targets if unfinished(state_dir(self.config), t.db)]
        if len(pending) > 1:
            self.log.warning(
                "resuming interrupted maintenance runs of several profiles in one stop",
                dbs=[str(t.db) for t in pending],
            )
            await self._run(pending[0], ["maintenance", "--all-profiles", "--resume"], "resume")
            return
        for t in pending:
            self.log.warning("resuming an interrupted maintenance run", db=str(t.db))
            await self._run(t, ["maintenance", "--resume"], "resume")

    def tick(
        self,
        targets: Sequence[Target],
        incidents: Sequence[Incident],
        now: dt.datetime | None = None,
    ) -> None:
        """Start a repair run where the policy says one is due (in the background)."""
        mc = self.config.maintenance
        now = now or dt.datetime.now(dt.UTC)
        if mc.auto_repair == "never":
            self._snapshots(targets, now.timestamp())
            return
        for t in targets:
            key = str(t.db)
            if key in self.running:
                continue
            wanted = [
                i
                for i in incidents
                if i.db == key
                and i.kind in mc.repair_kinds
                and (i.id, i.count) not in self._done_for
            ]
            if not wanted:
                continue
            if mc.auto_repair == "in_window" and not fits(self.windows, now, estimate_s(t)):
                continue
            for i in wanted:
                self._done_for.add((i.id, i.count))
            self.log.warning(
                "starting a maintenance run",
                db=key,
                incidents=[i.id for i in wanted],
                policy=mc.auto_repair,
            )
            self.running[key] = asyncio.create_task(
                self._run(t, ["maintenance", "--yes"], "repair")
            )
        self._snapshots(targets, now.timestamp())

    def _snapshots(self, targets: Sequence[Target], now: float) -> None:
        """A verified snapshot of each database every ``maintenance.snapshot_interval``."""
        mc = self.config.maintenance
        if not mc.snapshots:
            return
        for t in targets:
            key = str(t.db)
            if key not in self._snapshot_at:
                newest = newest_of(state_dir(self.config), t.db)
                first = min(FIRST_SNAPSHOT_AFTER_S, mc.snapshot_interval)
                self._snapshot_at[key] = (
                    newest.taken_at if newest is not None else now - mc.snapshot_interval + first
                )
            if now - self._snapshot_at[key] < mc.snapshot_interval:
                continue
            if key in self.running or key in self.in_progress or not t.db.exists():
                continue
            self._snapshot_at[key] = now
            self.running[key] = asyncio.create_task(
                self._run(t, ["snapshots", "take", "--idle"], "snapshot")
            )

    async def _run(self, target: Target, args: list[str], what: str) -> None:
        key = str(target.db)
        if args[0] == "maintenance":
            args = [*args, "--here"]  # run by this subprocess, not handed back to the daemon
        every = "--all-profiles" in args
        argv = [sys.executable, "-m", "statewarden.cli.ctl", *args, "--json"]
        if not every:
            argv[-1:-1] = ["--db", key]
        if self.config.source:
            argv += ["--config", self.config.source]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            out, err = await proc.communicate()
            try:
                report: dict[str, Any] = json.loads(out)
            except ValueError:
                report = {"outcome": "failed", "message": err.decode(errors="replace")[-500:]}
            report["exit_code"] = proc.returncode
            if what == "snapshot":
                self.last_snapshot[key] = report
            elif every and isinstance(report.get("profiles"), list):
                for each in report["profiles"]:
                    self.last[str(each.get("db") or key)] = each
            else:
                self.last[key] = report
            log = self.log.info if proc.returncode == 0 else self.log.error
            log(
                f"maintenance {what} finished",
                db=key,
                outcome=report.get("outcome") or ("kept" if proc.returncode == 0 else "not kept"),
                exit_code=proc.returncode,
                message=report.get("message") or "",
                downtime_s=report.get("downtime_s"),
                quarantine=report.get("quarantine"),
            )
        finally:
            self.running.pop(key, None)
