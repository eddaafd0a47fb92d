"""Prometheus metrics from a real daemon over HTTP: off by default; with
``metrics.listen`` set, open incidents by kind, holders, WAL bytes, the alert outbox."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from lab.alertmanager import free_port
from lab.hermes_fixtures import holding
from statewarden.config import parse_config
from statewarden.errors import ConfigError
from tests.support.daemon import DaemonProc
from tests.support.hermes_logs import hermes_logger, malformed
from tests.support.waiting import wait_for


def scrape(port: int) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out = {}
    for line in text.splitlines():
        if line.startswith("statewarden_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


class TestMetrics:
    def test_served_and_follow_the_daemon(self, env: dict[str, str], hermes_home: Path) -> None:
        """A real daemon serves metrics on metrics.listen, and they follow it: WAL size, outbox
        depth, holders, a corruption incident opened and its journald notification delivered."""
        port = free_port()
        cfg = Path(env["XDG_CONFIG_HOME"]) / "statewarden" / "config.yaml"
        cfg.parent.mkdir(parents=True, exist_ok=True)
        cfg.write_text(f"metrics: {{listen: '127.0.0.1:{port}'}}\n")
        db = hermes_home / "state.db"
        with holding(hermes_home):
            d = DaemonProc(env)
            try:
                d.wait_for_line("statewarden ready")
                first = scrape(port)
                assert first['statewarden_open_incidents{kind="corruption"}'] == 0
                assert f'statewarden_wal_bytes{{db="{db}"}}' in first
                assert first['statewarden_alert_outbox_depth{sink="journald"}'] == 0
                wait_for(
                    lambda: any(k.startswith("statewarden_holders{") for k in scrape(port)),
                    what="a holders gauge",
                )
                malformed(hermes_logger(hermes_home / "logs", "gateway.session"))
                wait_for(
                    lambda: scrape(port)['statewarden_open_incidents{kind="corruption"}'] == 1,
                    what="the corruption incident counted",
                )
                wait_for(
                    lambda: scrape(port)['statewarden_alerts_delivered{sink="journald"}'] >= 1,
                    what="the journald notification counted",
                )
            finally:
                d.stop()

    def test_off_by_default_and_listen_is_checked(self) -> None:
        """Metrics are off by default, and a listen address that is not host:port is refused."""
        assert parse_config("{}").metrics.listen is None
        with pytest.raises(ConfigError, match=r"metrics\.listen: expected host:port"):
            parse_config("metrics: {listen: '9108'}")
