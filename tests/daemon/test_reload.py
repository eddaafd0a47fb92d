"""SIGHUP reaches the daemon's parts: each part was given the config at start and is
given the new one on reload (the parts hold no daemon to read it from)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from statewarden.daemon.verify import VERIFIED_FILE
from statewarden.errors import EXIT_USAGE
from tests.support.cli import run_ctl
from tests.support.daemon import DaemonProc


def test_a_reloaded_verify_interval_takes_effect(env: dict[str, str], tmp_path: Path) -> None:
    """Started with ``watch.verify_interval: 1h`` on a database whose first verification
    (an earlier run's, on record in verified.json) is two minutes old, the daemon does not
    verify it again; after SIGHUP with ``1m`` (the floor) the schedule verifies it at once
    (reason ``scheduled``) without a restart; under the old interval it would wait an
    hour. (The record is aged instead of waiting out the floor's minute.)"""
    config = tmp_path / "config.yaml"
    config.write_text("watch:\n  verify_interval: 1h\n")
    first = DaemonProc(env, "--config", str(config))
    try:
        first.wait_for_line("database verified healthy")
    finally:
        assert first.stop() == 0
    record = Path(env["XDG_STATE_HOME"]) / "statewarden" / VERIFIED_FILE
    verified = json.loads(record.read_text())
    ((db, entry),) = verified.items()
    assert (entry["reason"], entry["result"]) == ("first", "none")
    entry["at"] -= 120
    record.write_text(json.dumps(verified))
    d = DaemonProc(env, "--config", str(config))
    try:
        d.wait_for_line("statewarden ready")
        (st,) = d.ctl("status")["databases"]
        assert (st["verified"]["reason"], st["verified"]["at"]) == ("first", entry["at"])
        config.write_text("watch:\n  verify_interval: 1m\n")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_line("config reloaded")
        assert not [x for x in d.lines if "verifying database" in x]
        line = d.wait_for_line("reason=scheduled", timeout_s=60)
        assert "verifying database" in line
        assert db in line
    finally:
        assert d.stop() == 0


def test_status_after_a_rejected_reload_shows_the_running_config_and_the_error(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A reload refused (a holder scan every millisecond) keeps the daemon on the config
    it runs; ``status`` (text and JSON) then exits 0 naming that config, the rejected
    file's error and when, instead of failing on the file (exit 2). A later valid reload
    clears it. With the daemon gone, the invalid file is the command's error again."""
    config = tmp_path / "config.yaml"
    config.write_text("watch:\n  verify_interval: 1h\n")
    d = DaemonProc(env, "--config", str(config))
    stopped = False
    try:
        d.wait_for_line("statewarden ready")
        config.write_text("watch:\n  holders_interval: 1ms\n")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_line("config reload failed")
        error = "watch.holders_interval: must be at least 1s (the floor for this key), got 1ms"
        r = run_ctl("status", "--config", str(config), env=env)
        assert r.exit_code == 0, r.stderr
        assert f"config: {config} (running)" in r.stdout
        (rejected,) = [x for x in r.stdout.splitlines() if x.startswith("config reload rejected")]
        assert rejected.endswith(f"running config kept: {config}:2: {error}")
        assert "config file invalid now" not in r.stdout  # the same error, said once
        r = run_ctl("status", "--json", "--config", str(config), env=env)
        assert r.exit_code == 0, r.stderr
        data = json.loads(r.stdout)
        assert data["daemon"]["config"] == str(config)
        assert error in data["daemon"]["config_rejected"]["error"]
        assert error in data["config_file_error"]
        config.write_text("watch:\n  holders_interval: 2s\n")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_line("config reloaded")
        r = run_ctl("status", "--config", str(config), env=env)
        assert r.exit_code == 0, r.stderr
        assert "config reload rejected" not in r.stdout
        config.write_text("watch:\n  holders_interval: 1ms\n")
        assert d.stop() == 0
        stopped = True
        r = run_ctl("status", "--config", str(config), env=env)
        assert r.exit_code == EXIT_USAGE
        assert error in r.stderr
    finally:
        if not stopped:
            d.stop()
