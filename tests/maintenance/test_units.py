"""Maintenance with a real systemd --user: the Hermes units holding a damaged state.db are
stopped with a job wait, the file is repaired and swapped, the units start again and
write to the new file."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.hermes_fixtures import writer_env
from statewarden.holders.scan import HolderScanner
from tests.support.maintenance import exempt_comms, integrity, rows, run_maintenance, session_ids
from tests.support.repo import REPO
from tests.support.systemd_harness import UserSystemd
from tests.support.units import DASHBOARD, GATEWAY, UNIT, holders, main_pid

WAIT_S = 60.0


def wait_for(cond: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


@pytest.mark.systemd
def test_units_are_stopped_repaired_and_started_again(
    units: tuple[UserSystemd, Path, list[str]], tmp_path: Path
) -> None:
    """Maintenance with a real user manager stops the Hermes units holding a damaged state.db,
    repairs it, and starts them again as new processes that hold the new file, none stale."""
    manager, db, distinct = units
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps({"holders": {"exempt_comms": exempt_comms()}, "maintenance": {"settle": "0.5s"}})
    )
    before = {main_pid(manager, GATEWAY), main_pid(manager, DASHBOARD)}
    env = {
        **os.environ,
        "STATEWARDEN_CONFIG": str(config),
        "DBUS_SESSION_BUS_ADDRESS": manager.bus_address,
    }
    proc = run_maintenance("--db", str(db), "--yes", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["outcome"] == "repaired"
    assert sorted(rep["units_stopped"]) == sorted([GATEWAY, DASHBOARD])
    assert [u["result"] for u in rep["units_started"]] == ["done", "done"]
    assert rep["start_again"] == []  # every holder was a unit
    assert rep["downtime_s"] is not None
    # Started again, as new processes, which hold the new file and write to it.
    after = {main_pid(manager, GATEWAY), main_pid(manager, DASHBOARD)}
    assert 0 not in after
    assert not after & before
    new_ino = db.stat().st_ino
    wait_for(lambda: after <= holders(db), "the restarted units to hold the new file")
    scan = HolderScanner([db], watch_opens=False).scan()[0]
    assert not any(h.stale for h in scan.holders)
    assert db.stat().st_ino == new_ino
    n = rows(db, "SELECT count(*) FROM messages NOT INDEXED")[0][0]
    wait_for(
        lambda: rows(db, "SELECT count(*) FROM messages NOT INDEXED")[0][0] > n,
        "a unit to write to the new file",
    )
    ids = session_ids(db)
    assert len(ids) == len(set(ids))
    assert set(distinct) <= set(ids)
    assert integrity(db) == "ok"
    assert stat.S_IMODE(db.stat().st_mode) == 0o644


@pytest.mark.systemd
def test_unit_that_fails_to_start_again_is_reported(
    units: tuple[UserSystemd, Path, list[str]], tmp_path: Path
) -> None:
    """The swap is kept (the new file is good); the unit that did not start is named, exit 1."""
    manager, db, _ = units
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps({"holders": {"exempt_comms": exempt_comms()}, "maintenance": {"settle": "0.5s"}})
    )
    # The dashboard's next start fails: its program is gone.
    manager.write_unit(
        DASHBOARD, UNIT.format(home=db.parent, bin="/nonexistent", what="dashboard", restart="no")
    )
    manager.daemon_reload()
    env = {
        **os.environ,
        "STATEWARDEN_CONFIG": str(config),
        "DBUS_SESSION_BUS_ADDRESS": manager.bus_address,
    }
    proc = run_maintenance("--db", str(db), "--yes", "--json", env=env)
    assert proc.returncode == 1, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["outcome"] == "repaired"
    assert f"{DASHBOARD} did not start again" in rep["message"]
    assert main_pid(manager, GATEWAY) != 0
    assert integrity(db) == "ok"


@pytest.mark.systemd
def test_four_holders_with_a_respawner(
    units: tuple[UserSystemd, Path, list[str]], tmp_path: Path
) -> None:
    """Story 1 and 5: two units, the user's `hermes chat` and an orphaned `hermes serve
    --isolated` that a respawner brings back. With --force the run stops all four; as
    root the fence cannot keep the respawned serve out, so the run either wins the race
    or aborts with it named, and in both cases both units run again and nothing is lost."""
    manager, db, distinct = units
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "holders": {"exempt_comms": exempt_comms()},
                "maintenance": {"settle": "1s", "respawn_limit": 2, "stop_grace": "3s"},
            }
        )
    )
    bin_dir = tmp_path / "bin"
    env = {**writer_env(db.parent), "FAKE_HERMES_WRITE_EVERY": "0.3"}
    chat = subprocess.Popen(
        [str(bin_dir / "hermes"), "chat"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert chat.stdout is not None
    assert chat.stdout.readline().strip() == "ready"
    pidfile = tmp_path / "serve.pid"
    respawner = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "tests" / "support" / "respawner.py"),
            str(bin_dir / "hermes"),
            "serve",
            "--isolated",
        ],
        env={**env, "FAKE_HERMES_PIDFILE": str(pidfile)},
    )
    try:
        wait_for(lambda: pidfile.exists() and len(holders(db)) >= 4, "four holders")
        run_env = {
            **os.environ,
            "STATEWARDEN_CONFIG": str(config),
            "DBUS_SESSION_BUS_ADDRESS": manager.bus_address,
        }
        proc = run_maintenance("--db", str(db), "--yes", "--force", "--json", env=run_env)
        chat_code = chat.poll()
    finally:
        respawner.terminate()
        respawner.wait(timeout=WAIT_S)
        if chat.poll() is None:
            chat.kill()
        chat.wait()
        chat.stdout.close()
    rep = json.loads(proc.stdout)
    assert chat_code is not None  # the interactive CLI was stopped (--force)
    if proc.returncode == 0:
        assert rep["outcome"] == "repaired"
        ids = session_ids(db)
        assert len(ids) == len(set(ids))
        assert rep["recover"]["tables"]["sessions"]["duplicates_dropped"] == 1
        assert integrity(db) == "ok"
    else:
        assert proc.returncode == 1, proc.stderr
        assert rep["outcome"] == "rolled back: the database is unchanged"
        assert "hermes serve --isolated" in rep["message"]
        assert stat.S_IMODE(db.stat().st_mode) == 0o644
    assert set(distinct) <= set(session_ids(db))
    assert sorted(rep["units_stopped"]) == sorted([GATEWAY, DASHBOARD])
    wait_for(
        lambda: 0 not in {main_pid(manager, GATEWAY), main_pid(manager, DASHBOARD)},
        "both units to run again",
    )
