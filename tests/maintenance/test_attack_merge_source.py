"""``maintenance --merge-from`` given a file that only looks like the one Hermes moved
aside: a symlink planted under a moved-aside name, or a second name (hard link) of
another home's database, both beside state.db. Real files: the old file Hermes 0.22
moved aside itself, the other home's state.db written by Hermes 0.22."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from statewarden.errors import MergeRefused
from statewarden.maintenance.merge import prepare_source
from statewarden.recovery import recover
from tests.support.maintenance import maintenance_config, run_maintenance
from tests.support.merging import Vanished, quarantined, report_of, sha

# A name Hermes 0.22 gives only to the file it renames away from state.db.
PLANTED = "state.db.zeroed-20260101-000000-4242.bak"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return maintenance_config(tmp_path, monkeypatch)


def _symlink(other: Path, planted: Path) -> None:
    planted.symlink_to(other)


def _hard_link(other: Path, planted: Path) -> None:
    os.link(other, planted)


@pytest.mark.parametrize("plant", [_symlink, _hard_link], ids=["symlink", "hard-link"])
def test_a_planted_name_does_not_prove_another_database(
    tmp_path: Path, config: Path, vanished: Vanished, other_home: Path, plant: object
) -> None:
    """Invariant: a copy proves whose it is; no foreign database's rows are merged.
    Another home's state.db reached through a moved-aside name in state.db's folder
    (a symlink to it, or a hard link) is not a file Hermes moved aside from state.db:
    the merge is refused (exit 5, one line saying why), state.db and the other file
    are as they were, nothing is quarantined."""
    db, _old = vanished(tmp_path)
    other = tmp_path / "other.db"
    shutil.copyfile(other_home, other)
    planted = db.parent / PLANTED
    assert callable(plant)
    plant(other, planted)
    before = (db.stat().st_ino, sha(db), sha(other))
    proc = run_maintenance("--db", str(db), "--merge-from", str(planted), "--yes")
    assert proc.returncode == 5, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"{planted}: refused: nothing proves it is an earlier file of {db}" in line
    assert "Traceback" not in proc.stderr
    assert (db.stat().st_ino, sha(db), sha(other)) == before
    assert not (tmp_path / "xdg-state" / "statewarden" / "quarantine").exists()


def test_the_moved_aside_file_through_a_symlink_elsewhere_is_still_proven(
    tmp_path: Path, config: Path, vanished: Vanished
) -> None:
    """The file Hermes moved aside, named through a symlink in another folder, is still
    that file: proven by what it is (its real name and folder), and merged once."""
    db, old = vanished(tmp_path)
    link = tmp_path / "old-link.db"
    link.symlink_to(old)
    proc = run_maintenance("--db", str(db), "--merge-from", str(link), "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    rep = report_of(proc)
    assert rep["outcome"] == "merged"
    assert f"moved aside from {db} ({old})" in rep["merge"]["proof"]
    assert rep["merge"]["sessions_added"] == 12
    assert quarantined(tmp_path).is_file()


def test_the_file_recovered_is_the_file_proven(
    tmp_path: Path,
    vanished: Vanished,
    other_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Invariant: a copy proves whose it is. A symlink given as --merge-from that points
    at another home's database while it is recovered, and at the file Hermes moved
    aside once it is proven (repointed by whoever owns the symlink), made the other
    database's rows proven by the moved-aside file's name. The path is resolved once:
    what is recovered is what is proven, and the merge is refused."""
    db, old = vanished(tmp_path)
    other = tmp_path / "other.db"
    shutil.copyfile(other_home, other)
    link = tmp_path / "link.db"
    link.symlink_to(other)
    real_recover = recover.recover

    def recover_then_repoint(source: Path, out: Path, **kwargs: Any) -> Any:
        report = real_recover(source, out, **kwargs)
        link.unlink()
        link.symlink_to(old)
        return report

    monkeypatch.setattr(recover, "recover", recover_then_repoint)
    state = tmp_path / "state"
    folder = state / "run"
    folder.mkdir(parents=True)
    with pytest.raises(MergeRefused, match="nothing proves it is an earlier file"):
        prepare_source(link, db, home=db.parent, state=state, folder=folder)
    assert not (folder / "merge-source").exists()
