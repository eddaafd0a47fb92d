"""``statewardenctl status``: facts about every watched database."""

from __future__ import annotations

import click

from statewarden.cli._common import (
    config_option,
    db_option,
    handle_errors,
    json_option,
    profile_option,
)
from statewarden.cli.status_output import VERIFIED_RECORD, report_status

__all__ = ["VERIFIED_RECORD", "status"]


@click.command()
@config_option
@db_option
@profile_option
@json_option
@handle_errors
def status(config_path: str | None, db: str | None, profile: str | None, as_json: bool) -> None:
    """Facts about each Hermes database, read without writing or locking it.

    Example: statewardenctl status --json
    """
    report_status(config_path, db, profile, as_json)
