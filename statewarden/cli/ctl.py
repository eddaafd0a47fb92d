"""``statewardenctl``: status, config, and (in their own modules) the other commands."""

from __future__ import annotations

import click

from statewarden import __version__
from statewarden.cli.check_cmd import check
from statewarden.cli.config_cmd import config_group
from statewarden.cli.holders_cmd import holders
from statewarden.cli.incidents_cmd import incidents_group
from statewarden.cli.maintenance_cmd import maintenance
from statewarden.cli.quarantine_cmd import quarantine_group
from statewarden.cli.recover_cmd import recover_cmd
from statewarden.cli.snapshots_cmd import snapshots_group
from statewarden.cli.status_cmd import status


@click.group("statewardenctl", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="statewardenctl")
def main() -> None:
    """Inspect and repair Hermes Agent's state.db.

    Exit codes: 0 ok, 1 failed, 2 usage or config error, 3 data loss or base damage,
    4 unreadable database, 5 maintenance refused, 130 interrupted.
    """


main.add_command(status)
main.add_command(holders)
main.add_command(config_group)
main.add_command(check)
main.add_command(recover_cmd)
main.add_command(incidents_group)
main.add_command(maintenance)
main.add_command(quarantine_group)
main.add_command(snapshots_group)


if __name__ == "__main__":
    main()
