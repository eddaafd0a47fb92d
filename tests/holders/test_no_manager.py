"""``statewardenctl holders`` as typed where no systemd user manager can answer.

The D-Bus client (dbus-fast, asyncio) cost the whole command more CPU time than
``fuser`` spends, only to find that nothing listens. Invariant: the client is imported
only when a manager may answer; where none can, the command says the same one line the
client would have said, and still lists the holders it found through ``/proc``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, holding, make_home
from statewarden.errors import SystemdUnavailable
from statewarden.manager_socket import unreachable_reason
from statewarden.systemd import list_units_sync
from tests.support.cli import installed_ctl_imports
from tests.support.waiting import WAIT_S

REPO = Path(__file__).resolve().parents[2]
# What only talking D-Bus needs: none of it may load where no manager can answer.
CLIENT_MODULES = frozenset({"statewarden.systemd", "dbus_fast", "asyncio", "structlog.dev"})
# The client's own answer, in a process of the same environment as the command's.
CLIENT_SAYS = (
    "from statewarden.errors import SystemdUnavailable\n"
    "from statewarden.systemd import list_units_sync\n"
    "try:\n    list_units_sync()\nexcept SystemdUnavailable as e:\n    print(e)\n"
)


def plain_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The command's environment: no bus, no runtime folder, no config; ``extra`` added."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "STATEWARDEN_CONFIG")
    }
    env.update(HOME=str(tmp), XDG_CONFIG_HOME=str(tmp / "config"), **extra)
    return env


def holders_as_typed(
    db: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """The installed ``statewardenctl holders --db DB`` (no --no-systemd), a whole process;
    with the modules it imported."""
    return installed_ctl_imports("holders", "--db", str(db), env=env)


def client_says(env: dict[str, str]) -> str:
    """The line the D-Bus client gives when it cannot reach a manager in ``env``."""
    proc = subprocess.run(
        [sys.executable, "-c", CLIENT_SAYS],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
        env=env,
    )
    return proc.stdout.strip()


def dead_socket(path: Path) -> Path:
    """A Unix socket file nobody listens on (its server gone): connecting is refused."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
    return path


@pytest.fixture
def folder() -> Iterator[Path]:
    """A short private folder (a Unix socket path must fit in 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="sw-nomgr-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def no_manager_envs(folder: Path) -> dict[str, dict[str, str]]:
    """Each way a user's environment can name no manager that answers."""
    (folder / "run").mkdir()
    (folder / "notadir").write_text("")
    return {
        "nothing named": plain_env(folder),
        "an empty runtime folder": plain_env(folder, XDG_RUNTIME_DIR=str(folder / "run")),
        "a bus that is not there": plain_env(
            folder, DBUS_SESSION_BUS_ADDRESS=f"unix:path={folder}/gone/bus"
        ),
        "a bus socket nobody listens on": plain_env(
            folder, DBUS_SESSION_BUS_ADDRESS=f"unix:path={dead_socket(folder / 'bus')}"
        ),
        "a bus under a file": plain_env(
            folder, DBUS_SESSION_BUS_ADDRESS=f"unix:path={folder}/notadir/bus"
        ),
    }


def test_holders_without_a_manager_imports_no_d_bus_client(folder: Path) -> None:
    """In every environment with no manager to answer, the whole command lists the real
    writer, ends with the line the D-Bus client itself gives there, and imports neither
    the client, dbus-fast, asyncio nor structlog's console renderer."""
    home = make_home(folder / "hermes", TINY)
    with holding(home) as writer:
        for case, env in no_manager_envs(folder).items():
            proc, modules = holders_as_typed(home / "state.db", env)
            assert proc.returncode in (0, 1), (case, proc.stdout, proc.stderr[-2000:])
            lines = proc.stdout.splitlines()
            assert any(line.startswith(f"{writer.pid} ") for line in lines), (case, proc.stdout)
            assert lines[-1] == client_says(env), case
            assert lines[-1].startswith("systemd user manager not reachable: "), case
            assert sorted(CLIENT_MODULES & modules) == [], case
            assert "statewarden.manager_socket" in modules, case  # the check did run


def test_the_check_says_what_the_client_says_for_each_unreachable_bus(folder: Path) -> None:
    """For each bus address nothing answers at (no such file, a socket nobody listens
    on, a plain file), the check's line is the client's own, the OS reason included."""
    addresses = [
        f"unix:path={folder}/gone/bus",
        f"unix:path={dead_socket(folder / 'bus')}",
        f"unix:path={folder / 'plain-file'}",
    ]
    (folder / "plain-file").write_text("")
    for address in addresses:
        with pytest.raises(SystemdUnavailable) as err:
            list_units_sync(address=address)
        assert unreachable_reason(address) == str(err.value), address


@pytest.fixture
def plain_bus(folder: Path) -> Iterator[str]:
    """A real session dbus-daemon with no systemd on it; yields its address."""
    if shutil.which("dbus-daemon") is None:
        pytest.skip("dbus-daemon is not installed; packaging/setup-dev.sh installs dbus")
    address = f"unix:path={folder}/live-bus"
    proc = subprocess.Popen(
        ["dbus-daemon", "--session", "--nofork", "--print-address=1", f"--address={address}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=WAIT_S)
        if proc.stdout:
            proc.stdout.close()


def test_a_bus_that_answers_is_asked_through_the_client(folder: Path, plain_bus: str) -> None:
    """The check cannot stand in for D-Bus: a live bus is left to the client, which is
    imported and tells that no systemd is on it (the import check above can fail)."""
    assert unreachable_reason(plain_bus) is None
    home = make_home(folder / "hermes", TINY)
    env = plain_env(folder, DBUS_SESSION_BUS_ADDRESS=plain_bus)
    proc, modules = holders_as_typed(home / "state.db", env)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == (
        f"systemd user manager not reachable: no systemd on the bus at {plain_bus};"
        " holders are still found through /proc"
    )
    assert {"statewarden.systemd", "dbus_fast", "asyncio"} <= modules
