"""The group class of every ``statewardenctl`` command group: summaries listed whole.

click cuts each command's summary in a group's ``--help`` to what fits on one line after
the longest name, ending it with ``...``; a reader then sees half a sentence. This group
lists the first sentence of each command's help whole, wrapped under its name instead.
"""

from __future__ import annotations

import click

# Longer than any first sentence: click then stops at the sentence's end, not at a width.
WHOLE_SUMMARY_CHARS = 10_000


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
