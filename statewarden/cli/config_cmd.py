"""``statewardenctl config check`` and ``config show``."""

from __future__ import annotations

import click
import yaml

from statewarden.cli._common import config_option, get_config, handle_errors, print_json
from statewarden.cli._group import CommandGroup
from statewarden.config import to_plain


@click.group("config", cls=CommandGroup)
def config_group() -> None:
    """Validate or print the configuration."""


@config_group.command("check")
@config_option
@handle_errors
def check(config_path: str | None) -> None:
    """Validate the config file; exit 2 with one line naming the problem if it is invalid.

    Example: statewardenctl config check --config ~/.config/statewarden/config.yaml
    """
    config = get_config(config_path)
    where = config.source or "no config file; defaults"
    click.echo(f"config ok: {where}")


@config_group.command("show")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
@handle_errors
def show(config_path: str | None, as_json: bool) -> None:
    """Print the effective configuration, defaults filled in, secrets redacted.

    Durations and sizes are printed as the config writes them (30s, 4h, 50MB), in the
    largest unit that keeps them whole; --json gives them as numbers of seconds and bytes.

    Example: statewardenctl config show --json
    """
    config = get_config(config_path)
    if as_json:
        print_json({"source": config.source, "config": to_plain(config)})
        return
    click.echo(f"# source: {config.source or 'defaults (no config file)'}")
    click.echo(yaml.safe_dump(to_plain(config, units=True), sort_keys=False).rstrip())
