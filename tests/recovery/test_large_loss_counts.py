"""Each table's report counts its loss as a number, however many rows went: hundreds of
messages lost at once (150 zeroed leaves of the messages b-tree).

Invariant: ``tables.<t>.lost`` is the number of rows known lost (their keys, listed in
``lost_keys``), and ``lost_at_most`` adds the rows the unreadable stretches could have
held; with the table's witnesses intact both equal the truth, and with every witness
destroyed too (its indexes and FTS copies) nothing names a lost row, ``lost`` is 0 and
``lost_at_most`` still bounds the truth (here exactly: Hermes deleted no message of the
fixture). Before, the per-table report had no count at all: a loss known only as a
stretch of rowids was a range, and the count of a large one had to be read off the
truncated key sample.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import corruption
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
