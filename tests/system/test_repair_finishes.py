"""What a repair starts, the daemon finishes: nothing left open tells the user to repair.

A repaired outcome resolves the corruption incident and every incident folded into it;
the maintenance command's own process is never a holder incident.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from statewarden.errors import EXIT_FAILED
from statewarden.maintenance import outcomes
from tests.support.cli import run_ctl
from tests.support.daemon import DaemonProc, daemon_env
from tests.support.hermes_logs import hermes_logger, malformed
from tests.support.repo import REPO
from tests.support.waiting import wait_for


def _env(tmp_path: Path, home: Path) -> dict[str, str]:
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps({"watch": {"verify_interval": "1h"}, "holders": {"unexpected_after": "1s"}})
    )
    env = daemon_env(tmp_path, home)
    env["STATEWARDEN_CONFIG"] = str(config)
    return env


def _open_kinds(d: DaemonProc) -> set[str]:
    return {i["kind"] for i in d.ctl("incidents")["incidents"]}


def test_a_repaired_outcome_resolves_what_was_folded_into_corruption(
    tmp_path: Path, hermes_home: Path
) -> None:
    """A repaired outcome resolves the corruption incident and what was folded into it (write
    failures, self-repair) as repaired by that run."""
    env = _env(tmp_path, hermes_home)
    d = DaemonProc(env)
    try:
        d.wait_for_line("statewarden ready")
        log = hermes_logger(hermes_home / "logs", "gateway.session")
        malformed(log)
        log.warning("Session DB append_message failed: database disk image is malformed")
        (hermes_home / "state.db.malformed-backup-20260101_000000").write_bytes(b"x")
        wanted = {"corruption", "write_failures", "self_repair"}
        wait_for(lambda: wanted <= _open_kinds(d), what=f"{wanted} open")
        state = Path(env["XDG_STATE_HOME"]) / "statewarden"
        report = {
            "outcome": "repaired",
            "action": "repair",
            "db": str(hermes_home / "state.db"),
            "run_id": "run-1",
            "exit_code": 0,
            "post_check": {"ok": True},
        }
        outcomes.record(state, report, "default", time.time())
        wait_for(lambda: not (wanted & _open_kinds(d)), what="every one resolved")
        every = d.ctl("incidents", "--all")["incidents"]
        for inc in (i for i in every if i["kind"] in wanted):
            assert inc["state"] == "resolved"
            assert inc["resolution"] == "repaired by maintenance run run-1"
    finally:
        d.stop()


HOLD = """
import sys, time, apsw
from pathlib import Path
from statewarden.atomic import private_dir
from statewarden.maintenance.ledger import run_dir, run_lock
db, state, locked = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1"
def hold():
    conn = apsw.Connection(str(db))
    conn.execute("select count(*) from sessions").fetchall()
    print("holding", flush=True)
    time.sleep(300)
if locked:
    with run_lock(private_dir(run_dir(state, db))):
        hold()
else:
    hold()
"""


def _holder(db: Path, state: Path, *, locked: bool) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db), str(state), "1" if locked else "0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != "holding\n":  # never leave it behind for a later test's warnings
        proc.kill()
        proc.wait()
        proc.stdout.close()
        raise AssertionError(f"the holder did not start (said {line!r})")
    return proc


def test_the_maintenance_process_is_not_a_holder_incident(
    tmp_path: Path, hermes_home: Path
) -> None:
    """A process holding the run lock and the database is seen as a holder, and raises
    no unexpected_holder; the same process without the lock does."""
    env = _env(tmp_path, hermes_home)
    db = hermes_home / "state.db"
    state = Path(env["XDG_STATE_HOME"]) / "statewarden"
    d = DaemonProc(env)
    procs = []
    try:
        d.wait_for_line("statewarden ready")
        run = _holder(db, state, locked=True)
        procs.append(run)

        def held_by(pid: int) -> bool:
            return any(h["pid"] == pid for s in d.ctl_raw("holders") for h in s["holders"])

        wait_for(lambda: held_by(run.pid), what="the run's process seen as a holder")
        other = _holder(db, state, locked=False)
        procs.append(other)
        (inc,) = wait_for(lambda: d.incidents_of("unexpected_holder"), what="unexpected_holder")
        assert f"pid {other.pid} " in inc["summary"]
        assert held_by(run.pid)
        assert [
            i for i in d.incidents_of("unexpected_holder") if f"pid {run.pid} " in i["summary"]
        ] == []
    finally:
        for p in procs:
            p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()
        d.stop()


def test_no_verification_while_a_maintenance_run_holds_its_lock(
    tmp_path: Path, hermes_home: Path
) -> None:
    """With a run's lock held, the due first verification waits and a requested one is
    refused with why; once the run is over, the waiting one runs."""
    env = _env(tmp_path, hermes_home)
    db = hermes_home / "state.db"
    state = Path(env["XDG_STATE_HOME"]) / "statewarden"
    run = _holder(db, state, locked=True)
    d = DaemonProc(env)
    try:
        d.wait_for_line("statewarden ready")
        r = run_ctl("verify", env=env)
        assert r.exit_code == EXIT_FAILED
        assert r.stderr.strip().endswith(
            f"{db}: a maintenance run is in progress; it is verified after the run"
        )
        (st,) = d.ctl("status")["databases"]
        assert st["verified"] is None
        run.kill()
        run.wait()
        line = d.wait_for_line("database verified healthy")
        assert f"db={db}" in line
        # One verification in all: the one that waited for the run.
        started = [ln for ln in d.lines if "verifying database" in ln]
        assert len(started) == 1
        assert "reason=first" in started[0]
        (st,) = d.ctl("status")["databases"]
        assert st["verified"]["reason"] == "first"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if run.stdout is not None:
            run.stdout.close()
        d.stop()
