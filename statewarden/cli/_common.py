"""What every command shares: ``--config``, ``--json``, error handling, output helpers."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from statewarden.cli import _plain
from statewarden.cli._plain import errors_as_exit_codes, printable
from statewarden.cli._progress import PROGRESS_CHOICES
from statewarden.errors import EXIT_FAILED
from statewarden.json_output import json_document

F = TypeVar("F", bound=Callable[..., Any])

# Every command reads its config and chooses its databases the same way (``_plain``).
get_config = _plain.get_config
select_targets = _plain.select_targets


def echo_line(text: str = "", *, err: bool = False) -> None:
    """Print one line of text output, control characters escaped (:func:`printable`)."""
    click.echo(printable(text), err=err)


def handle_errors(func: F) -> F:
    """Turn any error into one line on stderr and an exit code; never a traceback.

    Set ``STATEWARDEN_DEBUG=1`` to see the traceback of an unexpected error.
    """
    return handle_errors_failing_with(EXIT_FAILED)(func)


def handle_errors_failing_with(failed: int) -> Callable[[F], F]:
    """:func:`handle_errors` for a command whose failures exit with ``failed`` instead
    of 1 (``check``, whose 1 means derived damage)."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            prog = click.get_current_context().find_root().command.name or "statewarden"
            passthrough = (click.exceptions.Exit, click.ClickException)
            with errors_as_exit_codes(prog, passthrough, failed):
                return func(*args, **kwargs)
            return None

        return cast(F, wrapper)

    return decorate


if TYPE_CHECKING:
    _TextType = click.ParamType[Any, Any]  # generic since click 8.2
else:
    _TextType = click.ParamType


class Given(_TextType):
    """The type of every option and argument that takes text: an empty value (``--db ""``,
    what an unset shell variable gives) is a usage error naming the option (exit 2).
    Taken as "not given", it would mean the default database; taken as a path, the
    current folder. ``path``: the value is handed on as a ``Path``."""

    name = "text"

    def __init__(self, *, path: bool = False) -> None:
        self.path = path
        if path:
            self.name = "path"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """``value`` as given (a ``Path`` for ``path``); an empty one fails."""
        if isinstance(value, str) and value == "":
            self.fail("it is empty (an unset variable?): give a value or leave it out", param, ctx)
        return Path(value) if self.path and isinstance(value, str) else value


TEXT = Given()
PATH = Given(path=True)

config_option = click.option(
    "--config",
    "config_path",
    type=TEXT,
    default=None,
    help="Config file (default: $STATEWARDEN_CONFIG, else "
    "$XDG_CONFIG_HOME/statewarden/config.yaml).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
db_option = click.option(
    "--db", type=TEXT, default=None, help="A state.db path instead of discovery."
)
profile_option = click.option(
    "--profile", type=TEXT, default=None, help="Only this Hermes profile."
)


progress_option = click.option(
    "--progress",
    "progress_mode",
    type=click.Choice(PROGRESS_CHOICES),
    default="auto",
    show_default=True,
    help="Progress on stderr: a bar on a TTY (auto), JSON lines, or none.",
)


def print_json(data: Mapping[str, Any]) -> None:
    """A command's result as one indented JSON object on stdout."""
    click.echo(json.dumps(json_document(data), indent=2, default=str, sort_keys=False))


def print_json_line(data: Mapping[str, Any], *, err: bool = False) -> None:
    """One event as a one-line JSON object (progress, --watch scans), on stdout or stderr."""
    click.echo(json.dumps(json_document(data), default=str), err=err)
