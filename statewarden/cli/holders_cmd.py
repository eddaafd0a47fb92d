"""``statewardenctl holders``: every process holding each watched state.db."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from statewarden.cli._common import (
    config_option,
    db_option,
    get_config,
    handle_errors,
    json_option,
    print_json,
    printable,
    profile_option,
    select_targets,
)
from statewarden.errors import EXIT_OK, EXIT_SCAN_INCOMPLETE, EXIT_STALE_OR_LOST_LOCKS, UsageError
from statewarden.holders.processes import human_age, short_command
from statewarden.holders.report import DB_FILE, SHM_FILE, WAL_FILE
from statewarden.holders.scan import VIA_LOCKS, Holder, HolderScan, HolderScanner, age_seconds
from statewarden.targets import Target

if TYPE_CHECKING:
    from statewarden.systemd import UnitInfo

DEFAULT_WATCH_INTERVAL_S = 2.0
_COLUMNS = ("PID", "KIND", "UNIT", "FDS (db/wal/shm)", "ORPHAN", "SINCE", "FLAGS", "COMMAND")
_COMMAND_WIDTH = 60


def exit_code(scans: list[HolderScan]) -> int:
    """3 when a holder is STALE or lost its locks, 1 when the scan is incomplete, else 0."""
    if any(("STALE" in h.flags or "LOST-LOCKS" in h.flags) for s in scans for h in s.holders):
        return EXIT_STALE_OR_LOST_LOCKS
    if any(not s.complete for s in scans):
        return EXIT_SCAN_INCOMPLETE
    return EXIT_OK


def _check_db(db: str) -> None:
    path = Path(db).expanduser()
    if path.is_dir():
        raise UsageError(f"--db {db}: is a directory; give the path of the state.db file")
    if not path.exists():
        raise UsageError(f"--db {db}: no such file")


def _fds(h: Holder) -> str:
    if h.via == VIA_LOCKS:
        return "? (locks)"  # its descriptors could not be read; its locks were seen
    return "/".join(str(h.fds.get(n, 0)) for n in (DB_FILE, WAL_FILE, SHM_FILE))


def _row(h: Holder, now: float) -> tuple[str, ...]:
    command = short_command(h.cmdline) or f"[{h.comm}]"
    if len(command) > _COMMAND_WIDTH:
        command = command[: _COMMAND_WIDTH - 3] + "..."
    flags = ",".join(h.flags)
    if h.stale_files:
        flags = flags.replace("STALE", "STALE(" + "+".join(h.stale_files) + ")")
    return tuple(
        printable(cell)
        for cell in (
            str(h.pid),
            h.kind + ("*" if h.kind_evidence else ""),
            h.unit or "(none)",
            _fds(h),
            "yes" if h.orphan else "-",
            human_age(age_seconds(h, now)),
            flags or "-",
            command,
        )
    )


def coverage_line(scan: HolderScan) -> str | None:
    """One line on the processes checked through /proc/locks alone, or None if there were none.

    ``312 processes of other users could not be read; none holds a lock on state.db``
    """
    checked = [u for u in scan.uninspectable if u.get("checked") == VIA_LOCKS]
    if not checked:
        return None
    n = len(checked)
    others = sum(1 for u in checked if u.get("uid") != os.geteuid())
    plural = "process" if n == 1 else "processes"
    if others == n:
        who = f"{n} {plural} of other users"
    elif not others:
        who = f"{n} {plural}"
    else:
        who = f"{n} {plural} ({others} of other users)"
    held = sum(1 for u in checked if u.get("holds_lock"))
    if not held:
        return f"{who} could not be read; none holds a lock on state.db"
    verb = "holds" if held == 1 else "hold"
    return f"{who} could not be read; {held} {verb} a lock on state.db (listed above, via locks)"


def _unreadable(scan: HolderScan) -> list[str]:
    """``--verbose``: one line per process that could not be read, and how it was covered."""
    lines = []
    for u in scan.uninspectable:
        uid = "?" if u.get("uid") is None else u["uid"]
        if u.get("checked") == VIA_LOCKS:
            how = "holds a lock on state.db" if u.get("holds_lock") else "holds no lock on state.db"
        elif u.get("exempt"):
            how = "exempt"
        else:
            how = "not covered"
        lines.append(f"  pid {u['pid']} ({u['comm']}, uid {uid}): {u['reason']}; {how}")
    return lines


def _is_unreadable_problem(scan: HolderScan, problem: str) -> bool:
    return any(problem.startswith(f"pid {u['pid']} (") for u in scan.uninspectable)


def render(
    scans: list[HolderScan],
    targets: list[Target],
    units: list[UnitInfo],
    systemd_note: str | None,
    *,
    verbose: bool = False,
) -> None:
    now = time.time()
    for i, (scan, target) in enumerate(zip(scans, targets, strict=True)):
        if i:
            click.echo()
        click.echo(f"{target.name}: {scan.db}")
        for note in scan.notes:
            click.echo(f"  note: {note}")
        if scan.holders:
            rows = [_COLUMNS, *(_row(h, now) for h in scan.holders)]
            widths = [max(len(r[c]) for r in rows) for c in range(len(_COLUMNS) - 1)]
            for r in rows:
                cells = [r[c].ljust(widths[c]) for c in range(len(widths))]
                click.echo("  ".join([*cells, r[-1]]).rstrip())
            for h in scan.holders:
                if h.kind_evidence:
                    click.echo(printable(f"  * pid {h.pid} is a {h.kind} by {h.kind_evidence}"))
        else:
            click.echo("no holders")
        if scan.vanished:
            click.echo(f"  {len(scan.vanished)} process(es) exited during the scan")
        line = coverage_line(scan)
        if line:
            click.echo(line)
        if verbose and scan.uninspectable:
            click.echo("processes that could not be read:")
            for text in _unreadable(scan):
                click.echo(printable(text))
        if not scan.complete:
            click.echo(
                f"scan INCOMPLETE: {len(scan.problems)} problem(s); treat the database as held:"
            )
            hidden = 0
            for p in scan.problems:
                if not verbose and _is_unreadable_problem(scan, p):
                    hidden += 1
                else:
                    click.echo(printable(f"  {p}"))
            if hidden:
                click.echo(
                    f"  {hidden} process(es) could not be inspected"
                    f" (holders.other_users: {scan.other_users}); --verbose lists them"
                )
    if units:
        click.echo()
        click.echo("systemd user units:")
        width = max(len(u.name) for u in units)
        for u in units:
            click.echo(
                f"  {u.name.ljust(width)}  {u.active_state}/{u.sub_state}"
                f"  main pid {u.main_pid or '-'}  restarts {u.n_restarts}"
            )
    if systemd_note:
        click.echo(systemd_note)


def _payload(
    scans: list[HolderScan],
    targets: list[Target],
    note: str | None,
    units: list[UnitInfo],
    systemd_note: str | None,
) -> dict[str, Any]:
    dbs = []
    for scan, target in zip(scans, targets, strict=True):
        item = scan.to_json()
        item["profile"] = target.name
        dbs.append(item)
    return {
        "complete": all(s.complete for s in scans),
        "databases": dbs,
        "systemd": systemd_note,
        "units": [u.to_json() for u in units],
        "note": note or None,
        # With one database, its fields at the top level too (the documented shape).
        **({k: v for k, v in dbs[0].items() if k != "complete"} if len(dbs) == 1 else {}),
    }


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
@click.option("--count", type=click.IntRange(min=0), default=0,
              help="With --watch, stop after this many scans (0: never).")  # fmt: skip
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
    if db:
        _check_db(db)
    targets, note = select_targets(config_path, db, profile)
    # No config file means every default (other_users: locks), with --db too.
    policy = get_config(config_path).holders
    scanner = HolderScanner(
        [t.db for t in targets],
        exempt_comms=policy.exempt_comms,
        other_users=policy.other_users,
        watch_opens=watch,  # open events only help the incremental scans of --watch
    )
    n = 0
    code = EXIT_OK
    try:
        while True:
            scans = scanner.scan(full=n == 0)
            if any(h.kind == "unknown" for scan in scans for h in scan.holders):
                # Hermes' gateway_heartbeats may name it (a read-only look at the file).
                from statewarden.holders.heartbeats import apply_heartbeats  # noqa: PLC0415

                apply_heartbeats(scans)
            units: list[UnitInfo] = []
            systemd_note = None
            if not no_systemd:
                # D-Bus (dbus-fast, asyncio) is imported only when it is asked.
                from statewarden.holders.units import systemd_view  # noqa: PLC0415

                units, systemd_note = systemd_view(scans)
            code = exit_code(scans)
            if as_json:
                data = _payload(scans, targets, note, units, systemd_note)
                if watch:
                    click.echo(json.dumps(data, default=str))
                else:
                    print_json(data)
            else:
                if watch:
                    click.echo(time.strftime("-- %Y-%m-%d %H:%M:%S --"))
                if note:
                    click.echo(note)
                render(scans, targets, units, systemd_note, verbose=verbose)
            n += 1
            if not watch or (count and n >= count):
                break
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    raise SystemExit(code)
