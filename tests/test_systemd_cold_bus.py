"""The systemd user manager when the user's bus has not been activated yet.

The field's case: a headless server with lingering, or the first client after a login.
The user manager runs and its ``dbus.socket`` listens on ``$XDG_RUNTIME_DIR/bus``, but no
dbus-daemon runs yet: the first client to connect starts it (socket activation), and
the manager connects to the new bus and takes ``org.freedesktop.systemd1`` only a
moment later. A client that asks for systemd at once, as statewarden was the first to,
finds no owner ("no systemd on the bus"). Each test here starts a real private manager
(``tests/systemd_harness.py``) exactly in that state: started as every other test starts
it, but ``dbus.service`` is never started; ``systemctl --user`` (through the manager's
private socket) leaves the bus asleep, as it does in the field.

In a module of its own: the harness lock is taken once per manager, and the other
modules keep a module-wide manager up while their tests run.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.hermes_fixtures import SMALL, TINY, make_home
from statewarden.cli import install as inst
from statewarden.systemd import UserManager
from tests.support.fake_hermes import install_fake_hermes
from tests.support.install import Installed
from tests.support.maintenance import exempt_comms, run_maintenance
from tests.support.systemd_harness import UserSystemd, unavailable_reason, user_systemd
from tests.support.units import GATEWAY, UNIT, holders, main_pid
from tests.support.waiting import WAIT_S, wait_for


@pytest.fixture
def cold_manager(tmp_path: Path) -> Iterator[UserSystemd]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with user_systemd(tmp_path / "manager", activate_bus=False) as manager:
        manager.write_unit("sleeper.service", "[Service]\nExecStart=/bin/sleep 1000\n")
        manager.daemon_reload()
        assert manager.systemctl("is-active", "dbus.service").stdout.strip() == "inactive"
        yield manager


def bus_state(manager: UserSystemd) -> str:
    return manager.systemctl("is-active", "dbus.service").stdout.strip()


@pytest.mark.systemd
class TestUserBusNotActivatedYet:
    def test_the_private_socket_is_used_first(
        self, cold_manager: UserSystemd, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With $XDG_RUNTIME_DIR set, the manager is reached through its private socket
        (peer-to-peer, as systemctl --user does): jobs and their JobRemoved signals work,
        and the bus is never woken."""
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(cold_manager.runtime_dir))
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", cold_manager.bus_address)

        async def go() -> tuple[bool, str, list[str]]:
            async with UserManager() as m:
                started = await m.start_unit("sleeper.service", timeout_s=WAIT_S)
                stopped = await m.stop_unit("sleeper.service", timeout_s=WAIT_S)
                return m.peer, str(m.address), [started.result, stopped.result]

        peer, address, results = asyncio.run(go())
        assert peer
        assert address == f"unix:path={cold_manager.runtime_dir}/systemd/private"
        assert results == ["done", "done"]
        assert bus_state(cold_manager) == "inactive"

    def test_unit_changes_are_seen_through_the_private_socket(
        self, cold_manager: UserSystemd, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The daemon's unit watch over the private socket (no bus daemon, so no match
        rules): the manager's PropertiesChanged signals still arrive."""
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(cold_manager.runtime_dir))
        assert cold_manager.systemctl("start", "sleeper.service").returncode == 0

        async def go() -> tuple[bool, list[str]]:
            async with UserManager() as m:
                stream = await m.watch_units(["sleeper*"])
                async with UserManager() as other:
                    assert (await other.stop_unit("sleeper.service")).result == "done"
                states: list[str] = []
                while "inactive" not in states:
                    change = await asyncio.wait_for(anext(stream), WAIT_S)
                    if "ActiveState" in change.changed:
                        states.append(str(change.changed["ActiveState"]))
                return m.peer, states

        peer, states = asyncio.run(go())
        assert peer
        assert states[-1] == "inactive"
        assert bus_state(cold_manager) == "inactive"

    def test_on_the_bus_the_name_is_waited_for(self, cold_manager: UserSystemd) -> None:
        """Only the bus (no private socket in reach): the first connection starts the
        bus daemon, and the client waits for the manager to take its name instead of
        saying "no systemd on the bus"."""
        assert bus_state(cold_manager) == "inactive"

        async def go() -> tuple[bool, str]:
            async with UserManager(cold_manager.bus_address) as m:
                job = await m.start_unit("sleeper.service", timeout_s=WAIT_S)
                await m.stop_unit("sleeper.service", timeout_s=WAIT_S)
                return m.peer, job.result

        assert asyncio.run(go()) == (False, "done")
        assert bus_state(cold_manager) == "active"


@pytest.mark.systemd
def test_enable_now_on_a_user_bus_not_activated_yet() -> None:
    """The user's bus not started yet (dbus.socket listening, no dbus-daemon: a headless
    server with lingering): ``install --enable --now`` was the first to connect, found no
    ``org.freedesktop.systemd1`` on the bus it had just woken, and failed with "no systemd
    on the bus" (2 of 5 fresh installs). It now reaches the manager through its private
    socket, as ``systemctl --user`` does, and leaves the bus asleep."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    base = Path(tempfile.mkdtemp(prefix="statewarden-install-", dir="/tmp"))
    base.chmod(0o755)
    try:
        hermes = make_home(base / "hermes", TINY)
        with user_systemd(base / "manager", activate_bus=False) as manager:
            state = manager.home / ".local" / "state"
            r = manager.systemctl(
                "set-environment",
                f"HOME={manager.home}",
                f"XDG_STATE_HOME={state}",
                f"XDG_CONFIG_HOME={manager.home / '.config'}",
                f"HERMES_HOME={hermes}",
            )
            assert r.returncode == 0, r.stderr
            env = {**manager.env(), "XDG_STATE_HOME": str(state), "HERMES_HOME": str(hermes)}
            installed = Installed(manager, env)
            done = installed.ctl("install", "--enable", "--now")
            assert done.exit_code == 0, done.stdout + done.stderr
            installed.wait_running()
            assert manager.systemctl("is-enabled", inst.UNIT).stdout.strip() == "enabled"
            assert manager.systemctl("is-active", "dbus.service").stdout.strip() == "inactive"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.systemd
def test_units_are_stopped_when_the_user_bus_is_not_activated_yet(tmp_path: Path) -> None:
    """The user's bus not started yet (dbus.socket listening, no dbus-daemon): the run
    was the first to connect and always failed to reach the manager ("no systemd on the
    bus"), so the units holding the database could not be stopped through it. It now
    reaches the manager through its private socket, as ``systemctl --user`` does: the
    unit is stopped and started again with a job wait, and the bus is left asleep."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    db = make_home(tmp_path / "hermes", SMALL) / "state.db"
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps({"holders": {"exempt_comms": exempt_comms()}, "maintenance": {"settle": "0.5s"}})
    )
    with user_systemd(tmp_path / "manager", activate_bus=False) as manager:
        manager.write_unit(
            GATEWAY, UNIT.format(home=db.parent, bin=bin_dir, what="gateway run", restart="always")
        )
        manager.daemon_reload()
        assert manager.systemctl("start", GATEWAY).returncode == 0
        wait_for(lambda: main_pid(manager, GATEWAY) in holders(db), "the unit to hold")
        before = main_pid(manager, GATEWAY)
        env = {**manager.env(), "STATEWARDEN_CONFIG": str(config)}
        proc = run_maintenance(
            "--db", str(db), "--action", "checkpoint", "--yes", "--json", env=env
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        rep = json.loads(proc.stdout)
        assert rep["outcome"] == "checkpointed"
        assert rep["units_stopped"] == [GATEWAY]
        assert [u["result"] for u in rep["units_started"]] == ["done"]
        assert rep["start_again"] == []
        assert main_pid(manager, GATEWAY) not in (0, before)
        assert manager.systemctl("is-active", "dbus.service").stdout.strip() == "inactive"
