"""The text and JSON of ``statewardenctl holders``: one scan, reported; no click needed.

The click command (:mod:`statewarden.cli.holders_cmd`) and the quick entry point
(:mod:`statewarden.cli.quick`) both report through here, so they print the same.
"""

from __future__ import annotations

import os
import stat
import sys
import time

from statewarden.cli._plain import get_config, printable, select_targets, write_line
from statewarden.config_literals import no_config_file
from statewarden.errors import EXIT_OK, EXIT_SCAN_INCOMPLETE, EXIT_STALE_OR_LOST_LOCKS, UsageError
from statewarden.holders import (
    DB_FILE,
    SHM_FILE,
    VIA_LOCKS,
    WAL_FILE,
    Holder,
    HolderScan,
    HolderScanner,
    age_seconds,
    human_age,
    short_command,
)
from statewarden.json_output import json_document
from statewarden.targets import profile_for_db

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from statewarden.systemd import UnitInfo

_COLUMNS = (
    "PID",
    "KIND",
    "UNIT",
    "FDS (db/wal/shm)",
    "LOCKS",
    "ORPHAN",
    "SINCE",
    "FLAGS",
    "COMMAND",
)
_COMMAND_WIDTH = 60
_FILE_SHORT = {DB_FILE: "db", WAL_FILE: "wal", SHM_FILE: "shm"}
_LOCK_KIND_SHORT = {"POSIX": "posix", "OFDLCK": "ofd", "FLOCK": "flock"}
ROLLBACK_NOTE = (
    "  note: the database is in rollback-journal mode: a connection holds a lock only during"
    " a transaction, so an idle holder with no lock is normal (not flagged NO-LOCK)"
)


def exit_code(scans: list[HolderScan]) -> int:
    """3 when a holder is STALE or lost its locks, 1 when the scan is incomplete, else 0."""
    if any(("STALE" in h.flags or "LOST-LOCKS" in h.flags) for s in scans for h in s.holders):
        return EXIT_STALE_OR_LOST_LOCKS
    if any(not s.complete for s in scans):
        return EXIT_SCAN_INCOMPLETE
    return EXIT_OK


def check_db(db: str) -> None:
    """``--db`` names a file this user can look at: one line saying why not (exit 2)."""
    path = os.path.expanduser(db)
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except FileNotFoundError:
        raise UsageError(f"--db {db}: no such file") from None
    except OSError as exc:  # a folder this user may not search: not "no such file"
        raise UsageError(f"--db {db}: {exc.strerror or exc}") from None
    if is_dir:
        raise UsageError(f"--db {db}: is a directory; give the path of the state.db file")


def _fds(h: Holder) -> str:
    if h.via == VIA_LOCKS:
        return "? (locks)"  # its descriptors could not be read; its locks were seen
    return "/".join(str(h.fds.get(n, 0)) for n in (DB_FILE, WAL_FILE, SHM_FILE))


def _locks(h: Holder) -> str:
    """The locks it owns on the bundle, short: ``posix R db, ofd W wal x2``; ``-`` none."""
    if not h.locks:
        return "-"
    counts: dict[str, int] = {}
    for lk in h.locks:
        kind = _LOCK_KIND_SHORT.get(lk.kind, lk.kind.lower())
        text = f"{kind} {lk.mode[:1]} {_FILE_SHORT.get(lk.file, lk.file)}"
        counts[text] = counts.get(text, 0) + 1
    return ", ".join(t if n == 1 else f"{t} x{n}" for t, n in counts.items())


def rollback_journal(db: str) -> bool:
    """True when the database's header says rollback-journal mode (bytes 18 and 19 are
    1): an idle connection then holds no lock, and that is normal."""
    try:
        fd = os.open(db, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        head = os.pread(fd, 20, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    return len(head) == 20 and head[18] == 1 and head[19] == 1


def _row(h: Holder, now: float, *, rollback: bool = False) -> tuple[str, ...]:
    command = short_command(h.cmdline) or f"[{h.comm}]"
    if len(command) > _COMMAND_WIDTH:
        command = command[: _COMMAND_WIDTH - 3] + "..."
    flags = ",".join(f for f in h.flags if not (rollback and f == "NO-LOCK"))
    if h.stale_files:
        flags = flags.replace("STALE", "STALE(" + "+".join(h.stale_files) + ")")
    return tuple(
        printable(cell)
        for cell in (
            str(h.pid),
            h.kind + ("*" if h.kind_evidence else ""),
            h.unit or "(none)",
            _fds(h),
            _locks(h),
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
    me = os.geteuid()
    others = sum(1 for u in checked if u.get("uid") != me)
    plural = "process" if n == 1 else "processes"
    if others == n:
        who = f"{n} {plural} of other users"
    elif not others:
        who = f"{n} {plural}"
    else:
        who = f"{n} {plural} ({others} of other users)"
    held = sum(1 for u in checked if u.get("holds_lock"))
    if not held:
        if any("names no owner" in p for p in scan.problems):
            # /proc/locks names no owner for an OFD lock: one of them may hold it.
            return (
                f"{who} could not be read; none owns a lock on state.db by its pid, but the"
                " lock that names no owner (below) may be one of theirs"
            )
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
    profiles: list[str],
    units: list[UnitInfo],
    systemd_note: str | None,
    *,
    verbose: bool = False,
) -> None:
    now = time.time()
    for i, (scan, profile) in enumerate(zip(scans, profiles, strict=True)):
        if i:
            write_line()
        write_line(printable(f"{profile}: {scan.db}"))
        for note in scan.notes:
            write_line(printable(f"  note: {note}"))
        rollback = bool(scan.holders) and rollback_journal(str(scan.db))
        if rollback and any("NO-LOCK" in h.flags for h in scan.holders):
            write_line(ROLLBACK_NOTE)
        if scan.holders:
            rows = [_COLUMNS, *(_row(h, now, rollback=rollback) for h in scan.holders)]
            widths = [max(len(r[c]) for r in rows) for c in range(len(_COLUMNS) - 1)]
            for r in rows:
                cells = [r[c].ljust(widths[c]) for c in range(len(widths))]
                write_line("  ".join([*cells, r[-1]]).rstrip())
            for h in scan.holders:
                if h.kind_evidence:
                    write_line(printable(f"  * pid {h.pid} is a {h.kind} by {h.kind_evidence}"))
        else:
            write_line("no holders")
        if scan.vanished:
            write_line(f"  {len(scan.vanished)} process(es) exited during the scan")
        line = coverage_line(scan)
        if line:
            write_line(line)
        if verbose and scan.uninspectable:
            write_line("processes that could not be read:")
            for text in _unreadable(scan):
                write_line(printable(text))
        if not scan.complete:
            write_line(
                f"scan INCOMPLETE: {len(scan.problems)} problem(s); treat the database as held:"
            )
            hidden = 0
            for p in scan.problems:
                if not verbose and _is_unreadable_problem(scan, p):
                    hidden += 1
                else:
                    write_line(printable(f"  {p}"))
            if hidden:
                write_line(
                    f"  {hidden} process(es) could not be inspected"
                    f" (holders.other_users: {scan.other_users}); --verbose lists them"
                )
    if units:
        write_line()
        write_line("systemd user units:")
        width = max(len(u.name) for u in units)
        for u in units:
            write_line(
                f"  {u.name.ljust(width)}  {u.active_state}/{u.sub_state}"
                f"  main pid {u.main_pid or '-'}  restarts {u.n_restarts}"
            )
    if systemd_note:
        write_line(systemd_note)


def _payload(
    scans: list[HolderScan],
    profiles: list[str],
    note: str | None,
    units: list[UnitInfo],
    systemd_note: str | None,
) -> dict[str, Any]:
    dbs = []
    for scan, profile in zip(scans, profiles, strict=True):
        item = scan.to_json()
        item["profile"] = profile
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


def open_scanner(
    config_path: str | None,
    db: str | None,
    profile: str | None,
    *,
    watch: bool,
    name_unreadable: bool = True,
    read_locks_ahead: bool = True,
) -> tuple[HolderScanner, list[str], str]:
    """The scanner of the chosen databases, their profiles, and a note when none were found.

    ``name_unreadable``: False when the report only counts the processes that could not be
    read (text without ``--verbose``): the scan then spares reading their names.
    ``read_locks_ahead``: each scan reads /proc/locks ahead in a thread (``locks.ReadAhead``);
    False when the caller already keeps one reading.
    """
    if db:
        check_db(db)
    if db and not profile:
        # Named on the command line: its path and its profile's name are all the report
        # needs (no Target: pathlib is a quarter of this command's CPU time next to fuser).
        dbs, profiles, note = [db], [profile_for_db(db)], ""
    else:
        targets, note = select_targets(config_path, db, profile)
        dbs, profiles = [os.fspath(t.db) for t in targets], [t.name for t in targets]
    # No config file means every default (other_users: locks), with --db too; the config
    # module is imported only to read a file.
    policy = None if no_config_file(config_path) else get_config(config_path).holders
    scanner = HolderScanner(
        dbs,
        watch_opens=watch,  # open events only help the incremental scans of --watch
        name_unreadable=name_unreadable,
        read_locks_ahead=read_locks_ahead,
    )
    if policy is not None:
        scanner.exempt_comms = frozenset(policy.exempt_comms)
        scanner.other_users = policy.other_users
    return scanner, profiles, note


def scan_and_report(
    scanner: HolderScanner,
    profiles: list[str],
    note: str,
    *,
    full: bool,
    as_json: bool,
    watch: bool,
    no_systemd: bool,
    verbose: bool,
) -> int:
    """Scan once, print the result (text, or JSON: one document, or one line with --watch).

    Returns the exit code of this scan (:func:`exit_code`).
    """
    scans = scanner.scan(full=full)
    if any(h.kind == "unknown" for scan in scans for h in scan.holders):
        # Hermes' gateway_heartbeats may name it (a read-only look at the file).
        from statewarden.holders import apply_heartbeats  # noqa: PLC0415

        apply_heartbeats(scans)
    units: list[UnitInfo] = []
    systemd_note = None
    if not no_systemd:
        # D-Bus (dbus-fast, asyncio) is imported only when it is asked.
        from statewarden.holders import systemd_view  # noqa: PLC0415

        units, systemd_note = systemd_view(scans)
    if as_json:
        import json  # noqa: PLC0415 - only --json needs it

        data = json_document(_payload(scans, profiles, note, units, systemd_note))
        if watch:
            write_line(json.dumps(data, default=str))
        else:
            write_line(json.dumps(data, indent=2, default=str, sort_keys=False))
    else:
        if watch:
            write_line(time.strftime("-- %Y-%m-%d %H:%M:%S --"))
        if note:
            write_line(note)
        render(scans, profiles, units, systemd_note, verbose=verbose)
    sys.stdout.flush()
    return exit_code(scans)
