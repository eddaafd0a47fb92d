"""`statewarden run` as a real process: start-up, waiting for Hermes, signals, sd_notify."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, make_home
from tests.support.daemon import DaemonProc


@pytest.fixture
def daemon_env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, HERMES_HOME=str(tmp_path / "hermes"))


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    f = tmp_path / "config.yaml"
    f.write_text("discovery:\n  rescan_interval: 100ms\n")
    return f


@pytest.fixture
def run_daemon(daemon_env: dict[str, str], config_file: Path) -> Iterator[DaemonProc]:
    d = DaemonProc(daemon_env, "--config", str(config_file))
    yield d
    d.stop(signal.SIGKILL)


class TestStartStop:
    def test_no_hermes_home_keeps_running_and_picks_it_up(
        self, run_daemon: DaemonProc, daemon_env: dict[str, str]
    ) -> None:
        """With no Hermes home the daemon says so and keeps running; a home and database
        created later are picked up by the next rescan."""
        run_daemon.wait_for_line("statewarden started")
        line = run_daemon.wait_for_line("no Hermes home found")
        assert line.startswith("warning: no Hermes home found; waiting for one to appear")
        assert run_daemon.proc.poll() is None
        home = Path(daemon_env["HERMES_HOME"])
        home.mkdir()
        line = run_daemon.wait_for_line("watching database")
        assert f"db={home / 'state.db'}" in line
        assert "present=false" in line
        make_home(home, TINY)
        run_daemon.wait_for_line("database appeared")
        assert run_daemon.stop(signal.SIGTERM) == 0
        assert "statewarden stopped signal=SIGTERM" in run_daemon.wait_for_line(
            "statewarden stopped"
        )

    def test_lists_every_database_at_start(self, tmp_path: Path, config_file: Path) -> None:
        """At start-up each discovered database (profiles included) is logged once."""
        home = make_home(tmp_path / "h", TINY, profiles=("coder",))
        d = DaemonProc(dict(os.environ, HERMES_HOME=str(home)), "--config", str(config_file))
        try:
            first = d.wait_for_line("watching database")
            second = d.wait_for_line("watching database")
            assert f"profile=default db={home / 'state.db'} present=true" in first
            assert f"profile=coder db={home / 'profiles/coder/state.db'} present=true" in second
            assert d.stop(signal.SIGINT) == 0
        finally:
            d.stop(signal.SIGKILL)

    def test_sigint_stops_cleanly(self, run_daemon: DaemonProc) -> None:
        """Ctrl-C (SIGINT) is a clean stop with exit code 0."""
        run_daemon.wait_for_line("statewarden started")
        assert run_daemon.stop(signal.SIGINT) == 0

    def test_sighup_with_broken_config_keeps_running(
        self, run_daemon: DaemonProc, config_file: Path
    ) -> None:
        """SIGHUP re-reads the config; an invalid one is reported and the old one kept."""
        run_daemon.wait_for_line("statewarden started")
        config_file.write_text("discovery:\n  rescan_interval: never\n")
        run_daemon.proc.send_signal(signal.SIGHUP)
        line = run_daemon.wait_for_line("config reload failed")
        assert "discovery.rescan_interval: expected a duration" in line
        assert run_daemon.proc.poll() is None
        config_file.write_text("discovery:\n  rescan_interval: 200ms\n")
        run_daemon.proc.send_signal(signal.SIGHUP)
        run_daemon.wait_for_line("config reloaded")
        assert run_daemon.stop() == 0


class TestNotify:
    def test_ready_status_watchdog_stopping(
        self, daemon_env: dict[str, str], config_file: Path, tmp_path: Path
    ) -> None:
        """Under a (fake) service manager: READY=1 with STATUS, WATCHDOG=1 pings, STOPPING=1."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(tmp_path / "notify"))
        sock.settimeout(20)
        env = dict(daemon_env, NOTIFY_SOCKET=str(tmp_path / "notify"), WATCHDOG_USEC="200000")
        d = DaemonProc(env, "--config", str(config_file))
        try:
            got: list[str] = []
            while not any(m.startswith("READY=1") for m in got):
                got.append(sock.recv(4096).decode())
            ready = next(m for m in got if m.startswith("READY=1"))
            assert ready == "READY=1\nSTATUS=waiting for a Hermes home"
            while got.count("WATCHDOG=1") < 2:
                got.append(sock.recv(4096).decode())
            assert d.stop() == 0
            while "STOPPING=1" not in got:
                got.append(sock.recv(4096).decode())
        finally:
            d.stop(signal.SIGKILL)
            sock.close()


class TestDamagedState:
    def test_damaged_incident_book_is_set_aside_not_fatal(
        self, tmp_path: Path, config_file: Path
    ) -> None:
        """A garbage incidents.json does not stop the daemon: it is renamed aside, said, and
        the daemon starts with an empty book."""
        state = tmp_path / "xdg-state" / "statewarden"
        state.mkdir(parents=True)
        (state / "incidents.json").write_text("{torn")
        env = dict(
            os.environ,
            HERMES_HOME=str(tmp_path / "hermes"),
            XDG_STATE_HOME=str(tmp_path / "xdg-state"),
        )
        d = DaemonProc(env, "--config", str(config_file))
        try:
            line = d.wait_for_line("incident book damaged")
            assert "incident book unreadable" in line
            d.wait_for_line("statewarden ready")
            assert [p.name.startswith("incidents.damaged-") for p in state.iterdir()].count(
                True
            ) == 1
        finally:
            assert d.stop() == 0
