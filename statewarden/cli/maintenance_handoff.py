"""``statewardenctl maintenance`` with the daemon running: the run handed to it, watched.

The request is ``maintenance_run`` over the control socket (``daemon.handoff`` on the
other side); every event of the run comes back as it happens and is shown as a run in
this process would show it (step lines, the progress bar on a TTY, JSON lines with
--json); its report is printed at the end. Ctrl-C sends ``maintenance_cancel`` on a
second connection and the watching goes on: the run rolls back (before the swap) or
finishes (from the swap on), and says which. On a terminal without ``--yes`` the plan
is shown (a dry run here, which changes nothing) and confirmed first.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from typing import Any

from statewarden.cli._common import echo_line
from statewarden.cli._progress import progress_reporter
from statewarden.cli.maintenance_output import PREFIX, printer, report_from
from statewarden.config import Config, runtime_dir
from statewarden.daemon import StreamClient, request, socket_path
from statewarden.errors import EXIT_FAILED, ControlError, DaemonNotRunning, StatewardenError
from statewarden.maintenance import MaintenanceRun, Options, RunReport
from statewarden.targets import Target

PING_TIMEOUT_S = 5.0


def hand_off(
    target: Target,
    config: Config,
    action: str,
    flags: dict[str, bool],
    *,
    as_json: bool,
    confirm: Callable[[], bool] | None,
) -> RunReport | None:
    """The run's report, run by the daemon; None if no daemon runs (run it here)."""
    path = socket_path(runtime_dir(config))
    try:
        request(path, "maintenance", timeout_s=PING_TIMEOUT_S)
    except DaemonNotRunning:
        return None
    db = str(target.db.absolute())
    if confirm is not None:
        # The plan as it stands (a dry run here changes nothing), confirmed before asking.
        options = Options(action=action, force=flags["force"], dry_run=True)
        dry = MaintenanceRun(target, config, options, emit=printer(as_json)).execute()
        if dry.exit_code:
            return dry
        if not confirm():
            return RunReport(
                db=db, action=action, outcome="not confirmed: nothing done", exit_code=EXIT_FAILED
            )
    try:
        stream = StreamClient(path, "maintenance_run", db=db, action=action, **flags)
    except DaemonNotRunning:
        return None
    asked = [0]

    def on_sigint(_signum: int, _frame: Any) -> None:
        asked[0] += 1

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        with progress_reporter("none" if as_json else "auto") as draw:
            emit = printer(as_json, draw)
            if not as_json:
                echo_line(
                    f"{PREFIX}handed to the daemon (Ctrl-C cancels before the swap)", err=True
                )
            while True:
                if asked[0]:
                    asked[0] = 0
                    _ask_cancel(path, db, emit)
                item = stream.next()
                if item is None:
                    continue
                kind, data = item
                if kind == "event":
                    emit(data)
                    continue
                return _report(data, db, action)
    finally:
        signal.signal(signal.SIGINT, old)
        stream.close()


def _ask_cancel(path: Any, db: str, emit: Callable[[dict[str, Any]], None]) -> None:
    try:
        answer = request(path, "maintenance_cancel", db=db)
    except StatewardenError as exc:
        answer = {"asked": False, "reason": str(exc)}
    if answer.get("asked"):
        emit({"event": "message", "text": f"{PREFIX}Ctrl-C: cancel asked; {answer['reason']}"})
    else:
        emit({"event": "cancel", "accepted": False, "reason": answer.get("reason")})


def _report(data: Any, db: str, action: str) -> RunReport:
    if not isinstance(data, dict):
        raise ControlError("the daemon gave no report of the run")
    if "action" not in data:  # the run ended before it could report (its stderr said why)
        return RunReport(
            db=db,
            action=action,
            outcome=str(data.get("outcome") or "failed"),
            exit_code=int(data.get("exit_code") or EXIT_FAILED),
            message=str(data.get("message") or ""),
        )
    report = report_from(data)
    with contextlib.suppress(TypeError, ValueError):
        report.exit_code = int(data.get("exit_code", report.exit_code))
    return report
