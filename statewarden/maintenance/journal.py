"""What a run tells as it goes: each step's ledger line (durable first), then its event;
the time each step took; the steps that failed; the cancel a person asked for.

``$STATEWARDEN_CRASH_AT=<step>`` makes the run ``SIGKILL`` itself right after the
ledger line of that step is durable (or, for ``sidecars-moved`` and ``original-kept``,
half-way through the swap; for ``catch-up-copied``, once the catch-up folder holds its
copy of the database); ``$STATEWARDEN_FAIL_AT=<step>`` raises an unexpected error
(``_InjectedFault``) at the same points: the fault-injection points the crash and
fault tests use.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statewarden.errors import EXIT_FAILED, StatewardenError
from statewarden.maintenance.ledger import FINISHED, Ledger
from statewarden.maintenance.report import Failure, RunReport, StepTime

ENV_CRASH_AT = "STATEWARDEN_CRASH_AT"
ENV_FAIL_AT = "STATEWARDEN_FAIL_AT"
# Why a cancel is refused from the swap on: the new file is going in (or is in).
PAST_THE_SWAP = (
    "the swap has begun, so the run finishes (the new file goes in, the units start again)"
)
CANCELLED = "cancelled by the user before the swap"

EmitFn = Callable[[dict[str, Any]], None]


class _InjectedFault(RuntimeError):
    """The unexpected error ``$STATEWARDEN_FAIL_AT`` raises (fault tests)."""


class Abort(BaseException):
    """A step ends the run before the swap: it rolls back, ``code`` its exit code. Not an
    error of the step's work but the run's decision, so it passes every ``except
    Exception`` between the step and the guard that rolls the run back (``run.py``)."""

    def __init__(self, message: str, code: int, *, cancelled: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.cancelled = cancelled


def what_failed(exc: BaseException) -> str:
    """One line for an error a step did not expect."""
    if isinstance(exc, StatewardenError | _InjectedFault):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
    return f"{type(exc).__name__}: {exc}"


def crash_point(name: str) -> None:
    """Where ``$STATEWARDEN_CRASH_AT`` kills the run and ``$STATEWARDEN_FAIL_AT`` fails it."""
    if os.environ.get(ENV_CRASH_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(ENV_FAIL_AT) == name:
        raise _InjectedFault(f"a fault injected at {name}")


class Journal:
    """The ledger, the events and the report's step times and failures of one run."""

    def __init__(self, db: Path, ledger: Ledger, report: RunReport, emit: EmitFn | None) -> None:
        self.db = db
        self.ledger = ledger
        self.report = report
        self._emit = emit
        self._step_started: tuple[str, float] | None = None
        # Cancel (Ctrl-C, or the daemon's SIGINT for a run handed to it): asked for at any
        # time, acted on at the next step before the swap; refused from the swap on.
        self.cancel_asked = False
        self._cancel_answer: dict[str, Any] | None = None
        self.committed = False  # the swap has begun: a cancel is refused
        self.resuming = False

    def emit(self, event: str, **data: Any) -> None:
        """The event to whoever follows the run (a terminal, the daemon's client). A
        write that fails there (a closed SSH session, a full disk under a redirect)
        never stops the run: it goes on unheard, its ledger and report its record (a
        SIGHUP's answer, unwritable, once kept the run from finishing its ledger)."""
        if self._emit is None:
            return
        try:
            self._emit({"event": event, "db": str(self.db), **data})
        except OSError:
            self._emit = None

    def step(self, name: str, **data: Any) -> None:
        """Ledger line first (durable), then the event; timings per step."""
        self.tell_cancel()
        self.ledger.step(name, **data)
        self._time_step(name)
        self.emit("step", step=name, **data)
        crash_point(name)

    def _time_step(self, name: str | None) -> None:
        now = time.monotonic()
        if self._step_started is not None:
            prev, since = self._step_started
            self.report.steps.append(StepTime(prev, round(now - since, 3)))
        self._step_started = (name, now) if name is not None else None

    def current_step(self) -> str:
        return self._step_started[0] if self._step_started is not None else "run"

    def failed(self, step: str, exc: BaseException) -> None:
        """Record a step that failed after the stop; the run goes on to the restart."""
        error = what_failed(exc)
        self.report.failures.append(Failure(step, error))
        self.emit("step-failed", step=step, error=error)
        with contextlib.suppress(OSError, StatewardenError):
            self.ledger.step("step-failed", failed=step, error=error)

    def guarded(self, step: str, work: Callable[[], object]) -> None:
        """Run ``work``: a failure is recorded, never raised."""
        try:
            work()
        except Exception as exc:  # noqa: BLE001 - rule 14: nothing may skip the restart
            self.failed(step, exc)

    def finish(self, outcome: str, code: int, message: str = "") -> RunReport:
        """The run's end: its outcome in the report, the ledger and the last event."""
        self.report.outcome = outcome
        self.report.exit_code = code
        self.report.message = message or self.report.message
        self._time_step(None)
        self.tell_cancel()
        try:
            self.ledger.step(FINISHED, outcome=outcome, exit_code=code, message=self.report.message)
        except (OSError, StatewardenError) as exc:
            # The run is done; only its record is not: --resume finishes it again.
            self.report.notes.append(f"the run ledger could not be finished: {exc}")
        self.ledger.close()
        self.emit("finished", outcome=outcome, exit_code=code, message=self.report.message)
        return self.report

    # -- cancel ------------------------------------------------------------------------

    def cancel(self) -> tuple[bool, str]:
        """Ask the run to stop (safe to call from a signal handler: flags only)."""
        if self.resuming:
            answer = (False, "a resume finishes (or rolls back) what an interrupted run began")
        elif self.committed:
            answer = (False, PAST_THE_SWAP)
        else:
            self.cancel_asked = True
            answer = (True, "the run stops before the swap and rolls back what it did")
        self._cancel_answer = {"accepted": answer[0], "reason": answer[1]}
        return answer

    def tell_cancel(self) -> None:
        """The answer to a cancel, as an event, once (outside the signal handler)."""
        answer, self._cancel_answer = self._cancel_answer, None
        if answer is not None:
            self.emit("cancel", **answer)

    def stop_if_cancelled(self) -> None:
        self.tell_cancel()
        if self.cancel_asked and not self.committed:
            raise Abort(CANCELLED, EXIT_FAILED, cancelled=True)

    def commit(self) -> None:
        """The point of no return: from here a cancel is refused."""
        self.committed = True
        if self.cancel_asked:  # asked in between (a signal handler runs between bytecodes)
            self.committed = False
            raise Abort(CANCELLED, EXIT_FAILED, cancelled=True)
