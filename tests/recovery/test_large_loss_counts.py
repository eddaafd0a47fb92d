"""Each table's report counts its loss as a number, however many rows went: hundreds of
messages lost at once (150 zeroed leaves of the messages b-tree).

Invariant: ``tables.<t>.lost`` is the number of rows known lost (their keys, listed in
``lost_keys``), and ``lost_at_most`` adds the rows the unreadable stretches could have
held; with the table's witnesses intact both equal the truth, and with every witness
destroyed too (its indexes and FTS copies) nothing names a lost row, ``lost`` is 0 and
``lost_at_most`` still bounds the truth (here exactly: Hermes deleted no message of the
fixture). Rows the b-tree reached whose key ran into zeros are counted lost unnamed
(``unnamed_lost``), never under a key read from the zeros. Before, the per-table report
had no count at all: a loss known only as a stretch of rowids was a range, and the count
of a large one had to be read off the truncated key sample; and two such rows were
counted as one lost message 0, a key that never existed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import corruption, fuzz
from statewarden.recovery.recover import recover


@pytest.mark.parametrize("witnesses", [True, False], ids=["witnessed", "no-witness"])
def test_a_large_loss_is_counted_per_table(tmp_path: Path, witnesses: bool) -> None:
    """The per-table counts against the rows the zeroed leaves held."""
    case = corruption.zeroed_run_of_leaves(tmp_path / "db", witnesses=witnesses)
    truth = len(case.lost_rowids["messages"])
    assert truth > 500
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    report = recover(case.db, out).to_json()
    t = report["tables"]["messages"]
    assert report["loss_detected"]
    if witnesses:
        assert (t["lost"], t["lost_at_most"], len(t["lost_keys"])) == (truth, truth, truth)
        assert report["lost"]["messages"] == truth
    else:
        assert t["lost"] == 0
        assert t["lost_at_most"] == truth
        assert t["unreadable_ranges"]


def test_rows_whose_key_ran_into_zeros_count_as_lost_unnamed(tmp_path: Path) -> None:
    """A sector zeroed over two messages' cell starts while page 1 and the schema are
    destroyed (nothing left to name them): both cells read as rowid 0. The report
    counts two messages lost unnamed, never a lost message 0, and the table is not
    "complete" (``lab/fuzz.PAGE1_FINDINGS['zeroed_cell_starts_read_as_rowid_0']``)."""
    seed = fuzz.PAGE1_FINDINGS["zeroed_cell_starts_read_as_rowid_0"]
    case, found = fuzz.run_seed(tmp_path / "run", seed, page1=True)
    assert found == [], case.describe()
    truth = case.truth["messages"]
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    t = recover(case.db, out).to_json()["tables"]["messages"]
    back = {r[0] for r in corruption.table_rows(out, "SELECT rowid FROM messages")}
    gone = [r for r in truth if r not in back]
    assert len(gone) == 2
    assert (t["lost_keys"], t["unnamed_lost"], t["lost_at_most"]) == ([], 2, 2)
    assert t["status"] == "partial"
