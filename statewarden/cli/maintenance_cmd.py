"""``statewardenctl maintenance``: stop every holder, repair, swap, restart; or resume."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from statewarden.cli._common import (
    config_option,
    db_option,
    echo_line,
    get_config,
    handle_errors,
    json_option,
    print_json,
    profile_option,
    select_targets,
)
from statewarden.cli._progress import progress_reporter
from statewarden.errors import UsageError
from statewarden.maintenance.plan import Plan
from statewarden.maintenance.run import ACTIONS, MaintenanceRun, Options


def _printer(as_json: bool) -> Any:
    def emit(event: dict[str, Any]) -> None:
        if as_json:
            click.echo(json.dumps(event, default=str), err=True)
        elif event["event"] == "plan":
            for line in event["lines"]:
                echo_line(line, err=True)
        elif event["event"] == "step":
            echo_line(f"statewardenctl: maintenance: {event['step']}", err=True)

    return emit


@click.command("maintenance")
@config_option
@db_option
@profile_option
@click.option("--action", type=click.Choice(ACTIONS), default="repair", show_default=True,
              help="repair (check, repair only when damaged), check (read-only), vacuum,"
              " journal-mode=delete|wal, checkpoint.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Print the plan and stop.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation on a terminal.")
@click.option(
    "--force",
    is_flag=True,
    help="Also stop the user's interactive Hermes and non-Hermes holders of our own uid.",
)
@click.option("--accept-loss", is_flag=True, help="Swap in a repair that lost rows (listed).")
@click.option("--resume", is_flag=True, help="Finish or roll back an interrupted run.")
@click.option(
    "--no-import",
    is_flag=True,
    help="Do not import the transcripts Hermes diverted into the repaired file.",
)
@json_option
@handle_errors
def maintenance(
    *,
    config_path: str | None,
    db: str | None,
    profile: str | None,
    action: str,
    dry_run: bool,
    yes: bool,
    force: bool,
    accept_loss: bool,
    resume: bool,
    no_import: bool,
    as_json: bool,
) -> None:
    """Stop every holder of a state.db, repair it, swap the new file in, restart Hermes.

    The new file is built while Hermes still runs; the holders are stopped only for the
    swap. The original goes to quarantine, never deleted. Every step is in a run ledger,
    so an interrupted run is finished or rolled back by --resume (or the daemon).

    Exit codes: 0 done (or healthy), 1 failed or aborted and rolled back, 2 usage,
    3 the repair would lose rows (nothing swapped without --accept-loss) or swapped with
    accepted loss, 4 unreadable, 5 refused (a holder that may not be stopped).

    Example: statewardenctl maintenance --profile default --dry-run
    """
    targets, note = select_targets(config_path, db, profile)
    if not targets:
        raise UsageError(note or "no database to work on")
    if len(targets) > 1:
        names = ", ".join(t.name for t in targets)
        raise UsageError(f"several databases found ({names}); choose one with --db or --profile")
    config = get_config(config_path)

    def confirm(plan: Plan) -> bool:
        if yes or not (sys.stdin.isatty() and sys.stderr.isatty()):
            return True
        return click.confirm("Stop these holders and run the maintenance?", err=True)

    options = Options(action=action, force=force, accept_loss=accept_loss, dry_run=dry_run,
                      confirm=confirm, import_transcripts=not no_import)  # fmt: skip
    with progress_reporter("json" if as_json else "auto") as progress:
        run = MaintenanceRun(targets[0], config, options, emit=_printer(as_json),
                             progress=progress)  # fmt: skip
        report = run.resume() if resume else run.execute()
    if as_json:
        print_json(report.to_json())
    else:
        for line in report.render():
            echo_line(line)
    if report.exit_code:
        raise SystemExit(report.exit_code)
