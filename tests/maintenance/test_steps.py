"""The steps of a run are one list (``maintenance/steps.py``): a real run's ledger goes
through them in the list's order, and ``--resume`` goes on over the same list from the
step the ledger names, not through a second path that redoes the swap."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from lab.hermes_fixtures import SMALL, make_home
from statewarden.maintenance.ledger import LedgerRecord
from statewarden.maintenance.resume import resume_point
from statewarden.maintenance.steps import NAMES
from tests.support.maintenance import (
    exempt_comms,
    ledger_of,
    maintenance_config,
    run_maintenance,
    session_ids,
)
from tests.support.systemd_harness import UserSystemd
from tests.support.units import DASHBOARD, GATEWAY

# Ledger lines that are not steps of the list: one per holder stopped, the roll-back,
# a failure, the end.
NOT_STEPS = {"begin", "stop-unit", "signal", "rollback", "step-failed", "finished"}


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    maintenance_config(tmp_path, monkeypatch)
    return make_home(tmp_path / "home", SMALL) / "state.db"


def test_a_runs_ledger_goes_through_the_list_in_order(db: Path) -> None:
    """A vacuum with nothing holding the file: every step line of its ledger is a step
    of the list, in the list's order, from the pre-build to the post-check."""
    proc = run_maintenance("--db", str(db), "--action", "vacuum", "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    steps = [e["step"] for e in ledger_of(db) if e["step"] not in NOT_STEPS]
    assert steps == [
        "prebuild",
        "fence",
        "settle",
        "verify-source",
        "swap",
        "swapped",
        "post-check",
    ]
    assert [NAMES.index(s) for s in steps] == sorted(NAMES.index(s) for s in steps)


@pytest.mark.parametrize("step", ["swapped", "post-check"])
def test_resume_goes_on_from_the_step_the_ledger_names(db: Path, step: str) -> None:
    """kill -9 right after a step past the swap is in the ledger: --resume goes on from
    that step (the swap is not done again: no second swap line), the run finishes
    swapped with a passing post-check, and says where it went on from."""
    env = {**os.environ, "STATEWARDEN_CRASH_AT": step}
    crashed = run_maintenance("--db", str(db), "--action", "vacuum", "--yes", env=env)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    killed = ledger_of(db)
    assert killed[-1]["step"] == step
    assert resume_point(LedgerRecord(Path("run.jsonl"), killed)) == step
    resumed = run_maintenance("--db", str(db), "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    rep = json.loads(resumed.stdout)
    assert (rep["action"], rep["outcome"]) == ("vacuum", "swapped")
    assert rep["post_check"]["ok"] is True
    assert f"resumed after an interruption after the swap: went on from {step}" in rep["notes"]
    after = [e["step"] for e in ledger_of(db)[len(killed) :]]
    assert "swap" not in after
    assert after[0] == step
    assert after[-1] == "finished"


@pytest.mark.systemd
def test_a_resumed_swap_is_rolled_forward_before_the_units_start(
    units: tuple[UserSystemd, Path, list[str]], tmp_path: Path
) -> None:
    """kill -9 half-way through the swap (the original's sidecars already in
    quarantine) of a repair whose holders are two units: --resume rolls the swap forward
    first and only then starts the units (its ledger's restart line comes after its swap
    line), both end active, no session is lost."""
    manager, db, distinct = units
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps({"holders": {"exempt_comms": exempt_comms()}, "maintenance": {"settle": "0.5s"}})
    )
    env = {
        **os.environ,
        "STATEWARDEN_CONFIG": str(config),
        "DBUS_SESSION_BUS_ADDRESS": manager.bus_address,
    }
    crashed = run_maintenance(
        "--db", str(db), "--yes", env={**env, "STATEWARDEN_CRASH_AT": "sidecars-moved"}
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    for unit in (GATEWAY, DASHBOARD):  # what the killed run stopped is stopped still
        assert manager.systemctl("is-active", unit).stdout.strip() != "active", unit
    killed = len(ledger_of(db))
    resumed = run_maintenance("--db", str(db), "--resume", "--json", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["outcome"] == "repaired"
    after = [e["step"] for e in ledger_of(db)[killed:]]
    assert after.index("swap") < after.index("restart"), after
    for unit in (GATEWAY, DASHBOARD):
        assert manager.systemctl("is-active", unit).stdout.strip() == "active", unit
    assert set(distinct) <= set(session_ids(db))


def test_resume_point_of_a_ledger() -> None:
    """Before the swap a resume rolls back (no step to go on from); from the swap on it
    goes on from the last step of the list the ledger names, lines of holders and
    failures aside."""
    begin = {"step": "begin", "run_id": "r"}

    def lines(*names: str) -> LedgerRecord:
        return LedgerRecord(Path("run.jsonl"), [begin, *({"step": n} for n in names)])

    assert resume_point(lines("prebuild", "signal", "fence", "settle")) is None
    assert resume_point(lines("prebuild", "settle", "verify-source", "swap")) == "swap"
    assert resume_point(lines("swap", "swapped", "restart", "step-failed")) == "restart"
    assert resume_point(lines("swap", "swapped", "post-check", "import")) == "import"
