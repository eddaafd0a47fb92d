"""``statewardenctl check``: every error in the database, by b-tree and logical table."""

from __future__ import annotations

import click

from statewarden.cli._common import (
    TEXT,
    config_option,
    db_option,
    handle_errors_failing_with,
    json_option,
    profile_option,
    progress_option,
)
from statewarden.cli.check_output import report_check
from statewarden.errors import EXIT_NOT_CHECKED


@click.command()
@config_option
@db_option
@profile_option
@json_option
@click.option(
    "--max-errors",
    type=int,
    default=None,
    help="Print at most N raw error lines (the check itself is never capped).",
)
@click.option(
    "--work-dir",
    type=TEXT,
    default=None,
    help="Where the private copy is made (default: $TMPDIR, else /tmp).",
)
@progress_option
@handle_errors_failing_with(EXIT_NOT_CHECKED)
def check(
    *,
    config_path: str | None,
    db: str | None,
    profile: str | None,
    as_json: bool,
    max_errors: int | None,
    work_dir: str | None,
    progress_mode: str,
) -> None:
    """Check a state.db for damage, uncapped, on a private copy (the source is only read).

    Exit codes: 0 healthy, 1 derived damage only, 3 base damage, 4 unreadable, 2 usage
    (a path that cannot be used), 5 not checked (no space, a write failed; the message
    says why).

    Example: statewardenctl check --db ~/.hermes/state.db --json
    """
    code = report_check(
        config_path,
        db,
        profile,
        as_json=as_json,
        max_errors=max_errors,
        work_dir=work_dir,
        progress_mode=progress_mode,
    )
    if code:
        raise SystemExit(code)
