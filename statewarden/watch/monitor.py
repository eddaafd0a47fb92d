"""One database's watchers, each behind a guard that keeps a failing watcher from
taking the daemon down.

A :class:`Guard` runs one watcher's poll. When the poll raises, the watcher is backed
off exponentially (``BACKOFF_START_S`` doubling up to ``BACKOFF_MAX_S``, a
:class:`~statewarden.backoff.Backoff`), the failure is reported once (a log line and a
``watcher_failed`` signal), and further failures in the same streak are only counted.
When the watcher works again, "recovered after N errors" is logged and the signal clears.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from statewarden.backoff import Backoff
from statewarden.config import Config, state_dir
from statewarden.incidents import Found, Observation, Signal
from statewarden.logs import get_logger
from statewarden.targets import Target
from statewarden.watch.files import FileWatcher
from statewarden.watch.logtail import LogTailer
from statewarden.watch.rules import CronSessions, SignalBatch, signals_from_journal

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 300.0
# Python's logging writes a record and its traceback in one write(), so a record is
# complete almost at once; this short wait only covers a writer that splits it.
LOG_IDLE_FLUSH_S = 0.005
# Bytes read per log file per poll: bounds memory under a flood, and how long one poll
# keeps the daemon's loop (so its control socket) busy: about 1,300 lines, about ten
# milliseconds (the loop polls again at once while the tailer is behind).
LOG_POLL_BYTES = 128 << 10
# Offsets are saved at most this often (each save is two fsyncs), and always on stop; a
# crash re-reads at most this much of the logs.
LOG_OFFSETS_SAVE_S = 1.0

Poll = Callable[[float], list[Found]]


@dataclass
class Guard:
    name: str
    db: str
    poll: Poll
    last_error: str = ""
    next_try: float = 0.0
    log: Any = field(default_factory=get_logger)
    backoff: Backoff = field(default_factory=lambda: Backoff(BACKOFF_START_S, BACKOFF_MAX_S))

    @property
    def errors(self) -> int:
        """Failures in a row, since the last successful poll."""
        return self.backoff.failures

    def run(self, now: float) -> list[Found]:
        if not self.due(now):
            return []
        try:
            found = self.poll(now)
        except Exception as exc:  # noqa: BLE001 - a watcher failure must not stop the daemon
            return self.failed(exc, now)
        return self.succeeded(found, now)

    def due(self, now: float) -> bool:
        return now >= self.next_try

    def failed(self, exc: BaseException, now: float) -> list[Found]:
        """Back off; report the first failure of a streak only."""
        self.next_try = now + self.backoff.failed()
        self.last_error = f"{type(exc).__name__}: {exc}"
        if self.errors > 1:
            return []
        self.log.error("watcher failed", watcher=self.name, db=self.db, error=self.last_error)
        summary = f"the {self.name} watcher failed: {self.last_error}"
        return [Signal("watcher_failed", self.db, summary, now, key=self.name, source=self.name)]

    def succeeded(self, found: list[Found], now: float) -> list[Found]:
        """After a failure streak, say it recovered and clear the signal."""
        if not self.errors:
            return found
        errors = self.backoff.succeeded()
        self.log.info("watcher recovered", watcher=self.name, db=self.db, after_errors=errors)
        summary = f"the {self.name} watcher recovered after {errors} errors"
        self.last_error = ""
        return [*found, Signal("watcher_failed", self.db, summary, now, key=self.name, clears=True)]

    def status(self) -> dict[str, Any]:
        return {"watcher": self.name, "errors": self.errors, "last_error": self.last_error or None}


class TargetMonitor:
    """Everything watched for one database; each watcher is a guarded poll."""

    def __init__(self, target: Target, config: Config) -> None:
        self.target = target
        self.db = str(target.db)
        self.files = FileWatcher(
            target,
            wal_warn_bytes=config.watch.wal_warn_bytes,
            wal_growth_window_s=config.watch.wal_growth_window,
            recovery_warn_bytes=config.watch.recovery_files_warn_bytes,
            recovery_growth_scans=config.watch.recovery_files_growth_scans,
        )
        digest = hashlib.sha256(self.db.encode()).hexdigest()[:12]
        self.logs = LogTailer(
            target.logs_dir,
            state_dir(config) / f"logtail-{digest}.json",
            idle_flush_s=LOG_IDLE_FLUSH_S,
            max_poll_bytes=LOG_POLL_BYTES,
            save_interval_s=LOG_OFFSETS_SAVE_S,
        )
        self.cron = CronSessions()
        self._log_problems: dict[str, str] = {}  # log name -> why it cannot be read
        self.guards: list[Guard] = [
            Guard("files", self.db, self.files.poll),
            Guard("logs", self.db, self._poll_logs),
        ]

    def _poll_logs(self, now: float) -> list[Found]:
        batch = SignalBatch(self.target, cron=self.cron, now=now)
        for record in self.logs.poll():
            batch.add(record)
        out = batch.signals()
        for notice in self.logs.drain_notices():
            out.append(
                Observation(f"log_{notice.what}", self.db, notice.text, now, {"file": notice.file})
            )
        out.extend(self._log_problem_signals(now))
        return out

    def _log_problem_signals(self, now: float) -> list[Found]:
        """A log that cannot be read is a ``watcher_failed`` incident (detection from it
        has stopped), with the remedy; it clears when the log can be read again."""
        out: list[Found] = []
        problems = self.logs.problems
        for name, why in problems.items():
            if self._log_problems.get(name) == why:
                continue
            if self.logs.problem_kind(name) == "not_a_file":
                # Not a permission matter: a FIFO, a device, a directory is never read.
                summary = (
                    f"Hermes' log {name} is skipped: {why}; statewarden reads only regular "
                    f"files, so nothing logged there is seen. Remove it (Hermes creates {name} "
                    "again as a regular file)"
                )
            else:
                summary = (
                    f"Hermes' log {name} cannot be followed ({why}); nothing it logs is seen. "
                    f"Give this user read access to {self.target.logs_dir} and its files "
                    "(chmod u+rx on the folder, u+r on the logs)"
                )
            out.append(
                Signal(
                    "watcher_failed",
                    self.db,
                    summary,
                    now,
                    key=f"logs/{name}",
                    source="logs",
                    evidence=(why,),
                )
            )
        for name in set(self._log_problems) - set(problems):
            out.append(
                Signal(
                    "watcher_failed",
                    self.db,
                    f"Hermes' log {name} can be read again",
                    now,
                    key=f"logs/{name}",
                    clears=True,
                )
            )
        self._log_problems = dict(problems)
        return out

    def journal_entry(self, entry: dict[str, Any]) -> list[Found]:
        return signals_from_journal(entry, self.target, cron=self.cron)

    def next_wake_s(self) -> float | None:
        """When to poll again for the logs: now if behind, or when a waiting record completes."""
        if self.logs.behind:
            return 0.0
        return self.logs.next_flush_in()

    def close(self) -> None:
        self.logs.close()

    def add(self, name: str, poll: Poll) -> None:
        self.guards.append(Guard(name, self.db, poll))

    def poll(self, now: float | None = None) -> list[Found]:
        now = time.time() if now is None else now
        out: list[Found] = []
        for guard in self.guards:
            out.extend(guard.run(now))
        return out

    def status(self) -> list[dict[str, Any]]:
        out = [g.status() for g in self.guards]
        for s in out:
            if s["watcher"] == "logs" and self._log_problems:
                s["problems"] = dict(self._log_problems)
        return out
