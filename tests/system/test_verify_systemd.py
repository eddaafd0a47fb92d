"""The proof, in a real user manager: silent damage is caught, and a repair finishes it.

A Hermes-like gateway (Hermes' own ``SessionDB``, ``tests/fake_hermes.py``) runs as a
unit and writes. While it is stopped a ``sessions`` row is stored twice (real bytes:
``duplicate_cell``, the primitive of ``lab.corruption.phantom_row``); it starts again and
goes on writing without a single error. The
daemon (short ``watch.verify_interval``) opens a ``corruption`` incident on its own and
alerts through the journald sink; ``statewardenctl maintenance --yes`` repairs it; then
no incident is open and no alert that tells the user to repair arrives, through a grace
period of scheduled verifications, a requested one, and an empty outbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.hermes_fixtures import SMALL, make_home

# The primitive of lab.corruption.phantom_row, applied in place to the live home's file.
from statewarden.demo.damage import duplicate_cell
from statewarden.holders.scan import HolderScanner
from statewarden.incidents.signals import KINDS, Found, Observation
from statewarden.watch import units as units_module
from statewarden.watch.units import UnitWatcher
from tests.support.daemon import DaemonProc
from tests.support.fake_hermes import install_fake_hermes
from tests.support.maintenance import exempt_comms, integrity, run_maintenance, session_ids
from tests.support.repo import REPO
from tests.support.systemd_harness import UserSystemd, unavailable_reason, user_systemd
from tests.support.waiting import wait_for

pytestmark = pytest.mark.systemd

WAIT_S = 120.0
GATEWAY = "hermes-gateway.service"
UNIT = """\
[Unit]
Description=Hermes gateway (statewarden verification test)

[Service]
Environment=HERMES_HOME={home}
Environment=FAKE_HERMES_WRITE_EVERY=0.2
ExecStart={bin}/hermes gateway run
Restart=no
KillMode=mixed
"""


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[UserSystemd]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with user_systemd(tmp_path / "manager") as m:
        yield m


def main_pid(manager: UserSystemd) -> int:
    r = manager.systemctl("show", "-p", "MainPID", "--value", GATEWAY)
    return int(r.stdout.strip() or 0)


def holds(db: Path, pid: int) -> bool:
    scan = HolderScanner([db], watch_opens=False).scan()[0]
    return pid != 0 and pid in {h.pid for h in scan.holders}


def alerts(manager: UserSystemd) -> list[dict[str, Any]]:
    """The journald sink's entries, oldest first."""
    manager.run("journalctl", "--flush")
    out = manager.run(
        "journalctl", "-o", "json", "--no-pager", "SYSLOG_IDENTIFIER=statewarden"
    ).stdout
    return [e for e in map(json.loads, out.splitlines()) if "STATEWARDEN_KIND" in e]


def write_config(path: Path, home: Path, interval: str) -> None:
    path.write_text(
        json.dumps(
            {
                "targets": [{"home": str(home), "gateway_unit": GATEWAY}],
                "watch": {"verify_interval": interval},
                "holders": {"exempt_comms": exempt_comms()},
                "maintenance": {"settle": "0.5s"},
                "alerts": {"group_wait": "300ms", "journald": {"enabled": True}},
            }
        )
    )


def test_a_phantom_row_planted_while_stopped_is_caught_and_repaired(
    manager: UserSystemd, tmp_path: Path
) -> None:
    """In a real user manager, a phantom row planted while the Hermes unit was stopped is found by
    the daemon's own verification (a corruption incident and its journal alert), and a repair stops
    the unit, repairs the file and resolves every incident."""
    home = make_home(tmp_path / "hermes", SMALL)
    db = home / "state.db"
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    config = tmp_path / "config.yaml"
    write_config(config, home, "1s")
    env = dict(
        os.environ,
        HERMES_HOME=str(home),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_RUNTIME_DIR=str(tmp_path / "run"),
        XDG_CONFIG_HOME=str(tmp_path / "cfg"),
        DBUS_SESSION_BUS_ADDRESS=manager.bus_address,
        STATEWARDEN_CONFIG=str(config),
    )
    env.pop("NOTIFY_SOCKET", None)
    # In the manager's mount namespace: its journal is the one the sink writes to.
    d = DaemonProc(env, prefix=("nsenter", "-t", str(manager.manager_pid), "-m"))
    try:
        d.wait_for_line("statewarden ready")

        def status() -> dict[str, Any]:
            result: dict[str, Any] = d.ctl_raw("status")
            return result

        def verified() -> dict[str, Any]:
            return status()["databases"][0]["verified"] or {}

        wait_for(lambda: status()["units"] == "watching 0 Hermes units", what="no unit yet")
        # The gateway appears: status follows it.
        manager.write_unit(GATEWAY, UNIT.format(home=home, bin=bin_dir))
        manager.daemon_reload()
        assert manager.systemctl("start", GATEWAY).returncode == 0
        wait_for(lambda: holds(db, main_pid(manager)), timeout_s=WAIT_S, what="the unit holds")
        wait_for(
            lambda: status()["units"] == "watching 1 Hermes unit",
            timeout_s=WAIT_S,
            what="status to follow the new unit",
        )
        wait_for(
            lambda: verified().get("result") == "none",
            timeout_s=WAIT_S,
            what="a healthy verification while the unit writes",
        )

        # Stopped: Hermes closed the database (the WAL folded in); one row stored twice.
        assert manager.systemctl("stop", GATEWAY).returncode == 0
        assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0
        duplicate_cell(db, "sessions", 2)
        assert manager.systemctl("start", GATEWAY).returncode == 0
        wait_for(lambda: holds(db, main_pid(manager)), timeout_s=WAIT_S, what="held again")

        # Found on the daemon's own schedule, no request, no log line.
        (inc,) = wait_for(
            lambda: d.incidents_of("corruption"), timeout_s=WAIT_S, what="the corruption incident"
        )
        assert inc["summary"].startswith("verification found base damage in state.db")
        assert any("1 phantom duplicate" in e for e in inc["evidence"])
        assert inc["evidence"][-1] == "next step: statewardenctl maintenance --profile default"
        assert verified()["result"] == "base"
        assert manager.systemctl("is-active", GATEWAY).stdout.strip() == "active"
        (fired,) = wait_for(
            lambda: [e for e in alerts(manager) if e["STATEWARDEN_KIND"] == "corruption"],
            timeout_s=WAIT_S,
            what="the corruption alert in the journal",
        )
        assert fired["STATEWARDEN_STATE"] == "firing"
        assert fired["MESSAGE_ID"] == KINDS["corruption"].message_id
        assert fired["PRIORITY"] == "2"

        # The schedule back to a day (SIGHUP) so that no verification copy is under way
        # when the repair scans for holders; then the repair.
        write_config(config, home, "1d")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_line("config reloaded")
        wait_for(lambda: not verified().get("running"), what="no verification running")
        proc = run_maintenance("--db", str(db), "--yes", "--json", env=env)
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert report["outcome"] == "repaired"
        assert report["units_stopped"] == [GATEWAY]
        run_id = report["run_id"]

        # Finished: every incident resolved by the run, nothing open.
        def resolved() -> bool:
            every = d.ctl("incidents", "--all")["incidents"]
            return any(i["kind"] == "corruption" and i["state"] == "resolved" for i in every)

        wait_for(resolved, timeout_s=WAIT_S, what="the corruption incident resolved")
        every = d.ctl("incidents", "--all")["incidents"]
        (done,) = [i for i in every if i["kind"] == "corruption"]
        assert done["resolution"] == f"repaired by maintenance run {run_id}"
        # Grace: a verification asked for (healthy now), the outbox empty, the mute over.
        r = subprocess.run(
            [sys.executable, "-m", "statewarden.cli.ctl", "verify", "--json"],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            check=False,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        assert [v["result"] for v in json.loads(r.stdout)["databases"]] == ["none"]
        wait_for(
            lambda: d.ctl("alerts")["maintenance"] == [],
            timeout_s=WAIT_S,
            what="the end of the maintenance mute",
        )
        wait_for(lambda: d.ctl("alerts")["outbox"] == [], timeout_s=WAIT_S, what="an empty outbox")
        assert d.ctl("incidents")["incidents"] == []
        entries = alerts(manager)
        gone = next(
            i
            for i, e in enumerate(entries)
            if e["STATEWARDEN_KIND"] == "corruption" and e["STATEWARDEN_STATE"] == "resolved"
        )
        after = [(e["STATEWARDEN_KIND"], e["STATEWARDEN_STATE"]) for e in entries[gone + 1 :]]
        assert [a for a in after if a[1] == "firing" and a[0] != "maintenance_repaired"] == []
        ids = session_ids(db)
        assert len(ids) == len(set(ids))
        assert integrity(db) == "ok"
        # The gateway goes away (stopped, its unit file removed): status follows.
        assert manager.systemctl("stop", GATEWAY).returncode == 0
        (manager.unit_dir / GATEWAY).unlink()
        manager.daemon_reload()
        wait_for(
            lambda: status()["units"] == "watching 0 Hermes units",
            timeout_s=WAIT_S,
            what="status to follow the unit going away",
        )
    finally:
        d.stop()


def test_the_unit_watcher_outlives_a_quiet_period(
    manager: UserSystemd, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changes after a quiet period (no change for CHECK_EVERY_S) are still seen, and the
    units listed follow a unit that comes and goes."""
    monkeypatch.setattr(units_module, "CHECK_EVERY_S", 0.2)
    monkeypatch.setattr(units_module, "RELIST_AFTER_S", 0.2)
    found: list[Found] = []
    watcher = UnitWatcher(found.append, lambda _u: "/h/state.db", address=manager.bus_address)
    manager.write_unit(GATEWAY, "[Service]\nExecStart=/bin/sleep 300\n")
    manager.daemon_reload()

    def states() -> list[str]:
        return [f.text for f in found if isinstance(f, Observation) and f.what == "unit_state"]

    async def scenario() -> None:
        task = asyncio.create_task(watcher.run())
        try:
            await async_wait(lambda: watcher.status == "watching 0 Hermes units")
            await asyncio.sleep(1.0)  # several quiet periods
            assert not task.done()
            assert manager.systemctl("start", GATEWAY).returncode == 0
            await async_wait(lambda: f"{GATEWAY} is active (running)" in states())
            await async_wait(lambda: watcher.status == "watching 1 Hermes unit")
            await asyncio.sleep(1.0)
            assert manager.systemctl("stop", GATEWAY).returncode == 0
            await async_wait(lambda: watcher.status == "watching 0 Hermes units")
            assert f"{GATEWAY} is inactive (dead)" in states()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(scenario())


async def async_wait(cond: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "gave up waiting"
        await asyncio.sleep(0.05)
