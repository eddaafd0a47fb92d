"""FTS shadow tables copied while FTS5's own checks still run (``FtsFill.copy_ahead``):
kept for the FTS tables the checks pass, undone for the one they fail, whichever of the
two FTS tables that is. Undoing the first one's copy also undoes the second's (their
savepoints nest): that one is copied again. Every file here is written by Hermes and
then damaged in place: a phantom row in ``sessions`` (so the file is rebuilt while the
checks run) and sixteen bytes of one FTS index inverted inside its cell (every b-tree
intact: only FTS5's own check can see it)."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from lab import corruption
from lab.corruption import table_rows as rows
from statewarden.demo import damage
from statewarden.recovery.recover import recover
from tests.support.recovery import assert_same_rows

FTS = ("messages_fts", "messages_fts_trigram")
QUERIES = {
    "messages_fts": ["the", "tool", "session"],
    "messages_fts_trigram": ["the", "ool", "ion"],
}


def _scramble(case: corruption.Case, fts: str) -> None:
    pf = corruption.PristineFile(case.db)
    _, leaves = pf.tree_pages(case.roots[f"{fts}_data"])
    leaf = leaves[len(leaves) // 2]
    off = pf.cell_offsets(leaf)[0]
    old = pf.page(leaf)[off + 64 : off + 80]
    damage.write_at(case.db, (leaf - 1) * pf.page_size + off + 64, bytes(b ^ 0xFF for b in old))


def _fts_check(path: Path, fts: str) -> str:
    conn = apsw.Connection(str(path))
    try:
        conn.execute(f"INSERT INTO {fts}({fts}) VALUES('integrity-check')")
        return "ok"
    except apsw.Error as exc:
        return str(exc)
    finally:
        conn.close()


@pytest.mark.parametrize("scrambled", FTS)
def test_copy_ahead_kept_for_the_intact_fts_undone_for_the_damaged(
    tmp_path: Path, scrambled: str
) -> None:
    """The scrambled FTS table is rebuilt from its content, the intact one is its
    source's copy (checked on the source), both pass FTS5's own check in the output,
    and every MATCH answers as on the pristine file."""
    case = corruption.phantom_row(tmp_path / "db")
    _scramble(case, scrambled)
    assert _fts_check(case.db, scrambled) != "ok"  # the damage is real
    intact = next(f for f in FTS if f != scrambled)
    assert _fts_check(case.db, intact) == "ok"
    out = tmp_path / "out.db"
    report = recover(case.db, out)
    doc = report.to_json()
    assert (doc["damage"], doc["verified"], doc["loss_detected"]) == ("base", True, False)
    assert doc["verification"]["fts_checked_on_source"] == [intact]
    for fts in FTS:
        assert _fts_check(out, fts) == "ok"
        for term in QUERIES[fts]:
            q = f"SELECT rowid FROM {fts} WHERE {fts} MATCH '{term}' ORDER BY rowid"
            assert rows(out, q) == rows(case.pristine, q)
    hits = rows(case.pristine, f"SELECT count(*) FROM {intact} WHERE {intact} MATCH 'the'")
    assert hits != [(0,)]  # the comparison is not of two empty answers
    for shadow in ("_data", "_content", "_docsize"):
        q = f"SELECT count(*) FROM {intact}{shadow}"
        assert rows(out, q) == rows(case.pristine, q)
    assert_same_rows(out, "messages")
    assert_same_rows(out, "sessions")
