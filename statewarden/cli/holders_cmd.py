"""``statewardenctl holders``: every process holding each watched state.db."""

from __future__ import annotations

import time

import click

from statewarden.cli._common import (
    config_option,
    db_option,
    handle_errors,
    json_option,
    profile_option,
)
from statewarden.cli.holders_output import (
    coverage_line,
    open_scanner,
    scan_and_report,
)
from statewarden.errors import EXIT_OK

__all__ = ["coverage_line", "holders"]

DEFAULT_WATCH_INTERVAL_S = 2.0


@click.command()
@config_option
@db_option
@profile_option
@json_option
@click.option("--watch", is_flag=True, help="Scan again every --interval seconds until Ctrl-C.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=DEFAULT_WATCH_INTERVAL_S,
    show_default=True,
    help="Seconds between scans with --watch.",
)
@click.option(
    "--count",
    type=click.IntRange(min=0),
    default=0,
    help="With --watch, stop after this many scans (0: never).",
)
@click.option("--no-systemd", is_flag=True, help="Do not ask the systemd user manager.")
@click.option("--verbose", "-v", is_flag=True, help="List the processes that could not be read.")
@handle_errors
def holders(
    *,
    config_path: str | None,
    db: str | None,
    profile: str | None,
    as_json: bool,
    watch: bool,
    interval: float,
    count: int,
    no_systemd: bool,
    verbose: bool,
) -> None:
    """Every process holding each state.db: kind, unit, descriptors, locks, orphans.

    Finds holders through /proc (descriptors, memory maps, /proc/locks), flags STALE
    holders of an old or deleted state.db / -wal / -shm, and holders that lost their
    SQLite locks. A process that cannot be read (another user's) is checked through
    /proc/locks (holders.other_users: locks); kernel threads are left out. Units come
    from each process's cgroup, confirmed by the systemd user manager when reachable.

    Exit codes: 0 scan complete and no holder at risk; 1 scan incomplete (a process
    could not be inspected, or /proc hides processes: treat the database as held); 2
    usage error (bad --db, unknown --profile); 3 a holder is STALE or lost its locks.

    Example: statewardenctl holders --profile coder --json
    """
    scanner, profiles, note = open_scanner(
        config_path, db, profile, watch=watch, name_unreadable=as_json or verbose
    )
    n = 0
    code = EXIT_OK
    try:
        while True:
            code = scan_and_report(
                scanner,
                profiles,
                note,
                full=n == 0,
                as_json=as_json,
                watch=watch,
                no_systemd=no_systemd,
                verbose=verbose,
            )
            n += 1
            if not watch or (count and n >= count):
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    raise SystemExit(code)
