"""The run report as a typed object: a real repair's JSON, taken back the way the CLI
takes the daemon's report (``RunReport.from_json``), is the same JSON again, its own
records typed, and it renders the lines a person reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.corruption import phantom_row
from lab.hermes_fixtures import SMALL
from statewarden.maintenance.report import (
    Failure,
    PostCheck,
    RunReport,
    StartAgain,
    StepTime,
    UnitStarted,
)
from tests.support.maintenance import maintenance_config, run_maintenance


def test_a_repairs_report_comes_back_from_its_json_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repair's JSON read back gives typed records and exactly the same JSON; what it
    renders names each step and the post-check; a key a newer daemon adds is left out,
    not an error."""
    maintenance_config(tmp_path, monkeypatch)
    db = phantom_row(tmp_path / "home", SMALL).db
    proc = run_maintenance("--db", str(db), "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    data.pop("schema_version")  # the CLI's, around the report
    assert data["outcome"] == "repaired"
    report = RunReport.from_json(data)
    assert json.dumps(report.to_json()) == json.dumps(data)
    assert report.steps
    assert all(isinstance(s, StepTime) for s in report.steps)
    assert report.steps[0].step == "prebuild"
    assert isinstance(report.post_check, PostCheck)
    assert report.post_check.ok
    lines = report.render()
    assert f"  post-check: {report.post_check.summary}" in lines
    assert [line.split()[0] for line in lines if line.endswith(" s")][: len(report.steps)] == [
        s.step for s in report.steps
    ]
    newer = {**data, "added_later": 1, "post_check": {**data["post_check"], "x": 2}}
    assert RunReport.from_json(newer).to_json() == data


def test_every_typed_record_comes_back_from_its_json() -> None:
    """Each record the run types (a unit started, a process to start again, a failure,
    the post-check) comes back from the JSON equal, and renders as it did when the
    report was a bag of dicts."""
    report = RunReport(
        db="/h/state.db",
        action="vacuum",
        outcome="swapped",
        steps=[StepTime("swap", 0.25)],
        units_started=[UnitStarted("a.service", "start", "/j/1", "done", 0.1, False, "active")],
        start_again=[StartAgain(4242, "hermes chat", None), StartAgain(7, "hermes serve", 9)],
        post_check=PostCheck(["page 3: bad"], [5], [5, 6], False, "integrity FAILED, ..."),
        failures=[Failure("import", "a fault injected at import")],
    )
    data = json.loads(json.dumps(report.to_json()))
    assert RunReport.from_json(data) == report
    assert data["units_started"][0]["state"] == "active"
    assert data["start_again"][1] == {"pid": 7, "command": "hermes serve", "running_again": 9}
    assert report.render()[1:] == [
        "  swap            0.250 s",
        "  processes stopped (named below)",
        "  unit a.service: start done, now active",
        "  start again yourself: hermes chat (was pid 4242)",
        "  running again: hermes serve (pid 9; whatever started it started it again)",
        "  post-check: integrity FAILED, ...",
        "    page 3: bad",
        "  failed: import: a fault injected at import",
    ]


def test_a_report_without_a_post_check_says_so_as_before() -> None:
    """No post-check ran (a refused run): the JSON holds ``{}`` there, as it always did,
    and reading it back gives no post-check."""
    report = RunReport(db="/h/state.db", action="repair", outcome="refused: nothing done")
    data = report.to_json()
    assert data["post_check"] == {}
    assert RunReport.from_json(data).post_check is None
    assert not any("post-check" in line for line in report.render())
