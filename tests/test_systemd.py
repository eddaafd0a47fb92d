"""The systemd user manager client: a real bus without systemd, and a real private manager."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, holding, make_home
from statewarden.errors import SystemdCallFailed, SystemdUnavailable
from statewarden.holders.scan import HolderScan, HolderScanner
from statewarden.holders.units import annotate
from statewarden.systemd import (
    JobResult,
    UnitChange,
    UnitInfo,
    UserManager,
    call_sync,
    list_units_sync,
    session_bus_address,
    start_unit_sync,
    stop_unit_sync,
    unit_name_from_path,
)
from tests.support.cli import run_ctl
from tests.support.fake_hermes import install_fake_hermes
from tests.support.privileges import SETPRIV
from tests.support.repo import REPO
from tests.support.systemd_harness import UserSystemd, unavailable_reason, user_systemd
from tests.support.waiting import WAIT_S, wait_for

FALLBACK = "holders are still found through /proc"
GATEWAY = "hermes-gateway.service"
DASHBOARD = "hermes-dashboard.service"


def unit_info(name: str, address: str) -> UnitInfo:
    """The manager's facts about a unit it knows."""
    info = call_sync(lambda m: m.unit(name), address)
    assert info is not None, name
    return info


@pytest.fixture
def plain_bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real session dbus-daemon with no systemd on it; yields its address."""
    if shutil.which("dbus-daemon") is None:
        pytest.skip("dbus-daemon is not installed; packaging/setup-dev.sh installs dbus")
    folder = Path(tempfile.mkdtemp(prefix="statewarden-bus-"))
    folder.chmod(0o755)
    sock = folder / "bus"
    proc = subprocess.Popen(
        [
            "dbus-daemon",
            "--session",
            "--nofork",
            "--print-address=1",
            f"--address=unix:path={sock}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        yield f"unix:path={sock}"
    finally:
        proc.terminate()
        proc.wait(timeout=WAIT_S)
        if proc.stdout:
            proc.stdout.close()
        shutil.rmtree(folder, ignore_errors=True)


class TestUnitPaths:
    def test_unescape(self) -> None:
        """systemd's object path escaping is undone (_2d is '-', _2e is '.', _40 is '@')."""
        assert (
            unit_name_from_path("/org/freedesktop/systemd1/unit/hermes_2dgateway_2eservice")
            == GATEWAY
        )
        assert (
            unit_name_from_path("/org/freedesktop/systemd1/unit/user_401000_2eservice")
            == "user@1000.service"
        )


class TestNoBus:
    def test_no_address_at_all(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Neither $DBUS_SESSION_BUS_ADDRESS nor $XDG_RUNTIME_DIR/bus: one line that says so."""
        monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
        with pytest.raises(SystemdUnavailable) as err:
            session_bus_address()
        assert str(err.value) == (
            "systemd user manager not reachable: no session bus ($DBUS_SESSION_BUS_ADDRESS is"
            f" unset and $XDG_RUNTIME_DIR/bus does not exist); {FALLBACK}"
        )

    def test_runtime_dir_bus_is_used(self, tmp_path: Path) -> None:
        """Without $DBUS_SESSION_BUS_ADDRESS, $XDG_RUNTIME_DIR/bus is the user bus."""
        (tmp_path / "bus").touch()
        assert (
            session_bus_address({"XDG_RUNTIME_DIR": str(tmp_path)}) == f"unix:path={tmp_path}/bus"
        )

    def test_socket_missing(self, tmp_path: Path) -> None:
        """A bus address naming no socket: typed error, the OS reason, no traceback."""
        address = f"unix:path={tmp_path}/nobus"
        with pytest.raises(SystemdUnavailable) as err:
            list_units_sync(address=address)
        assert str(err.value) == (
            f"systemd user manager not reachable: cannot connect to {address}"
            f" (No such file or directory); {FALLBACK}"
        )

    def test_bad_address(self) -> None:
        """An address with an unknown transport is reported, not raised raw."""
        with pytest.raises(
            SystemdUnavailable,
            match=r"cannot connect to bogus:x=1 \(got unknown address transport: bogus\)",
        ):
            list_units_sync(address="bogus:x=1")


@pytest.mark.process
class TestBusWithoutSystemd:
    def test_no_systemd_on_the_bus(self, plain_bus: str) -> None:
        """A live bus where nothing owns org.freedesktop.systemd1 (and none is activated)."""
        with pytest.raises(SystemdUnavailable) as err:
            stop_unit_sync(GATEWAY, address=plain_bus)
        assert str(err.value) == (
            f"systemd user manager not reachable: no systemd on the bus at {plain_bus}; {FALLBACK}"
        )

    def test_other_uid_is_refused(self, plain_bus: str) -> None:
        """Another uid's session bus refuses us: 'access denied', one line, exit 0 from /proc."""
        if os.geteuid() != 0:
            pytest.skip("needs root to connect as a second uid (setpriv); run the suite as root")
        code = (
            "import sys; from statewarden.systemd import list_units_sync;"
            " from statewarden.errors import SystemdUnavailable\n"
            "try:\n    list_units_sync(address=sys.argv[1])\n"
            "except SystemdUnavailable as e:\n    print(e)\n"
        )
        proc = subprocess.run(
            [
                *SETPRIV,
                sys.executable,
                "-c",
                code,
                plain_bus,
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
        )
        assert proc.stdout == (
            f"systemd user manager not reachable: access denied by the bus at {plain_bus}"
            f" (it closed the connection while authenticating uid 65534); {FALLBACK}\n"
        ), proc.stderr

    def test_cli_keeps_working_through_proc(
        self, plain_bus: str, hermes_home: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`holders` still lists holders from /proc and prints why systemd could not help."""
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", plain_bus)
        with holding(hermes_home) as w:
            result = run_ctl("holders")
            data = json.loads(run_ctl("holders", "--json").stdout)
        assert result.exit_code in (0, 1)
        assert any(line.startswith(f"{w.pid} ") for line in result.stdout.splitlines())
        note = (
            f"systemd user manager not reachable: no systemd on the bus at {plain_bus}; {FALLBACK}"
        )
        assert result.stdout.splitlines()[-1] == note
        assert data["systemd"] == note
        assert w.pid in {h["pid"] for h in data["holders"]}


# -- a real private systemd --user ------------------------------------------------------

GATEWAY_UNIT = """\
[Unit]
Description=Hermes gateway (statewarden test)

[Service]
Environment=HERMES_HOME={home}
Environment=FAKE_HERMES_WRITE_EVERY=0.2
ExecStart={bin}/hermes gateway run
Restart=always
RestartSec=1
KillMode=mixed
"""
DASHBOARD_UNIT = """\
[Unit]
Description=Hermes dashboard (statewarden test)

[Service]
Environment=HERMES_HOME={home}
Environment=FAKE_HERMES_WRITE_EVERY=0.3
ExecStart={bin}/hermes dashboard
"""
FAILING_UNIT = """\
[Service]
Type=oneshot
ExecStart=/bin/false
"""


class Setup:
    def __init__(self, manager: UserSystemd, home: Path) -> None:
        self.manager = manager
        self.home = home
        self.db = home / "state.db"
        self.address = manager.bus_address

    def scan(self) -> HolderScan:
        return HolderScanner([self.db]).scan()[0]

    def unit(self, name: str) -> UnitInfo | None:
        return call_sync(lambda m: m.unit(name), self.address)

    def main_pid(self, name: str) -> int:
        return unit_info(name, self.address).main_pid

    def restarts(self, name: str) -> int:
        return unit_info(name, self.address).n_restarts

    def holding_pids(self) -> set[int]:
        return {h.pid for h in self.scan().holders}

    def wait_held_by_units(self) -> None:
        """Both units run and each main process holds the database."""

        def ready() -> bool:
            pids = {self.main_pid(GATEWAY), self.main_pid(DASHBOARD)}
            return 0 not in pids and pids <= self.holding_pids()

        wait_for(ready, "both units to hold state.db")


@pytest.fixture(scope="module")
def systemd_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("user-systemd")
    home = make_home(base / "hermes", TINY)
    bin_dir = base / "bin"
    install_fake_hermes(bin_dir)
    with user_systemd(base / "manager") as manager:
        manager.write_unit(GATEWAY, GATEWAY_UNIT.format(home=home, bin=bin_dir))
        manager.write_unit(DASHBOARD, DASHBOARD_UNIT.format(home=home, bin=bin_dir))
        manager.write_unit("hermes-broken.service", FAILING_UNIT)
        manager.daemon_reload()
        for unit in (GATEWAY, DASHBOARD):
            r = manager.systemctl("start", unit)
            assert r.returncode == 0, r.stderr
        setup = Setup(manager, home)
        setup.wait_held_by_units()
        yield setup


@pytest.fixture
def units(systemd_setup: Setup) -> Iterator[Setup]:
    """Both units running and holding the database before and after each test."""
    systemd_setup.wait_held_by_units()
    yield systemd_setup
    for unit in (GATEWAY, DASHBOARD):
        systemd_setup.manager.systemctl("start", unit)
    systemd_setup.wait_held_by_units()


@pytest.mark.systemd
class TestListUnits:
    def test_units_by_default_patterns(self, units: Setup) -> None:
        """Both Hermes units are listed, running, with MainPID, ControlGroup and NRestarts."""
        found = {u.name: u for u in list_units_sync(address=units.address)}
        assert set(found) == {GATEWAY, DASHBOARD}
        for name in (GATEWAY, DASHBOARD):
            u = found[name]
            assert (u.load_state, u.active_state, u.sub_state) == ("loaded", "active", "running")
            assert u.main_pid > 0
            assert u.control_group == f"/user.slice/user-0.slice/user@0.service/app.slice/{name}"

    def test_patterns_select(self, units: Setup) -> None:
        """Patterns are shell globs on unit names."""
        names = [u.name for u in list_units_sync(["hermes-dash*"], address=units.address)]
        assert names == [DASHBOARD]


@pytest.mark.systemd
class TestHoldersAndUnits:
    def test_holders_are_mapped_to_their_units(self, units: Setup) -> None:
        """Each unit's main process is a holder; its cgroup names the unit, GetUnitByPID agrees."""
        result = units.scan()
        by_pid = {h.pid: h for h in result.holders}
        for name, kind in ((GATEWAY, "gateway"), (DASHBOARD, "dashboard")):
            pid = units.main_pid(name)
            h = by_pid[pid]
            assert (h.unit, h.kind) == (name, kind)
            assert h.parents[0]["pid"] == units.manager.manager_pid
            assert h.parents[0]["user_manager"] is True
            assert not h.orphan
        asyncio.run(_annotate(units.address, result))
        for name in (GATEWAY, DASHBOARD):
            h = by_pid[units.main_pid(name)]
            assert h.unit == name
            assert h.main_pid_of_unit is True
            assert h.orphan is False

    def test_unit_by_pid(self, units: Setup) -> None:
        """GetUnitByPID names the unit of a main process, and None for a process outside."""
        pid = units.main_pid(GATEWAY)
        assert call_sync(lambda m: m.unit_by_pid(pid), units.address) == GATEWAY
        assert call_sync(lambda m: m.unit_by_pid(os.getpid()), units.address) is None

    def test_cli_shows_units_from_the_manager(
        self, units: Setup, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With the bus reachable, `holders --json` has no systemd note and the units set."""
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", units.address)
        data = json.loads(run_ctl("holders", "--db", str(units.db), "--json").stdout)
        assert data["systemd"] is None
        assert [(u["name"], u["active_state"], u["sub_state"]) for u in data["units"]] == [
            (DASHBOARD, "active", "running"),
            (GATEWAY, "active", "running"),
        ]
        text = run_ctl("holders", "--db", str(units.db)).stdout.splitlines()
        assert text[text.index("systemd user units:") + 1 :] == [
            f"  {DASHBOARD}  active/running  main pid {units.main_pid(DASHBOARD)}  restarts 0",
            f"  {GATEWAY}    active/running  main pid {units.main_pid(GATEWAY)}  restarts {units.restarts(GATEWAY)}",
        ]
        units_of = {
            h["pid"]: (h["unit"], h["kind"], h["main_pid_of_unit"]) for h in data["holders"]
        }
        assert units_of[units.main_pid(GATEWAY)] == (GATEWAY, "gateway", True)
        assert units_of[units.main_pid(DASHBOARD)] == (DASHBOARD, "dashboard", True)

    def test_journal_of_a_unit(self, units: Setup) -> None:
        """The private journald has the unit's stdout under _SYSTEMD_USER_UNIT."""
        assert "ready" in units.manager.journal(GATEWAY).splitlines()


async def _annotate(address: str, result: HolderScan) -> None:
    async with UserManager(address) as m:
        await annotate(m, [result])


@pytest.mark.systemd
class TestStopStart:
    def test_stop_and_start_with_job_results(self, units: Setup) -> None:
        """Stopping both units ends their holders; starting them brings new holders back."""
        before = {units.main_pid(GATEWAY), units.main_pid(DASHBOARD)}
        stopped = [stop_unit_sync(u, address=units.address) for u in (GATEWAY, DASHBOARD)]
        assert [(r.action, r.result, r.gave_up) for r in stopped] == [("stop", "done", False)] * 2
        assert not before & units.holding_pids()
        assert units.scan().holders == []
        started = [start_unit_sync(u, address=units.address) for u in (GATEWAY, DASHBOARD)]
        assert [(r.action, r.result) for r in started] == [("start", "done")] * 2
        units.wait_held_by_units()
        after = {units.main_pid(GATEWAY), units.main_pid(DASHBOARD)}
        assert not after & before
        assert after == units.holding_pids()

    def test_stop_of_unknown_unit_is_a_call_error(self, units: Setup) -> None:
        """StopUnit of a unit systemd does not know fails with its D-Bus error, typed."""
        with pytest.raises(SystemdCallFailed) as err:
            stop_unit_sync("hermes-nope.service", address=units.address)
        assert err.value.error_name == "org.freedesktop.systemd1.NoSuchUnit"
        assert str(err.value) == (
            "systemd StopUnit failed: org.freedesktop.systemd1.NoSuchUnit:"
            " Unit hermes-nope.service not loaded."
        )

    def test_failed_start_reports_failed(self, units: Setup) -> None:
        """A unit whose start fails ends its job with result 'failed'."""
        result = start_unit_sync("hermes-broken.service", address=units.address)
        assert isinstance(result, JobResult)
        assert (result.result, result.ok) == ("failed", False)

    def test_our_wait_can_give_up(self, units: Setup) -> None:
        """With a zero timeout the wait gives up at once: result 'timeout', gave_up true."""
        result = stop_unit_sync(DASHBOARD, address=units.address, timeout_s=0)
        assert (result.result, result.gave_up) == ("timeout", True)
        wait_for(lambda: units.main_pid(DASHBOARD) == 0, "the dashboard to stop anyway")

    def test_crash_is_restarted_and_counted(self, units: Setup) -> None:
        """A killed gateway comes back (Restart=always) with NRestarts + 1 and a new holder."""
        old_pid = units.main_pid(GATEWAY)
        restarts = unit_info(GATEWAY, units.address).n_restarts
        os.kill(old_pid, signal.SIGKILL)
        wait_for(lambda: units.main_pid(GATEWAY) not in (0, old_pid), "the gateway's restart")
        units.wait_held_by_units()
        info = unit_info(GATEWAY, units.address)
        assert info.n_restarts == restarts + 1
        assert old_pid not in units.holding_pids()


@pytest.mark.systemd
class TestWatch:
    def test_properties_changed_on_stop(self, units: Setup) -> None:
        """watch_units yields the dashboard's ActiveState changes while it is stopped."""

        async def go() -> list[UnitChange]:
            async with UserManager(units.address) as m:
                seen: list[UnitChange] = []
                stream = await m.watch_units(["hermes-dashboard*"])
                async with UserManager(units.address) as other:
                    job = await other.stop_unit(DASHBOARD)
                    assert job.result == "done"
                while not any(c.changed.get("ActiveState") == "inactive" for c in seen):
                    seen.append(await asyncio.wait_for(anext(stream), WAIT_S))
                return seen

        seen = asyncio.run(go())
        assert {c.unit for c in seen} == {DASHBOARD}
        states = [c.changed["ActiveState"] for c in seen if "ActiveState" in c.changed]
        assert states[-1] == "inactive"
