"""A ``-wal`` commit frame whose database-size field alone is damaged, its checksum left.

SQLite stops replaying at the frame (its checksum fails) and drops that commit and
every later one. The checksum covers the frame header's first 8 bytes (page number,
database size) and the page; run back from the stored checksum, it proves whether the
page and the chain are intact and, if so, which size the field held: the frame is then
a commit written whole, and its transaction is taken like any other commit SQLite
drops. The last commit of the WAL is no exception: its messages and session updates
come back (exit 0, no loss) and ``check`` names the dropped commit as base damage,
never "none". A frame whose page image is damaged proves nothing and is not taken.
Ground truth: the same ``-wal`` undamaged, replayed by SQLite.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lab import corruption
from lab.corruption import wal_frames
from lab.wal_damage import set_commit_size_only, set_frame_bit
from statewarden.recovery.decoding.wal import read_wal
from tests.support.cli import run_ctl

# Hermes writers and recover's integrity-check child are real processes.
pytestmark = pytest.mark.process

TABLES = ("sessions", "messages")


def _check(db: Path) -> tuple[int, dict[str, Any]]:
    code, stdout, _ = run_ctl("check", "--db", str(db), "--json", "--progress", "none")
    (diag,) = json.loads(stdout)["databases"]
    return code, diag


def _recover(db: Path, tmp_path: Path) -> tuple[int, dict[str, Any], Path]:
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    code, stdout, _ = run_ctl(
        "recover", "--source", str(db), "--output", str(out), "--json", "--progress", "none"
    )
    return code, json.loads(stdout), out


def _rows(path: Path, name: str) -> list[tuple[object, ...]]:
    return corruption.table_rows(path, f"SELECT rowid, * FROM {name} ORDER BY rowid")


@pytest.mark.parametrize("which", ["last", "middle"])
@pytest.mark.parametrize("change", ["plus-one", "zeroed", "all-ones"])
def test_a_commits_size_field_alone(tmp_path: Path, which: str, change: str) -> None:
    """The size field of the last (or a middle) commit frame rewritten (one more page,
    zeroed so the frame no longer reads as a commit, or 0xFFFFFFFF), its checksum left:
    the checksum proves the size it held, every row Hermes committed comes back exactly
    with no loss, and check says base damage (SQLite drops the commit), naming the
    field and the proven size."""
    case = corruption.wal_commits(tmp_path / "home", 30)
    wal = Path(f"{case.db}-wal")
    frames = wal_frames(wal)
    commits = [i for i, (_, _, size) in enumerate(frames) if size]
    frame = commits[-1] if which == "last" else commits[len(commits) // 2]
    size = frames[frame][2]
    damaged = {"plus-one": size + 1, "zeroed": 0, "all-ones": 0xFFFFFFFF}[change]
    set_commit_size_only(wal, frame, damaged)
    code, report, out = _recover(case.db, tmp_path)
    assert (code, report["loss_detected"]) == (0, False), report["notes"]
    for name in TABLES:
        assert _rows(out, name) == _rows(case.pristine, name), name
    code, diag = _check(case.db)
    assert (code, diag["damage"]) == (3, "base")
    assert diag["wal_dropped_commits"] == len(commits) - commits.index(frame)
    proven = f"it reads {damaged}, the checksum proves {size}"
    assert any(proven in n for n in diag["notes"]), diag["notes"]
    repaired = read_wal(wal, 4096).frames[frame]
    assert (repaired.size_repaired, repaired.commit, repaired.stored_commit) == (
        True,
        size,
        damaged,
    )


def test_a_damaged_page_in_the_last_commit_frame_proves_no_size(tmp_path: Path) -> None:
    """One bit of the last commit frame's page flipped: no size makes the checksum
    match, so nothing is proven and the frame stays damaged (not taken as intact)."""
    case = corruption.wal_commits(tmp_path / "home", 30)
    wal = Path(f"{case.db}-wal")
    frames = wal_frames(wal)
    last = max(i for i, (_, _, size) in enumerate(frames) if size)
    set_frame_bit(wal, last)
    facts = read_wal(wal, 4096)
    assert not facts.frames[last].intact
    assert facts.dropped_commits == 0
