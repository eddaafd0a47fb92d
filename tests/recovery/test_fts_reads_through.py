"""A search index that does not read through itself is no healthy one.

SQLite's ``integrity_check`` runs FTS5's own check, which never reads an external-content
table's content: after ``ALTER TABLE messages RENAME COLUMN tool_name TO ...`` (legal
SQL, run by hand), Hermes 0.22's ``messages_fts`` names a column its content no longer
has, every search fails ("no such column"), and ``check`` called the file healthy while
``recover`` could not verify any output of it. Invariant: ``check`` says healthy only of
a file whose FTS tables read. Real file: Hermes 0.22's own state.db.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from lab.hermes_fixtures import NEWEST, make_home
from statewarden.recovery.check import check_database

pytestmark = pytest.mark.process  # check runs FTS5's checks in a child process


def test_an_index_whose_content_lost_a_column_it_names_is_damage(tmp_path: Path) -> None:
    """The column renamed: derived damage (exit 1 class), the FTS table named with the
    error; the same file before the rename is healthy."""
    db = make_home(tmp_path / "hermes", NEWEST) / "state.db"
    assert check_database(db, tmp_path).damage == "none"
    conn = apsw.Connection(str(db))
    try:
        conn.execute("ALTER TABLE messages RENAME COLUMN tool_name TO tool_nome")
        with pytest.raises(apsw.SQLError, match="no such column"):
            conn.execute("SELECT * FROM messages_fts LIMIT 1").fetchall()
    finally:
        conn.close()
    diag = check_database(db, tmp_path)
    assert diag.damage == "derived"
    assert "no such column" in diag.fts["messages_fts"]
