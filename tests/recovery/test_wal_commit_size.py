"""A ``-wal`` whose last commit frame gives a wrong database size, its checksums valid.

Too small, SQLite cuts live pages off and reads the database as malformed; too large,
SQLite reads every row but cannot checkpoint. Either way the earlier commits are
consistent and the last commit's pages are intact: the WAL is no other database's, it
is replayed with the size its b-trees prove, every row comes back (exit 0), and
``check`` names the damaged field as base damage. Ground truth: the same ``-wal``
undamaged, replayed by SQLite.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab import corruption
from lab.corruption import wal_frames
from lab.wal_damage import set_commit_size
from tests.support.cli import run_ctl


@pytest.mark.parametrize("pages", [100, 5000])
def test_the_last_commits_size_field(tmp_path: Path, pages: int) -> None:
    """The last commit frame's size rewritten to ``pages`` (100: fewer than the b-trees
    reach; 5000: more than the file and the WAL hold): every table comes back exactly
    as Hermes' commits left it, with no loss, and check and recover agree."""
    case = corruption.wal_commits(tmp_path / "home", 30)
    wal = Path(f"{case.db}-wal")
    last = max(i for i, (_, _, commit) in enumerate(wal_frames(wal)) if commit)
    set_commit_size(wal, last, pages)
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    code, stdout, _ = run_ctl(
        "recover", "--source", str(case.db), "--output", str(out), "--json", "--progress", "none"
    )
    report = json.loads(stdout)
    assert code == 0, report["notes"]
    assert report["loss_detected"] is False
    for name in ("sessions", "messages"):
        sql = f"SELECT rowid, * FROM {name} ORDER BY rowid"
        assert corruption.table_rows(out, sql) == corruption.table_rows(case.pristine, sql)
    code, stdout, _ = run_ctl("check", "--db", str(case.db), "--json", "--progress", "none")
    (diag,) = json.loads(stdout)["databases"]
    assert code == 3
    assert diag["damage"] == "base"
    assert any("the size field is damaged" in n for n in diag["notes"]), diag["notes"]
