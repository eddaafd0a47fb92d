"""Every JSON document and JSON line a command prints starts with ``"schema_version": 1``.

Each command runs for real (CliRunner, the same code path as the installed script) on a
Hermes home written by Hermes' own code, with private XDG folders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from statewarden.config import load_config, state_dir
from statewarden.incidents.book import IncidentBook
from statewarden.incidents.signals import Signal
from statewarden.json_output import SCHEMA_VERSION, json_document
from tests.support.cli import run_ctl


def document(stdout: str) -> dict[str, Any]:
    doc = json.loads(stdout)
    assert isinstance(doc, dict), f"a bare {type(doc).__name__}, not an object"
    assert next(iter(doc)) == "schema_version"
    assert doc["schema_version"] == SCHEMA_VERSION == 1
    return doc


@pytest.fixture
def journald_config(tmp_path: Path) -> Path:
    path = tmp_path / "journald.yaml"
    path.write_text("alerts: {journald: {enabled: true}}\n")
    return path


def test_the_version_is_one_and_cannot_be_shadowed() -> None:
    """json_document puts ``schema_version: 1`` first, and a payload naming its own schema_version
    is a ValueError."""
    assert json_document({"a": 1}) == {"schema_version": 1, "a": 1}
    with pytest.raises(ValueError, match="names its own schema_version"):
        json_document({"schema_version": 2})


@pytest.mark.parametrize(
    ("args", "codes", "key"),
    [
        (["status", "--json"], {0}, "databases"),
        (["holders", "--json", "--no-systemd"], {0}, "databases"),
        (["incidents", "--json"], {0}, "incidents"),
        (["incidents", "--all", "--json"], {0}, "incidents"),
        (["alerts", "--json"], {0}, "sinks"),
        (["silence", "list", "--json"], {0}, "silences"),
        (["quarantine", "list", "--json"], {0}, "quarantine"),
        (["snapshots", "--json"], {0}, "snapshots"),
        (["config", "show", "--json"], {0}, "config"),
        (["install", "--dry-run", "--json"], {0}, "changes"),
    ],
)
def test_listing_commands(hermes_home: Path, args: list[str], codes: set[int], key: str) -> None:
    """Each listing command's --json document is an object starting with ``schema_version: 1`` and
    holding its list under the expected key."""
    r = run_ctl(*args)
    assert r.exit_code in codes, r.stderr
    assert key in document(r.stdout)


def test_silence_list_is_an_object_of_silences(tmp_path: Path) -> None:
    """``silence list --json`` was a bare list; it is ``{"schema_version", "silences"}``."""
    add = run_ctl(
        "silence", "add", "--kind", "wal_growth", "--for", "1h", "--reason", "r", "--json"
    )
    assert add.exit_code == 0, add.stderr
    assert document(add.stdout)["id"] == 1
    doc = document(run_ctl("silence", "list", "--json").stdout)
    assert list(doc) == ["schema_version", "silences"]
    assert [(s["id"], s["state"]) for s in doc["silences"]] == [(1, "active")]
    expired = run_ctl("silence", "expire", "1", "--json")
    assert document(expired.stdout)["state"] == "ended"


def test_alerts_test_is_an_object_of_sinks(journald_config: Path) -> None:
    """``alerts test --json`` was a bare map of sink names; its sinks are under ``sinks``."""
    r = run_ctl("alerts", "test", "--config", str(journald_config), "--json")
    doc = document(r.stdout)
    assert list(doc) == ["schema_version", "sinks"]
    assert list(doc["sinks"]) == ["journald"]
    assert r.exit_code == (0 if doc["sinks"]["journald"]["result"] == "ok" else 1)


def test_incident_show(hermes_home: Path) -> None:
    """``incidents show --json`` is a versioned document holding the incident asked for."""
    book = IncidentBook(state_dir(load_config(None)) / "incidents.json")
    book.record(Signal("corruption", str(hermes_home / "state.db"), "malformed"))
    book.save()
    r = run_ctl("incidents", "show", "1", "--json")
    assert r.exit_code == 0, r.stderr
    assert document(r.stdout)["incident"]["id"] == 1


def test_check_recover_and_their_progress_lines(hermes_home: Path, tmp_path: Path) -> None:
    """check and recover print a versioned document, and each of their JSON progress lines on stderr
    starts with schema_version, then event."""
    db = hermes_home / "state.db"
    r = run_ctl("check", "--db", str(db), "--json", "--progress", "json")
    assert r.exit_code == 0, r.stderr
    assert document(r.stdout)["damage"] == "none"
    events = [json.loads(line) for line in r.stderr.splitlines()]
    assert events
    assert all(list(e)[:2] == ["schema_version", "event"] for e in events)
    out = tmp_path / "recovered.db"
    r = run_ctl(
        "recover", "--source", str(db), "--output", str(out), "--json", "--progress", "json"
    )
    assert r.exit_code == 0, r.stderr
    assert document(r.stdout)["verified"] is True
    assert {json.loads(line)["schema_version"] for line in r.stderr.splitlines()} == {1}


def test_the_recover_report_file(hermes_home: Path, tmp_path: Path) -> None:
    """The file `recover --report FILE` writes is a JSON document like the others:
    `schema_version` first, then the same keys as `recover --json`."""
    db = hermes_home / "state.db"
    report = tmp_path / "report.json"
    r = run_ctl(
        "recover", "--source", str(db), "--output", str(tmp_path / "a.db"), "--report", str(report)
    )
    assert r.exit_code == 0, r.stderr
    written = document(report.read_text())
    r = run_ctl("recover", "--source", str(db), "--output", str(tmp_path / "b.db"), "--json")
    assert r.exit_code == 0, r.stderr
    assert list(written) == list(document(r.stdout))


def test_snapshot_take(hermes_home: Path) -> None:
    """``snapshots take --json`` is a versioned document listing the one snapshot taken."""
    r = run_ctl("snapshots", "take", "--db", str(hermes_home / "state.db"), "--json")
    assert r.exit_code == 0, r.stderr
    assert len(document(r.stdout)["snapshots"]) == 1


def test_holders_watch_lines(hermes_home: Path) -> None:
    """``holders --watch --json`` prints one versioned document per scan: a full scan, then an
    incremental one."""
    args = ["--watch", "--count", "2", "--interval", "0.05", "--json", "--no-systemd"]
    r = run_ctl("holders", *args)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2
    assert [document(line)["scan"] for line in lines] == ["full", "incremental"]


def test_maintenance_dry_run_and_its_event_lines(hermes_home: Path) -> None:
    """``maintenance --dry-run --json`` prints a versioned document, and every event line on stderr
    carries schema_version 1."""
    r = run_ctl(
        "maintenance",
        "--db",
        str(hermes_home / "state.db"),
        "--action",
        "check",
        "--dry-run",
        "--json",
    )
    assert r.exit_code == 0, r.stderr
    document(r.stdout)
    events = [json.loads(line) for line in r.stderr.splitlines()]
    assert events
    assert {e["schema_version"] for e in events} == {1}
