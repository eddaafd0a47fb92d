"""What a complete, clean integrity check of the b-trees proves is not scanned for again,
and the facts come out the same.

``check`` waits for SQLite's check of the b-trees before it scans the tables; when that
check finds nothing (every page reads, each table's rowids rise, each full index lists
exactly its table's rows), a rowid table's rows are counted rather than scanned, the rowids
its FTS copies hold that it lacks are looked up by SQL, and the orphans are counted by
plain full scans rather than ``scan.py``'s reads past damage (``table_scans.py``).
Invariant: with the proof and without it, the same facts, on healthy files of every Hermes
layout and on files whose b-trees are clean but whose rows are not (rows deleted behind
their FTS copies, a copy above the AUTOINCREMENT sequence, a session deleted under its
messages).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import apsw
import pytest

from lab.hermes_fixtures import MAIN_EXTERNAL, NEWEST, OLDEST, TALL, TINY, AnySpec, built_db
from statewarden.recovery.diagnose import diagnose
from tests.support.recovery import scan_facts

pytestmark = pytest.mark.unit

SPECS: dict[str, AnySpec] = {
    "0.13.0": OLDEST,
    "0.19.0": TINY,
    "0.22": NEWEST,
    "main": MAIN_EXTERNAL,
    "tall": TALL,
}
# The layouts whose FTS tables keep their own copy of each message's text.
OWN_COPIES = ("0.13.0", "0.19.0")


def rows_gone_behind_their_copies(db: Path) -> tuple[list[int], int]:
    """Three messages deleted with the triggers that would remove their FTS copies
    dropped, the newest of them above the sequence lowered under it, and a session
    deleted under its messages, a message whose session id is not UTF-8: b-trees SQLite
    finds clean, rows that are not. Returns
    (the rowids deleted, the one above the sequence)."""
    conn = apsw.Connection(str(db))
    try:
        triggers = [
            (str(name), str(sql))
            for name, sql in conn.execute(
                "SELECT name, sql FROM sqlite_schema"
                " WHERE type = 'trigger' AND tbl_name = 'messages'"
            )
        ]
        for name, _sql in triggers:
            conn.execute(f'DROP TRIGGER "{name}"')
        newest = int(conn.execute("SELECT max(rowid) FROM messages").fetchall()[0][0] or 0)
        gone = [r for (r,) in conn.execute("SELECT rowid FROM messages LIMIT 2 OFFSET 5")]
        gone.append(newest)
        conn.execute(f"DELETE FROM messages WHERE rowid IN ({', '.join(map(str, gone))})")
        conn.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'messages'", (newest - 1,))
        conn.execute(
            "DELETE FROM sessions WHERE id = (SELECT session_id FROM messages LIMIT 1 OFFSET 40)"
        )
        # A parent key that is not UTF-8: Python cannot read the row as text, SQLite can.
        conn.execute(
            "UPDATE messages SET session_id = CAST(x'ff6f' AS TEXT)"
            " WHERE rowid = (SELECT min(rowid) FROM messages)"
        )
        for _name, sql in triggers:
            conn.execute(sql)
    finally:
        conn.close()
    return gone, newest


@pytest.mark.parametrize("layout", SPECS)
def test_a_healthy_file_has_the_same_facts_with_the_proof_and_without(
    tmp_path: Path, layout: str
) -> None:
    """Every table's facts, the orphans, the failed foreign-key checks and the FTS
    copies compared are the same with the proof as without it."""
    db = tmp_path / "state.db"
    shutil.copyfile(built_db(SPECS[layout]), db)
    assert scan_facts(db, proved=True) == scan_facts(db, proved=False)


@pytest.mark.parametrize("layout", ["0.13.0", "0.19.0", "0.22"])
def test_rows_gone_behind_clean_b_trees_are_the_same_facts_with_the_proof(
    tmp_path: Path, layout: str
) -> None:
    """Rows deleted behind their FTS copies are missing rows (where the FTS tables keep
    their own copies) and the messages of a deleted session are orphans, with the proof
    as without it; the copy above the sequence is no missing row in either. The b-trees
    are clean (``check`` takes the proof on this file)."""
    db = tmp_path / "state.db"
    shutil.copyfile(built_db(SPECS[layout]), db)
    gone, above = rows_gone_behind_their_copies(db)
    proved = scan_facts(db, proved=True)
    assert proved == scan_facts(db, proved=False)
    tables, orphans, _fk_errors, _copies = proved
    (messages,) = [t for t in tables if t.name == "messages"]
    expected = sorted(set(gone) - {above}) if layout in OWN_COPIES else []
    assert messages.missing_rows == expected
    assert orphans.get("messages", 0) > 0
    diagnosis = diagnose(db)
    assert diagnosis.integrity_ok  # the b-trees are clean: the proof is taken
    assert diagnosis.orphans == orphans
    (seen,) = [t for t in diagnosis.tables if t.name == "messages"]
    assert seen.missing_rows == messages.missing_rows


# Files whose b-trees SQLite finds clean, where the proof does not cover a table: a column
# named rowid (the word then names it, not the rowid), a foreign key's parent that is a
# virtual table (its scan is FTS5's, no b-tree the check read), an FTS copy in a table of
# another shape than FTS5's own (its ids need not rise). Each once gave other facts with
# the proof than without it.
NOT_COVERED = {
    "a column named rowid": """
        CREATE TABLE t(rowid INT, x); INSERT INTO t VALUES (1, 'a'), (1, 'b'), (1, 'c');""",
    "a parent with a column named rowid": """
        CREATE TABLE p(rowid INT, k TEXT PRIMARY KEY);
        INSERT INTO p VALUES (7, 'a'), (7, 'b'), (7, 'c');
        CREATE TABLE c(id INTEGER PRIMARY KEY, pk REFERENCES p(k));
        INSERT INTO c(pk) VALUES ('a'), ('b'), ('c');""",
    "a virtual table as parent": """
        CREATE TABLE src(k INT, title TEXT);
        CREATE VIRTUAL TABLE f USING fts5(title, content='src', content_rowid='k');
        INSERT INTO src VALUES (5, 'a'), (5, 'b'), (5, 'c');
        CREATE TABLE c(id INTEGER PRIMARY KEY, t TEXT REFERENCES f(title));
        INSERT INTO c(t) VALUES ('a'), ('b'), ('c');""",
    "an FTS copy in a table of another shape": """
        CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT);
        CREATE VIRTUAL TABLE x USING fts5(body);
        CREATE TRIGGER t_ai AFTER INSERT ON t BEGIN
            INSERT INTO x(rowid, body) VALUES (new.id, new.body); END;
        INSERT INTO t(body) VALUES ('a'), ('b'), ('c'), ('d'), ('e');""",
}
# The FTS copy's table made again without FTS5 (as a writer that drops modules could),
# its ids out of order.
OTHER_SHAPE = """
    DROP TABLE x_content; CREATE TABLE x_content(id INT, c0);
    INSERT INTO x_content VALUES (1, 'a'), (20, 'z'), (2, 'b'), (21, 'y'), (3, 'c');"""


def btrees_clean(db: Path) -> bool:
    """SQLite's whole-file check of the b-trees, as ``check`` runs it (FTS5 modules
    dropped: its shadow tables read as tables), finds nothing."""
    uri = f"file:{db}?mode=ro"
    conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    try:
        conn.drop_modules(None)
        return [r[0] for r in conn.execute("PRAGMA integrity_check(2147483647)")] == ["ok"]
    finally:
        conn.close()


@pytest.mark.parametrize("case", NOT_COVERED)
def test_what_the_proof_does_not_cover_is_scanned(tmp_path: Path, case: str) -> None:
    """On clean b-trees, a table the proof does not cover is scanned as without it:
    the same facts either way."""
    db = tmp_path / "odd.db"
    conn = apsw.Connection(str(db))
    try:
        conn.execute(NOT_COVERED[case])
        if "x_content" in NOT_COVERED[case] or "fts5(body)" in NOT_COVERED[case]:
            conn.drop_modules(None)
            conn.execute(OTHER_SHAPE)
    finally:
        conn.close()
    assert btrees_clean(db)
    assert scan_facts(db, proved=True) == scan_facts(db, proved=False)
