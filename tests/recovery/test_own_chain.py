"""A long message whose overflow pointer was lost (its 4 bytes zeroed): SQLite cannot
read past its cell, and its own overflow pages, intact, are reached by nothing.

Invariant: a row whose record its cell and its own unattached overflow pages hold whole
comes back as it was and is proven: its text and timestamp restored from its witnesses
are what those pages hold, so no column is left "unverified" and no loss is reported
when every row came back. (Before, the rest of the chain was looked for only after a
lost page, never right at a lost pointer, and a row whose unreadable columns all came
back from its FTS copies and indexes was left with its other columns unverified and
the loss reported.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import corruption, fuzz
from statewarden.recovery.recover import recover


@pytest.mark.parametrize("which", [0, 1])
def test_a_row_whose_overflow_pointer_was_lost_comes_back_proven(
    tmp_path: Path, which: int
) -> None:
    """Every row back as Hermes wrote it, nothing listed as lost or unproven."""
    case = corruption.lost_overflow_pointer(tmp_path / "db", which)
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    report = recover(case.db, out).to_json()
    held = fuzz.FuzzCase(db=case.db, pristine=case.pristine, older=case.pristine, seed=0)
    held.truth = fuzz.carve_truth(case.pristine, case.db)
    rowid = case.phantom["messages"]
    assert not held.truth["messages"][rowid][1], "its cell changed"
    assert fuzz.violations(held, report, out) == []
    sql = f"SELECT * FROM messages WHERE rowid = {rowid}"
    assert corruption.table_rows(out, sql) == corruption.table_rows(case.pristine, sql)
    assert (report["unverified_rows"], report["partial_rows"]) == ([], [])
    assert report["loss_detected"] is False
