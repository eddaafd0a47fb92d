"""The query planner's statistics come through a rebuild: rows that read are never left
out unnamed. ``ANALYZE`` (or Hermes' ``PRAGMA optimize``) writes ``sqlite_stat1``; a
rebuild made its tables from the schema, skipped SQLite's own tables, and the rows were
gone with no word in the report. Real file: Hermes 0.22's own state.db."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from lab.hermes_fixtures import NEWEST, make_home
from statewarden.recovery.check import check_database
from statewarden.recovery.recover import recover

pytestmark = pytest.mark.process  # recover checks FTS5 in a child process


def stat_rows(db: Path) -> list[tuple[object, ...]]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return sorted(conn.execute("SELECT * FROM sqlite_stat1").fetchall(), key=repr)
    finally:
        conn.close()


def test_a_rebuild_keeps_the_statistics(tmp_path: Path) -> None:
    """ANALYZE, then the messages root page zeroed (a rebuild with salvage): the output
    holds the source's sqlite_stat1 rows as they were, and passes check."""
    db = make_home(tmp_path / "hermes", NEWEST) / "state.db"
    conn = apsw.Connection(str(db))
    try:
        conn.execute("ANALYZE")
        (page,) = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'messages'")
        (size,) = conn.execute("PRAGMA page_size")
    finally:
        conn.close()
    before = stat_rows(db)
    assert before
    with open(db, "r+b") as f:
        f.seek((int(page[0]) - 1) * int(size[0]))
        f.write(b"\0" * int(size[0]))
    out = tmp_path / "out.db"
    report = recover(db, out)
    assert report.verified, report.verification
    assert report.strategy != "reindex"  # the rebuild path, not a copy of the whole file
    assert stat_rows(out) == before
    assert check_database(out, tmp_path).damage == "none"
