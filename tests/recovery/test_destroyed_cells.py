"""Invariant: the loss verdict counts every row the damage took. A cell that begins in
a zeroed sector reads, for SQLite, as a row of rowid 0 with nothing stored: the row it
held is gone, its key unknown. ``recover`` once called such a file "verified, no loss"
(exit 0) while rows were missing: in a table that holds a real row 0 the cells were set
aside as second readings of it, counted nowhere. Now ``check`` names the destroyed
cells (base damage), ``recover`` counts each as a row lost unnamed (exit 3), writes no
row of rowid 0 it did not read, and its output passes ``check``."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import apsw

from tests.support.cli import run_ctl

PAGE = 4096
SECTOR = 512


def _plain_table(path: Path) -> None:
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA page_size=4096")
    conn.execute("CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT)")
    with conn:
        for i in range(1000):
            conn.execute("INSERT INTO t VALUES(?, ?)", (i, "x" * (i % 900)))
    conn.close()


def _cells_starting_in_last_sector(path: Path, page: int) -> int:
    """Read from the file itself: the cells of table leaf ``page`` whose offset lies in
    its last 512 bytes."""
    data = path.read_bytes()[(page - 1) * PAGE : page * PAGE]
    assert data[0] == 0x0D  # a table leaf
    (count,) = struct.unpack(">H", data[3:5])
    offsets = struct.unpack(f">{count}H", data[8 : 8 + 2 * count])
    return sum(off >= PAGE - SECTOR for off in offsets)


def test_cells_that_begin_in_a_zeroed_sector_are_rows_lost(tmp_path: Path) -> None:
    """The last sector of a leaf of a table with a real row 0, zeroed: check exit 3
    naming the destroyed cells; recover exit 3 with each counted lost unnamed, every
    row it wrote one the source held (none of rowid 0 but the real one), its output
    clean by check."""
    db = tmp_path / "state.db"
    _plain_table(db)
    pristine = tmp_path / "pristine.db"
    shutil.copyfile(db, pristine)
    page = 5
    destroyed = _cells_starting_in_last_sector(db, page)
    assert destroyed > 0
    with db.open("r+b") as f:
        f.seek(page * PAGE - SECTOR)
        f.write(bytes(SECTOR))
    checked = run_ctl("check", "--db", str(db), "--json")
    assert checked.exit_code == 3, checked.stdout + checked.stderr
    (diag,) = json.loads(checked.stdout)["databases"]
    assert diag["destroyed_cells"] == {"t": destroyed}
    out, report = tmp_path / "out.db", tmp_path / "report.json"
    r = run_ctl("recover", "--source", str(db), "--output", str(out), "--report", str(report))
    assert r.exit_code == 3, r.stdout + r.stderr
    rep = json.loads(report.read_text())
    assert rep["loss_detected"] is True
    assert rep["tables"]["t"]["unnamed_lost"] == destroyed
    rows = apsw.Connection(str(pristine)).execute("SELECT a, b FROM t").fetchall()
    before: dict[Any, Any] = {row[0]: row[1] for row in rows}
    after = apsw.Connection(str(out)).execute("SELECT a, b FROM t").fetchall()
    assert all(a in before for a, _ in after)
    assert [b for a, b in after if a == 0] == [before[0]]
    assert len(before) - len(after) == destroyed
    clean = run_ctl("check", "--db", str(out))
    assert clean.exit_code == 0, clean.stdout + clean.stderr
