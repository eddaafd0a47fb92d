"""One trigger that feeds two FTS tables, one of them named with a quote in it: a
schema no Hermes writes, but one SQLite takes. A phantom row in the base table makes
the file rebuilt. The quoted name (``"we""ird fts"``) was not read in the trigger, so
that FTS table had no base table and its shadow tables were copied whole while the
trigger, created before the data for the other one, wrote into it too: the output
failed FTS5's check and was not kept (exit 1). Both are filled by the trigger now."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from statewarden.demo import damage
from statewarden.recovery.decoding.schema import inserts_into
from statewarden.recovery.recover import recover

WEIRD = 'we"ird fts'
# The trigger's first INSERT names the FTS table a copy can be held against (its feed);
# the second one, not read as a feed, is filled by the trigger: both ways round.
FIRST = {"quoted first": '"we""ird fts"', "plain first": "plain_fts"}
SECOND = {"quoted first": "plain_fts", "plain first": '"we""ird fts"'}


def _schema(first: str, second: str) -> str:
    return f"""
CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT);
CREATE VIRTUAL TABLE {first} USING fts5(body);
CREATE VIRTUAL TABLE {second} USING fts5(body, tokenize='trigram');
CREATE TRIGGER t_ai AFTER INSERT ON t BEGIN
  INSERT INTO {first}(rowid, body) VALUES (new.id, new.body);
  INSERT INTO {second}(rowid, body) VALUES (new.id, new.body);
END;
CREATE TRIGGER t_ad AFTER DELETE ON t BEGIN
  DELETE FROM {first} WHERE rowid = old.id;
  DELETE FROM {second} WHERE rowid = old.id;
END;
"""


def _build(path: Path, schema: str) -> None:
    conn = apsw.Connection(str(path))
    try:
        conn.execute("PRAGMA journal_mode=WAL").fetchall()
        conn.execute(schema)
        with conn:
            for i in range(1, 3001):
                conn.execute(
                    "INSERT INTO t(id, body) VALUES (?, ?)", (i, f"hello world note {i} " * 5)
                )
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


def _one(path: Path, sql: str, *args: object) -> object:
    conn = apsw.Connection(str(path))
    try:
        row = conn.execute(sql, args).fetchone()
        return row[0] if row else None
    finally:
        conn.close()


@pytest.mark.parametrize("order", list(FIRST))
def test_both_fts_tables_are_filled_by_the_trigger(tmp_path: Path, order: str) -> None:
    """Verified, nothing lost, both FTS tables pass FTS5's check in the output and
    answer every MATCH as the source does."""
    db = tmp_path / "state.db"
    _build(db, _schema(FIRST[order], SECOND[order]))
    damage.duplicate_cell(db, "t", 5)
    out = tmp_path / "out.db"
    report = recover(db, out)
    assert (report.damage, report.verified, report.loss_detected) == ("base", True, False)
    assert report.verification is not None
    assert report.verification.fts == {WEIRD: "ok", "plain_fts": "ok"}
    assert _one(out, "SELECT count(*) FROM t") == 3000
    for fts, term in ((FIRST[order], "hello"), (SECOND[order], "ote 12")):
        q = f"SELECT count(*) FROM {fts} WHERE {fts} MATCH ?"
        assert _one(out, q, f'"{term}"') == _one(db, q, f'"{term}"')
        assert _one(out, q, f'"{term}"') != 0


def test_inserts_into_reads_every_quoting() -> None:
    """Bare, double-quoted (a quote doubled inside), backquoted, bracketed and
    single-quoted names; never a longer name that starts the same."""
    for text in (
        'INSERT INTO "we""ird fts"(rowid) VALUES (1)',
        'INSERT INTO `we"ird fts` VALUES (1)',
    ):
        assert inserts_into(text, WEIRD), text
    for text in (
        "insert into messages_fts(rowid) values (1)",
        'INSERT INTO "messages_fts" VALUES (1)',
        "INSERT  INTO [messages_fts] VALUES (1)",
        "INSERT INTO 'messages_fts' VALUES (1)",
    ):
        assert inserts_into(text, "messages_fts"), text
    assert not inserts_into("INSERT INTO messages_fts_trigram(rowid) VALUES (1)", "messages_fts")
    assert not inserts_into('INSERT INTO "messages_fts_trigram" VALUES (1)', "messages_fts")
    assert not inserts_into('INSERT INTO "we"', WEIRD)
