"""What maintenance stopped, it starts again (docs/safety.md, rule 14), in a real user
manager: an unexpected error injected (``$STATEWARDEN_FAIL_AT``) at every step after the
first stop, one run per step, on the same two Hermes units (a gateway that systemd
restarts, a dashboard it does not). After every run both units are active, the run's
ledger is finished (the next run is not refused), the report names the failed step, and
every session row is still there and the file passes SQLite's integrity check.

The first run repairs the fixture's phantom row with the fault at the import (a
diverted transcript waits in ``sessions/``); then ``--action vacuum`` swaps a new file
in on the healthy database, so every step of a swap runs each time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.maintenance import exempt_comms, integrity, run_maintenance, session_ids
from tests.support.systemd_harness import UserSystemd
from tests.support.transcripts import NEW, write_jsonl
from tests.support.units import DASHBOARD, GATEWAY

# Every point a run passes after its first stop, in order (the swap's own two halfway
# points included); a fault before the swap rolls back, one after it is recorded.
BEFORE_SWAP = ("fence", "settle", "verify-source", "swap", "sidecars-moved", "original-kept")
AFTER_SWAP = ("renamed", "swapped", "restart", "post-check")


def active(manager: UserSystemd, unit: str) -> str:
    return manager.systemctl("is-active", unit).stdout.strip()


@pytest.mark.systemd
def test_every_unit_runs_again_whatever_step_fails(
    units: tuple[UserSystemd, Path, list[str]],
    tmp_path: Path,
) -> None:
    """An error at each step after the stop: both units active at the end, the run
    finished (exit 1, the step named), no row lost, the file intact; a last run
    without a fault repairs as usual."""
    manager, db, distinct = units
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps({"holders": {"exempt_comms": exempt_comms()}, "maintenance": {"settle": "0.5s"}})
    )
    write_jsonl(db.parent / "sessions" / f"{NEW}.jsonl", [{"role": "user", "content": "kept"}])
    base = {
        **os.environ,
        "STATEWARDEN_CONFIG": str(config),
        "DBUS_SESSION_BUS_ADDRESS": manager.bus_address,
    }
    seen: dict[str, str] = {}
    runs = [("repair", "import")] + [("vacuum", step) for step in BEFORE_SWAP + AFTER_SWAP]
    for action, step in runs:
        env = {**base, "STATEWARDEN_FAIL_AT": step}
        proc = run_maintenance("--db", str(db), "--yes", "--json", "--action", action, env=env)
        assert "Traceback" not in proc.stderr, proc.stderr
        rep = json.loads(proc.stdout)
        seen[step] = rep["outcome"]
        assert proc.returncode == 1, (step, proc.stderr, rep)
        assert f"a fault injected at {step}" in json.dumps(rep["failures"]), (step, rep)
        for unit in (GATEWAY, DASHBOARD):
            assert active(manager, unit) == "active", (step, unit, rep)
        assert sorted(rep["units_stopped"]) == sorted([GATEWAY, DASHBOARD]), step
        assert integrity(db) == "ok", step
        assert set(distinct) <= set(session_ids(db)), step
    assert seen["import"] == "repaired", seen
    assert all(seen[s].startswith("rolled back") for s in BEFORE_SWAP), seen
    assert all(seen[s] == "swapped" for s in AFTER_SWAP), seen
    # Nothing left unfinished: a run without a fault goes through.
    proc = run_maintenance("--db", str(db), "--yes", "--json", "--action", "vacuum", env=base)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["failures"] == []
    for unit in (GATEWAY, DASHBOARD):
        assert active(manager, unit) == "active", unit
