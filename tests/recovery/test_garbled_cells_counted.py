"""A cell the table's b-tree reaches that decodes to no row the table could store is a
row lost, its key unknown: recover counts it (``unnamed_lost``) and never calls the
table complete, with or without an index or FTS copy left to name the row."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import corruption
from lab.corruption import table_rows as rows
from tests.support.recovery import recover_json


@pytest.mark.parametrize(
    ("table", "cell", "witnesses"),
    [
        ("messages", 0, False),
        ("messages", 2, False),
        ("sessions", 0, False),
        ("sessions", 3, False),
        ("messages", 2, True),
    ],
)
def test_a_zeroed_cell_start_is_counted_lost(
    tmp_path: Path, table: str, cell: int, *, witnesses: bool
) -> None:
    """The sector over a cell's start zeroed: the cells it covers read as rowid 0 with
    an empty record, which fails NOT NULL and is set aside. Each row the output lacks
    of those the sector touched is counted, by key (``lost``) where a witness names it,
    else unnamed; the table is not complete, loss is detected, and every other row is
    exactly as Hermes wrote it. (Without witnesses the set-aside cells were counted
    nowhere: status "complete", unnamed_lost 0, one or two messages really lost; a third
    rowid-0 cell on one leaf was not even read.)"""
    case = corruption.zeroed_sector_at_cell_start(
        tmp_path / "db", table=table, cell=cell, witnesses=witnesses
    )
    hit = set(case.lost_rowids[table])
    code, rep, out = recover_json(case, tmp_path)
    t = rep["tables"][table]
    sql = f"SELECT rowid, * FROM {table} ORDER BY rowid"
    got = {r[0]: r for r in rows(out, sql)}
    want = {r[0]: r for r in rows(case.pristine, sql)}
    gone = {r for r in want if r not in got}
    assert gone
    assert gone <= hit
    assert t["lost"] + t["unnamed_lost"] == len(gone)
    assert set(t["lost_keys"]) <= gone
    assert t["status"] != "complete"
    assert (code, rep["loss_detected"]) == (3, True)
    assert all(got[r] == want[r] for r in want if r not in hit)
