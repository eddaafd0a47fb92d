"""``statewardenctl captures``: what Hermes' retired WAL captures and pre-update backups
hold that the live file lacks (``recovery/captures.py``)."""

from __future__ import annotations

import os

import click

from statewarden.byte_sizes import human_bytes
from statewarden.cli._common import (
    TEXT,
    config_option,
    db_option,
    echo_line,
    handle_errors,
    json_option,
    print_json,
    profile_option,
    progress_option,
    select_targets,
)
from statewarden.cli._progress import progress_reporter
from statewarden.errors import UsageError, path_error


@click.command()
@config_option
@db_option
@profile_option
@json_option
@click.option(
    "--work-dir",
    type=TEXT,
    default=None,
    help="Where the private copies are made (default: $TMPDIR, else /tmp).",
)
@progress_option
@handle_errors
def captures(
    *,
    config_path: str | None,
    db: str | None,
    profile: str | None,
    as_json: bool,
    work_dir: str | None,
    progress_mode: str,
) -> None:
    """What Hermes' retired WAL captures and pre-update backups hold that the live file lacks.

    Each is read on a private copy, as recover --extra-source reads one, and counts only
    once it proves it is of this database; per table, the rows whose rowid the live file
    lacks, and of those the ones above the live file's sqlite_sequence (never given out
    there: writes it lost). Nothing is changed. Exit codes: 0 listed, 1 not read (no room
    for the private copies; the message says why), 2 usage (a path that cannot be used),
    4 the live file cannot be read.

    Example: statewardenctl captures --profile default --json
    """
    # The engine only when it runs: `captures --help` and a usage error start without it.

    from statewarden.cli.check_output import default_work_parent, work_parent  # noqa: PLC0415
    from statewarden.recovery import read_captures  # noqa: PLC0415

    targets, note = select_targets(config_path, db, profile)
    if not targets:
        raise UsageError(note or "no database to look beside")
    for t in targets:
        try:
            os.stat(t.db)
        except OSError as exc:
            raise path_error(t.db, exc) from None
    parent = work_parent(work_dir) if work_dir else default_work_parent()
    with progress_reporter(progress_mode) as progress:
        found = [(t, read_captures(t.db, parent, progress=progress)) for t in targets]
    if as_json:
        print_json(
            {
                "databases": [
                    {"db": str(t.db), "captures": [r.to_json() for r in readings]}
                    for t, readings in found
                ]
            }
        )
        return
    for t, readings in found:
        if not readings:
            echo_line(f"{t.db}: no retired WAL capture or pre-update backup beside it")
            continue
        echo_line(f"{t.db}:")
        for r in readings:
            when = f", captured {r.captured_at}" if r.captured_at else ""
            echo_line(f"  {r.kind} {r.name} ({human_bytes(r.bytes)}{when}): {r.verdict}")
            if r.used and not r.lacking:
                echo_line("    nothing the live file lacks")
            for g in r.tables:
                if not g.lacking:
                    continue
                lost = (
                    f", {g.never_given_out} never given out there (above its sqlite_sequence"
                    f" {g.sequence}): writes the live file lost"
                    if g.never_given_out
                    else ""
                )
                maybe = g.lacking - g.never_given_out
                deleted = (
                    f"; {maybe} may have been deleted since (nothing here tells which)"
                    if maybe
                    else ""
                )
                echo_line(f"    {g.table}: {g.lacking} rows the live file lacks{lost}{deleted}")
