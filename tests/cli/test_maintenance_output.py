"""What a person reads of a real maintenance run, on exact text: each step said in
words (no bare ``maintenance: signal``), no raw Python dict in the notes, no downtime
figure for a run that stopped nothing or rolled back, and the processes of other users
that could not be read as one line rather than one each."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lab.corruption import phantom_row
from lab.hermes_fixtures import SMALL
from tests.support.maintenance import ctl, maintenance_config, report_of
from tests.support.privileges import SETPRIV, needs_root
from tests.support.repo import REPO

PREFIX = "statewardenctl: maintenance: "


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return maintenance_config(tmp_path, monkeypatch)


def test_each_step_is_said_in_words(config: Path, tmp_path: Path) -> None:
    """A repair that stops one holder: the step lines on stderr, exactly, in order;
    none is a bare step name; the report's notes hold no Python dict, and the source's
    identity is a JSON object of its own."""
    case = phantom_row(tmp_path / "home", SMALL)
    holder = subprocess.Popen(["sh", "-c", f'exec 3<"{case.db}"; exec sleep 300'])
    try:
        proc = ctl("--db", str(case.db), "--yes", "--force")
        rep = report_of(ctl("--db", str(case.db), "--yes", "--json"))  # healthy now
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 0, proc.stderr
    steps = [line for line in proc.stderr.splitlines() if line.startswith(PREFIX)]
    (kept,) = [x for x in proc.stdout.splitlines() if x.startswith("  original kept in ")]
    run_id = Path(kept.removeprefix("  original kept in ")).name.removeprefix("default-")
    assert steps == [
        PREFIX + f"run {run_id} started",
        PREFIX + "building the new file while Hermes runs",
        PREFIX + f"stopping pid {holder.pid} (sleep 300)",
        PREFIX + "fencing state.db (mode 000) so that nothing opens it",
        PREFIX + "waiting until no process holds the database",
        PREFIX + "checking whether the database changed since the pre-build",
        PREFIX + "swapping the new file in (the original goes to quarantine)",
        PREFIX + "the new file is in place",
        PREFIX + "checking the new file and who holds it",
    ]
    assert not any("{'" in line for line in proc.stdout.splitlines())
    assert rep["outcome"] == "healthy: nothing to repair"
    assert isinstance(rep["source_identity"], dict)
    assert rep["source_identity"]["db_size"] == case.db.stat().st_size
    assert not any("source identity" in n for n in rep["notes"])


def test_no_downtime_for_a_run_that_stopped_nothing(config: Path, tmp_path: Path) -> None:
    """Nobody holds the file: the repair swaps without stopping anything, so there is
    no downtime figure (text or JSON)."""
    case = phantom_row(tmp_path / "home", SMALL)
    text = ctl("--db", str(case.db), "--yes")
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0] == f"maintenance repair of {case.db}: repaired"
    assert not [line for line in text.stdout.splitlines() if "downtime:" in line]
    again = phantom_row(tmp_path / "home2", SMALL)
    rep = report_of(ctl("--db", str(again.db), "--yes", "--json"))
    assert rep["outcome"] == "repaired"
    assert rep["downtime_s"] is None
    assert rep["units_stopped"] == []


def test_a_rolled_back_run_has_no_downtime_figure(config: Path, tmp_path: Path) -> None:
    """A holder that stops, then a writer opens the file during the settle of a run
    that cannot finish (settle_timeout): rolled back; the report says the holders were
    stopped (a process is not started again by the run: it is named), with no downtime
    figure."""
    case = phantom_row(tmp_path / "home", SMALL)
    cfg = json.loads(config.read_text())
    cfg["maintenance"].update(settle="30s", settle_timeout="2s")
    config.write_text(json.dumps(cfg))
    holder = subprocess.Popen(["sh", "-c", f'exec 3<"{case.db}"; exec sleep 300'])
    try:
        proc = ctl("--db", str(case.db), "--yes", "--force")
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"maintenance repair of {case.db}: rolled back: the database is unchanged"
    assert lines[1] == "  aborted and rolled back: holders did not settle within 2 s"
    # The holder was a process (no unit): stopped, and named below to start again.
    assert "  processes stopped (named below), nothing swapped" in lines
    assert not [line for line in lines if "downtime:" in line]
    assert report_of(ctl("--db", str(case.db), "--yes", "--json", "--dry-run"))


@needs_root
def test_unreadable_processes_of_other_users_are_one_line() -> None:
    """As an unprivileged user with ``holders.other_users: fail``, every process of
    root is unreadable: the refusal is one line with their count, not one each."""
    base = Path(tempfile.mkdtemp(prefix="statewarden-output-"))
    try:
        base.chmod(0o755)
        case = phantom_row(base / "home", SMALL)
        (base / "config.yaml").write_text(json.dumps({"holders": {"other_users": "fail"}}))
        subprocess.run(["chown", "-R", "65534:65534", str(base)], check=True)
        env = {
            **os.environ,
            "HOME": str(base),
            "XDG_STATE_HOME": str(base / "state"),
            "XDG_RUNTIME_DIR": str(base / "run"),
            "XDG_CONFIG_HOME": str(base / "cfg"),
            "STATEWARDEN_CONFIG": str(base / "config.yaml"),
        }
        proc = subprocess.run(
            [
                *SETPRIV,
                sys.executable,
                "-m",
                "statewarden.cli.ctl",
                "maintenance",
                "--db",
                str(case.db),
                "--yes",
            ],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert proc.returncode == 5, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == f"maintenance repair of {case.db}: refused: nothing done"
    (line,) = out[1:]
    head, _, tail = line.partition(" processes of other users could not be read (none holds")
    assert head.startswith("  holder scan incomplete: ")
    assert int(head.removeprefix("  holder scan incomplete: ")) > 1
    assert tail.startswith(" a lock on state.db; the first: pid 1 ")
    assert tail.endswith(
        "holders.other_users: fail counts them against the scan, locks (the default)"
        " checks them through /proc/locks"
    )
    assert line.count("could not be inspected") == 1
    assert proc.stderr.count("cannot proceed: ") == 1
