"""Hermes as systemd --user units (gateway, dashboard) holding a database, for the tests
of maintenance with a real user manager."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.corruption import phantom_row
from lab.hermes_fixtures import SMALL
from statewarden.holders.scan import HolderScanner
from tests.support.fake_hermes import install_fake_hermes
from tests.support.maintenance import session_ids
from tests.support.systemd_harness import UserSystemd, unavailable_reason, user_systemd
from tests.support.waiting import wait_for

GATEWAY = "hermes-gateway.service"
DASHBOARD = "hermes-dashboard.service"
UNIT = """\
[Unit]
Description=Hermes {what} (statewarden maintenance test)

[Service]
Environment=HERMES_HOME={home}
Environment=FAKE_HERMES_WRITE_EVERY=0.2
ExecStart={bin}/hermes {what}
Restart={restart}
RestartSec=1
KillMode=mixed
"""


def holders(db: Path) -> set[int]:
    return {h.pid for h in HolderScanner([db], watch_opens=False).scan()[0].holders}


def main_pid(manager: UserSystemd, unit: str) -> int:
    r = manager.systemctl("show", "-p", "MainPID", "--value", unit)
    return int(r.stdout.strip() or 0)


@pytest.fixture
def units(tmp_path: Path) -> Iterator[tuple[UserSystemd, Path, list[str]]]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    case = phantom_row(tmp_path / "hermes", SMALL)
    distinct = sorted(set(session_ids(case.db)))
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    with user_systemd(tmp_path / "manager") as manager:
        for name, what, restart in (
            (GATEWAY, "gateway run", "always"),
            (DASHBOARD, "dashboard", "no"),
        ):
            manager.write_unit(
                name, UNIT.format(home=case.db.parent, bin=bin_dir, what=what, restart=restart)
            )
        manager.daemon_reload()
        for name in (GATEWAY, DASHBOARD):
            r = manager.systemctl("start", name)
            assert r.returncode == 0, r.stderr
        wait_for(
            lambda: (
                {main_pid(manager, GATEWAY), main_pid(manager, DASHBOARD)} <= holders(case.db)
                and 0 not in {main_pid(manager, GATEWAY)}
            ),
            "units to hold",
        )
        yield manager, case.db, distinct
