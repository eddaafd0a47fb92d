"""What ``check`` and ``recover`` say about a header field or a schema row SQLite
refuses: only what is true, in the class the damage really is.

The databases are Hermes' own (``lab.hermes_fixtures.later_db``); the damage is one field or
one schema row, written with plain writes and SQLite's ``writable_schema``.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import apsw

from lab import corruption
from lab.hermes_fixtures import later_db
from tests.support.cli import run_ctl


def hermes_copy(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    shutil.copyfile(later_db(), db)
    return db


def check_doc(db: Path, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    code, out, err = run_ctl("check", "--db", str(db), "--json", "--work-dir", str(tmp_path / "w"))
    assert err == ""
    doc: dict[str, Any] = json.loads(out)["databases"][0]
    return code, doc


def test_header_page_count_larger_than_a_whole_file(tmp_path: Path) -> None:
    """The header's page count 296 -> 10000, every page in place: ``check`` said "the
    file is truncated" and base damage (exit 3) while ``recover`` brought every row back
    with no word about the header. Now ``check`` says the header's count is wrong, class
    unreadable (SQLite refuses the file as it is: exit 4), and ``recover`` says the same
    in its notes, every row back, exit 0."""
    db = hermes_copy(tmp_path)
    pages = db.stat().st_size // 4096
    with open(db, "r+b") as f:
        f.seek(28)
        f.write(struct.pack(">I", 10000))
    code, doc = check_doc(db, tmp_path)
    assert (code, doc["damage"]) == (4, "unreadable")
    want = (
        f"the header says 10000 pages, the file holds {pages} ({pages * 4096} bytes) and every"
        " page the database references: the header's page count is wrong, not the file"
        " short; SQLite refuses the file as it is"
    )
    assert want in doc["findings"]
    assert not [f for f in doc["findings"] if "truncated" in f]
    out = tmp_path / "out.db"
    code, text, _ = run_ctl("recover", "--source", str(db), "--output", str(out), "--json")
    assert code == 0
    report = json.loads(text)
    assert want in report["notes"]
    assert report["loss_detected"] is False
    for sql in ("SELECT * FROM sessions ORDER BY id", "SELECT * FROM messages ORDER BY id"):
        assert corruption.table_rows(out, sql) == corruption.table_rows(later_db(), sql)


def test_header_page_count_larger_than_a_cut_file_is_still_truncation(tmp_path: Path) -> None:
    """The file cut to two thirds of its pages (the header's count then larger, and
    true): pages the b-trees reference are gone, so it stays "the file is truncated",
    base damage."""
    db = hermes_copy(tmp_path)
    pages = db.stat().st_size // 4096
    keep = pages * 2 // 3
    assert keep * 4096 % pages  # no other page size makes the header's count fit the file
    with open(db, "r+b") as f:
        f.truncate(keep * 4096)
    code, doc = check_doc(db, tmp_path)
    assert (code, doc["damage"]) == (3, "base")
    assert (
        f"the file is truncated: the header says {pages} pages, {keep} are present"
        f" ({keep * 4096} bytes)" in doc["findings"]
    )


def test_one_create_table_that_no_longer_parses(tmp_path: Path) -> None:
    """Page 1 intact, one ``CREATE TABLE`` text that no longer parses: ``check`` said
    "page 1 and the sqlite_schema pages are destroyed". Now it says what SQLite said."""
    db = hermes_copy(tmp_path)
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA writable_schema=ON")
    row = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'messages'").fetchone()
    assert row is not None
    sql = str(row[0])
    broken = sql.replace("api_content TEXT", "api_content TEXT,")
    assert broken != sql
    conn.execute("UPDATE sqlite_schema SET sql = ? WHERE name = 'messages'", (broken,))
    conn.close()
    code, doc = check_doc(db, tmp_path)
    assert (code, doc["damage"]) == (4, "unreadable")
    assert not [f for f in doc["findings"] if "destroyed" in f]
    (rebuilt,) = [f for f in doc["findings"] if "the schema was rebuilt" in f]
    assert rebuilt.startswith(
        f"{db}: the schema cannot be read (malformed database schema (messages) - near"
    )
