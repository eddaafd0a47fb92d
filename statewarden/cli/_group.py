"""The group class of every ``statewardenctl`` command group: summaries listed whole.

click cuts each command's summary in a group's ``--help`` to what fits on one line after
the longest name, ending it with ``...``; a reader then sees half a sentence. This group
lists the first sentence of each command's help whole, wrapped under its name instead.
"""

from __future__ import annotations

from typing import IO, Any

import click

# Longer than any first sentence: click then stops at the sentence's end, not at a width.
WHOLE_SUMMARY_CHARS = 10_000


def _usage_error_in_one_line(self: click.UsageError, file: IO[Any] | None = None) -> None:
    """A usage error (an unknown option or command, a bad value) as one line, as every
    other error of ``statewardenctl`` and ``statewarden`` is: what was wrong, and where
    the help is. (click prints the usage, a hint and the error on four lines.)"""
    names = []  # the commands by their own names, however the program was started
    ctx = self.ctx
    while ctx is not None:
        names.append(ctx.command.name or ctx.info_name or "")
        ctx = ctx.parent
    path = " ".join(reversed(names)) or "statewardenctl"
    message = self.format_message().rstrip(".")
    click.echo(f"{path.split()[0]}: error: {message} (see {path} --help)", file=file, err=True)


click.UsageError.show = _usage_error_in_one_line  # type: ignore[method-assign]


class CommandGroup(click.Group):
    """A click group whose ``--help`` shows each command's summary whole."""

    def summaries(self, ctx: click.Context) -> list[tuple[str, str]]:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            rows.append((name, cmd.get_short_help_str(WHOLE_SUMMARY_CHARS)))
        return rows

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = self.summaries(ctx)
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
