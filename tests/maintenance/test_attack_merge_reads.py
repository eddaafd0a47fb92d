"""``maintenance --merge-from`` reads this database's earlier copies to prove a file is
its own; a read never writes them. Real files: a WAL state.db whose Hermes 0.22 writer
was killed (its ``-wal`` and ``-shm`` left), quarantined with them by a real run, then
moved aside by Hermes 0.22 when its first page was zeroed."""

from __future__ import annotations

import hashlib
import shutil
import signal
from pathlib import Path

import pytest

from lab.hermes_fixtures import NEWEST_HERMES, NEWEST_WAL, Spec, make_home
from statewarden.maintenance.swap import list_quarantine
from tests.support.cli import run_ctl
from tests.support.maintenance import maintenance_config, run_maintenance
from tests.support.merging import Writer, report_of
from tests.support.vanishing import damage, hermes_starts_fresh
from tests.support.waiting import wait_for


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return maintenance_config(tmp_path, monkeypatch)


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_quarantined_wal_original_is_read_never_written(tmp_path: Path, config: Path) -> None:
    """Invariant: a read never writes a file. A WAL original quarantined with its
    ``-wal`` and ``-shm`` is what proves a copy of the database's earlier file; reading
    its ids in place (read-only) rebuilt its ``-shm``, so the folder no longer matched its
    manifest and restore refused it. Read now through a private copy: a refused merge
    and a proven one leave every file of the folder byte for byte as the swap kept it,
    and the proof still holds."""
    home = make_home(tmp_path / "hermes", NEWEST_WAL)
    db = home / "state.db"
    w = Writer(tmp_path, home)
    wait_for(lambda: len(w.committed()) >= 5, "five committed messages")
    w.proc.send_signal(signal.SIGKILL)
    w.stop()
    assert Path(f"{db}-shm").exists()
    assert Path(f"{db}-wal").stat().st_size > 0
    vacuum = run_maintenance("--db", str(db), "--action", "vacuum", "--yes")
    assert vacuum.returncode == 0, vacuum.stderr
    state = tmp_path / "xdg-state" / "statewarden"
    (entry,) = list_quarantine(state)
    assert {"state.db-wal", "state.db-shm"} <= set(entry.files)
    kept = digest(entry.path)
    other = make_home(tmp_path / "other", Spec(hermes=NEWEST_HERMES, seed=5)) / "state.db"
    refused = run_maintenance("--db", str(db), "--merge-from", str(other), "--dry-run")
    assert refused.returncode == 5, refused.stderr
    assert digest(entry.path) == kept
    damage(db, "zeroed")
    moved = hermes_starts_fresh(home, sessions=5, messages=20, seed=2)
    away = tmp_path / "away.db"
    shutil.copyfile(moved, away)
    proc = run_maintenance("--db", str(db), "--merge-from", str(away), "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    proof = report_of(proc)["merge"]["proof"]
    assert f"store_instance_id / db_file_generation is that of {entry.path}" in proof
    assert digest(entry.path) == kept
    assert entry.not_as_kept() is None
    assert run_ctl("check", "--db", str(db)).exit_code == 0
