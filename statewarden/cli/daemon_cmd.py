"""``statewarden``: the daemon's own command (``statewarden run``, ``--version``)."""

from __future__ import annotations

import asyncio
import sys

import click

from statewarden import __version__, logs
from statewarden.cli._common import config_option, get_config, handle_errors
from statewarden.cli._group import CommandGroup
from statewarden.daemon import Daemon


@click.group(
    "statewarden", cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(__version__, prog_name="statewarden")
def main() -> None:
    """statewarden: watches Hermes Agent's state.db and keeps it safe."""


@main.command()
@config_option
@click.option(
    "--log-format",
    type=click.Choice(["auto", "console", "json", "journald", "plain"]),
    default=None,
    help="Override logging.format from the config.",
)
@handle_errors
def run(config_path: str | None, log_format: str | None) -> None:
    """Run the supervisor in the foreground (what the systemd unit starts).

    Example: statewarden run --config ~/.config/statewarden/config.yaml
    """
    config = get_config(config_path)
    logs.configure(config.logging.level, log_format or config.logging.format)
    daemon = Daemon(config, reload=lambda: get_config(config_path))
    sys.exit(asyncio.run(daemon.run()))


if __name__ == "__main__":
    main()
