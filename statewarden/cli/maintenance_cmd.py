"""``statewardenctl maintenance``: stop every holder, repair, swap, restart; or resume.

When the daemon runs, the run is handed to it (``maintenance_handoff.py``) and watched
from here; without one (or with ``--here``) this process runs it. Either way Ctrl-C
cancels safely before the swap and is refused, with the reason, after it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from statewarden.cli._common import (
    TEXT,
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
from statewarden.cli.maintenance_handoff import hand_off
from statewarden.cli.maintenance_output import finish, printer
from statewarden.errors import UsageError
from statewarden.maintenance import ACTIONS, MaintenanceRun, Options, Plan, execute_all, resume_all

# Signals that end a command run by hand: Ctrl-C, a ``kill`` (SIGTERM), a terminal or an
# SSH session closed under it (SIGHUP). Each asks the runs to cancel as Ctrl-C does, so
# that no signal but SIGKILL ends a run with Hermes stopped (a SIGKILL leaves the run's
# ledger to --resume).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_cancel(runs: list[MaintenanceRun]) -> Iterator[None]:
    """Ctrl-C (SIGINT), SIGTERM and SIGHUP ask every run to cancel: each rolls back at
    its next step before its swap, and from the swap on finishes."""

    def on_signal(_signum: int, _frame: Any) -> None:
        for run in runs:
            run.cancel()

    old = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def each_profile(
    config_path: str | None, asked: Options, *, resume: bool, yes: bool, as_json: bool
) -> None:
    """``--all-profiles``: every profile's run in this process, in one stop
    (``maintenance/all_profiles.py``); each profile's report, then the worst exit code."""
    targets, note = select_targets(config_path, None, None)
    if not targets:
        raise UsageError(note or "no database to work on")
    config = get_config(config_path)
    interactive = not yes and sys.stdin.isatty() and sys.stderr.isatty()

    def confirm(plan: Plan) -> bool:
        if not interactive:
            return True
        return click.confirm(f"Stop these holders and repair {plan.db}?", err=True)

    asked.confirm = confirm
    with progress_reporter("json" if as_json else "auto") as progress:
        runs = [
            MaintenanceRun(
                t, config, replace(asked), emit=printer(as_json, profile=t.name), progress=progress
            )
            for t in targets
        ]
        with signals_cancel(runs):
            report = resume_all(runs) if resume else execute_all(runs)
    if as_json:
        print_json(report.to_json())
    else:
        for line in report.render():
            echo_line(line)
    if report.exit_code:
        raise SystemExit(report.exit_code)


# Actions the daemon is not handed: they run in this process.
HERE_ONLY = ("merge", "apply-captures")


def action_of(action: str, *, resume: bool, merge_from: str | None, apply: bool) -> str:
    """The run's action: --merge-from and --apply-captures are actions of their own."""
    if merge_from is not None:
        if action != "repair" or resume:
            raise UsageError(
                "--merge-from is an action of its own: leave out --action and --resume"
            )
        action = "merge"
    if apply:
        if action != "repair" or resume:
            raise UsageError(
                "--apply-captures is an action of its own: leave out --action, --merge-from"
                " and --resume"
            )
        action = "apply-captures"
    return action


@click.command("maintenance")
@config_option
@db_option
@profile_option
@click.option(
    "--action",
    type=click.Choice(ACTIONS),
    default="repair",
    show_default=True,
    help="repair (check, repair only when damaged), check (read-only), vacuum,"
    " journal-mode=delete|wal, checkpoint.",
)
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
@click.option(
    "--merge-from",
    "merge_from",
    type=TEXT,
    metavar="PATH",
    help="Merge the sessions of an earlier file of this database (the file Hermes moved"
    " aside, as the sessions_vanished incident names it) with the current ones.",
)
@click.option(
    "--apply-captures",
    "apply_captures",
    is_flag=True,
    help="Bring back the rows the live file lost that Hermes' retired WAL captures and"
    " pre-update backups hold (as statewardenctl captures lists them), then move those"
    " captures to quarantine.",
)
@click.option(
    "--all-profiles",
    "all_profiles",
    is_flag=True,
    help="Repair every profile's database (configured or found) in one stop of Hermes.",
)
@click.option(
    "--here",
    is_flag=True,
    help="Run in this process even when the daemon runs (it is handed to the daemon otherwise).",
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
    merge_from: str | None,
    apply_captures: bool,
    all_profiles: bool,
    here: bool,
    as_json: bool,
) -> None:
    """Stop every holder of a state.db, repair it, swap the new file in, restart Hermes.

    The new file is built while Hermes still runs; the holders are stopped only for the
    swap. The original goes to quarantine, never deleted. Every step is in a run ledger,
    so an interrupted run is finished or rolled back by --resume (or the daemon).

    When the daemon runs, the run is handed to it (one at a time per database; its
    progress is shown here, and it goes on if this command is killed); otherwise
    (or with --here) this process runs it. Ctrl-C cancels before the swap (the run
    rolls back); from the swap on it is refused and the run finishes.

    --merge-from PATH brings back the sessions of an earlier file of the database (the
    file Hermes 0.22 moved aside when it started with an empty one): the old file is
    recovered, proven to be this database's, and merged with what Hermes wrote since
    into one verified file, swapped in as a repair is. It runs in this process.

    --apply-captures brings back what Hermes' retired WAL captures and pre-update
    backups beside state.db hold that the live file lost: each is read on a private
    copy and used only once it proves it is of this database (one of another database
    is refused and named, a .partial one named as not used; neither is touched); of its
    rows the live file lacks, those above the live file's sqlite_sequence (never given
    out there: lost writes, never rows deleted since) come in, each listed with its
    capture; a row whose session the live file lacks, or whose id Hermes gave out
    again since, is left out and named. The new
    file is verified and swapped in as a repair is, then the captures used move to the
    run's quarantine folder. --dry-run lists what would come in. It runs in this
    process; --resume finishes a killed run (nothing is applied or moved twice).

    --all-profiles repairs every profile's database (configured, or found in the
    Hermes home) in one stop: each is checked and pre-built while Hermes runs (a
    healthy one is left as is, and said so), the units are stopped once, each damaged
    database is swapped in turn, and everything is started again once. A profile whose
    run fails is rolled back and named, the others are swapped; the exit code is the
    worst profile's. It runs in this process; --all-profiles --resume takes up every
    profile's interrupted run. Not with --db, --profile, --action, --merge-from or
    --apply-captures (usage error).

    Exit codes: 0 done (or healthy, or nothing to merge or apply), 1 failed, aborted or
    cancelled and rolled back, 2 usage (a --merge-from path that cannot be used: none, a
    directory, an empty file), 3 the repair would lose rows (nothing swapped without
    --accept-loss) or swapped with accepted loss, 4 unreadable, 5 refused (a holder that
    may not be stopped, another run in progress on the database or one that did not
    finish (--resume takes it up), or a --merge-from file that is not this database's
    earlier file).

    Example: statewardenctl maintenance --profile default --dry-run
    """
    if all_profiles and (db or profile or merge_from or apply_captures or action != "repair"):
        raise UsageError(
            "--all-profiles repairs every profile's database: leave out --db, --profile,"
            " --action, --merge-from and --apply-captures"
        )
    options = Options(
        action=action_of(action, resume=resume, merge_from=merge_from, apply=apply_captures),
        force=force,
        accept_loss=accept_loss,
        dry_run=dry_run,
        import_transcripts=not no_import,
        merge_from=Path(merge_from) if merge_from is not None else None,
    )
    if all_profiles:
        each_profile(config_path, options, resume=resume, yes=yes, as_json=as_json)
    else:
        one_profile(
            config_path, db, profile, options, resume=resume, here=here, yes=yes, as_json=as_json
        )


def one_profile(
    config_path: str | None,
    db: str | None,
    profile: str | None,
    options: Options,
    *,
    resume: bool,
    here: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """One database's run: handed to the daemon when it runs, else run here."""
    targets, note = select_targets(config_path, db, profile)
    if not targets:
        raise UsageError(note or "no database to work on")
    if len(targets) > 1:
        names = ", ".join(t.name for t in targets)
        raise UsageError(f"several databases found ({names}); choose one with --db or --profile")
    config = get_config(config_path)
    interactive = not yes and sys.stdin.isatty() and sys.stderr.isatty()

    def ask() -> bool:
        return click.confirm("Stop these holders and run the maintenance?", err=True)

    def confirm(_plan: Plan) -> bool:
        return ask() if interactive else True

    if not (here or options.dry_run or options.action in HERE_ONLY):
        flags = {
            "force": options.force,
            "accept_loss": options.accept_loss,
            "no_import": not options.import_transcripts,
            "resume": resume,
        }
        handed = hand_off(
            targets[0],
            config,
            options.action,
            flags,
            as_json=as_json,
            confirm=ask if interactive and not resume else None,
        )
        if handed is not None:
            finish(handed, as_json)
            return
    options.confirm = confirm
    with progress_reporter("json" if as_json else "auto") as progress:
        run = MaintenanceRun(targets[0], config, options, emit=printer(as_json), progress=progress)
        with signals_cancel([run]):
            report = run.resume() if resume else run.execute()
    finish(report, as_json)
