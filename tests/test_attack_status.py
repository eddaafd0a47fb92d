"""``statewardenctl status`` against planted sidecars and a closed WAL bundle: it reads
without harm (nothing written, no sidecar created beside the file), never hangs, and
says in one problem line why it did not read through SQLite."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from statewarden.cli.status_output import VERDICTS, verification
from statewarden.daemon import verify
from statewarden.daemon.verify import recorded
from tests.support.cli import ctl_process
from tests.support.live_bundle import bundle, killed_writer, live_copy, plant_sidecar
from tests.support.maintenance import rows

pytestmark = pytest.mark.process


def status(db: Path) -> subprocess.CompletedProcess[str]:
    """``statewardenctl status --db DB`` as a process (a FIFO -journal hung it)."""
    return ctl_process("status", "--db", str(db))


def problems(done: subprocess.CompletedProcess[str]) -> list[str]:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return [line for line in done.stdout.splitlines() if line.strip().startswith("problem")]


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("plant", ["symlink", "fifo", "folder"])
def test_a_planted_sidecar_is_named_and_nothing_is_created(
    tmp_path: Path, suffix: str, plant: str
) -> None:
    """A sidecar that is a symlink, a FIFO or a folder: status names it in one problem
    line and opens no SQLite connection (a FIFO -journal hung it; a lone -shm or -wal
    made SQLite create the other beside the file); the bundle and the symlink's target
    are unchanged."""
    db = live_copy(tmp_path / "home")
    victim = tmp_path / "victim"
    plant_sidecar(db, suffix, plant, victim)
    before, target = bundle(db.parent), victim.read_bytes()
    found = problems(status(db))
    assert len(found) == 1, found
    assert f"state.db{suffix}: is " in found[0], found
    assert bundle(db.parent) == before
    assert victim.read_bytes() == target


def test_a_wal_with_no_shm_gets_no_shm_from_status(tmp_path: Path) -> None:
    """A real Hermes writer killed in WAL mode, its -shm gone: status leaves no -shm
    beside the file (a read-only reader created one) and says why it read the file
    alone."""
    db = live_copy(tmp_path / "home")
    killed_writer(db.parent, tmp_path / "bin")
    Path(f"{db}-shm").unlink()
    before = bundle(db.parent)
    found = problems(status(db))
    assert bundle(db.parent) == before, "a -shm was created beside the file"
    assert any("-wal with no -shm" in p for p in found), found


def reject_constant(name: str) -> object:
    raise ValueError(f"not JSON: {name}")


HOSTILE_RECORDS = [
    {"at": float("nan"), "result": "none", "reason": "first"},
    {"at": 1e300, "result": "none", "reason": "first"},
    {"at": 1_700_000_000, "result": ["base"], "reason": "first"},
    {"at": 1_700_000_000, "result": "base", "reason": {"a": 1}},
    {"at": 1_700_000_000, "result": "corrupted", "reason": "first"},
    {"at": True, "result": "none", "reason": "first"},
]


@pytest.mark.parametrize("record", HOSTILE_RECORDS)
def test_a_damaged_verification_record_is_never_shown_as_a_verdict(
    tmp_path: Path, record: dict[str, object]
) -> None:
    """verified.json (the daemon's record) with a record that is no verification: status
    says "never" verified, exit 0, valid JSON (a NaN time stopped it with "unexpected
    ValueError", a list or unknown result was shown as damage no check found)."""
    db = live_copy(tmp_path / "home")
    state = Path(os.environ["XDG_STATE_HOME"]) / "statewarden"
    state.mkdir(parents=True)
    (state / "verified.json").write_text(json.dumps({str(db): {"db": str(db), **record}}))
    done = status(db)
    assert done.returncode == 0, done.stderr
    assert "  last verified   never" in done.stdout.splitlines()
    as_json = _checked(ctl_process("status", "--db", str(db), "--json"))
    (database,) = json.loads(as_json.stdout, parse_constant=reject_constant)["databases"]
    assert database["verified"] is None


@pytest.mark.parametrize("record", HOSTILE_RECORDS)
def test_the_daemon_takes_a_damaged_record_for_none(record: dict[str, object]) -> None:
    """The daemon reads verified.json the same way: a record that is no verification is
    none (the database is verified again, "first"); a NaN time made it due never."""
    assert recorded({"db": "/x/state.db", **record}) is None


def test_status_and_the_daemon_know_the_same_verdicts() -> None:
    """status_output's light copy of the verdicts (it does not import the daemon) and
    the daemon's own are one set; a real record passes both."""
    assert VERDICTS == verify.VERDICTS
    v = verify.Verified("/x/state.db", 1_700_000_000.0, "base", "scheduled", findings=["f"])
    assert recorded(v.to_json()) == v
    assert verification(v.to_json()) is not None


def test_a_symlinked_state_db_is_read_with_the_real_files_sidecars(tmp_path: Path) -> None:
    """state.db a symlink to the real file, whose -wal and -shm a killed Hermes writer
    left: status gives their sizes and reads through SQLite the pages the -wal adds (it
    looked beside the symlink, saw no sidecar, and read the file alone, immutable)."""
    db = live_copy(tmp_path / "home")
    killed_writer(db.parent, tmp_path / "bin")
    real = db.with_name("real.db")
    for sfx in ("", "-wal", "-shm"):
        Path(f"{db}{sfx}").rename(f"{real}{sfx}")
    db.symlink_to(real.name)
    (pages,) = rows(real, "PRAGMA page_count")
    done = _checked(ctl_process("status", "--db", str(db), "--json"))
    (database,) = json.loads(done.stdout)["databases"]
    assert database["wal_bytes"] == Path(f"{real}-wal").stat().st_size
    assert database["size_bytes"] == real.stat().st_size
    assert database["page_count"] == pages[0]
    assert database["problems"] == []


def _checked(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stderr
    return done
