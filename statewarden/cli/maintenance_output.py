"""What ``statewardenctl maintenance`` shows of a run, run here or by the daemon: its
events on stderr (step lines, cancel answers, a progress bar; JSON lines with --json),
then its report on stdout and its exit code."""

from __future__ import annotations

import contextlib
from typing import Any

from statewarden.cli._common import echo_line, print_json, print_json_line
from statewarden.maintenance import RunReport, cancel_line, step_line
from statewarden.progress import ProgressFn

PREFIX = "statewardenctl: maintenance: "


def printer(as_json: bool, draw: ProgressFn | None = None, profile: str | None = None) -> Any:
    """What a person (or, with --json, a program) sees of a run's events, on stderr;
    ``profile`` names the run's profile in each (--all-profiles runs several)."""
    prefix = PREFIX if profile is None else f"{PREFIX}{profile}: "

    def emit(event: dict[str, Any]) -> None:
        # Whoever reads the events may go away (a pipe closed, the daemon stopped, a
        # terminal closed: EIO; a full disk under a redirect): the run goes on to its
        # end, which its ledger and outcome record.
        with contextlib.suppress(OSError):
            show(event)

    def show(event: dict[str, Any]) -> None:
        kind = event.get("event")
        if as_json:
            # An event relayed from the daemon's run carries its schema_version already.
            shown = {k: v for k, v in event.items() if k != "schema_version"}
            print_json_line(shown if profile is None else {"profile": profile, **shown}, err=True)
        elif kind == "plan":
            for line in event["lines"]:
                echo_line(line, err=True)
        elif kind == "step":
            echo_line(prefix + step_line(event), err=True)
        elif kind == "cancel":
            echo_line(prefix + cancel_line(event), err=True)
        elif kind == "started":
            echo_line(f"{prefix}run {event.get('run_id')} started", err=True)
        elif kind == "message":
            echo_line(str(event.get("text")), err=True)
        elif kind == "progress" and draw is not None:
            draw(str(event["phase"]), int(event["done"]), int(event["total"]))

    return emit


def finish(report: RunReport, as_json: bool) -> None:
    if as_json:
        print_json(report.to_json())
    else:
        for line in report.render():
            echo_line(line)
    if report.exit_code:
        raise SystemExit(report.exit_code)


def report_from(data: dict[str, Any]) -> RunReport:
    return RunReport.from_json(data)
