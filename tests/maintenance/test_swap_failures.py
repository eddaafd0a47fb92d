"""A swap that fails never leaves Hermes stopped without cause (docs/safety.md rule 14).

Invariant: the units stay stopped only when the original cannot be used as it is (a
sidecar of it left the database's folder and cannot be brought back). Otherwise the run
rolls back (the original whole where it was) or goes forward (the new file has the
name). Found by attack: a planted symlink in place of the run's quarantine folder kept
Hermes stopped with nothing moved; an error after the rename (the quarantine's manifest
on a full disk) kept it stopped with the new file already in place, and every --resume
failed.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lab.corruption import phantom_row
from lab.hermes_fixtures import SMALL
from tests.support.fake_hermes import install_fake_hermes
from tests.support.maintenance import (
    FakeHermes,
    ctl,
    ledger_of,
    maintenance_config,
    report_of,
    session_ids,
)
from tests.support.privileges import needs_root
from tests.support.repo import REPO

pytestmark = pytest.mark.process  # real maintenance runs and a real Hermes stand-in

MAINTENANCE = [sys.executable, "-m", "statewarden.cli.ctl", "maintenance"]


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return maintenance_config(tmp_path, monkeypatch)


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    return bin_dir


@pytest.fixture
def phantom(tmp_path: Path) -> tuple[Path, list[str]]:
    """A Hermes home whose sessions table has a phantom row; and the distinct ids before."""
    case = phantom_row(tmp_path / "home", SMALL)
    return case.db, sorted(set(session_ids(case.db)))


def test_a_failure_once_the_new_file_has_the_name_never_keeps_hermes_stopped(
    config: Path, phantom: tuple[Path, list[str]], fake_bin: Path
) -> None:
    """An error right after the rename (a full disk for the quarantine's manifest, here
    injected): the swap is done, so the run goes on. It ends repaired, the failure
    named (exit 1), the holder named to start again, nothing left to resume. Before, it
    said "could not be undone", kept Hermes stopped, and every --resume failed."""
    db, distinct = phantom
    w = FakeHermes(fake_bin, db.parent, "dashboard", write_every=0.1)
    try:
        env = {**os.environ, "STATEWARDEN_FAIL_AT": "renamed"}
        proc = ctl("--db", str(db), "--yes", "--json", env=env)
    finally:
        w.stop()
    rep = report_of(proc)
    assert proc.returncode == 1, proc.stderr
    assert rep["outcome"] == "repaired"
    (failure,) = rep["failures"]
    assert failure["step"] == "swap"
    assert "a fault injected at renamed" in failure["error"]
    assert "manifest.json was not written" in failure["error"]
    assert [p["command"] for p in rep["start_again"]] == ["hermes dashboard"]
    assert stat.S_IMODE(db.stat().st_mode) == 0o644
    assert set(distinct) <= set(session_ids(db))
    assert ledger_of(db)[-1]["step"] == "finished"
    assert report_of(ctl("--db", str(db), "--resume", "--json"))["outcome"] == "nothing to resume"


def test_a_symlink_planted_as_the_runs_quarantine_folder_rolls_back(
    config: Path, phantom: tuple[Path, list[str]], fake_bin: Path, tmp_path: Path
) -> None:
    """Once the holders are being stopped, the run's own quarantine folder is planted as
    a symlink to another folder: the swap refuses it before anything leaves the
    database's folder, so the run rolls back (exit 1): the original in place with its
    mode, the new file gone, the holder named to start again, nothing put in the other
    folder, nothing left to resume."""
    db, distinct = phantom
    mode = stat.S_IMODE(db.stat().st_mode)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    quarantine = Path(os.environ["XDG_STATE_HOME"]) / "statewarden" / "quarantine"
    w = FakeHermes(fake_bin, db.parent, "dashboard", write_every=0.1)
    try:
        proc = subprocess.Popen(
            [*MAINTENANCE, "--db", str(db), "--yes", "--json"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        run_id = ""
        for line in proc.stderr:
            event = json.loads(line)
            if event.get("event") == "started":
                run_id = str(event["run_id"])
            if event.get("event") == "step" and event.get("step") == "signal" and run_id:
                quarantine.mkdir(parents=True, exist_ok=True)
                (quarantine / f"default-{run_id}").symlink_to(elsewhere)
                break
        out, rest = proc.communicate(timeout=300)
    finally:
        w.stop()
    assert run_id
    rep = report_of(subprocess.CompletedProcess(proc.args, proc.returncode, out, rest))
    assert proc.returncode == 1, rest
    assert rep["outcome"] == "rolled back: the database is unchanged"
    assert "not a folder (a symlink?)" in rep["message"]
    assert [p["command"] for p in rep["start_again"]] == ["hermes dashboard"]
    assert stat.S_IMODE(db.stat().st_mode) == mode
    assert set(distinct) <= set(session_ids(db))
    assert not list(db.parent.glob(".statewarden-new-*"))
    assert list(elsewhere.iterdir()) == []
    assert ledger_of(db)[-1]["step"] == "finished"
    assert report_of(ctl("--db", str(db), "--resume", "--json"))["outcome"] == "nothing to resume"


@pytest.mark.parametrize(
    ("step", "how"), [("swap", "removed"), ("sidecars-moved", "removed"), ("swap", "grown")]
)
def test_a_resumed_swap_whose_new_file_is_gone_or_changed_rolls_back(
    config: Path, phantom: tuple[Path, list[str]], fake_bin: Path, step: str, how: str
) -> None:
    """kill -9 during the swap, then the pre-built new file is removed (a cleaner of
    temporary files) or written to: --resume cannot roll forward, and rolls back while
    the original has its name (its sidecars brought back from quarantine): exit 1, the
    original in place with its mode and every row, nothing left to resume. Before,
    every --resume failed and Hermes stayed stopped with state.db at mode 000."""
    db, distinct = phantom
    mode = stat.S_IMODE(db.stat().st_mode)
    w = FakeHermes(fake_bin, db.parent, "dashboard", write_every=0.1)
    try:
        crashed = ctl("--db", str(db), "--yes", env={**os.environ, "STATEWARDEN_CRASH_AT": step})
    finally:
        w.stop()
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    (new,) = db.parent.glob(".statewarden-new-*")
    if how == "removed":
        new.unlink()
    else:
        with open(new, "ab") as f:
            f.write(b"\0" * 4096)
    resumed = ctl("--db", str(db), "--resume", "--json")
    rep = report_of(resumed)
    assert resumed.returncode == 1, resumed.stderr
    assert rep["outcome"] == "rolled back: the database is unchanged"
    assert rep["quarantine"] is None
    assert stat.S_IMODE(db.stat().st_mode) == mode
    assert set(distinct) <= set(session_ids(db))
    assert not list(db.parent.glob(".statewarden-new-*"))
    assert ledger_of(db)[-1]["step"] == "finished"
    assert report_of(ctl("--db", str(db), "--resume", "--json"))["outcome"] == "nothing to resume"


BY_HAND = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('by_hand', 'cli', 1.0)")
conn.close()
"""


@needs_root
@pytest.mark.parametrize("step", ["swap", "sidecars-moved", "original-kept"])
def test_a_resumed_swap_rolls_back_when_the_original_was_written_meanwhile(
    config: Path, phantom: tuple[Path, list[str]], step: str
) -> None:
    """kill -9 during the swap; then root's Hermes (the fence does not stop root) is
    started by hand, commits a session and closes: --resume would swap in a file without
    that session, so it rolls back (exit 1), and the session is in the live file. Before,
    the resume said "repaired" (exit 0) and the session was only in quarantine."""
    db, distinct = phantom
    crashed = ctl("--db", str(db), "--yes", env={**os.environ, "STATEWARDEN_CRASH_AT": step})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    subprocess.run([sys.executable, "-c", BY_HAND, str(db)], check=True, timeout=60)
    resumed = ctl("--db", str(db), "--resume", "--json")
    rep = report_of(resumed)
    assert resumed.returncode == 1, resumed.stderr
    assert rep["outcome"] == "rolled back: the database is unchanged"
    assert "written while the run was interrupted" in rep["message"]
    assert "by_hand" in session_ids(db)
    assert set(distinct) <= set(session_ids(db))
    assert ledger_of(db)[-1]["step"] == "finished"
