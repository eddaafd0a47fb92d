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

    Example: statewardenctl config show --json
    """
    config = get_config(config_path)
    data = to_plain(config)
    if as_json:
        print_json({"source": config.source, "config": data})
        return
    click.echo(f"# source: {config.source or 'defaults (no config file)'}")
    click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())
