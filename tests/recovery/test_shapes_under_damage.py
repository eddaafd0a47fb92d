"""Tables of other shapes than Hermes' keep every row SQLite can read, damaged or not.

Invariants: no row that can be read is lost, and no value is changed; a healthy file is
healthy whatever its tables hold; every file ``recover`` writes passes ``check``.
Each case here broke one of them before:

- a blob of zeros (``zeroblob``, an R-Tree node) was taken for a zeroed sector: a
  healthy file was base damage and ``recover`` wrote the value as NULL;
- a damaged WITHOUT ROWID table was recovered as no rows at all, every row of it read
  by rowid, which it has none of (the report counted none lost);
- a damaged table with a column called ``rowid`` had that column overwritten with the
  rowid in every row copied one by one;
- a table whose columns take ``rowid``, ``_rowid_`` and ``oid`` (no SQL reaches its
  rowid) had its ``rowid`` column read as the rowid: an unexpected error, or phantom
  duplicates;
- a table with a STORED generated column (its value is in the record) was read as a
  schema text cut short: a healthy file was "unreadable";
- an empty database (schema format 0 in its header) was "unreadable";
- a table the output cannot create (a collation only its writer had) ended ``recover``
  with an unexpected error;
- another program's tables called ``sessions`` and ``messages`` were held to Hermes'
  rules for its columns: their values were "damage", and ``recover`` wrote NULL;
- an FTS5 table no other table feeds, its index damaged, was copied as it was (the
  output failed, nothing was written); a contentless one left empty was "no loss";
- an R-Tree's shadow tables were made again from the schema beside the ones its
  virtual table makes: "already exists", and the output failed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab.corruption import phantom_row, zero_middle_leaf_page
from lab.hermes_fixtures import TINY
from statewarden.recovery.check import check_database
from statewarden.recovery.diagnosis import Diagnosis
from statewarden.recovery.recover import recover

ROWS = 1500


def made(path: Path, sql: str) -> Path:
    conn = apsw.Connection(str(path))
    try:
        conn.execute(sql)
    finally:
        conn.close()
    return path


def numbered(select: str) -> str:
    """``INSERT ... SELECT`` body over the numbers 1 .. ROWS, as ``n``."""
    return (
        f"WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {ROWS})"
        f" SELECT {select} FROM g"
    )


def all_rows(db: Path, table: str) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
    finally:
        conn.close()


def probed_rows(db: Path, sql: str, keys: list[Any]) -> set[tuple[Any, ...]]:
    """The rows a lookup of each key reads from the damaged ``db`` (one that fails reads
    none): the rows that can be read, whatever a full scan does."""
    out = set()
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        for k in keys:
            try:
                out.update(conn.execute(sql, (k,)).fetchall())
            except (apsw.Error, UnicodeDecodeError):
                continue  # (text that is not UTF-8 does not read as text)
    finally:
        conn.close()
    return out


def checked(db: Path) -> Diagnosis:
    """``check``'s diagnosis of ``db`` (its private copy beside it)."""
    return check_database(db, db.parent)


def recovered(db: Path, tmp_path: Path) -> tuple[Any, Path]:
    out = tmp_path / "out.db"
    report = recover(db, out)
    assert report.verified, report.verification
    assert checked(out).damage == "none"  # every output passes check
    return report, out


@pytest.mark.process  # recover checks FTS5 in a child process
@pytest.mark.parametrize(
    "value",
    ["zeroblob(3000)", "zeroblob(20000)", "CAST(zeroblob(700) AS TEXT)"],
    ids=["in-the-cell", "overflow-pages", "nul-text"],
)
def test_a_blob_of_zeros_is_a_value(tmp_path: Path, value: str) -> None:
    """A blob of zeros in the cell and on overflow pages, and text of NUL characters in
    a table that is not Hermes' (Hermes' text holds none): healthy, recovered as it is."""
    db = made(
        tmp_path / "z.db",
        f"CREATE TABLE t(id INTEGER PRIMARY KEY, b); INSERT INTO t VALUES (1, {value}), (2, 'x')",
    )
    d = checked(db)
    assert (d.damage, d.zeroed_cells) == ("none", {})
    report, out = recovered(db, tmp_path)
    assert not report.loss_detected
    assert report.partial_rows == []
    assert all_rows(out, "t") == all_rows(db, "t")


@pytest.mark.process
def test_a_damaged_without_rowid_table_is_read_from_both_ends(tmp_path: Path) -> None:
    """A middle leaf zeroed: every row a lookup by key still reads is in the output,
    no other; the stretch that could not be read is in the report, loss detected."""
    db = made(
        tmp_path / "w.db",
        "CREATE TABLE w(k INTEGER PRIMARY KEY, a TEXT, b BLOB) WITHOUT ROWID;"
        " CREATE INDEX wa ON w(a);"
        " INSERT INTO w " + numbered("n, printf('v%d', n), randomblob(n % 40)"),
    )
    pristine = set(all_rows(db, "w"))
    zero_middle_leaf_page(db, "w")
    readable = probed_rows(db, "SELECT * FROM w WHERE k = ?", list(range(1, ROWS + 1)))
    assert 0 < len(readable) < ROWS
    report, out = recovered(db, tmp_path)
    held = set(all_rows(out, "w"))
    assert readable <= held <= pristine
    t = report.tables["w"]
    assert report.loss_detected
    assert t.unread_stretch is not None
    assert t.status == "partial"
    assert t.source_rows == t.recovered == len(held)
    assert report.render()[-1] == (
        "result: verified, loss detected: a stretch of rows no rowid reaches could not be read"
    )


@pytest.mark.process
def test_a_damaged_table_keeps_its_column_called_rowid(tmp_path: Path) -> None:
    """Copied row by row past a zeroed leaf, each row keeps the value of its column
    called ``rowid`` (it was written over with the rowid)."""
    db = made(
        tmp_path / "r.db",
        "CREATE TABLE t(rowid TEXT, a BLOB);"
        " INSERT INTO t " + numbered("printf('r%d', n), randomblob(30)"),
    )
    pristine = set(all_rows(db, "t"))
    zero_middle_leaf_page(db, "t")
    readable = probed_rows(
        db, 'SELECT "rowid", a FROM t WHERE _rowid_ = ?', list(range(1, ROWS + 1))
    )
    report, out = recovered(db, tmp_path)
    held = set(all_rows(out, "t"))
    assert readable <= held <= pristine
    assert report.loss_detected


@pytest.mark.process
@pytest.mark.parametrize("values", [[1, 1, 2], ["a", None, "a"]], ids=["ints", "text-null"])
def test_no_name_reaches_the_rowid(tmp_path: Path, values: list[Any]) -> None:
    """Columns called ``rowid``, ``_rowid_`` and ``oid``: a healthy file is healthy;
    and with another table damaged (a phantom row in Hermes' sessions), ``recover``
    copies every row of it, counted (nothing names its rows)."""
    case = phantom_row(tmp_path / "hermes", TINY)
    healthy = tmp_path / "healthy.db"
    shutil.copyfile(case.pristine, healthy)
    sql = "CREATE TABLE u(rowid, _rowid_, oid, x);" + "".join(
        f" INSERT INTO u VALUES ({v!r}, {v!r}, {v!r}, {i});".replace("None", "NULL")
        for i, v in enumerate(values)
    )
    for db in (healthy, case.db):
        made(db, sql)
    d = checked(healthy)
    assert (d.damage, d.notes) == ("none", [])
    u = next(t for t in d.tables if t.name == "u")
    assert (u.scan_rows, u.findings()) == (len(values), [])
    report, out = recovered(case.db, tmp_path)
    assert report.strategy == "rebuild"
    assert all_rows(out, "u") == all_rows(case.db, "u")
    t = report.tables["u"]
    assert (t.status, t.source_rows, t.recovered, t.lost) == ("complete", 3, 3, 0)


@pytest.mark.process
@pytest.mark.parametrize("damaged", [False, True], ids=["healthy", "zeroed-leaf"])
def test_a_stored_generated_column_is_read_from_the_record(tmp_path: Path, damaged: bool) -> None:
    """A STORED generated column between two others: healthy, the file is healthy;
    copied row by row past a zeroed leaf, SQLite computes it again in the output."""
    db = made(
        tmp_path / "g.db",
        "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT,"
        " s TEXT GENERATED ALWAYS AS (a || 'x') STORED, v AS (a || 'y') VIRTUAL, b BLOB);"
        " INSERT INTO t(a, b) " + numbered("printf('a%d', n), randomblob(40)"),
    )
    pristine = set(all_rows(db, "t"))
    if not damaged:
        d = checked(db)
        assert (d.damage, d.notes) == ("none", [])
    else:
        zero_middle_leaf_page(db, "t")
    readable = probed_rows(db, "SELECT * FROM t WHERE id = ?", list(range(1, ROWS + 1)))
    report, out = recovered(db, tmp_path)
    held = set(all_rows(out, "t"))
    assert readable <= held <= pristine
    assert report.loss_detected == damaged


@pytest.mark.process
def test_an_empty_database_is_healthy(tmp_path: Path) -> None:
    """No schema yet (its header's schema format is 0, which SQLite reads as 1): healthy,
    and recovered as it is (its header was taken for damaged)."""
    db = made(tmp_path / "empty.db", "PRAGMA user_version = 3")
    d = checked(db)
    assert (d.damage, d.notes) == ("none", [])
    report, _ = recovered(db, tmp_path)
    assert not report.loss_detected


@pytest.mark.process
def test_a_table_the_output_cannot_create_is_counted_lost(tmp_path: Path) -> None:
    """A column with a collation only its writer registered: SQLite cannot create the
    table in the output, so its rows are counted lost and the note says why; every
    other table is recovered (the copy of its rows ended with an unexpected error)."""
    db = tmp_path / "c.db"
    conn = apsw.Connection(str(db))
    try:
        conn.create_collation("rev", lambda a, b: (a < b) - (a > b))
        conn.execute(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT COLLATE rev); CREATE INDEX ia ON t(a);"
            " INSERT INTO t(a) VALUES ('x'), ('y'), ('z');"
            " CREATE TABLE u(id INTEGER PRIMARY KEY, b); INSERT INTO u(b) VALUES (1), (2);"
        )
    finally:
        conn.close()
    report, out = recovered(db, tmp_path)
    t, u = report.tables["t"], report.tables["u"]
    assert (t.status, t.source_rows, t.lost) == ("failed", 3, 3)
    assert (u.status, u.recovered) == ("complete", 2)
    assert "could not create table t: no such collation sequence: rev" in report.notes
    assert all_rows(out, "u") == all_rows(db, "u")


@pytest.mark.process
def test_tables_named_as_hermes_names_them_are_held_to_no_rule_of_hermes(tmp_path: Path) -> None:
    """Another program's ``sessions`` and ``messages`` (not Hermes' CREATE TABLE texts):
    a millisecond epoch and a blob in a text column are its values, not damage; they
    were read as values Hermes never writes, the file as base damage, and ``recover``
    wrote them as NULL."""
    db = made(
        tmp_path / "other.db",
        "CREATE TABLE sessions(id TEXT PRIMARY KEY, created_at REAL);"
        " INSERT INTO sessions VALUES ('a', 1717000000000), ('b', -5);"
        " CREATE TABLE messages(id INTEGER PRIMARY KEY, content TEXT);"
        " INSERT INTO messages(content) VALUES (x'00ff'), ('text');",
    )
    d = checked(db)
    assert (d.damage, d.misfits) == ("none", [])
    report, out = recovered(db, tmp_path)
    assert not report.loss_detected
    for table in ("sessions", "messages"):
        assert all_rows(out, table) == all_rows(db, table)


FTS_ROWS = numbered("n, printf('tok%d shared words %s', n, hex(randomblob(20)))")


@pytest.mark.process
def test_an_fts_table_with_its_own_content_is_indexed_again(tmp_path: Path) -> None:
    """An FTS5 table no other table feeds, a page of its index zeroed: its intact
    content is copied and FTS5's 'rebuild' makes the index again; every row answers a
    MATCH. Its index was copied as it was and failed verification: nothing was written,
    the healthy table beside it neither."""
    db = made(
        tmp_path / "f.db",
        "CREATE VIRTUAL TABLE f USING fts5(a);"
        " CREATE TABLE keep(id INTEGER PRIMARY KEY, v);"
        " INSERT INTO keep " + numbered("n, n") + ";"
        " INSERT INTO f(rowid, a) " + FTS_ROWS,
    )
    zero_middle_leaf_page(db, "f_data")
    report, out = recovered(db, tmp_path)
    assert not report.loss_detected
    assert all_rows(out, "keep") == all_rows(db, "keep")
    conn = apsw.Connection(str(out), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        for n in (1, ROWS // 2, ROWS):
            assert conn.execute("SELECT rowid FROM f WHERE f MATCH ?", (f"tok{n}",)).fetchall() == [
                (n,)
            ]
    finally:
        conn.close()


@pytest.mark.process
def test_a_contentless_fts_table_left_empty_is_a_loss(tmp_path: Path) -> None:
    """A contentless FTS5 table (its index the only copy of what it held), a page of its
    index zeroed: nothing rebuilds it, so it is left empty, and that is a loss: all of
    its rows (the verdict said "no loss")."""
    db = made(
        tmp_path / "c.db",
        "CREATE VIRTUAL TABLE f USING fts5(a, content=''); INSERT INTO f(rowid, a) " + FTS_ROWS,
    )
    zero_middle_leaf_page(db, "f_data")
    report, _ = recovered(db, tmp_path)
    assert report.loss_detected
    assert report.tables_lost == ["f"]


@pytest.mark.process
def test_an_r_tree_comes_through_a_rebuild(tmp_path: Path) -> None:
    """An R-Tree beside a table with a zeroed leaf: the rebuild's CREATE VIRTUAL TABLE
    makes its shadow tables (a root node in one of them), which are emptied and take
    the source's rows; the R-Tree answers as it did. They were made again from the
    schema ("already exists"), their rows set aside, and the output failed."""
    db = made(
        tmp_path / "r.db",
        "CREATE VIRTUAL TABLE r USING rtree(id, x0, x1, y0, y1);"
        " INSERT INTO r " + numbered("n, n, n + 1, n, n + 2") + ";"
        " CREATE TABLE s(id INTEGER PRIMARY KEY, v); INSERT INTO s "
        + numbered("n, randomblob(100)"),
    )
    zero_middle_leaf_page(db, "s")
    report, out = recovered(db, tmp_path)
    assert report.strategy == "rebuild"
    assert all_rows(out, "r") == all_rows(db, "r")
    conn = apsw.Connection(str(out), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        found = conn.execute("SELECT id FROM r WHERE x0 >= 700 AND x1 <= 702").fetchall()
    finally:
        conn.close()
    assert found == [(700,), (701,)]
    for shadow in ("r_node", "r_rowid", "r_parent"):
        assert report.tables[shadow].status == "complete"


@pytest.mark.process
def test_rows_alike_in_a_table_no_name_reaches_by_rowid_are_all_read(tmp_path: Path) -> None:
    """Columns called ``rowid``, ``_rowid_`` and ``oid`` whose values repeat, a middle
    leaf zeroed: the read from the end goes on to the damage, past rows equal to the
    last one the read from the start took (it stopped there: more than a thousand
    readable rows were left out)."""
    db = made(
        tmp_path / "u.db",
        "CREATE TABLE u(rowid, _rowid_, oid, x);"
        " INSERT INTO u " + numbered("n % 7, n % 7, n % 7, n % 3"),
    )
    pristine = all_rows(db, "u")
    zero_middle_leaf_page(db, "u")
    report, out = recovered(db, tmp_path)
    held = all_rows(out, "u")
    t = report.tables["u"]
    assert t.unread_stretch is not None
    assert report.loss_detected
    assert len(held) == t.source_rows == t.recovered
    assert len(held) > len(pristine) * 3 // 4  # one leaf of many lost, no more
    rest = list(pristine)
    for row in held:  # every row held is one the source had
        rest.remove(row)


@pytest.mark.process
def test_an_intact_contentless_fts_table_is_copied(tmp_path: Path) -> None:
    """A contentless FTS5 table beside a table with a zeroed leaf: its index, intact, is
    copied and answers as before (it was left empty whatever its state)."""
    db = made(
        tmp_path / "c.db",
        "CREATE VIRTUAL TABLE f USING fts5(a, content='');"
        " INSERT INTO f(rowid, a) " + FTS_ROWS + ";"
        " CREATE TABLE s(id INTEGER PRIMARY KEY, v); INSERT INTO s "
        + numbered("n, randomblob(100)"),
    )
    zero_middle_leaf_page(db, "s")
    report, out = recovered(db, tmp_path)
    assert report.tables_lost == []
    conn = apsw.Connection(str(out), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("SELECT rowid FROM f WHERE f MATCH 'tok7'").fetchall() == [(7,)]
    finally:
        conn.close()


@pytest.mark.process
def test_a_row_that_does_not_read_is_skipped_by_its_key(tmp_path: Path) -> None:
    """A WITHOUT ROWID table, a middle leaf zeroed and two rows (one before it, one
    after) holding text that is not UTF-8: each read stops at such a row, goes on by
    key past it and names it lost; every other row that reads comes back. Both reads
    stopped there before, and more than a thousand readable rows were left out."""
    bad = "CAST(x'41ff42' AS TEXT)"
    db = made(
        tmp_path / "w.db",
        "CREATE TABLE w(k INTEGER PRIMARY KEY, v TEXT) WITHOUT ROWID;"
        " INSERT INTO w "
        + numbered(f"n, CASE WHEN n IN (300, 1200) THEN {bad} ELSE printf('v%d', n) END"),
    )
    zero_middle_leaf_page(db, "w")
    readable = probed_rows(db, "SELECT * FROM w WHERE k = ?", list(range(1, ROWS + 1)))
    report, out = recovered(db, tmp_path)
    held = set(all_rows(out, "w"))
    t = report.tables["w"]
    truth = made(
        tmp_path / "t.db", "CREATE TABLE p(k, v); INSERT INTO p " + numbered("n, 'v' || n")
    )
    assert readable <= held <= set(all_rows(truth, "p"))
    assert (300,) in t.lost_keys
    assert (1200,) in t.lost_keys
    assert report.loss_detected


@pytest.mark.process
def test_an_r_tree_whose_shadow_table_is_damaged_is_a_loss_not_a_failure(tmp_path: Path) -> None:
    """A leaf of an R-Tree's node table zeroed: its shadow tables no longer agree with
    each other, so the R-Tree is left as creating it makes it, named in tables_lost, and
    every other table is recovered. Its rows were copied as they read, the output failed
    verification, and nothing was written, the healthy table beside it neither."""
    db = made(
        tmp_path / "r.db",
        "CREATE VIRTUAL TABLE r USING rtree(id, x0, x1, y0, y1);"
        " INSERT INTO r " + numbered("n, n, n + 1, n, n + 2") + ";"
        " CREATE TABLE s(id INTEGER PRIMARY KEY, v); INSERT INTO s " + numbered("n, n * 2"),
    )
    zero_middle_leaf_page(db, "r_node")
    report, out = recovered(db, tmp_path)
    assert report.tables_lost == ["r"]
    assert report.loss_detected
    assert all_rows(out, "s") == all_rows(db, "s")
    assert all_rows(out, "r") == []


@pytest.mark.process
def test_an_fts_table_whose_own_content_is_damaged_keeps_what_reads(tmp_path: Path) -> None:
    """An FTS5 table no other table feeds, a leaf of its content table zeroed: the
    content rows that read are copied one by one and the index made again from them;
    the rows lost are reported under the content table, and the table beside it is
    whole. Its shadow tables were copied as they read, the output failed verification,
    and nothing was written."""
    db = made(
        tmp_path / "f.db",
        "CREATE VIRTUAL TABLE f USING fts5(a);"
        " INSERT INTO f(rowid, a) " + FTS_ROWS + ";"
        " CREATE TABLE keep(id INTEGER PRIMARY KEY, v); INSERT INTO keep " + numbered("n, n"),
    )
    zero_middle_leaf_page(db, "f_content")
    readable = probed_rows(
        db, "SELECT id, c0 FROM f_content WHERE id = ?", list(range(1, ROWS + 1))
    )
    report, out = recovered(db, tmp_path)
    t = report.tables["f_content"]
    assert report.loss_detected
    assert t.recovered == len(readable) < ROWS
    assert t.status == "partial"
    assert t.unreadable_ranges  # the zeroed leaf's rowids: nothing else names them
    assert all_rows(out, "keep") == all_rows(db, "keep")
    held = set(all_rows(out, "f"))
    assert len(held) == len(readable)
    conn = apsw.Connection(str(out), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        (n,) = next(iter(readable))[:1]
        assert conn.execute("SELECT rowid FROM f WHERE f MATCH ?", (f"tok{n}",)).fetchall() == [
            (n,)
        ]
    finally:
        conn.close()


@pytest.mark.process
@pytest.mark.parametrize(
    ("sql", "shadow"),
    [
        (
            "CREATE VIRTUAL TABLE v USING rtree(id, x0, x1);"
            " INSERT INTO v " + numbered("n, n, n + 1"),
            "v_rowid",
        ),
        (
            "CREATE VIRTUAL TABLE v USING fts4(body);"
            " INSERT INTO v(rowid, body) " + numbered("n, 'word' || n || ' shared'"),
            "v_segdir",
        ),
    ],
    ids=["r-tree", "fts4"],
)
def test_a_virtual_table_takes_its_rows_through_itself(
    tmp_path: Path, sql: str, shadow: str
) -> None:
    """A shadow table a virtual table's own reads do not need is damaged (an R-Tree's
    rowid map, FTS4's segment directory): the virtual table reads its rows in the
    source as ever, and they are written through it in the output, which makes its
    shadow tables again. Every row comes back: no loss."""
    db = made(tmp_path / "v.db", sql)
    pristine = all_rows(db, "v")
    zero_middle_leaf_page(db, shadow)
    report, out = recovered(db, tmp_path)
    assert not report.loss_detected
    assert report.tables_lost == []
    assert all_rows(out, "v") == pristine
