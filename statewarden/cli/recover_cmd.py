"""``statewardenctl recover``: a verified new database from a damaged one."""

from __future__ import annotations

import click

from statewarden.cli._common import (
    TEXT,
    echo_line,
    handle_errors,
    json_option,
    print_json,
    progress_option,
)
from statewarden.cli._progress import progress_reporter
from statewarden.errors import EXIT_FAILED, EXIT_OK, EXIT_RECOVERED_WITH_LOSS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from statewarden.recovery import Report


@click.command("recover")
@click.option("--source", required=True, type=TEXT, help="The damaged state.db (only read).")
@click.option("--output", required=True, type=TEXT, help="The new database (must not exist).")
@click.option(
    "--report", "report_path", type=TEXT, default=None, help="Write the JSON report here."
)
@click.option(
    "--extra-source",
    "extra_sources",
    multiple=True,
    type=TEXT,
    help="Another copy that may prove a lost row (a snapshot, a retired WAL capture folder,"
    " a pre-update backup); repeat for more. Verified before use.",
)
@json_option
@progress_option
@handle_errors
def recover_cmd(
    *,
    source: str,
    output: str,
    report_path: str | None,
    extra_sources: tuple[str, ...],
    as_json: bool,
    progress_mode: str,
) -> None:
    """Recover SOURCE into a new, verified database at OUTPUT; the source is never changed.

    Exit codes: 0 verified with no loss, 3 verified with loss (listed), 1 failed,
    2 usage (for example OUTPUT exists), 4 source unreadable.

    Example: statewardenctl recover --source state.db --output recovered.db --report r.json
    """
    # The engine only when it runs: `recover --help` and a usage error start without it.
    from pathlib import Path  # noqa: PLC0415

    from statewarden.recovery import recover  # noqa: PLC0415

    with progress_reporter(progress_mode) as progress:
        report = recover.recover(
            Path(source),
            Path(output),
            report_path=Path(report_path) if report_path else None,
            progress=progress,
            extra_sources=[Path(p) for p in extra_sources],
        )
    if as_json:
        print_json(report.to_json())
    else:
        for line in report.render():
            echo_line(line)
    code = _exit_code(report)
    if code:
        raise SystemExit(code)


def _exit_code(report: Report) -> int:
    """0 verified with no loss, 3 verified with loss, 1 not verified."""
    if not report.verified:
        return EXIT_FAILED
    return EXIT_RECOVERED_WITH_LOSS if report.loss_detected else EXIT_OK
