"""``statewardenctl snapshots [take]``: the verified last-known-good copies."""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

from statewarden.byte_sizes import human_bytes
from statewarden.cli._common import (
    config_option,
    db_option,
    echo_line,
    get_config,
    handle_errors,
    json_option,
    print_json,
    profile_option,
    progress_option,
    select_targets,
)
from statewarden.cli._group import CommandGroup
from statewarden.cli._progress import progress_reporter
from statewarden.config import state_dir
from statewarden.errors import StatewardenError, UsageError
from statewarden.maintenance import list_snapshots, take_snapshot
from statewarden.priority import idle_priority


@click.group("snapshots", cls=CommandGroup, invoke_without_command=True)
@config_option
@json_option
@click.pass_context
@handle_errors
def snapshots_group(ctx: click.Context, *, config_path: str | None, as_json: bool) -> None:
    """List verified snapshots (online backup copies that passed check), newest first.

    Example: statewardenctl snapshots --json
    """
    if ctx.invoked_subcommand is not None:
        return
    snaps = list_snapshots(state_dir(get_config(config_path)))
    if as_json:
        print_json({"snapshots": [s.to_json() for s in snaps]})
        return
    if not snaps:
        click.echo("no verified snapshot yet")
    for s in snaps:
        when = dt.datetime.fromtimestamp(s.taken_at).isoformat(timespec="seconds")
        echo_line(
            f"{when}  {s.profile}  {human_bytes(s.bytes)}  {s.sessions} sessions"
            f"  check {'passed' if s.verified else 'FAILED'}  {s.path}"
        )


@snapshots_group.command("take")
@config_option
@db_option
@profile_option
@progress_option
@click.option(
    "--idle", is_flag=True, help="Run at idle CPU and I/O priority (nice 19, idle I/O class)."
)
@json_option
@handle_errors
def take_cmd(
    *,
    config_path: str | None,
    db: str | None,
    profile: str | None,
    progress_mode: str,
    idle: bool,
    as_json: bool,
) -> None:
    """Take a verified snapshot of each database now (the daemon takes one a day).

    An online copy through SQLite's backup API from a read-only connection (Hermes
    keeps writing; nothing is checkpointed), kept only if it passes check.
    Exit codes: 0 kept, 1 not kept (the message says why), 4 unreadable. Each
    database is tried even when another is not kept; the code is the gravest.

    Example: statewardenctl snapshots take --profile default
    """
    targets, note = select_targets(config_path, db, profile)
    if not targets:
        raise UsageError(note or "no database to snapshot")
    config = get_config(config_path)
    mc = config.maintenance
    if idle:
        idle_priority()
    snaps: list[Any] = []  # maintenance's Snapshot
    failed: list[StatewardenError] = []
    with progress_reporter(progress_mode) as progress:
        for t in targets:
            try:
                snaps.append(
                    take_snapshot(
                        t.db,
                        state_dir(config),
                        t.name,
                        mc.snapshots_keep,
                        mc.snapshots_max_age,
                        progress=progress,
                    )
                )
            except StatewardenError as exc:
                # One database not kept is no reason to leave the others without one.
                failed.append(exc)
    if as_json and snaps:
        print_json(
            {
                "snapshots": [s.to_json() for s in snaps],
                "failed": [{"error": str(e), "exit_code": e.exit_code} for e in failed],
            }
        )
    elif not as_json:
        for s in snaps:
            echo_line(
                f"kept {s.path}: {human_bytes(s.bytes)}, {s.sessions} sessions,"
                f" check passed, {s.seconds:.2f} s"
            )
    if failed:
        # Each failure one line (the last through the usual error path); the exit code is
        # the gravest of them (4: a database unreadable).
        worst = max(failed, key=lambda e: e.exit_code)
        prog = click.get_current_context().find_root().command.name
        for other in failed:
            if other is not worst:
                echo_line(f"{prog}: error: {other}", err=True)
        raise worst
