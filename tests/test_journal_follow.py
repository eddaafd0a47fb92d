"""The journal follower against a real journald and systemd --user (root only).

The gateway prints the JSONL fallback line to stdout, so only its unit's journal has it
(docs/hermes.md). Here a real unit prints that line; the daemon, following the journal with
journalctl, must open a jsonl_fallback incident.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, make_home
from tests.support.daemon import DaemonProc
from tests.support.waiting import wait_for
from tests.systemd_harness import UserSystemd, unavailable_reason, user_systemd

pytestmark = pytest.mark.systemd

UNIT = "hermes-gateway.service"
FALLBACK = "[gateway] Warning: SQLite session store unavailable, falling back to JSONL: database disk image is malformed"


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[UserSystemd]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with user_systemd(tmp_path / "manager") as m:
        yield m


def test_fallback_line_printed_by_a_unit_opens_incident(
    manager: UserSystemd, tmp_path: Path
) -> None:
    """A unit printing the JSONL fallback line to stdout -> a jsonl_fallback incident."""
    home = make_home(tmp_path / "hermes", TINY)
    config = tmp_path / "config.yaml"
    config.write_text(f"targets:\n  - home: {home}\n    gateway_unit: {UNIT}\n")
    env = dict(
        os.environ,
        HERMES_HOME=str(home),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_RUNTIME_DIR=str(tmp_path / "run"),
        XDG_CONFIG_HOME=str(tmp_path / "cfg"),
    )
    env.pop("NOTIFY_SOCKET", None)
    # Inside the manager's mount namespace, where its journal lives.
    d = DaemonProc(
        env, "--config", str(config), prefix=("nsenter", "-t", str(manager.manager_pid), "-m")
    )
    try:
        d.wait_for_line("statewarden ready")
        wait_for(
            lambda: d.ctl_raw("status")["databases"][0]["journal"].startswith("following"),
            what="journal followed",
        )
        manager.write_unit(
            UNIT, f"[Service]\nExecStart=/bin/sh -c 'echo \"{FALLBACK}\"; exec sleep 300'\n"
        )
        manager.daemon_reload()
        r = manager.systemctl("start", UNIT)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: FALLBACK in manager.journal(UNIT), what="line in the unit's journal")
        (inc,) = wait_for(
            lambda: [i for i in d.ctl("incidents")["incidents"] if i["kind"] == "jsonl_fallback"],
            what="jsonl_fallback incident",
        )
        assert inc["severity"] == "critical"
        assert "database disk image is malformed" in inc["summary"]
        assert inc["source"].startswith("journal")
    finally:
        manager.systemctl("stop", UNIT)
        assert d.stop(signal.SIGTERM) == 0


def test_crash_looping_unit_opens_crash_loop(manager: UserSystemd, tmp_path: Path) -> None:
    """A Hermes unit that keeps dying and being restarted by systemd is a crash_loop
    incident, seen through NRestarts over D-Bus; restarts are on the timeline."""
    home = make_home(tmp_path / "hermes", TINY)
    config = tmp_path / "config.yaml"
    config.write_text(
        f"targets:\n  - home: {home}\n    gateway_unit: {UNIT}\nwatch:\n  journal: false\n"
    )
    env = dict(
        manager.env(),
        HERMES_HOME=str(home),
        XDG_STATE_HOME=str(tmp_path / "state"),
        XDG_RUNTIME_DIR=str(tmp_path / "run"),
        XDG_CONFIG_HOME=str(tmp_path / "cfg"),
    )
    env.pop("NOTIFY_SOCKET", None)
    manager.write_unit(
        UNIT,
        "[Unit]\nStartLimitIntervalSec=0\n[Service]\nExecStart=/bin/false\n"
        "Restart=always\nRestartSec=200ms\n",
    )
    manager.daemon_reload()
    d = DaemonProc(env, "--config", str(config))
    try:
        d.wait_for_line("statewarden ready")
        wait_for(lambda: d.ctl_raw("status")["units"].startswith("watching"), what="units watched")
        manager.systemctl("start", UNIT)
        (inc,) = wait_for(
            lambda: [i for i in d.ctl("incidents")["incidents"] if i["kind"] == "crash_loop"],
            what="crash_loop incident",
        )
        assert inc["key"] == UNIT
        assert inc["db"] == str(home / "state.db")
        shown = d.ctl("incidents", "show", str(inc["id"]))
        assert any(e["what"] == "unit_restarted" for e in shown["timeline"])
    finally:
        manager.systemctl("stop", UNIT)
        assert d.stop(signal.SIGTERM) == 0
