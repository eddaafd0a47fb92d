"""Schema 31 (Hermes 0.22) and newer with page 1 and the schema destroyed, on real files.

Hermes 0.22's own SessionDB wrote the files (``NEWEST`` in DELETE mode, as it creates
them on this SQLite, ``NEWEST_WAL`` a file that was WAL), or opened a file of an older
Hermes and upgraded it (columns it adds land last, so the column order differs from a
fresh file's). The lab zeroes page 1 and every ``sqlite_schema`` page, so every row is
intact on its own pages: recover must give back every row, the schema Hermes wrote byte
for byte, and a file Hermes 0.22 opens without rewriting anything. A file of a newer
schema (32) is named so, its rows taken by the names of the columns statewarden knows.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab import corruption
from lab.hermes_fixtures import (
    MAIN_EXTERNAL,
    MAIN_LEGACY,
    NEWEST,
    NEWEST_HERMES,
    NEWEST_WAL,
    OLDEST,
    TINY,
    AnySpec,
    built_db,
    hermes_python,
    writer_env,
)
from lab.write_known_schemas import opened_by_newest
from statewarden.sqlite import read_header
from tests.support.cli import run_ctl

NEWER = "schema 32, newer than the layouts this statewarden knows (up to 31)"


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    return corruption.table_rows(path, sql)


def schema_rows(path: Path) -> list[tuple[object, ...]]:
    return sorted(rows(path, "SELECT type, name, tbl_name, sql FROM sqlite_schema"), key=repr)


def stored_tables(path: Path) -> list[str]:
    """The tables whose rows are stored (FTS shadow tables included)."""
    q = "SELECT name, sql FROM sqlite_schema WHERE type = 'table'"
    return [str(n) for n, sql in rows(path, q) if not str(sql).startswith("CREATE VIRTUAL")]


def assert_every_row_back(pristine: Path, out: Path) -> None:
    """Every base table of the pristine file has exactly its rows in the output (the FTS
    shadow tables are rebuilt, not copied: their searches are compared instead)."""
    for table in stored_tables(pristine):
        if table.startswith("messages_fts"):
            continue
        q = f'SELECT rowid, * FROM "{table}" ORDER BY rowid'
        assert rows(out, q) == rows(pristine, q), table
    for fts in ("messages_fts", "messages_fts_trigram"):
        q = f"SELECT rowid FROM {fts} WHERE {fts} MATCH 'the' ORDER BY rowid"
        assert rows(out, q) == rows(pristine, q), fts


def destroy_page1_and_schema(db: Path, *, keep_header: bool = False) -> list[int]:
    """Zero page 1 (all but its header with ``keep_header``) and every other page of
    ``sqlite_schema``'s b-tree: no page names a table any more."""
    pf = corruption.PristineFile(db)
    interior, leaves = pf.tree_pages(1)
    pages = sorted({1, *interior, *leaves})
    with open(db, "r+b") as f:
        for n in pages:
            skip = 100 if n == 1 and keep_header else 0
            f.seek((n - 1) * pf.page_size + skip)
            f.write(bytes(pf.page_size - skip))
    return pages


def recover(db: Path, tmp_path: Path) -> tuple[int, dict[str, Any], str, Path]:
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir(exist_ok=True)
    code, stdout, err = run_ctl(
        "recover", "--source", str(db), "--output", str(out), "--json", "--progress", "none"
    )
    return code, json.loads(stdout) if stdout else {}, err, out


def layout_note(rep: dict[str, Any]) -> str:
    (note,) = [str(n) for n in rep["notes"] if "known schema" in n]
    return note


READ_EVERY_MESSAGE = (
    "import json, sys; from hermes_state import SessionDB; db = SessionDB();"
    " ids = json.loads(sys.argv[1]);"
    " print(json.dumps({i: [[m['id'], m['message_uid'], m['content']]"
    " for m in db.get_messages(i)] for i in ids})); db.close()"
)


def hermes_reads(db: Path, home: Path) -> tuple[dict[str, Any], list[tuple[object, ...]], int]:
    """A copy of ``db`` in ``home``, opened by Hermes 0.22's own SessionDB: what it reads
    of every session's messages, the copy's sqlite_schema rows after that open, and the
    header's application_id after it."""
    home.mkdir(parents=True)
    shutil.copyfile(db, home / "state.db")
    ids = sorted(str(r[0]) for r in rows(db, "SELECT id FROM sessions"))
    out = subprocess.run(
        [hermes_python(NEWEST_HERMES), "-c", READ_EVERY_MESSAGE, json.dumps(ids)],
        env=writer_env(home),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    read = json.loads(out.stdout.strip().splitlines()[-1])
    return read, schema_rows(home / "state.db"), read_header(home / "state.db").application_id


class TestSchema31:
    @pytest.mark.parametrize("keep_header", [False, True], ids=["header", "header-kept"])
    @pytest.mark.parametrize("spec", [NEWEST, NEWEST_WAL], ids=["delete", "wal"])
    def test_every_row_back_and_hermes_opens_it_as_it_was(
        self, tmp_path: Path, spec: AnySpec, keep_header: bool
    ) -> None:
        """Page 1 and every schema page of a file Hermes 0.22 wrote zeroed: the rows fit
        layout 31-external (its FTS read from the shapes: a fresh file has no
        fts_storage_version yet), every row comes back (exit 0, no loss) with the schema
        Hermes wrote, texts byte for byte and the message_uid trigger created after the
        rows (no uid changed); Hermes 0.22's SessionDB reads every message exactly as
        from the pristine file and leaves the schema as it found it. A destroyed header
        gives rollback mode (nothing proves WAL: no -wal), a kept one its own mode.
        Before, no layout fitted: exit 4, "not Hermes' state.db?"."""
        pristine = built_db(spec)
        db = tmp_path / "db" / "state.db"
        db.parent.mkdir()
        shutil.copyfile(pristine, db)
        destroy_page1_and_schema(db, keep_header=keep_header)
        code, rep, err, out = recover(db, tmp_path)
        assert (code, err) == (0, "")
        assert (rep["loss_detected"], rep["lost"], rep["verified"]) == (False, {}, True)
        assert "(layout 31-external)" in layout_note(rep)
        assert_every_row_back(pristine, out)
        assert schema_rows(out) == schema_rows(pristine)
        want_mode = read_header(pristine).journal_mode if keep_header else "rollback"
        assert read_header(out).journal_mode == want_mode
        code, stdout, _ = run_ctl("check", "--db", str(out), "--json", "--progress", "none")
        [doc] = json.loads(stdout)["databases"]
        assert (code, doc["damage"], doc["findings"]) == (0, "none", [])
        want, _, app_id = hermes_reads(pristine, tmp_path / "pristine-home")
        got, after, got_app_id = hermes_reads(out, tmp_path / "home")
        assert got == want
        assert (
            sum(len(m) for m in got.values())
            == rows(pristine, "SELECT count(*) FROM messages")[0][0]
        )
        assert after == schema_rows(out)
        # A destroyed header took the application_id with it; Hermes derives it again
        # from state_meta's db_file_generation on its first open.
        assert got_app_id == app_id == read_header(pristine).application_id

    def test_repeated_message_uids_are_no_damage(self, tmp_path: Path) -> None:
        """Copies of messages sharing their message_uid (compaction keeps the inactive
        original beside its copy: one logical message), then page 1 and the schema
        zeroed: check of the file before the damage finds nothing, recover brings every
        row back (uids as they were, repeats included) with no loss."""
        db = tmp_path / "db" / "state.db"
        db.parent.mkdir()
        shutil.copyfile(built_db(NEWEST), db)
        conn = apsw.Connection(str(db))
        with conn:
            conn.execute(
                "INSERT INTO messages (session_id, role, content, timestamp, active,"
                " compacted, message_uid) SELECT session_id, role, content, timestamp + 1,"
                " 1, 0, message_uid FROM messages WHERE id <= 5"
            )
            conn.execute("UPDATE messages SET active = 0, compacted = 1 WHERE id <= 5")
        conn.close()
        repeats = "SELECT count(*) - count(DISTINCT message_uid) FROM messages"
        assert rows(db, repeats) == [(5,)]
        code, stdout, _ = run_ctl("check", "--db", str(db), "--json", "--progress", "none")
        [doc] = json.loads(stdout)["databases"]
        assert (code, doc["damage"], doc["findings"]) == (0, "none", [])
        pristine = tmp_path / "pristine.db"
        shutil.copyfile(db, pristine)
        destroy_page1_and_schema(db)
        code, rep, err, out = recover(db, tmp_path)
        assert (code, err, rep["loss_detected"]) == (0, "", False)
        assert_every_row_back(pristine, out)
        assert rows(out, repeats) == [(5,)]


class TestUpgradedTo31:
    @pytest.mark.parametrize(
        ("layout", "spec"),
        [
            ("31-from-0.19.0", TINY),
            ("31-from-0.13.0", OLDEST),
            ("31-from-30-external", MAIN_EXTERNAL),
            ("31-from-30-legacy", MAIN_LEGACY),
        ],
    )
    def test_an_upgraded_file_comes_back_in_its_own_column_order(
        self, tmp_path: Path, layout: str, spec: AnySpec
    ) -> None:
        """A file of an older Hermes that Hermes 0.22 opened (its added columns last:
        ``sessions.auto_archived`` after ``tool_names``, ``_compressed_summary`` after
        ``api_content``; the 0.19.0 ones keep own-content FTS, with no
        fts_storage_version), page 1 and the schema zeroed: its own layout is named, and
        every row comes back in its own columns under the schema it had. Before, no
        layout of schema 31 was known: exit 4, or rows read into the wrong columns."""
        pristine = opened_by_newest(spec, tmp_path / "upgraded")
        db = tmp_path / "db" / "state.db"
        db.parent.mkdir()
        shutil.copyfile(pristine, db)
        destroy_page1_and_schema(db)
        code, rep, err, out = recover(db, tmp_path)
        assert (code, err) == (0, "")
        assert (rep["loss_detected"], rep["lost"], rep["verified"]) == (False, {}, True)
        assert f"(layout {layout})" in layout_note(rep)
        assert_every_row_back(pristine, out)
        assert schema_rows(out) == schema_rows(pristine)


def schema_32(dest: Path) -> Path:
    """A file of a Hermes newer than statewarden knows: a 0.22 file whose
    schema_version table says 32, with a column added to messages (some rows carry it)
    and a new table with its own index and rows."""
    dest.mkdir(parents=True)
    db = dest / "state.db"
    shutil.copyfile(built_db(NEWEST), db)
    conn = apsw.Connection(str(db))
    with conn:
        conn.execute("ALTER TABLE messages ADD COLUMN reply_to_uid TEXT")
        conn.execute("UPDATE messages SET reply_to_uid = 'reply-' || id WHERE id % 3 = 0")
        conn.execute(
            "CREATE TABLE message_reactions (id INTEGER PRIMARY KEY,"
            " message_uid TEXT NOT NULL, emoji TEXT NOT NULL, at REAL NOT NULL)"
        )
        conn.execute("CREATE INDEX idx_message_reactions_uid ON message_reactions(message_uid)")
        conn.execute(
            "INSERT INTO message_reactions (message_uid, emoji, at)"
            " SELECT message_uid, 'eyes', timestamp FROM messages WHERE id <= 40"
        )
        conn.execute("UPDATE schema_version SET version = 32")
    conn.close()
    return db


class TestNewerSchema:
    def test_page1_destroyed_every_row_back_by_name(self, tmp_path: Path) -> None:
        """Page 1 of a schema-32 file zeroed with its header (the schema's leaves
        left): its own schema is read again, every row of every table, the new column
        and the new table too, comes back (exit 0, no loss), and the version is 32."""
        db = schema_32(tmp_path / "src")
        pristine = tmp_path / "pristine.db"
        shutil.copyfile(db, pristine)
        with open(db, "r+b") as f:
            f.write(bytes(4096))
        code, rep, err, out = recover(db, tmp_path)
        assert (code, err, rep["loss_detected"], rep["verified"]) == (0, "", False, True)
        assert rep["verification"]["schema_version"] == 32
        assert schema_rows(out) == schema_rows(pristine)
        assert_every_row_back(pristine, out)

    def test_schema_destroyed_named_newer_rows_back_by_name(self, tmp_path: Path) -> None:
        """Page 1 and every schema page of a schema-32 file zeroed: the report names it
        (schema 32, newer than the layouts statewarden knows, up to 31), never "not
        Hermes' state.db?"; every table's rows come back by the names of the columns
        layout 31-external has, the field schema 32 added kept in a column of its own
        (unnamed_column_31, its name lost with the schema); the new table's rows fit no
        known table: listed as left out, cannot verify (a loss, exit 3). Before, messages
        fit no layout: all its rows were reported lost and the new table not named."""
        db = schema_32(tmp_path / "src")
        pristine = tmp_path / "pristine.db"
        shutil.copyfile(db, pristine)
        destroy_page1_and_schema(db)
        code, rep, err, out = recover(db, tmp_path)
        assert (code, err, rep["verified"], rep["loss_detected"]) == (3, "", True, True)
        note = layout_note(rep)
        assert NEWER in note
        assert "(layout 31-external)" in note
        assert "kept in unnamed_column_31" in note
        assert "cannot verify" in note
        assert "not Hermes" not in json.dumps(rep)
        assert rep["tables_lost"] == []
        assert rep["rows_left_out"] == [{"leaves": 1, "records_read": 40, "fit": []}]
        known = [
            c for (c,) in rows(built_db(NEWEST), "SELECT name FROM pragma_table_info('messages')")
        ]
        cols = ", ".join(f'"{c}"' for c in known)
        q = f"SELECT {cols}, %s FROM messages ORDER BY id"
        assert rows(out, q % "unnamed_column_31") == rows(pristine, q % "reply_to_uid")
        for table in stored_tables(built_db(NEWEST)):
            if table != "messages" and not table.startswith("messages_fts"):
                sql = f'SELECT rowid, * FROM "{table}" ORDER BY rowid'
                assert rows(out, sql) == rows(pristine, sql), table
        assert rows(out, "SELECT version FROM schema_version") == [(32,)]

    def test_no_layout_fits_a_newer_file(self, tmp_path: Path) -> None:
        """A schema-32 file whose page 1, schema and every page of sessions and messages
        are zeroed: no layout can be taken, and the one-line error names schema 32 as
        newer than statewarden knows, not "not Hermes' state.db?" (exit 4)."""
        db = schema_32(tmp_path / "src")
        roots = corruption.schema_roots(db)
        pf = corruption.PristineFile(db)
        tables = set()
        for name in ("sessions", "messages"):
            interior, leaves = pf.tree_pages(roots[name])
            tables |= {*interior, *leaves}
        destroy_page1_and_schema(db)
        with open(db, "r+b") as f:
            for n in tables:
                f.seek((n - 1) * pf.page_size)
                f.write(bytes(pf.page_size))
        code, _rep, err, out = recover(db, tmp_path)
        assert code == 4
        assert err.count("\n") == 1
        assert NEWER in err
        assert "not Hermes" not in err
        assert not out.exists()


class TestTextShortOfAColumn:
    @pytest.mark.parametrize(
        ("table", "column"), [("messages", "tool_call_id"), ("sessions", "cwd")]
    )
    def test_hermes_022_text_is_put_back(self, tmp_path: Path, table: str, column: str) -> None:
        """A 0.22 file whose CREATE TABLE text lost a column line (every record still
        carries the field): two known layouts (a fresh 0.22 file, a schema-30 file 0.22
        upgraded) name the same columns in the same order in texts that differ; the
        text of the layout sharing the file's other texts is put back, byte for byte,
        and every row reads in its own columns (exit 0). Before, two texts fitting made
        none be taken: every row read shifted (exit 3)."""
        db = tmp_path / "db" / "state.db"
        db.parent.mkdir()
        shutil.copyfile(built_db(NEWEST), db)
        conn = apsw.Connection(str(db))
        try:
            conn.execute("PRAGMA writable_schema=ON")
            ((sql,),) = conn.execute(
                "SELECT sql FROM sqlite_schema WHERE name = ?", (table,)
            ).fetchall()
            short = re.sub(rf"\n\s*{column} [^\n]*,", "", str(sql), count=1)
            assert short != sql
            conn.execute("UPDATE sqlite_schema SET sql = ? WHERE name = ?", (short, table))
        finally:
            conn.close()
        code, rep, err, out = recover(db, tmp_path)
        assert (code, err, rep["loss_detected"], rep["set_aside"]) == (0, "", False, [])
        (note,) = [n for n in rep["notes"] if f"CREATE TABLE text of {table}" in n]
        assert "schema_version 31, external-content FTS5 writes" in note
        assert schema_rows(out) == schema_rows(built_db(NEWEST))
        assert_every_row_back(built_db(NEWEST), out)
