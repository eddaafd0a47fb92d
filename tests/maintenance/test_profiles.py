"""One gateway for every profile (current Hermes): a stop for one profile's repair
reaches the others, and the plan says so. In a real user manager, one gateway unit
holds two profiles' databases (two real Hermes writers in its cgroup)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lab.corruption import phantom_row
from lab.hermes_fixtures import SMALL, make_home
from tests.support.fake_hermes import install_fake_hermes
from tests.support.maintenance import exempt_comms, run_maintenance
from tests.support.systemd_harness import unavailable_reason, user_systemd
from tests.support.units import holders, main_pid
from tests.support.waiting import wait_for

GATEWAY = "hermes-gateway.service"
UNIT = """\
[Unit]
Description=One Hermes gateway for every profile (statewarden test)

[Service]
Environment=FAKE_HERMES_WRITE_EVERY=0.2
ExecStart=/bin/sh -c 'HERMES_HOME={a} {bin}/hermes gateway run & HERMES_HOME={b} {bin}/hermes gateway run & wait'
Restart=no
KillMode=mixed
"""


@pytest.mark.systemd
def test_the_plan_names_every_profile_the_stop_reaches(tmp_path: Path) -> None:
    """Repairing profile default stops the one gateway; the plan names profile work as
    reached by the stop (its database held by that unit), in text and JSON; after the
    run the unit is active again and holds both databases."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    case = phantom_row(tmp_path / "hermes", SMALL)
    work = make_home(tmp_path / "hermes" / "profiles" / "work", SMALL)
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "targets": [
                    {"home": str(case.db.parent), "name": "default", "gateway_unit": GATEWAY},
                    {"home": str(work), "name": "work"},
                ],
                "holders": {"exempt_comms": exempt_comms()},
                "maintenance": {"settle": "0.5s"},
            }
        )
    )
    with user_systemd(tmp_path / "manager") as manager:
        manager.write_unit(GATEWAY, UNIT.format(a=case.db.parent, b=work, bin=bin_dir))
        manager.daemon_reload()
        assert manager.systemctl("start", GATEWAY).returncode == 0
        wait_for(
            lambda: holders(case.db) and holders(work / "state.db"), "the gateway to hold both"
        )
        env = {
            **os.environ,
            "STATEWARDEN_CONFIG": str(config),
            "DBUS_SESSION_BUS_ADDRESS": manager.bus_address,
        }
        dry = run_maintenance("--db", str(case.db), "--dry-run", env=env)
        assert dry.returncode == 0, dry.stderr
        assert (
            f"this stop also stops Hermes for profile work ({work / 'state.db'}):"
            f" {GATEWAY} holds its database" in dry.stderr  # the plan goes to stderr
        ), dry.stderr
        proc = run_maintenance("--db", str(case.db), "--yes", "--json", env=env)
        assert proc.returncode == 0, proc.stderr
        rep = json.loads(proc.stdout)
        assert rep["outcome"] == "repaired"
        (affected,) = rep["plan"]["affected_profiles"]
        assert (affected["profile"], affected["unit"]) == ("work", GATEWAY)
        assert manager.systemctl("is-active", GATEWAY).stdout.strip() == "active"
        wait_for(
            lambda: main_pid(manager, GATEWAY) and holders(work / "state.db"),
            "the gateway to hold profile work's database again",
        )
