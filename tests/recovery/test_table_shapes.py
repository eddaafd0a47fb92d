"""Tables of every shape SQLite makes are read as what they are.

A WITHOUT ROWID table is rows keyed by their primary key: `check` read every table by
rowid, a WITHOUT ROWID table has none, so its full scan read no row and a healthy file
was reported as base damage ("no row can be read by a full scan"), its foreign keys
unchecked. A table with a column called ``rowid`` has its rowid under ``_rowid_`` or
``oid``: the scans read the column instead (a healthy file with that column repeating
was "phantom duplicates", one holding NULL an unexpected error). Hermes keeps neither
today; a later schema may, and the daemon's verification would then alert on every
healthy file. Invariant: a healthy file is healthy whatever its tables' shape.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab.corruption import phantom_row
from lab.hermes_fixtures import TINY, built_db
from statewarden.recovery.diagnose import diagnose
from statewarden.recovery.recover import recover
from tests.support.recovery import scan_facts

KEYED = """
    CREATE TABLE session_tags(
        session_id TEXT REFERENCES sessions(id), tag TEXT, PRIMARY KEY(session_id, tag)
    ) WITHOUT ROWID;
    INSERT INTO session_tags SELECT id, 'a' FROM sessions;
    INSERT INTO session_tags SELECT id, 'b' FROM sessions LIMIT 5;
    CREATE TABLE tag_names(name TEXT PRIMARY KEY, note TEXT) WITHOUT ROWID;
    INSERT INTO tag_names VALUES ('a', 'first'), ('b', 'second');
    CREATE TABLE labels(id INTEGER PRIMARY KEY, name TEXT REFERENCES tag_names(name));
    INSERT INTO labels(name) VALUES ('a'), ('b'), ('a');
"""
ORPHANS = """
    INSERT INTO session_tags VALUES ('no such session', 'a');
    INSERT INTO labels(name) VALUES ('no such tag');
"""


def hermes_with_keyed_tables(tmp_path: Path, *, orphans: bool) -> Path:
    db = tmp_path / "state.db"
    shutil.copyfile(built_db(TINY), db)
    conn = apsw.Connection(str(db))
    try:
        conn.execute(KEYED + (ORPHANS if orphans else ""))
    finally:
        conn.close()
    return db


@pytest.mark.unit
def test_a_healthy_file_with_without_rowid_tables_is_healthy(tmp_path: Path) -> None:
    """Damage none; each WITHOUT ROWID table read whole (the planner's count and the
    full scan's agree, every key distinct); its foreign keys checked."""
    db = hermes_with_keyed_tables(tmp_path, orphans=False)
    d = diagnose(db)
    assert (d.damage, d.integrity_ok, d.orphans, d.notes) == ("none", True, {}, [])
    by_name = {t.name: t for t in d.tables}
    for name, rows in (("session_tags", None), ("tag_names", 2)):
        t = by_name[name]
        assert t.findings() == []
        assert t.planner_rows == t.scan_rows == t.distinct_keys
        assert rows is None or t.scan_rows == rows
    assert scan_facts(db, proved=True) == scan_facts(db, proved=False)


@pytest.mark.unit
def test_orphans_of_and_under_a_without_rowid_table_are_counted(tmp_path: Path) -> None:
    """A WITHOUT ROWID child whose parent row is missing, and a rowid child whose
    WITHOUT ROWID parent row is missing: one orphan each, with the proof and without."""
    db = hermes_with_keyed_tables(tmp_path, orphans=True)
    assert diagnose(db).orphans == {"session_tags": 1, "labels": 1}
    assert scan_facts(db, proved=True) == scan_facts(db, proved=False)


@pytest.mark.unit
@pytest.mark.parametrize(
    "values", [[1, 1, 1], [None, "abc", 2.5]], ids=["repeating", "null-text-real"]
)
def test_a_column_called_rowid_is_not_read_as_the_rowid(tmp_path: Path, values: list[Any]) -> None:
    """A table with a column called ``rowid`` (its rowid read as ``_rowid_``): healthy,
    every row read once; and with ``_rowid_`` taken too (read as ``oid``)."""
    db = tmp_path / "odd.db"
    conn = apsw.Connection(str(db))
    try:
        conn.execute("CREATE TABLE t(rowid, x); CREATE TABLE u(rowid, _rowid_, x)")
        for i, v in enumerate(values):
            conn.execute("INSERT INTO t VALUES (?, ?)", (v, i))
            conn.execute("INSERT INTO u VALUES (?, ?, ?)", (v, v, i))
    finally:
        conn.close()
    d = diagnose(db)
    assert (d.damage, d.notes) == ("none", [])
    for t in d.tables:
        assert t.findings() == []
        assert t.scan_rows == t.distinct_keys == len(values)


@pytest.mark.process  # recover checks FTS5 in a child process
@pytest.mark.parametrize("damaged", [False, True], ids=["healthy", "phantom-row"])
def test_recover_counts_a_without_rowid_table_by_its_keys(tmp_path: Path, damaged: bool) -> None:
    """``recover`` of a file with WITHOUT ROWID tables, healthy (nothing to do) and with
    a phantom row (rebuilt row by row): each such table complete, every row in the
    output and counted, no loss. Its report said every row lost ("failed") while the
    output held them all, and counted none of a healthy file's."""
    if damaged:
        db = phantom_row(tmp_path / "hermes", TINY).db
        conn = apsw.Connection(str(db))
        try:
            conn.execute(KEYED)
        finally:
            conn.close()
    else:
        db = hermes_with_keyed_tables(tmp_path, orphans=False)
    out = tmp_path / "out.db"
    report = recover(db, out)
    assert report.verified
    assert not report.loss_detected
    assert report.strategy == ("rebuild" if damaged else "none")
    for name, rows in (("session_tags", 17), ("tag_names", 2)):
        t = report.tables[name]
        assert (t.status, t.lost, t.source_rows, t.recovered) == ("complete", 0, rows, rows)
