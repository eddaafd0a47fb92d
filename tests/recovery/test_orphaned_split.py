"""A split half written back: the messages root points at neither of the two leaves a
split left (the leaf that filled and the one opened beside it), and the old image of
the leaf from before the split lies on another page no b-tree reaches, so three
orphaned leaves hold overlapping rowid ranges (``corruption.orphaned_split``, built from
the fuzz lab's two real generations of one Hermes file).

Invariant: every row an orphaned leaf holds whole that no other copy contradicts comes
back, the newer of two versions of a rowid kept, the rest counted lost; the report says
"complete" only when nothing is missing.
"""

from __future__ import annotations

from pathlib import Path

from lab import corruption, fuzz
from lab.hermes_fixtures import FUZZ, built_db, later_db
from statewarden.recovery.recover import recover


def test_every_row_of_overlapping_orphaned_leaves_comes_back(tmp_path: Path) -> None:
    """The 31 messages of the two new leaves come back as Hermes wrote them, from the
    pages, and no promise of the fuzz lab is broken."""
    case = corruption.orphaned_split(tmp_path / "db", built_db(FUZZ), later_db())
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    report = recover(case.db, out).to_json()
    held = fuzz.FuzzCase(db=case.db, pristine=case.pristine, older=case.pristine, seed=0)
    held.truth = fuzz.carve_truth(case.pristine, case.db)
    assert fuzz.violations(held, report, out) == []
    back = {r[0] for r in corruption.table_rows(out, "SELECT rowid FROM messages")}
    assert set(case.unreached["messages"]) <= back
    t = report["tables"]["messages"]
    assert t["recovered_from_pages"] == len(case.unreached["messages"])
    assert (t["status"], t["lost"]) == ("complete", 0)
