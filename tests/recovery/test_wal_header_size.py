"""The header's database size against the file's size, and header fields that make
SQLite refuse a file whose pages are intact.

Pages past the header's size are not the database's when no b-tree reaches them (a
stale tail: SQLite reads none of them), so rows there are never taken. When the live
b-trees do reach past it, the size field is the damage, and every row on those pages
is recovered. Files written by Hermes; the damage is one header field, or a stale copy
of a leaf appended after Hermes deleted its messages and vacuumed. A wrong text
encoding, file format version or schema format is read as the file proves it.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import apsw
import pytest

from lab import corruption
from lab.corruption import recount_messages
from lab.hermes_fixtures import SMALL, built_db
from lab.wal_damage import page_at, set_header_size, table_leaves
from tests.support.cli import run_ctl
from tests.support.recovery import ordered_rows as rows_of
from tests.support.recovery import recover_quietly as recover

TABLES = ("sessions", "messages")


def test_a_size_field_smaller_than_the_live_trees(tmp_path: Path) -> None:
    """The header's size is cut to two thirds of the file, whose last third holds live
    leaves the interior pages still point to: every row comes back exactly (exit 0),
    and check says the size field is damaged (base: SQLite reads none of those rows)."""
    case = corruption.fresh_copy(tmp_path / "home", SMALL)
    pages = case.db.stat().st_size // 4096
    set_header_size(case.db, pages * 2 // 3)
    code, report, out = recover(case.db, tmp_path)
    assert code == 0, report["notes"]
    for name in TABLES:
        assert rows_of(out, name) == rows_of(case.pristine, name), name
    code, stdout, _ = run_ctl("check", "--db", str(case.db), "--json", "--progress", "none")
    assert code == 3
    (diag,) = json.loads(stdout)["databases"]
    assert diag["damage"] == "base"
    assert any("the size field is damaged" in n for n in diag["notes"]), diag["notes"]


def test_a_stale_leaf_past_the_size_stays_out(tmp_path: Path) -> None:
    """Hermes-style delete of one leaf's messages (triggers run, counts updated), then
    VACUUM; a stale copy of that leaf is left past the header's size, and an unrelated
    messages leaf is zeroed (so pages are salvaged). The deleted messages are not in
    the output; the zeroed leaf's messages are reported lost, nothing else is."""
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    shutil.copyfile(built_db(SMALL), db)
    root = corruption.schema_roots(db)["messages"]
    leaves = sorted(table_leaves(db, root).items())
    stale_page, deleted = leaves[len(leaves) // 2]
    stale = page_at(db, stale_page)
    conn = apsw.Connection(str(db))
    with conn:
        conn.execute(f"DELETE FROM messages WHERE id IN ({','.join(map(str, deleted))})")
        recount_messages(conn)
    conn.execute("VACUUM")
    conn.close()
    pristine = tmp_path / "pristine.db"
    shutil.copyfile(db, pristine)
    zeroed_page, zeroed = sorted(table_leaves(db, root).items())[5]
    with open(db, "r+b") as f:
        f.seek((zeroed_page - 1) * 4096)
        f.write(bytes(4096))
        f.seek(0, 2)
        f.write(stale)
    code, report, out = recover(db, tmp_path)
    assert code == 3
    held = {int(str(r)) for (r,) in corruption.table_rows(out, "SELECT id FROM messages")}
    assert not held & deleted
    truth = {int(str(r)) for (r,) in corruption.table_rows(pristine, "SELECT id FROM messages")}
    assert truth - held <= zeroed
    assert set(report["tables"]["messages"]["lost_keys"]) == truth - held


@pytest.mark.parametrize(
    ("offset", "data"),
    [(56, struct.pack(">I", 3)), (18, bytes([3, 3])), (44, struct.pack(">I", 9))],
    ids=["encoding-utf16be", "versions-3", "schema-format-9"],
)
def test_one_wrong_header_field(tmp_path: Path, offset: int, data: bytes) -> None:
    """One header field wrong (text encoding 1 -> 3, file format versions 2 -> 3, schema
    format 4 -> 9), every page intact: SQLite refuses the file, so check says it is
    unreadable (exit 4) and names the field; recover reads it with the values the file
    proves and every row comes back (exit 0)."""
    case = corruption.fresh_copy(tmp_path / "home", SMALL)
    with open(case.db, "r+b") as f:
        f.seek(offset)
        f.write(data)
    code, report, out = recover(case.db, tmp_path)
    assert code == 0, report.get("notes")
    for name in TABLES:
        assert rows_of(out, name) == rows_of(case.pristine, name), name
    assert any("the database header is damaged" in n for n in report["notes"])
    code, stdout, _ = run_ctl("check", "--db", str(case.db), "--json", "--progress", "none")
    (diag,) = json.loads(stdout)["databases"]
    assert code == 4
    assert diag["damage"] == "unreadable"
    assert any("the database header is damaged" in n for n in diag["notes"]), diag["notes"]
