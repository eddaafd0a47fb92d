"""Shared pytest fixtures (real Hermes homes, isolated XDG dirs) and the suite's rules:
under ``CI`` a skipped test is a failure; every test has one tier (unit, process or
systemd: tests/support/tiers.py) and a unit test that starts a process fails; the systemd
and slow tests get a longer per-test timeout than the default in pyproject.toml."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, make_home
from tests.support.daemon import DaemonProc, daemon_env
from tests.support.suite import LONG_TIMEOUT_S, in_ci
from tests.support.tiers import Spawns, implied_tier, marked_tiers, tier_of

# Fixtures more than one directory uses, defined in tests/support.
pytest_plugins = ["pytester", "tests.support.units", "tests.support.merging"]

SPAWNS = Spawns()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test without a tier mark gets the one its fixtures and folder imply; the systemd
    and slow ones get the long timeout."""
    for item in items:
        if not marked_tiers(item):
            item.add_marker(implied_tier(item))
        long = item.get_closest_marker("systemd") or item.get_closest_marker("slow")
        if long and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_S))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Under CI a skip means a tool or privilege went missing: fail, with the reason. A unit
    test that started a process (in its setup, body or teardown) fails, naming it."""
    report = yield
    spawned = SPAWNS.take()
    if spawned and os.environ.get("STATEWARDEN_SPAWN_LOG"):
        line = f"{tier_of(item)}\t{item.nodeid}\t{spawned[0]!r}\n"
        with open(os.environ["STATEWARDEN_SPAWN_LOG"], "a", errors="backslashreplace") as log:
            log.write(line)
    if spawned and report.passed and tier_of(item) == "unit":
        report.outcome = "failed"
        report.longrepr = (
            f"a unit test started a process ({spawned[0]}); mark it process "
            "(tests/support/tiers.py says how)"
        )
    if report.skipped and not hasattr(report, "wasxfail") and in_ci():
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI ({os.environ.get('CI')}), which must run every test: {reason}"
        )
    return report


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """Processes started before this test (collection, an earlier test's threads) are not its."""
    SPAWNS.take()


# What a test's process and its daemons never inherit: the developer's own config and a
# service manager's hand-over.
NOT_INHERITED = (
    "STATEWARDEN_CONFIG",
    "NOTIFY_SOCKET",
    "JOURNAL_STREAM",
    "INVOCATION_ID",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's own config, state or Hermes home."""
    for name in NOT_INHERITED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg-runtime"))
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "no-hermes-here"))


@pytest.fixture
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny Hermes home written by real Hermes code; ``$HERMES_HOME`` points at it."""
    home = make_home(tmp_path / "hermes", TINY)
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


@pytest.fixture
def env(tmp_path: Path, hermes_home: Path) -> dict[str, str]:
    """The environment of a daemon watching ``hermes_home`` with private XDG dirs."""
    return daemon_env(tmp_path, hermes_home)


@pytest.fixture
def daemon(env: dict[str, str]) -> Iterator[DaemonProc]:
    """A running `statewarden run` on ``hermes_home``, past its baseline poll."""
    d = DaemonProc(env)
    d.wait_for_line("statewarden ready")
    yield d
    d.stop()


@pytest.fixture(scope="module")
def shared_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProc]:
    """One running `statewarden run` on a tiny Hermes home of its own for a whole module,
    past its baseline poll: for tests that only ask it things (none changes its home, its
    config or its incidents). Its environment is built as ``env``'s is, from scratch."""
    base = tmp_path_factory.mktemp("shared-daemon")
    home = make_home(base / "hermes", TINY)
    env = {k: v for k, v in daemon_env(base, home).items() if k not in NOT_INHERITED}
    d = DaemonProc(env)
    d.wait_for_line("statewarden ready")
    yield d
    d.stop()
