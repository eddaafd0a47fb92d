"""``statewardenctl``: one group whose commands live in their own modules.

A command's module (and everything it needs: apsw, dbus-fast, rich, YAML) is imported
only when that command runs, so ``statewardenctl --help`` and a quick command start in
a few tens of milliseconds. The one-line help of each command is written here, next to
its module; a test keeps it equal to the command's own.
"""

from __future__ import annotations

import importlib

import click

from statewarden import __version__
from statewarden.cli._group import CommandGroup

# name -> (module, attribute, one-line help), in the order --help lists them
COMMANDS: dict[str, tuple[str, str, str]] = {
    "status": (
        "statewarden.cli.status_cmd",
        "status",
        "Facts about each Hermes database, read without writing or locking it.",
    ),
    "holders": (
        "statewarden.cli.holders_cmd",
        "holders",
        "Every process holding each state.db: kind, unit, descriptors, locks, orphans.",
    ),
    "config": (
        "statewarden.cli.config_cmd",
        "config_group",
        "Validate or print the configuration.",
    ),
    "check": (
        "statewarden.cli.check_cmd",
        "check",
        "Check a state.db for damage, uncapped, on a private copy (the source is only read).",
    ),
    "verify": (
        "statewarden.cli.verify_cmd",
        "verify",
        "Ask the daemon to verify each database now (as on its schedule) and wait for it.",
    ),
    "recover": (
        "statewarden.cli.recover_cmd",
        "recover_cmd",
        "Recover SOURCE into a new, verified database at OUTPUT; the source is never changed.",
    ),
    "incidents": (
        "statewarden.cli.incidents_cmd",
        "incidents_group",
        "List open incidents (newest problems first by severity).",
    ),
    "alerts": (
        "statewarden.cli.alerts_cmd",
        "alerts_group",
        "The alert outbox (notifications not yet delivered) and each sink's health.",
    ),
    "silence": (
        "statewarden.cli.silence_cmd",
        "silence_group",
        "Mute the notifications of one incident kind for a while (incidents are still kept).",
    ),
    "maintenance": (
        "statewarden.cli.maintenance_cmd",
        "maintenance",
        "Stop every holder of a state.db, repair it, swap the new file in, restart Hermes.",
    ),
    "quarantine": (
        "statewarden.cli.quarantine_cmd",
        "quarantine_group",
        "The originals maintenance runs replaced, kept with their checksums.",
    ),
    "captures": (
        "statewarden.cli.captures_cmd",
        "captures",
        "What Hermes' retired WAL captures and pre-update backups hold that the live file lacks.",
    ),
    "snapshots": (
        "statewarden.cli.snapshots_cmd",
        "snapshots_group",
        "List verified snapshots (online backup copies that passed check), newest first.",
    ),
    "demo": (
        "statewarden.cli.demo_cmd",
        "demo",
        "Repair a phantom row in a temporary sandbox, step by step, and clean up.",
    ),
    "install": (
        "statewarden.cli.install_cmd",
        "install",
        "Write statewarden's systemd --user units for this installation; enable, start.",
    ),
    "uninstall": (
        "statewarden.cli.install_cmd",
        "uninstall",
        "Stop and disable statewarden.service and remove exactly the files install wrote.",
    ),
}


class LazyGroup(CommandGroup):
    """A group that imports a command's module only when that command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command

    def summaries(self, ctx: click.Context) -> list[tuple[str, str]]:
        """The command list from :data:`COMMANDS`, whole, importing nothing."""
        return [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]


@click.group(
    "statewardenctl", cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(__version__, prog_name="statewardenctl")
def main() -> None:
    """Inspect and repair Hermes Agent's state.db.

    Exit codes: 0 ok, 1 failed, 2 usage or config error, 3 data loss or base damage,
    4 unreadable database, 5 maintenance refused, 130 interrupted.
    """


if __name__ == "__main__":
    main()
