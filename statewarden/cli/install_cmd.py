"""``statewardenctl install`` and ``uninstall``: the systemd --user units of this installation."""

from __future__ import annotations

from pathlib import Path

import click

from statewarden.cli import install as inst
from statewarden.cli._common import PATH, handle_errors, print_json
from statewarden.config import (
    ALERTMANAGER_CREDENTIAL,
    APPRISE_CREDENTIAL,
    HEARTBEAT_CREDENTIAL,
    xdg_dir,
)


def _manifest() -> Path:
    """Where install records what it wrote: the default state folder, whatever the config
    says (a changed ``paths.state_dir`` must not lose track of installed units)."""
    return xdg_dir("XDG_STATE_HOME", "~/.local/state") / "statewarden" / inst.MANIFEST_NAME


@click.command("install")
@click.option("--enable", is_flag=True, help="Enable the unit (start it with the user manager).")
@click.option("--now", is_flag=True, help="Start (or restart, if its file changed) the unit now.")
@click.option(
    "--unit-dir",
    type=PATH,
    default=None,
    help="Where to write the units (default ~/.config/systemd/user).",
)
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
@click.option(
    "--force", is_flag=True, help="Replace units, man pages, completions install did not write."
)
@click.option(
    "--telegram-token-file",
    type=PATH,
    default=None,
    help="Give the units this file (mode 600) as the Telegram token credential"
    " (LoadCredential=telegram-token:PATH).",
)
@click.option(
    "--apprise-urls-file",
    type=PATH,
    default=None,
    help="Give the units this file (mode 600) of Apprise URLs as a credential"
    " (LoadCredential=apprise-urls:PATH;"
    " alerts.apprise.credential: apprise-urls).",
)
@click.option(
    "--heartbeat-url-file",
    type=PATH,
    default=None,
    help="Give the daemon's unit this file (mode 600) with the heartbeat push URL"
    " as a credential (LoadCredential=heartbeat-url:PATH;"
    " alerts.heartbeat.credential: heartbeat-url).",
)
@click.option(
    "--alertmanager-url-file",
    type=PATH,
    default=None,
    help="Give the units this file (mode 600) with an Alertmanager URL that carries"
    " a secret as a credential (LoadCredential=alertmanager-url:PATH;"
    " alerts.alertmanager.credential: alertmanager-url).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@handle_errors
def install(  # noqa: PLR0917 (one parameter per option, as click passes them)
    enable: bool,
    now: bool,
    unit_dir: Path | None,
    dry_run: bool,
    force: bool,
    telegram_token_file: Path | None,
    apprise_urls_file: Path | None,
    heartbeat_url_file: Path | None,
    alertmanager_url_file: Path | None,
    as_json: bool,
) -> None:
    """Write statewarden's systemd --user units for this installation; enable, start.

    Writes statewarden.service and statewarden-failed@.service for the installation this
    command runs from, reloads the user manager, and with --enable / --now enables and
    starts statewarden.service. Puts the man pages and the bash, zsh and fish completions
    in ~/.local/share ($XDG_DATA_HOME), unless the installation's own share/ has them.
    Running it again changes nothing that is already right.

    Example: statewardenctl install --enable --now
    """
    secrets = {
        APPRISE_CREDENTIAL: (apprise_urls_file, "Apprise URLs file"),
        HEARTBEAT_CREDENTIAL: (heartbeat_url_file, "heartbeat URL file"),
        ALERTMANAGER_CREDENTIAL: (alertmanager_url_file, "Alertmanager URL file"),
    }
    credentials = {
        name: inst.check_token_file(path, what) for name, (path, what) in secrets.items() if path
    }
    plan = inst.plan_install(
        unit_dir or inst.default_unit_dir(),
        _manifest(),
        enable=enable,
        now=now,
        force=force,
        token_file=inst.check_token_file(telegram_token_file) if telegram_token_file else None,
        credentials=credentials,
    )
    loaded = [*([inst.CREDENTIAL] if telegram_token_file else []), *credentials]
    how = [f"the units load credential {n}: {inst.CREDENTIALS[n]} reads it" for n in loaded]
    if dry_run:
        lines = [f"would {f.action} {f.path}" for f in plan.all_files if f.action != "unchanged"]
        lines += [f"{f.path} is up to date" for f in plan.all_files if f.action == "unchanged"]
        lines += [plan.data_note] if plan.data_note else []
        lines.append("would reload the user manager")
        if enable:
            lines.append(f"would enable {inst.UNIT}")
        if now:
            lines.append(f"would start {inst.UNIT}")
        lines += how
        if as_json:
            print_json({"dry_run": True, "bindir": str(plan.bindir), "changes": lines})
        else:
            click.echo(f"ExecStart={plan.bindir}/statewarden run")
            click.echo("\n".join(lines))
        return
    outcome = inst.apply_install(plan)
    outcome.notes += how
    if as_json:
        print_json({"bindir": str(plan.bindir), **outcome.to_json()})
        return
    click.echo(f"ExecStart={plan.bindir}/statewarden run")
    for line in outcome.changes + outcome.notes:
        click.echo(line)
    if not enable and not now:
        click.echo(
            "next: statewardenctl install --enable --now"
            f" (or systemctl --user enable --now {inst.UNIT})"
        )


@click.command("uninstall")
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@handle_errors
def uninstall(dry_run: bool, as_json: bool) -> None:
    """Stop and disable statewarden.service and remove exactly the files install wrote.

    State, config and Hermes' own units are left alone.

    Example: statewardenctl uninstall
    """
    outcome = inst.uninstall(_manifest(), dry_run=dry_run)
    if as_json:
        print_json({"dry_run": dry_run, **outcome.to_json()})
        return
    for line in outcome.changes + outcome.notes:
        click.echo(line)
