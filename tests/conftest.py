"""Shared pytest fixtures: real Hermes homes, isolated XDG dirs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon_proc import DaemonProc, daemon_env
from tests.hermes_fixtures import TINY, make_home


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's own config, state or Hermes home."""
    for name in ("STATEWARDEN_CONFIG", "NOTIFY_SOCKET", "JOURNAL_STREAM", "INVOCATION_ID",
                 "WATCHDOG_USEC", "WATCHDOG_PID"):  # fmt: skip
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
    d.wait_for("statewarden ready")
    yield d
    d.stop()
