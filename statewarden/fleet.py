"""Fleet views on the engines people already run: Prometheus alerting rules and a Grafana
dashboard over the metrics the daemon exports (``daemon/metrics.py``, ``metrics.listen``).

They are data here, written to ``packaging/prometheus/statewarden.rules.yml`` and
``packaging/grafana/statewarden.json`` by ``docs/generate.py`` (a test keeps the files
equal to this module), shipped in the .deb under ``/usr/share/statewarden/``, and checked
by ``promtool check rules`` and ``promtool test rules`` against a scrape of a real daemon
(tests/daemon/test_fleet_rules.py).

The rules assume Prometheus scrapes the daemon with ``job="statewarden"`` (README: Fleet).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = ["JOB", "RULES", "dashboard_json", "rules_yaml"]

JOB = "statewarden"
VERIFY_MAX_AGE_S = 2 * 86400


@dataclass(frozen=True)
class AlertRule:
    """One Prometheus alerting rule."""

    alert: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str

    def to_yaml(self) -> dict[str, Any]:
        return {
            "alert": self.alert,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {"summary": self.summary, "description": self.description},
        }


RULES: tuple[AlertRule, ...] = (
    AlertRule(
        "StatewardenCorruptionOpen",
        'statewarden_open_incidents{kind="corruption"} > 0',
        "0m",
        "critical",
        "Hermes' state.db is damaged on {{ $labels.instance }}",
        "statewarden has an open corruption incident: run statewardenctl incidents, then"
        " statewardenctl maintenance on that host.",
    ),
    AlertRule(
        "StatewardenJsonlFallback",
        'statewarden_open_incidents{kind="jsonl_fallback"} > 0',
        "0m",
        "critical",
        "Hermes stopped writing to state.db on {{ $labels.instance }}",
        "The gateway diverts sessions to JSONL files instead of state.db: statewardenctl"
        " incidents names why; a repair imports them back.",
    ),
    AlertRule(
        "StatewardenVerificationStale",
        f"time() - statewarden_last_check_timestamp_seconds > {VERIFY_MAX_AGE_S}",
        "1h",
        "warning",
        "state.db {{ $labels.db }} was not verified for over 2 days",
        "The daemon verifies each database every watch.verify_interval (1 day by default):"
        " statewardenctl status shows the last verification and why it is late.",
    ),
    AlertRule(
        "StatewardenHoldersScanIncomplete",
        "statewarden_holders_scan_complete == 0",
        "15m",
        "warning",
        "statewarden cannot see every holder of {{ $labels.db }}",
        "Some processes could not be inspected (holders.other_users): statewardenctl holders"
        " --verbose lists them; maintenance refuses while the scan is incomplete.",
    ),
    AlertRule(
        "StatewardenMissing",
        f'up{{job="{JOB}"}} == 0 or absent(up{{job="{JOB}"}})',
        "10m",
        "critical",
        "statewarden is not answering on {{ $labels.instance }}",
        "Prometheus cannot scrape the statewarden daemon: systemctl --user status"
        " statewarden.service on that host.",
    ),
)


def rules_yaml() -> str:
    """The Prometheus rules file."""
    doc = {"groups": [{"name": "statewarden", "rules": [r.to_yaml() for r in RULES]}]}
    head = "# Generated from statewarden/fleet.py by docs/generate.py: edit that, not this.\n"
    return head + yaml.safe_dump(doc, sort_keys=False, width=1000)


# (title, expression, unit) of each dashboard panel: every metric the daemon exports.
PANELS: tuple[tuple[str, str, str], ...] = (
    ("Open incidents by kind", "sum by (kind) (statewarden_open_incidents)", "short"),
    ("Holders by kind", "sum by (db, kind) (statewarden_holders)", "short"),
    ("Holder scan complete", "statewarden_holders_scan_complete", "short"),
    ("WAL size", "statewarden_wal_bytes", "bytes"),
    ("Last check damage", "statewarden_last_check_damage == 1", "short"),
    ("Since the last check", "time() - statewarden_last_check_timestamp_seconds", "s"),
    ("Alert outbox depth", "statewarden_alert_outbox_depth", "short"),
    ("Alerts delivered", "statewarden_alerts_delivered", "short"),
)


def dashboard_json() -> str:
    """A Grafana dashboard (JSON model, a Prometheus data source chosen at import)."""
    panels = []
    for i, (title, expr, unit) in enumerate(PANELS):
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [{"refId": "A", "expr": expr, "legendFormat": ""}],
            }
        )
    model = {
        "title": "statewarden",
        "uid": "statewarden",
        "tags": ["statewarden", "hermes"],
        "schemaVersion": 39,
        "time": {"from": "now-7d", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Prometheus",
                }
            ]
        },
        "panels": panels,
    }
    return json.dumps(model, indent=2) + "\n"


def metric_names(expr: str) -> set[str]:
    """The statewarden metric names an expression reads."""
    out = set()
    for word in expr.replace("{", " ").replace("(", " ").replace(")", " ").split():
        if word.startswith("statewarden_"):
            out.add(word)
    return out
