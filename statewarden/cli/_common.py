"""What every command shares: ``--config``, ``--json``, error handling, output helpers."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from statewarden.config import Config, load_config
from statewarden.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    StatewardenError,
    UsageError,
)
from statewarden.json_output import json_document
from statewarden.targets import Target, discover, find_target, target_for_db

F = TypeVar("F", bound=Callable[..., Any])
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


def echo_line(text: str = "", *, err: bool = False) -> None:
    """Print one line of text output, control characters escaped (:func:`printable`)."""
    click.echo(printable(text), err=err)


def fail(prog: str, message: str, code: int) -> None:
    click.echo(printable(f"{prog}: error: {message}"), err=True)
    sys.exit(code)


def handle_errors(func: F) -> F:
    """Turn any error into one line on stderr and an exit code; never a traceback.

    Set ``STATEWARDEN_DEBUG=1`` to see the traceback of an unexpected error.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        prog = click.get_current_context().find_root().command.name or "statewarden"
        try:
            return func(*args, **kwargs)
        except StatewardenError as exc:
            fail(prog, str(exc), exc.exit_code)
        except KeyboardInterrupt:
            fail(prog, "interrupted", EXIT_INTERRUPTED)
        except BrokenPipeError:
            # The reader went away (`| head -1`): stop quietly, as a SIGPIPE'd tool would.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(EXIT_BROKEN_PIPE)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as exc:
            if os.environ.get(ENV_DEBUG):
                raise
            fail(
                prog,
                f"unexpected {type(exc).__name__}: {exc} (set {ENV_DEBUG}=1 for the traceback)",
                EXIT_FAILED,
            )
        return None

    return cast(F, wrapper)


config_option = click.option(
    "--config",
    "config_path",
    type=str,
    default=None,
    help="Config file (default: $STATEWARDEN_CONFIG, else "
    "$XDG_CONFIG_HOME/statewarden/config.yaml).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
db_option = click.option(
    "--db", type=str, default=None, help="A state.db path instead of discovery."
)
profile_option = click.option("--profile", type=str, default=None, help="Only this Hermes profile.")


def get_config(config_path: str | None) -> Config:
    return load_config(config_path)


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


def print_json(data: Mapping[str, Any]) -> None:
    """A command's result as one indented JSON object on stdout."""
    click.echo(json.dumps(json_document(data), indent=2, default=str, sort_keys=False))


def print_json_line(data: Mapping[str, Any], *, err: bool = False) -> None:
    """One event as a one-line JSON object (progress, --watch scans), on stdout or stderr."""
    click.echo(json.dumps(json_document(data), default=str), err=err)


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover
