"""``statewardenctl snapshots [take]``: the verified last-known-good copies."""

from __future__ import annotations

import datetime as dt

import click

from statewarden.cli._common import (
    config_option,
    db_option,
    echo_line,
    get_config,
    handle_errors,
    human_bytes,
    json_option,
    print_json,
    profile_option,
    select_targets,
)
from statewarden.cli._group import CommandGroup
from statewarden.config import state_dir
from statewarden.errors import UsageError
from statewarden.maintenance.snapshots import list_snapshots, take_snapshot


@click.group("snapshots", cls=CommandGroup, invoke_without_command=True)
@config_option
@json_option
@click.pass_context
@handle_errors
def snapshots_group(ctx: click.Context, *, config_path: str | None, as_json: bool) -> None:
    """List verified snapshots (backup copies that passed integrity_check), newest first.

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
        echo_line(f"{when}  {s.profile}  {human_bytes(s.bytes)}  {s.sessions} sessions"
                   f"  integrity {s.integrity}  {s.path}")  # fmt: skip


@snapshots_group.command("take")
@config_option
@db_option
@profile_option
@json_option
@handle_errors
def take_cmd(*, config_path: str | None, db: str | None, profile: str | None,
             as_json: bool) -> None:  # fmt: skip
    """Take a verified snapshot of each database now (the daemon does this in windows).

    Exit codes: 0 kept, 1 not kept (the message says why), 4 unreadable.

    Example: statewardenctl snapshots take --profile default
    """
    targets, note = select_targets(config_path, db, profile)
    if not targets:
        raise UsageError(note or "no database to snapshot")
    config = get_config(config_path)
    snaps = [take_snapshot(t.db, state_dir(config), t.name, config.maintenance.snapshots_keep)
             for t in targets]  # fmt: skip
    if as_json:
        print_json({"snapshots": [s.to_json() for s in snaps]})
        return
    for s in snaps:
        echo_line(f"kept {s.path}: {human_bytes(s.bytes)}, {s.sessions} sessions,"
                   f" integrity {s.integrity}, {s.seconds:.2f} s")  # fmt: skip
