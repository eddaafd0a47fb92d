"""SIGHUP reaches the daemon's parts: each part was given the config at start and is
given the new one on reload (the parts hold no daemon to read it from)."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.support.daemon import DaemonProc


def test_a_reloaded_verify_interval_takes_effect(env: dict[str, str], tmp_path: Path) -> None:
    """Started with ``watch.verify_interval: 1h``, a database is verified once (its first);
    after SIGHUP with ``1m`` (the floor) the schedule verifies it again a minute after the
    first (reason ``scheduled``) without a restart; under the old interval it would wait an
    hour."""
    config = tmp_path / "config.yaml"
    config.write_text("watch:\n  verify_interval: 1h\n")
    d = DaemonProc(env, "--config", str(config))
    try:
        d.wait_for_line("statewarden ready")
        d.wait_for_line("database verified healthy")
        assert not [x for x in d.lines if "verifying database" in x and "scheduled" in x]
        config.write_text("watch:\n  verify_interval: 1m\n")
        d.proc.send_signal(signal.SIGHUP)
        d.wait_for_line("config reloaded")
        line = d.wait_for_line("reason=scheduled", timeout_s=150)
        assert "verifying database" in line
    finally:
        assert d.stop() == 0
