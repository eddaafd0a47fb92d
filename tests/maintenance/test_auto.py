"""The daemon and maintenance: an interrupted run is finished at start-up, and a
corruption incident starts a repair run when the policy says so."""

from __future__ import annotations

import datetime as dt
import json
import signal
import stat
import subprocess
import sys
from pathlib import Path

from lab.hermes_fixtures import TINY, log_line, make_home
from statewarden.maintenance.ledger import read_ledger, run_dir
from tests.support.daemon import DaemonProc, daemon_env
from tests.support.maintenance import (
    exempt_comms,
    integrity,
    phantom_home_for_the_daemon,
    session_ids,
)
from tests.support.repo import REPO
from tests.support.waiting import wait_for as eventually


def setup(tmp_path: Path, **maintenance: object) -> tuple[Path, dict[str, str]]:
    db, env = phantom_home_for_the_daemon(
        tmp_path,
        {
            "maintenance": {"settle": "0.5s", **maintenance},
        },
    )
    return db, env


def ledger(db: Path, env: dict[str, str]) -> list[dict[str, object]]:
    record = read_ledger(run_dir(Path(env["XDG_STATE_HOME"]) / "statewarden", db) / "run.jsonl")
    return record.entries if record else []


def test_daemon_start_rolls_back_an_interrupted_run(tmp_path: Path) -> None:
    """kill -9 once fenced (state.db at mode 000); the daemon's start-up rolls it back."""
    db, env = setup(tmp_path, auto_repair="never")
    crashed = subprocess.run(
        [sys.executable, "-m", "statewarden.cli.ctl", "maintenance", "--db", str(db), "--yes"],
        env={**env, "STATEWARDEN_CRASH_AT": "settle"},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert stat.S_IMODE(db.stat().st_mode) == 0
    d = DaemonProc(env)
    try:
        d.wait_for_line("maintenance resume finished", timeout_s=120)
        assert ledger(db, env)[-1]["step"] == "finished"
        assert stat.S_IMODE(db.stat().st_mode) == 0o644
        last = d.ctl_raw("maintenance")["last"][str(db)]
        assert last["outcome"] == "rolled back: the database is unchanged"
    finally:
        d.stop()


def test_corruption_incident_starts_a_repair(tmp_path: Path) -> None:
    """auto_repair: immediately: a corruption line in Hermes' log -> a repair run."""
    db, env = setup(tmp_path, auto_repair="immediately")
    d = DaemonProc(env)
    try:
        d.wait_for_line("statewarden ready")
        line = log_line(
            dt.datetime.now(),
            "ERROR",
            "gateway.session",
            "FATAL: state.db reported structural corruption (database disk image is malformed)",
        )
        with open(db.parent / "logs" / "agent.log", "a") as f:
            f.write(line + "\n")
        d.wait_for_line("maintenance repair finished", timeout_s=120)
        status = eventually(
            lambda: d.ctl_raw("maintenance")["last"].get(str(db)), what="the run's report"
        )
        assert status["outcome"] == "repaired", status
    finally:
        d.stop()
    ids = session_ids(db)
    assert len(ids) == len(set(ids))
    assert integrity(db) == "ok"
    assert not list(db.parent.glob(".statewarden-*"))


def test_the_daemon_keeps_a_verified_snapshot_on_its_schedule(tmp_path: Path) -> None:
    """Every maintenance.snapshot_interval (no window needed), the daemon keeps a
    verified snapshot of each database, taken at idle priority."""
    home = make_home(tmp_path / "hermes", TINY)
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "holders": {"exempt_comms": exempt_comms()},
                "maintenance": {"auto_repair": "never", "snapshot_interval": "2s"},
            }
        )
    )
    env = daemon_env(tmp_path, home)
    env["STATEWARDEN_CONFIG"] = str(config)
    d = DaemonProc(env)
    try:
        d.wait_for_line("maintenance snapshot finished", timeout_s=120)
        last = eventually(
            lambda: d.ctl_raw("maintenance")["last_snapshot"].get(str(home / "state.db")),
            what="the snapshot's report",
        )
    finally:
        d.stop()
    assert last["exit_code"] == 0
    (snap,) = last["snapshots"]
    assert snap["integrity"] == "ok"
    assert snap["check"] == "none"
    assert integrity(Path(snap["path"])) == "ok"
