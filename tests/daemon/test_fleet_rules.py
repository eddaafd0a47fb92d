"""The shipped Prometheus rules and Grafana dashboard against the metrics a real daemon
exports: ``promtool check rules`` passes, and ``promtool test rules`` fires the right
alerts on series taken from real scrapes (a corruption incident opened by a Hermes log
line, a healthy daemon, a daemon that is gone), never on made-up metric names."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from lab.alertmanager import free_port
from statewarden import fleet
from tests.support.daemon import DaemonProc
from tests.support.hermes_logs import hermes_logger, malformed
from tests.support.repo import REPO
from tests.support.waiting import wait_for

RULES = REPO / "packaging" / "prometheus" / "statewarden.rules.yml"
DASHBOARD = REPO / "packaging" / "grafana" / "statewarden.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian: prometheus)")


def samples(port: int) -> list[str]:
    """The sample lines of one scrape (``name{labels} value``)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return [line for line in text.splitlines() if line.startswith("statewarden_")]


def families(port: int) -> set[str]:
    """The metric families a scrape declares (``# TYPE name ...``), with samples or not."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE statewarden_")}


def series(scrape: list[str], instance: str) -> list[dict[str, str]]:
    """promtool input series: each scraped sample held for an hour, with the labels
    Prometheus adds (job, instance), plus ``up`` 1."""
    out = [{"series": f'up{{job="{fleet.JOB}",instance="{instance}"}}', "values": "1x60"}]
    for line in scrape:
        name, value = line.rsplit(" ", 1)
        extra = f'job="{fleet.JOB}",instance="{instance}"'
        name = name[:-1] + f",{extra}}}" if name.endswith("}") else f"{name}{{{extra}}}"
        out.append({"series": name, "values": f"{float(value):g}x60"})
    return out


def promtool_test(tmp_path: Path, cases: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    spec = tmp_path / "tests.yml"
    spec.write_text(
        yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": cases})
    )
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, "test", "rules", str(spec)], capture_output=True, text=True, check=False
    )


def test_the_shipped_files_are_the_generated_ones() -> None:
    """packaging/ holds what statewarden/fleet.py generates (docs/generate.py)."""
    assert RULES.read_text() == fleet.rules_yaml()
    assert DASHBOARD.read_text() == fleet.dashboard_json()


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    """promtool check rules: every rule parses, 5 of them."""
    assert PROMTOOL is not None
    r = subprocess.run(
        [PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 5 rules found" in r.stdout


@needs_promtool
def test_the_rules_fire_on_a_real_daemons_metrics(
    env: dict[str, str], hermes_home: Path, tmp_path: Path
) -> None:
    """Scrapes of a real daemon: healthy, nothing fires but the verification's age once two
    days pass without one; a corruption line opens the incident and
    StatewardenCorruptionOpen fires; the daemon gone (up 0), StatewardenMissing fires. Every
    metric the rules and the dashboard read is one the daemon exported."""
    port = free_port()
    cfg = Path(env["XDG_CONFIG_HOME"]) / "statewarden" / "config.yaml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(f"metrics: {{listen: '127.0.0.1:{port}'}}\n")
    d = DaemonProc(env)
    try:
        d.wait_for_line("statewarden ready")
        wait_for(
            lambda: any(s.startswith("statewarden_holders_scan_complete{") for s in samples(port)),
            what="a holder scan",
        )
        healthy = samples(port)
        malformed(hermes_logger(hermes_home / "logs", "gateway.session"))
        wait_for(
            lambda: 'statewarden_open_incidents{kind="corruption"} 1.0' in samples(port),
            what="the corruption incident",
        )
        damaged = samples(port)
        exported = families(port)
    finally:
        d.stop()
    read = {n for r in fleet.RULES for n in fleet.metric_names(r.expr)}
    read |= {n for _, expr, _ in fleet.PANELS for n in fleet.metric_names(expr)}
    assert read <= exported, read - exported
    inst = "host:9108"
    no_alerts: list[dict[str, Any]] = [
        {"eval_time": "5m", "alertname": a, "exp_alerts": []}
        for a in ("StatewardenCorruptionOpen", "StatewardenJsonlFallback", "StatewardenMissing")
    ]
    corruption = {
        "eval_time": "5m",
        "alertname": "StatewardenCorruptionOpen",
        "exp_alerts": [
            {
                "exp_labels": {
                    "severity": "critical",
                    "kind": "corruption",
                    "job": fleet.JOB,
                    "instance": inst,
                },
                "exp_annotations": {
                    "summary": f"Hermes' state.db is damaged on {inst}",
                    "description": fleet.RULES[0].description,
                },
            }
        ],
    }
    down = [{"series": f'up{{job="{fleet.JOB}",instance="{inst}"}}', "values": "0x60"}]
    missing = {
        "eval_time": "30m",
        "alertname": "StatewardenMissing",
        "exp_alerts": [
            {
                "exp_labels": {"severity": "critical", "job": fleet.JOB, "instance": inst},
                "exp_annotations": {
                    "summary": f"statewarden is not answering on {inst}",
                    "description": fleet.RULES[4].description,
                },
            }
        ],
    }
    r = promtool_test(
        tmp_path,
        [
            {"interval": "1m", "input_series": series(healthy, inst), "alert_rule_test": no_alerts},
            {
                "interval": "1m",
                "input_series": series(damaged, inst),
                "alert_rule_test": [corruption],
            },
            {"interval": "1m", "input_series": down, "alert_rule_test": [missing]},
        ],
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(DASHBOARD.read_text())["panels"]
