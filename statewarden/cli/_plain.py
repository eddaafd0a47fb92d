"""What commands share that needs no click: safe text, errors as exit codes, targets.

``statewardenctl holders`` with plain options runs without importing click
(:mod:`statewarden.cli.quick`); what it shares with every other command lives here, and
:mod:`statewarden.cli._common` builds the click side on it.
"""

from __future__ import annotations

import os
import sys

from statewarden.config_literals import (
    DISCOVER_PROFILES,
    default_state_dir_name,
    no_config_file,
    runtime_dir_name,
)
from statewarden.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    StatewardenError,
    UsageError,
)
from statewarden.targets import (
    Target,
    default_hermes_home,
    discover,
    discover_homes,
    find_target,
    target_for_db,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import TracebackType

    # imported when a config is read: `holders --db` without a file needs none
    from statewarden.config import Config

ENV_DEBUG = "STATEWARDEN_DEBUG"


def printable(text: str) -> str:
    """``text`` with control characters written as escapes (``\\x1b``, ``\\n``).

    Names, paths and command lines come from other processes, other users' among them,
    and from folder names: printed raw, one could move the cursor, rewrite lines, retitle
    the terminal or split one line of output (an error is one line) into several.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def write_line(text: str = "", *, err: bool = False) -> None:
    """One line on stdout (or stderr), written as it is: callers escape what is not theirs.

    stdout is flushed by the caller when a report is whole (stderr writes each line).
    """
    (sys.stderr if err else sys.stdout).write(text + "\n")


def fail(prog: str, message: str, code: int) -> None:
    """``prog: error: message`` as one line on stderr, then exit with ``code``."""
    write_line(printable(f"{prog}: error: {message}"), err=True)
    sys.exit(code)


class errors_as_exit_codes:
    """Turn any error into one line on stderr and an exit code; never a traceback.

    Exceptions of the ``passthrough`` types (and ``SystemExit``) go on unchanged. Set
    ``STATEWARDEN_DEBUG=1`` to see the traceback of an unexpected error. ``failed``: the
    code of a failure (an error whose code is ``EXIT_FAILED``, or an unexpected one),
    for a command whose 1 means something else (``check``: derived damage). (A class,
    not a ``contextlib`` generator: ``statewardenctl holders`` starts without contextlib.)
    """

    def __init__(
        self,
        prog: str,
        passthrough: tuple[type[BaseException], ...] = (),
        failed: int = EXIT_FAILED,
    ) -> None:
        self.prog = prog
        self.passthrough = passthrough
        self.failed = failed

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Ends the process for an error it knows; anything else goes on (returns None)."""
        if isinstance(exc, StatewardenError):
            code = self.failed if exc.exit_code == EXIT_FAILED else exc.exit_code
            fail(self.prog, str(exc), code)
        elif isinstance(exc, KeyboardInterrupt):
            fail(self.prog, "interrupted", EXIT_INTERRUPTED)
        elif isinstance(exc, UnicodeEncodeError) and isinstance(exc.object, str):
            # A path with bytes that are not UTF-8 (os.fsdecode gave surrogates): SQLite
            # takes a file name as UTF-8 text, so that file cannot be named to it here.
            fail(
                self.prog,
                f"{printable(exc.object)}: this path is not valid UTF-8, and SQLite opens"
                " files by UTF-8 names: use a path whose names are UTF-8",
                EXIT_USAGE,
            )
        elif isinstance(exc, BrokenPipeError):
            # The reader went away (`| head -1`): stop quietly, as a SIGPIPE'd tool would.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(EXIT_BROKEN_PIPE)
        elif (
            isinstance(exc, Exception)
            and not isinstance(exc, self.passthrough)
            and not os.environ.get(ENV_DEBUG)
        ):
            fail(
                self.prog,
                f"unexpected {type(exc).__name__}: {exc} (set {ENV_DEBUG}=1 for the traceback)",
                self.failed,
            )


def get_config(config_path: str | None) -> Config:
    from statewarden.config import load_config  # noqa: PLC0415 - see the import above

    return load_config(config_path)


def discover_targets(config_path: str | None) -> list[Target]:
    """The targets the config names or discovery finds. With no config file, every
    default is known without loading the config (its dataclasses are a third of
    ``status``'s start): the Hermes home and its profiles."""
    if no_config_file(config_path):
        return discover_homes(default_hermes_home(), profiles=DISCOVER_PROFILES)
    return discover(get_config(config_path))


def own_folders(config_path: str | None) -> tuple[str, str]:
    """statewarden's state and runtime folders, as the config names them or by default
    (read without the config when there is no config file)."""
    if no_config_file(config_path):
        state = default_state_dir_name()
        return state, runtime_dir_name(state)
    from statewarden.config import runtime_dir, state_dir  # noqa: PLC0415 - see above

    config = get_config(config_path)
    return str(state_dir(config)), str(runtime_dir(config))


def select_targets(
    config_path: str | None, db: str | None, profile: str | None
) -> tuple[list[Target], str]:
    """The targets a command works on, and a note when none were found."""
    if db and profile:
        raise UsageError("--db and --profile cannot be used together")
    if db:
        return [target_for_db(db)], ""
    targets = discover_targets(config_path)
    if profile:
        t = find_target(targets, profile)
        if t is None:
            names = ", ".join(x.name for x in targets) or "none"
            raise UsageError(f"no Hermes profile named {profile!r} (found: {names})")
        return [t], ""
    if not targets:
        return [], "no Hermes home found ($HERMES_HOME or ~/.hermes); nothing to report"
    return targets, ""
