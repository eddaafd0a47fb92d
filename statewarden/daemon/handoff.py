"""Maintenance runs handed to the daemon by ``statewardenctl maintenance``.

When the daemon runs, ``statewardenctl maintenance`` does not run the maintenance
itself: it sends ``maintenance_run`` over the control socket and watches. The daemon
runs it exactly as its own runs (``maintenance.auto``): a ``statewardenctl maintenance
--here --json --yes`` subprocess, so the run holds the same lock, writes the same
ledger and leaves the same outcome for the alerts; the subprocess's JSON event lines
(plan, steps, progress, cancel answers) are streamed to every client watching, and its
report is the stream's result. The client going away does not stop the run.

- **One run at a time per database**: a request while a run is in progress on the
  database (handed to the daemon, started by the daemon itself, or a shell's run, seen
  through its lock and ledger) is refused with that run's id
  (:class:`~statewarden.errors.RunInProgress`, exit 5).
- **Cancel** (``maintenance_cancel``, sent by the client on Ctrl-C): refused, with the
  reason, once the run's ledger records the swap; otherwise the subprocess gets
  ``SIGINT``, which the run takes as a cancel (``MaintenanceRun.cancel``): it stops at
  its next step before the swap and rolls back, or (if it reached the swap meanwhile)
  refuses and finishes. Its answer arrives as a ``cancel`` event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statewarden.config import Config
from statewarden.daemon.control import Streamed
from statewarden.errors import RunInProgress, StatewardenError, UsageError
from statewarden.maintenance import ACTIONS, PAST_THE_SWAP, AutoMaintenance, in_progress

FLAGS = ("force", "accept_loss", "no_import", "resume")
REPORT_TAIL_CHARS = 500  # of a run's stderr, when it ended without a report


@dataclass
class HandedRun:
    db: str
    proc: asyncio.subprocess.Process
    events: list[dict[str, Any]] = field(default_factory=list)
    watchers: set[asyncio.Queue[dict[str, Any] | None]] = field(default_factory=set)
    run_id: str | None = None
    report: dict[str, Any] | None = None
    done: bool = False

    def publish(self, event: dict[str, Any]) -> None:
        if event.get("event") == "started":
            self.run_id = str(event.get("run_id") or "") or None
        self.events.append(event)
        for q in self.watchers:
            q.put_nowait(event)

    def end(self, report: dict[str, Any]) -> None:
        self.report = report
        self.done = True
        for q in self.watchers:
            q.put_nowait(None)

    def name(self) -> str:
        return self.run_id or f"(starting, pid {self.proc.pid})"


class HandedRuns:
    def __init__(
        self, config: Config, state_dir: Path, maintenance: AutoMaintenance, log: Any
    ) -> None:
        self.config_source = config.source
        self.state_dir = state_dir
        self.maintenance = maintenance
        self.log = log
        self.runs: dict[str, HandedRun] = {}

    def reconfigure(self, config: Config) -> None:
        self.config_source = config.source

    def _db(self, req: dict[str, Any]) -> str:
        db = req.get("db")
        if not isinstance(db, str) or not os.path.isabs(db):
            raise UsageError("db must be the absolute path of a state.db")
        return os.path.abspath(db)

    def _busy(self, db: str) -> str | None:
        """Why a run may not start on ``db`` now (one at a time), or None."""
        mine = self.runs.get(db)
        if mine is not None and not mine.done:
            return f"maintenance run {mine.name()} is already in progress on {db}"
        try:
            record = in_progress(self.state_dir, Path(db))
        except (OSError, StatewardenError):
            record = None
        if record is not None:
            pid = record.begin.get("pid")
            return f"maintenance run {record.run_id} (pid {pid}) is already in progress on {db}"
        if db in self.maintenance.running:
            return f"a snapshot or run the daemon started itself is in progress on {db}"
        return None

    async def start(self, req: dict[str, Any]) -> Streamed:
        """``maintenance_run``: start the run, stream it to this client."""
        db = self._db(req)
        action = req.get("action", "repair")
        if action not in ACTIONS:
            raise UsageError(f"action must be one of: {', '.join(ACTIONS)}")
        busy = self._busy(db)
        if busy is not None:
            raise RunInProgress(f"{busy}; wait for it to finish")
        argv = [
            sys.executable,
            "-m",
            "statewarden.cli.ctl",
            "maintenance",
            "--here",
            "--db",
            db,
            "--action",
            str(action),
            "--yes",
            "--json",
        ]
        for flag in FLAGS:
            if req.get(flag) is True:
                argv.append("--" + flag.replace("_", "-"))
        if self.config_source:
            argv += ["--config", self.config_source]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        run = HandedRun(db, proc)
        self.runs[db] = run
        self.maintenance.running[db] = asyncio.create_task(self._follow(run))
        self.log.warning("maintenance run handed to the daemon", db=db, action=action, pid=proc.pid)
        return Streamed(self._watch(run), lambda: run.report)

    async def _watch(self, run: HandedRun) -> Any:
        q: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        run.watchers.add(q)
        seen = list(run.events)  # taken with q added, no await between: nothing missed
        try:
            for old in seen:
                yield old
            if run.done:
                return
            while (event := await q.get()) is not None:
                yield event
        finally:
            run.watchers.discard(q)

    async def _follow(self, run: HandedRun) -> None:
        assert run.proc.stdout is not None
        assert run.proc.stderr is not None
        tail: list[str] = []
        out = b""
        try:
            reading = asyncio.create_task(run.proc.stdout.read())
            async for raw in run.proc.stderr:
                line = raw.decode(errors="replace").rstrip("\n")
                try:
                    event = json.loads(line)
                except ValueError:
                    event = None
                if isinstance(event, dict) and "event" in event:
                    run.publish(event)
                elif line:
                    tail.append(line)
                    run.publish({"event": "message", "text": line})
            out = await reading
            code = await run.proc.wait()
            try:
                report: dict[str, Any] = json.loads(out)
            except ValueError:
                report = {
                    "outcome": "failed",
                    "exit_code": code or 1,
                    "message": "\n".join(tail)[-REPORT_TAIL_CHARS:],
                }
            report["exit_code"] = code
            self.maintenance.last[run.db] = report
            log = self.log.info if code == 0 else self.log.error
            log(
                "maintenance run handed to the daemon finished",
                db=run.db,
                run_id=run.run_id,
                outcome=report.get("outcome"),
                exit_code=code,
            )
            run.end(report)
        finally:
            if not run.done:
                run.end(
                    {
                        "outcome": "failed",
                        "exit_code": 1,
                        "message": "the daemon stopped following the run",
                    }
                )
            self.maintenance.running.pop(run.db, None)

    async def cancel(self, req: dict[str, Any]) -> dict[str, Any]:
        """``maintenance_cancel``: ask the run handed to the daemon on ``db`` to stop."""
        db = self._db(req)
        run = self.runs.get(db)
        if run is None or run.done:
            raise UsageError(f"no maintenance run handed to the daemon is in progress on {db}")
        try:
            record = in_progress(self.state_dir, Path(db))
        except (OSError, StatewardenError):
            record = None
        if record is not None and record.has("swap"):
            return {"asked": False, "run_id": run.run_id, "reason": PAST_THE_SWAP}
        with contextlib.suppress(ProcessLookupError):
            run.proc.send_signal(signal.SIGINT)
        self.log.warning("maintenance run cancel asked", db=db, run_id=run.run_id)
        return {
            "asked": True,
            "run_id": run.run_id,
            "reason": "the run stops at its next step before the swap",
        }

    def close(self) -> list[asyncio.Task[Any]]:
        """The runs keep going (a run is finished or rolled back by itself, or resumed at
        the next start-up); nothing to cancel here but the watchers."""
        for run in self.runs.values():
            for q in run.watchers:
                q.put_nowait(None)
        return []
