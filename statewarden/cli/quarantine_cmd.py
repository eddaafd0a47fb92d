"""``statewardenctl quarantine list|restore``: the originals maintenance runs set aside."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import click

from statewarden.byte_sizes import human_bytes
from statewarden.cli._common import (
    TEXT,
    config_option,
    echo_line,
    get_config,
    handle_errors,
    json_option,
    print_json,
)
from statewarden.cli._group import CommandGroup
from statewarden.cli._progress import progress_reporter
from statewarden.cli.maintenance_output import printer
from statewarden.config import state_dir
from statewarden.errors import EXIT_REFUSED, StatewardenError, UsageError
from statewarden.maintenance import MaintenanceRun, Options, Plan, list_quarantine
from statewarden.targets import discover, target_for_db


@click.group("quarantine", cls=CommandGroup)
def quarantine_group() -> None:
    """The originals maintenance runs replaced, kept with their checksums."""


@quarantine_group.command("list")
@config_option
@json_option
@handle_errors
def list_cmd(*, config_path: str | None, as_json: bool) -> None:
    """List quarantined originals, newest first.

    Example: statewardenctl quarantine list --json
    """
    entries = list_quarantine(state_dir(get_config(config_path)))
    if as_json:
        print_json({"quarantine": [e.to_json() for e in entries]})
        return
    if not entries:
        click.echo("nothing in quarantine")
    for e in entries:
        when = dt.datetime.fromtimestamp(e.swapped_at).isoformat(timespec="seconds")
        files = ", ".join(f"{n} {human_bytes(b)}" for n, b in sorted(e.files.items()))
        echo_line(f"{e.name}  {when}  {e.db}  ({files})")


@quarantine_group.command("restore")
@click.argument("name", type=TEXT)
@config_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation on a terminal.")
@click.option("--force", is_flag=True, help="Also stop interactive and non-Hermes holders.")
@json_option
@handle_errors
def restore_cmd(
    *, name: str, config_path: str | None, yes: bool, force: bool, as_json: bool
) -> None:
    """Swap the quarantined original NAME back in, the way maintenance swaps.

    The current state.db goes to quarantine in turn; nothing is deleted. Only the
    original as the swap kept it is put back: a file of the folder that is not as its
    manifest records (changed, missing, a symlink, a sidecar put there since) is
    refused, named (exit 5), and nothing is done.

    Example: statewardenctl quarantine restore default-20260907T030000Z-a1b2c3
    """
    config = get_config(config_path)
    entry = next((e for e in list_quarantine(state_dir(config)) if e.name == name), None)
    if entry is None:
        raise UsageError(f"no quarantine entry named {name!r} (see statewardenctl quarantine list)")
    if not entry.db:
        raise UsageError(f"quarantine entry {name!r}: its manifest names no database path")
    changed = entry.not_as_kept()
    if changed is not None:
        refused = StatewardenError(
            f"quarantine entry {name!r}: refused: {changed}; only the original as the swap"
            " kept it is put back, nothing was done"
        )
        refused.exit_code = EXIT_REFUSED  # the folder is not what the swap kept
        raise refused
    db = Path(entry.db)
    target = next((t for t in discover(config) if t.db == db), None) or target_for_db(db)

    def confirm(plan: Plan) -> bool:
        if yes or not (sys.stdin.isatty() and sys.stderr.isatty()):
            return True
        return click.confirm(f"Stop these holders and put {name} back?", err=True)

    options = Options(
        action="restore", force=force, confirm=confirm, restore_from=entry.path / db.name
    )
    with progress_reporter("json" if as_json else "auto") as progress:
        report = MaintenanceRun(
            target, config, options, emit=printer(as_json), progress=progress
        ).execute()
    if as_json:
        print_json(report.to_json())
    else:
        for line in report.render():
            echo_line(line)
    if report.exit_code:
        raise SystemExit(report.exit_code)
