"""``statewardenctl status``: facts about every watched database."""

from __future__ import annotations

from pathlib import Path

import click

from statewarden.cli._common import (
    config_option,
    get_config,
    handle_errors,
    human_bytes,
    json_option,
    print_json,
)
from statewarden.errors import UsageError
from statewarden.status import DatabaseStatus, status_all
from statewarden.targets import Target, discover, find_target, target_for_db


def select_targets(
    config_path: str | None, db: str | None, profile: str | None
) -> tuple[list[Target], str]:
    """The targets a command works on, and a note when none were found."""
    if db and profile:
        raise UsageError("--db and --profile cannot be used together")
    if db:
        return [target_for_db(Path(db))], ""
    config = get_config(config_path)
    targets = discover(config)
    if profile:
        t = find_target(targets, profile)
        if t is None:
            names = ", ".join(x.name for x in targets) or "none"
            raise UsageError(f"no Hermes profile named {profile!r} (found: {names})")
        return [t], ""
    if not targets:
        return [], "no Hermes home found ($HERMES_HOME or ~/.hermes); nothing to report"
    return targets, ""


def _render(st: DatabaseStatus) -> None:
    click.echo(f"{st.profile}: {st.path}")
    if not st.exists:
        click.echo("  state.db        not present")
    else:
        click.echo(f"  size            {human_bytes(st.size_bytes)}")
        click.echo(
            f"  pages           {st.page_count if st.page_count is not None else '-'}"
            f" x {st.page_size or '-'} B, {st.freelist_count if st.freelist_count is not None else '-'} free"
        )
        click.echo(f"  journal mode    {st.journal_mode or '-'}")
        click.echo(
            f"  -wal / -shm     {human_bytes(st.wal_bytes)} / {human_bytes(st.shm_bytes)}"
            + (f", -journal {human_bytes(st.journal_bytes)}" if st.journal_bytes is not None else "")
        )
        click.echo(f"  schema_version  {st.schema_version if st.schema_version is not None else '-'}")
    if st.filesystem:
        fs = st.filesystem
        verdict = "UNSAFE for WAL" if fs.unsafe_for_wal else "safe for WAL"
        click.echo(f"  filesystem      {fs.type} on {fs.mount_point} ({verdict})")
    click.echo(f"  gateway unit    {st.gateway_unit}")
    for problem in st.problems:
        click.echo(f"  problem         {problem}")


@click.command()
@config_option
@click.option("--db", type=str, default=None, help="A state.db path instead of discovery.")
@click.option("--profile", type=str, default=None, help="Only this Hermes profile.")
@json_option
@handle_errors
def status(config_path: str | None, db: str | None, profile: str | None, as_json: bool) -> None:
    """Facts about each Hermes database, read without writing or locking it.

    Example: statewardenctl status --json
    """
    targets, note = select_targets(config_path, db, profile)
    results = status_all(targets)
    if as_json:
        print_json({"source": "local", "databases": [r.to_json() for r in results], "note": note or None})
        return
    if note:
        click.echo(note)
    for i, st in enumerate(results):
        if i:
            click.echo()
        _render(st)
