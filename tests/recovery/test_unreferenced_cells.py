"""Cells no pointer reaches on a damaged leaf (``carving.carve_damaged_leaves``): one bit
flipped in a cell pointer moves it into another cell or free space, and the cell it
named is whole on the page. The leaf's bytes no longer add up (its cells, free blocks
and fragments do not fill it), so it is carved: the unreferenced cell's row comes back
when an intact index or FTS copy vouches for it, and a deleted row's cell left in the
free space never does.

Invariant: an intact cell of a leaf the table's b-tree reaches, vouched for by the
table's witnesses, is never lost; what the pointer now reads is a garbled cell, never
a row, and never a key that existed. (Before, the row was lost in every case, and a
garbled cell that broke the table's NOT NULL columns was counted a lost key and a
stale row.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab import corruption
from lab.corruption import table_rows as rows
from statewarden.recovery.decoding import carving
from statewarden.recovery.decoding.schema import Schema, read_schema
from tests.support.cli import run_ctl


def schema_of(db: Path) -> Schema:
    conn = apsw.Connection(
        f"file:{db}?immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        return read_schema(conn)
    finally:
        conn.close()


def recover(db: Path, tmp_path: Path) -> tuple[int, dict[str, Any], Path]:
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir(exist_ok=True)
    code, stdout, err = run_ctl(
        "recover", "--source", str(db), "--output", str(out), "--json", "--progress", "none"
    )
    assert err == ""
    return code, json.loads(stdout), out


def same_table(a: Path, b: Path, table: str) -> bool:
    sql = f"SELECT rowid, * FROM {table} ORDER BY rowid"
    return rows(a, sql) == rows(b, sql)


@pytest.mark.parametrize("table", ["messages", "sessions"])
@pytest.mark.parametrize("bit", [3, 5, 7])
@pytest.mark.parametrize("cell", [1, 2])
def test_the_row_a_flipped_pointer_left_behind_comes_back(
    tmp_path: Path, table: str, bit: int, cell: int
) -> None:
    """Every row of sessions and messages as Hermes wrote it, no loss, no stale row, and
    what recover wrote passes check."""
    case = corruption.flipped_cell_pointer(tmp_path / "db", table=table, cell=cell, bit=bit)
    code, doc, out = recover(case.db, tmp_path)
    assert (code, doc["verified"], doc["loss_detected"], doc["lost"]) == (0, True, False, {})
    assert doc["stale_rows"] == []
    for t in ("sessions", "messages"):
        assert same_table(out, case.pristine, t), t
    code, out_json, _ = run_ctl("check", "--db", str(out), "--json", "--progress", "none")
    assert (code, json.loads(out_json)["damage"]) == (0, "none")


def test_a_deleted_row_left_in_the_free_space_never_comes_back(tmp_path: Path) -> None:
    """The leaf's last row was deleted before (its cell left whole in the page's
    unallocated space, its index entries and FTS copies gone with it): the carve finds
    it, nothing vouches for it, so it stays out; the flipped pointer's row comes back."""
    case = corruption.flipped_cell_pointer(
        tmp_path / "db", table="messages", cell=1, bit=5, delete_last=True
    )
    (gone,) = case.deleted["messages"]
    carved = carving.carve_damaged_leaves(case.db, schema_of(case.db), ["messages"])
    assert gone in {r for r, _ in carved["messages"]}  # the carve does meet it
    code, doc, out = recover(case.db, tmp_path)
    assert (code, doc["loss_detected"]) == (0, False)
    assert rows(out, f"SELECT 1 FROM messages WHERE rowid = {gone}") == []
    for t in ("sessions", "messages"):
        assert same_table(out, case.pristine, t), t
