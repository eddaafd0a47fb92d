"""A value Hermes never writes, but that an index entry of the same row holds too, was
written through SQLite as it reads: someone wrote it, no change on disk made it.

``check`` called such a file damaged, and ``recover`` wrote a placeholder, then the
index's value back, and called its own output damaged (a timestamp of -1.5); a session
id stored as a blob (its unique index holds the blob) was dropped as unreadable. And a
row salvaged from pages kept a value no witness vouches for, which the rebuild blanks,
so ``check`` called that output damaged. Invariants: one rule for ``check`` and every
path of ``recover`` (``column_types.unwitnessed``); every output passes ``check``; no
value that reads and that a witness vouches for is changed. Real files: Hermes 0.22's
own, changed through SQLite as another program would.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab.hermes_fixtures import NEWEST, make_home
from statewarden.recovery.check import check_database
from statewarden.recovery.recover import recover

pytestmark = pytest.mark.process  # check and recover check FTS5 in a child process


def hermes_file(tmp_path: Path, sql: str) -> Path:
    """Hermes 0.22's state.db with ``sql`` run on it, closed (no -wal left)."""
    db = make_home(tmp_path / "hermes", NEWEST) / "state.db"
    conn = apsw.Connection(str(db))
    try:
        conn.execute(sql)
    finally:
        conn.close()
    return db


def one(db: Path, sql: str) -> Any:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = conn.execute(sql).fetchone()
        return None if row is None else row[0]
    finally:
        conn.close()


def test_an_odd_timestamp_an_index_holds_too_is_no_damage(tmp_path: Path) -> None:
    """A message's timestamp of -1.5 (outside Hermes' window; the session index holds
    it too): healthy, and recovered as it is with no loss; the output passes check."""
    db = hermes_file(tmp_path, "UPDATE messages SET timestamp = -1.5 WHERE id = 5")
    assert check_database(db, tmp_path).damage == "none"
    out = tmp_path / "out.db"
    report = recover(db, out)
    assert report.verified, report.verification
    assert not report.loss_detected
    assert one(out, "SELECT timestamp FROM messages WHERE id = 5") == -1.5
    assert check_database(out, tmp_path).damage == "none"


def test_a_session_id_stored_as_a_blob_is_kept(tmp_path: Path) -> None:
    """A session's id stored as a blob (its unique index holds the blob): the row is
    copied as it is, never dropped as unreadable."""
    db = hermes_file(tmp_path, "UPDATE sessions SET id = CAST(id AS BLOB) WHERE rowid = 2")
    before = one(db, "SELECT id FROM sessions WHERE rowid = 2")
    out = tmp_path / "out.db"
    report = recover(db, out)
    assert report.verified, report.verification
    assert one(out, "SELECT id FROM sessions WHERE rowid = 2") == before
    assert report.tables["sessions"].lost == 0


def test_a_salvaged_row_is_held_to_the_rule_the_rebuild_is(tmp_path: Path) -> None:
    """A message's content stored as a blob (no index holds content) and the messages
    root page zeroed, so its rows come back from their pages: the content is blanked
    and reported as a partial row, as the rebuild does, and the output passes check.
    Before, the salvaged row kept the blob and check called the output damaged."""
    db = hermes_file(tmp_path, "UPDATE messages SET content = CAST(content AS BLOB) WHERE id = 5")
    root = one(db, "SELECT rootpage FROM sqlite_schema WHERE name = 'messages'")
    damaged = tmp_path / "damaged.db"
    shutil.copyfile(db, damaged)
    with open(damaged, "r+b") as f:
        f.seek((root - 1) * 4096)
        f.write(b"\0" * 4096)
    out = tmp_path / "out.db"
    report = recover(damaged, out)
    assert report.verified, report.verification
    assert check_database(out, tmp_path).damage == "none"
    (partial,) = [p for p in report.partial_rows if p["table"] == "messages"]
    assert (partial["rowid"], partial["columns"]) == (5, ["content"])
    assert one(out, "SELECT content FROM messages WHERE id = 5") is None
    assert one(out, "SELECT count(*) FROM messages") == one(db, "SELECT count(*) FROM messages")


def test_a_witnessed_value_beside_text_that_is_not_utf8(tmp_path: Path) -> None:
    """The same row holds a timestamp of -1.5 (the index holds it too) and content that
    is not UTF-8 (Python cannot read it): the witness is still asked, in SQL, so check
    calls it healthy as it does each alone, and recover keeps both."""
    db = hermes_file(
        tmp_path,
        "UPDATE messages SET timestamp = -1.5, content = CAST(x'ff41ff' AS TEXT) WHERE id = 5",
    )
    diag = check_database(db, tmp_path)
    assert not diag.misfits
    out = tmp_path / "out.db"
    report = recover(db, out)
    assert report.verified, report.verification
    assert one(out, "SELECT timestamp FROM messages WHERE id = 5") == -1.5
    assert one(out, "SELECT hex(content) FROM messages WHERE id = 5") == "FF41FF"


def test_a_column_called_rowid_is_no_rowid(tmp_path: Path) -> None:
    """messages widened by a column called ``rowid`` (ALTER TABLE ADD COLUMN), one
    content stored as a blob: the rows are addressed by the name their rowid keeps, no
    traceback; check calls it base damage, and recover's output passes check."""
    db = hermes_file(tmp_path, "UPDATE messages SET content = CAST(content AS BLOB) WHERE id = 5")
    # The SQLite apsw bundles refuses that column ("cannot add rowid alias"); the
    # system's, which Hermes writes with on Debian 12, adds it: in a process of its own.
    add = (
        "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).connection.close()"
    )
    alter = 'ALTER TABLE messages ADD COLUMN "rowid" TEXT'
    subprocess.run([sys.executable, "-c", add, str(db), alter], check=True, timeout=60)
    diag = check_database(db, tmp_path)
    assert diag.damage == "base"
    assert [m.rows for m in diag.misfits if m.table == "messages"] == [{5: ["content"]}]
    out = tmp_path / "out.db"
    report = recover(db, out)
    assert report.verified, report.verification
    assert check_database(out, tmp_path).damage == "none"
