"""``statewardenctl``'s entry point: ``holders``, ``status`` and ``check`` with plain
options run without click.

``statewardenctl holders`` is what a script or a watchdog runs again and again, next to
``fuser``, ``status`` is the first thing a user types, and ``check`` is measured against
SQLite's own ``integrity_check``; click and the command group are about half of their
imports (``check``'s: a third, next to the engine's). When a command's arguments are
only the options in :data:`HOLDERS_VALUES` / :data:`HOLDERS_FLAGS` (``status``:
:data:`STATUS_VALUES` / :data:`STATUS_FLAGS`; ``check``: :data:`CHECK_VALUES` /
:data:`CHECK_FLAGS`), they are read here and the command runs through the same code
as its click command (:mod:`statewarden.cli.holders_output`,
:mod:`statewarden.cli.status_output`, :mod:`statewarden.cli.check_output`), printing the
same. Anything else (``--help``,
``--watch``, an option without its value, an unknown option, another command) goes to
the click group (:mod:`statewarden.cli.ctl`), which reads and reports it as always.
This module and :mod:`statewarden.config_literals` are the package's two fast paths.
"""

from __future__ import annotations

import gc
import os
import sys

from statewarden.errors import EXIT_BROKEN_PIPE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

PROG = "statewardenctl"
# An option that takes a value -> its keyword; a flag -> its keyword.
HOLDERS_VALUES = {"--config": "config_path", "--db": "db", "--profile": "profile"}
HOLDERS_FLAGS = {
    "--json": "as_json",
    "--no-systemd": "no_systemd",
    "--verbose": "verbose",
    "-v": "verbose",
}
STATUS_VALUES = {"--config": "config_path", "--db": "db", "--profile": "profile"}
STATUS_FLAGS = {"--json": "as_json"}
CHECK_VALUES = {
    **STATUS_VALUES,
    "--max-errors": "max_errors",
    "--work-dir": "work_dir",
    "--progress": "progress_mode",
}
CHECK_FLAGS = {"--json": "as_json"}


def holders_options(args: list[str]) -> dict[str, str | bool | None] | None:
    """The options of ``holders ARGS``, or None when click should read them instead."""
    return plain_options(args, HOLDERS_VALUES, HOLDERS_FLAGS)


def plain_options(
    args: list[str], values: dict[str, str], flags: dict[str, str]
) -> dict[str, str | bool | None] | None:
    """The options ``args`` give, keyed as ``values`` and ``flags`` name them, or None
    when click should read them instead.

    Takes ``--db X`` and ``--db=X``; a repeated option keeps its last value, as click
    does. A value that looks like an option, an empty value, ``--`` or anything not
    listed goes to click, which gives its own answer (and its usage error).
    """
    options: dict[str, str | bool | None] = dict.fromkeys(values.values())
    options.update(dict.fromkeys(flags.values(), False))
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in flags:
            options[flags[arg]] = True
            i += 1
            continue
        name, eq, value = arg.partition("=")
        if name not in values:
            return None
        if not eq:
            if i + 1 >= len(args):
                return None
            value = args[i + 1]
            i += 1
        if not value or value.startswith("-"):
            return None
        options[values[name]] = value
        i += 1
    return options


def run_holders(options: dict[str, str | bool | None]) -> int:
    """``statewardenctl holders`` once, as the click command runs it without --watch."""
    from statewarden.holders import ReadAhead  # noqa: PLC0415

    # The kernel's wait for the first reader of /proc/locks, taken alongside the imports
    # and the scan (locks.ReadAhead).
    ahead = ReadAhead()
    try:
        return _holders(options)
    finally:
        ahead.stop()


def _holders(options: dict[str, str | bool | None]) -> int:
    from statewarden.cli._plain import errors_as_exit_codes  # noqa: PLC0415

    with errors_as_exit_codes(PROG):
        from statewarden.cli.holders_output import open_scanner, scan_and_report  # noqa: PLC0415

        config_path, db, profile = (options[k] for k in ("config_path", "db", "profile"))
        assert config_path is None or isinstance(config_path, str)
        assert db is None or isinstance(db, str)
        assert profile is None or isinstance(profile, str)
        as_json, verbose = bool(options["as_json"]), bool(options["verbose"])
        scanner, profiles, note = open_scanner(
            config_path,
            db,
            profile,
            watch=False,
            name_unreadable=as_json or verbose,
            read_locks_ahead=False,  # run_holders keeps one reading since the start
        )
        try:
            return scan_and_report(
                scanner,
                profiles,
                note,
                full=True,
                as_json=as_json,
                watch=False,
                no_systemd=bool(options["no_systemd"]),
                verbose=verbose,
            )
        except KeyboardInterrupt:
            return 0  # as the click command: Ctrl-C during the scan ends it quietly
    return 1  # pragma: no cover - errors_as_exit_codes exits


def run_status(options: dict[str, str | bool | None]) -> int:
    """``statewardenctl status`` once, as the click command runs it."""
    from statewarden.cli._plain import errors_as_exit_codes  # noqa: PLC0415

    with errors_as_exit_codes(PROG):
        from statewarden.cli.status_output import report_status  # noqa: PLC0415

        config_path, db, profile = (options[k] for k in ("config_path", "db", "profile"))
        assert config_path is None or isinstance(config_path, str)
        assert db is None or isinstance(db, str)
        assert profile is None or isinstance(profile, str)
        report_status(config_path, db, profile, bool(options["as_json"]))
        return 0
    return 1  # pragma: no cover - errors_as_exit_codes exits


def check_options(args: list[str]) -> dict[str, str | bool | int | None] | None:
    """The options of ``check ARGS`` as the click command takes them (``--max-errors``
    a whole number, ``--progress`` one of its choices, ``auto`` when not given), or None
    when click should read them instead (and answer what is wrong with them)."""
    from statewarden.cli._progress import PROGRESS_CHOICES  # noqa: PLC0415

    plain = plain_options(args, CHECK_VALUES, CHECK_FLAGS)
    if plain is None:
        return None
    options: dict[str, str | bool | int | None] = dict(plain)
    options["progress_mode"] = plain["progress_mode"] or "auto"
    if options["progress_mode"] not in PROGRESS_CHOICES:
        return None
    max_errors = plain["max_errors"]
    if isinstance(max_errors, str):
        try:
            options["max_errors"] = int(max_errors)  # what click's INT type does
        except ValueError:
            return None
    return options


def run_check(options: dict[str, str | bool | int | None]) -> int:
    """``statewardenctl check`` as the click command runs it; returns its exit code."""
    from statewarden.cli._plain import errors_as_exit_codes  # noqa: PLC0415
    from statewarden.errors import EXIT_NOT_CHECKED  # noqa: PLC0415

    with errors_as_exit_codes(PROG, failed=EXIT_NOT_CHECKED):
        from statewarden.cli.check_output import report_check  # noqa: PLC0415

        config_path, db, profile, work_dir, progress_mode = (
            options[k] for k in ("config_path", "db", "profile", "work_dir", "progress_mode")
        )
        max_errors = options["max_errors"]
        assert config_path is None or isinstance(config_path, str)
        assert db is None or isinstance(db, str)
        assert profile is None or isinstance(profile, str)
        assert work_dir is None or isinstance(work_dir, str)
        assert isinstance(progress_mode, str)
        assert max_errors is None or isinstance(max_errors, int)
        return report_check(
            config_path,
            db,
            profile,
            as_json=bool(options["as_json"]),
            max_errors=max_errors,
            work_dir=work_dir,
            progress_mode=progress_mode,
        )
    return 1  # pragma: no cover - errors_as_exit_codes exits


def end(code: int) -> NoReturn:
    """End the process with ``code`` once stdout and stderr are written out.

    The report is whole by then: what the interpreter would still do, freeing every
    object and module one by one, costs a whole ``holders`` run about a tenth of
    ``fuser``'s CPU time and changes nothing outside this process. A reader gone by
    the last write gives 141, as in :func:`~statewarden.cli._plain.errors_as_exit_codes`.
    """
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        code = EXIT_BROKEN_PIPE
    os._exit(code)


def main() -> None:
    """Run ``statewardenctl`` with ``sys.argv``."""
    args = sys.argv[1:]
    if args[:1] == ["holders"]:
        options = holders_options(args[1:])
        if options is not None:
            # One scan, one report, and the process ends: no reference cycle it makes
            # needs collecting before then, and the collector's passes over the scan's
            # records of thousands of processes would cost more than they free.
            gc.disable()
            end(run_holders(options))
    elif args[:1] == ["status"]:
        options = plain_options(args[1:], STATUS_VALUES, STATUS_FLAGS)
        if options is not None:
            end(run_status(options))
    elif args[:1] == ["check"]:
        checking = check_options(args[1:])
        if checking is not None:
            end(run_check(checking))
    from statewarden.cli.ctl import main as ctl_main  # noqa: PLC0415

    ctl_main(prog_name=PROG)
