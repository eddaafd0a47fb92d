"""Page 1 destroyed, with its header or with every ``sqlite_schema`` page: the page size
is inferred from the file, the schema taken from the Hermes layout the rows fit, and
every table salvaged; a file that is not Hermes' gets no guessed schema.

Ground truth: the lab zeroes only page 1 (and the schema pages), so every row of every
table is intact on disk and must come back exactly as Hermes wrote it.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab import corruption, fuzz
from lab.corruption import table_rows as rows
from lab.hermes_fixtures import (
    FUZZ,
    MAIN_EXTERNAL,
    MAIN_LEGACY,
    OLDEST,
    SMALL,
    AnySpec,
    built_db,
    hermes_python,
    later_db,
)
from lab.write_known_schemas import LAYOUTS, schema_rows
from statewarden.demo.damage import PristineFile
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.evidence.found_trees import freed_pages
from statewarden.recovery.evidence.known_schemas import KNOWN_SCHEMAS
from statewarden.recovery.evidence.lost_schema import infer_page_size
from tests.support.cli import run_ctl
from tests.support.recovery import assert_every_table_pristine, base_tables, but_the_count
from tests.support.recovery import recover_with_stderr as recover

SPECS: dict[str, AnySpec] = {
    "0.13.0": OLDEST,
    "0.19.0": SMALL,
    "30-external": MAIN_EXTERNAL,
    "30-legacy": MAIN_LEGACY,
}


def check(db: Path) -> tuple[int, dict[str, Any], str]:
    code, stdout, stderr = run_ctl("check", "--db", str(db), "--json", "--progress", "none")
    return code, json.loads(stdout) if stdout else {}, stderr


class TestKnownSchemas:
    @pytest.mark.parametrize("layout", list(LAYOUTS))
    def test_checked_in_schema_is_what_hermes_writes(self, layout: str) -> None:
        """The checked-in sqlite_schema rows of each layout equal, row for row and in
        order, those of a database that Hermes release (0.13.0 and 0.19.0 installed
        here) or the schema-30 writer creates now: a Hermes upgrade that changes its
        schema fails here until lab/write_known_schemas.py is run again."""
        _what, spec = LAYOUTS[layout]
        assert KNOWN_SCHEMAS[layout][1] == tuple(schema_rows(built_db(spec)))

    @pytest.mark.parametrize("version", ["0.13.0", "0.19.0"])
    def test_a_fresh_database_of_the_installed_hermes(self, tmp_path: Path, version: str) -> None:
        """A database the installed hermes-agent release creates now, in a new home
        (its ``SessionDB`` opened and closed, no rows), has exactly the checked-in
        sqlite_schema rows of that release."""
        home = tmp_path / "home"
        home.mkdir()
        script = (
            "import os, sys; os.environ['HERMES_HOME'] = sys.argv[1];"
            " from hermes_state import SessionDB; SessionDB().close()"
        )
        subprocess.run([hermes_python(version), "-c", script, str(home)], check=True)
        assert KNOWN_SCHEMAS[version][1] == tuple(schema_rows(home / "state.db"))


class TestPageSize:
    @pytest.mark.parametrize("page_size", [1024, 4096, 8192, 65536])
    def test_inferred_from_the_pages(self, tmp_path: Path, page_size: int) -> None:
        """A database written at this page size, its header zeroed: the page size the
        b-tree pages prove is the one it was written with."""
        db = tmp_path / "x.db"
        conn = apsw.Connection(str(db))
        conn.execute(f"PRAGMA page_size={page_size}")
        conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT)")
        rnd = random.Random(page_size)
        with conn:
            for _ in range(4000):
                conn.execute("INSERT INTO t(body) VALUES (?)", ("w" * rnd.randint(5, 400),))
        conn.close()
        with open(db, "r+b") as f:
            f.write(bytes(100))
        found = infer_page_size(db)
        assert found is not None
        assert found[0] == page_size

    def test_no_size_for_random_bytes(self, tmp_path: Path) -> None:
        """Random bytes have no consistent b-tree page at any size: no page size."""
        junk = tmp_path / "junk"
        junk.write_bytes(random.Random(3).randbytes(64 * 4096))
        assert infer_page_size(junk) is None


class TestPage1Destroyed:
    @pytest.mark.parametrize("layout", ["0.19.0", "30-external"])
    def test_page1_zeroed_with_its_header(self, tmp_path: Path, layout: str) -> None:
        """Page 1 zeroed whole, header included (the schema's leaves survive): the page
        size is inferred, page 1 rebuilt from the schema leaves, and every row of every
        table comes back (exit 0, no loss); check says unreadable (4). Before, both
        commands stopped at the zeroed header with exit 4."""
        case = corruption.zeroed_page1(tmp_path / "db", SPECS[layout])
        code, doc, err = check(case.db)
        assert (code, err, doc["databases"][0]["damage"]) == (4, "", "unreadable")
        code, rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (0, "")
        assert (rep["loss_detected"], rep["lost"], rep["verified"]) == (False, {}, True)
        assert any("page size the pages prove, 4096 bytes" in n for n in rep["notes"])
        assert_every_table_pristine(out, case.pristine)

    @pytest.mark.parametrize("layout", ["0.13.0", "0.19.0", "30-external", "30-legacy"])
    @pytest.mark.parametrize("keep_header", [False, True])
    def test_page1_and_every_schema_page_zeroed(
        self, tmp_path: Path, layout: str, keep_header: bool
    ) -> None:
        """Page 1 and every sqlite_schema page zeroed (with or without the header): no
        page names a table. The layout is told by the rows' shapes and named in the
        report with the tables found; every table comes back whole into its own table,
        the FTS tables are rebuilt from messages (exit 0, no loss). check says
        unreadable and that recover can rebuild from the known schema. Before, exit 4
        and nothing recovered."""
        case = corruption.zeroed_page1(
            tmp_path / "db", SPECS[layout], schema_leaves=True, keep_header=keep_header
        )
        code, doc, err = check(case.db)
        (d,) = doc["databases"]
        assert (code, err, d["damage"]) == (4, "", "unreadable")
        assert any("recover can rebuild the database from this schema" in n for n in d["notes"])
        code, rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (0, "")
        assert (rep["loss_detected"], rep["lost"], rep["verified"]) == (False, {}, True)
        (note,) = [n for n in rep["notes"] if "known schema" in n]
        assert f"(layout {layout})" in note
        assert "sessions (root page" in note
        assert "messages (root page" in note
        assert_every_table_pristine(out, case.pristine)
        for table in ("sessions", "messages"):
            assert rep["tables"][table]["lost_keys"] == []
            assert rep["tables"][table]["recovered"] == len(case.unreached[table])


class TestCarvedLeafWithPage1:
    def test_a_leaf_whose_pointers_are_gone_comes_back(self, tmp_path: Path) -> None:
        """Page 1, the schema pages and the header and cell pointers of one messages leaf
        zeroed: the rebuilt schema's indexes are new, so none of them lists the leaf's
        carved rows, but the old indexes' pages left in the file list each with its
        values; every row comes back as Hermes wrote it, no loss. Before, the carved
        rows were not taken (nothing vouched for them) and reported lost."""
        case = corruption.page1_and_leaf_pointers(tmp_path / "db")
        code, rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (0, "")
        assert (rep["loss_detected"], rep["lost"], rep["verified"]) == (False, {}, True)
        carved = len(case.unreached["messages"])
        assert rep["tables"]["messages"]["recovered_from_pages"] == carved
        assert_every_table_pristine(out, case.pristine)

    def test_a_deleted_rows_cell_stays_deleted(self, tmp_path: Path) -> None:
        """The same damage after a message was deleted whose cell SQLite left whole in
        the leaf's free space: carving finds it, but no index entry lists it any more,
        so it is not taken (counted as not vouched for); the leaf's live rows come back
        and the output holds exactly the messages before the damage. What became of
        that rowid is not proven either way: it is reported as a stretch that could not
        be read (exit 3, loss detected)."""
        case = corruption.page1_and_leaf_pointers(tmp_path / "db", delete_newest=True)
        (deleted,) = case.deleted["messages"]
        code, rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (3, "")
        assert (rep["loss_detected"], rep["verified"]) == (True, True)
        assert rep["tables"]["messages"]["unvouched_skipped"] == 1
        assert rep["tables"]["messages"]["unreadable_ranges"] == [[deleted, deleted]]
        carved = len(case.unreached["messages"])
        assert rep["tables"]["messages"]["recovered_from_pages"] == carved
        assert_every_table_pristine(out, case.pristine)
        assert rows(out, f"SELECT id FROM messages WHERE id = {deleted}") == []

    def test_leaves_no_tree_reaches_come_back(self, tmp_path: Path) -> None:
        """The root of messages back to its image from before Hermes appended the last
        messages (a lost write), page 1 with its header and the schema pages zeroed: the
        newer leaves are reached by no tree, and with the freelist unknown they may be
        freed pages of deleted rows, which no index of the rebuilt schema lists; the old
        indexes' pages list each of their rows with its values, and every message comes
        back. Before, they were not taken and reported lost."""
        db = tmp_path / "state.db"
        later, older = later_db(), built_db(FUZZ)
        db.write_bytes(later.read_bytes())
        pf, old = corruption.PristineFile(later), corruption.PristineFile(older)
        root = corruption.schema_roots(later)["messages"]
        corruption._write(db, (root - 1) * pf.page_size, old.page(root))
        interior, leaves = pf.tree_pages(1)
        for n in {*interior, *leaves}:
            corruption._write(db, (n - 1) * pf.page_size, bytes(pf.page_size))
        unreached = set(pf.tree_pages(root)[1]) - set(old.tree_pages(root)[1])
        assert unreached  # the older root does not reach the newest leaves
        code, rep, err, out = recover(db, tmp_path)
        assert (code, err) == (0, "")
        assert (rep["loss_detected"], rep["lost"], rep["verified"]) == (False, {}, True)
        assert rep["tables"]["messages"]["unvouched_skipped"] == 0
        assert_every_table_pristine(out, later)

    def test_deleted_rows_on_freed_leaves_stay_deleted(self, tmp_path: Path) -> None:
        """1,000 messages deleted (their leaves go to the freelist with their rows still
        on them), then page 1 with its header and the schema pages zeroed: those leaves
        are read, but no old index entry lists their rows any more, so the output holds
        exactly the live messages. (This test once zeroed page 1 alone: the page size
        was read again from the zeroed header. With the schema pages zeroed too, the
        code before the creation-order roots wrote deleted messages back.)"""
        case = corruption.fresh_copy(tmp_path / "db")
        conn = apsw.Connection(str(case.db))
        with conn:
            conn.execute("DELETE FROM messages WHERE id BETWEEN 500 AND 1499")
            corruption.recount_messages(conn)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        conn.close()
        live = rows(case.db, "SELECT rowid, * FROM messages ORDER BY rowid")
        assert int(str(rows(case.db, "PRAGMA freelist_count")[0][0])) > 0
        pf = corruption.PristineFile(case.db)
        interior, leaves = pf.tree_pages(1)
        for n in {*interior, *leaves}:  # the page size read once: page 1 may go first
            corruption._write(case.db, (n - 1) * pf.page_size, bytes(pf.page_size))
        code, rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (0, "")
        assert rep["tables"]["messages"]["unvouched_skipped"] > 0
        assert rows(out, "SELECT rowid, * FROM messages ORDER BY rowid") == live


class TestNotHermes:
    def stranger(self, tmp_path: Path) -> Path:
        db = tmp_path / "notes.db"
        conn = apsw.Connection(str(db))
        conn.execute(
            "PRAGMA journal_mode=wal; CREATE TABLE notes(id INTEGER PRIMARY KEY,"
            " body TEXT NOT NULL, created REAL); CREATE TABLE tags(name TEXT PRIMARY KEY, n INT)"
        ).fetchall()
        rnd = random.Random(1)
        with conn:
            for i in range(3000):
                conn.execute(
                    "INSERT INTO notes(body, created) VALUES (?, ?)", ("x" * rnd.randint(9, 300), i)
                )
        conn.close()
        return db

    @pytest.mark.parametrize("keep_header", [False, True])
    def test_no_schema_is_guessed(self, tmp_path: Path, keep_header: bool) -> None:
        """Another program's database with page 1 zeroed: check and recover exit 4 with
        one line saying its rows fit no known Hermes schema; no output is written."""
        db = self.stranger(tmp_path)
        with open(db, "r+b") as f:
            f.seek(100 if keep_header else 0)
            f.write(bytes(4096 - f.tell()))
        code, _doc, err = check(db)
        assert code == 4
        assert err.count("\n") == 1
        assert "fit no known Hermes schema" in err
        code, _rep, err, out = recover(db, tmp_path)
        assert code == 4
        assert err.count("\n") == 1
        assert "no schema is guessed" in err
        assert not os.path.exists(out)


class TestFuzzWithPage1:
    # The fuzz lab's damage plus page 1 destroyed (and the schema pages on half of
    # them); seeds 200 and 312 are the two whose other damage hit a schema leaf.
    SEEDS = (0, 1, 2, 3, 4, 5, 6, 7, 200, 312)

    @pytest.mark.parametrize("seed", SEEDS)
    def test_fixed_seeds_keep_every_promise(self, tmp_path: Path, seed: int) -> None:
        """Random damage and page 1 destroyed: recover drops no intact row, passes off
        no wrong row, reports loss exactly when rows were lost and leaves the source
        unchanged, as on every other seed of the fuzz lab."""
        case, found = fuzz.run_seed(tmp_path, seed, page1=True)
        assert found == [], case.describe()

    @pytest.mark.parametrize("name", sorted(fuzz.PAGE1_FINDINGS))
    def test_named_finding(self, tmp_path: Path, name: str) -> None:
        """A seed that once broke a promise with page 1 destroyed (see
        ``lab/fuzz.PAGE1_FINDINGS`` for what each did before its fix) now keeps every
        promise."""
        case, found = fuzz.run_seed(tmp_path, fuzz.PAGE1_FINDINGS[name], page1=True)
        assert found == [], case.describe()

    @pytest.mark.parametrize("seed", [200, 312])
    def test_a_destroyed_schema_leaf_loses_no_table(self, tmp_path: Path, seed: int) -> None:
        """A zeroed block over a sqlite_schema leaf (page 1 intact): the objects it named
        come back from the known schema and gateway_routing's rows with them. Before,
        the table was missing from the output and its rows were dropped."""
        case, found = fuzz.run_seed(tmp_path, seed)
        assert found == [], case.describe()


class TestRowsThatFitTwoTables:
    def test_left_out_rows_are_a_loss(self, tmp_path: Path) -> None:
        """Page 1 and the schema zeroed on a schema-30 file, and the one root of a table
        whose rows fit two tables alike that creation order can place (session_turn_leases
        between gateway_heartbeats and async_delegations) made unplaceable by zeroing the
        empty compression_locks root before it: the tree is left out, the report lists it
        in rows_left_out and loss_detected is true; no row is written to the wrong table."""
        case = corruption.zeroed_page1(tmp_path / "db", MAIN_EXTERNAL, schema_leaves=True)
        roots = corruption.schema_roots(case.pristine)
        n = roots["compression_locks"]
        corruption._write(case.db, (n - 1) * 4096, bytes(4096))
        code, rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (3, "")  # a verified output, with loss
        assert rep["rows_left_out"] == [
            {"leaves": 1, "records_read": 1, "fit": ["compression_locks", "session_turn_leases"]}
        ]
        assert rep["loss_detected"] is True
        for table in ("compression_locks", "session_turn_leases"):
            assert rows(out, f"SELECT * FROM {table}") == []


class TestFreelistUnknown:
    def test_deleted_rows_stay_deleted_when_the_header_is_gone(self, tmp_path: Path) -> None:
        """1,000 messages deleted (their leaves go to the freelist with their rows still
        on them), then the header zeroed: the freelist it named is unknown, so a page no
        b-tree reaches may hold deleted rows; recover takes such a row only when an
        intact index lists it, and the output holds exactly the live messages."""
        case = corruption.fresh_copy(tmp_path / "db")
        conn = apsw.Connection(str(case.db))
        with conn:
            conn.execute("DELETE FROM messages WHERE id BETWEEN 500 AND 1499")
            corruption.recount_messages(conn)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        conn.close()
        live = rows(case.db, "SELECT rowid, * FROM messages ORDER BY rowid")
        assert len(live) == 1000
        assert int(str(rows(case.db, "PRAGMA freelist_count")[0][0])) > 0
        with open(case.db, "r+b") as f:
            f.write(bytes(100))
        code, _rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (0, "")
        assert rows(out, "SELECT rowid, * FROM messages ORDER BY rowid") == live


class TestHostilePages:
    @pytest.mark.parametrize("shape", ["empty_leaves", "interior_cycle"])
    def test_one_line_and_exit_4(self, tmp_path: Path, shape: str) -> None:
        """A file with no header whose pages are b-tree pages but hold nothing Hermes
        wrote (only empty leaves; interior pages that point at themselves and each other
        in a cycle): the walks end, no schema is guessed, one line, exit 4."""
        pages = [bytes(4096)]
        for n in range(2, 34):
            page = bytearray(4096)
            if shape == "empty_leaves":
                page[0] = 0x0D
                struct.pack_into(">H", page, 5, 4096)
            else:
                page[0] = 0x05
                struct.pack_into(">HHHBI", page, 1, 0, 1, 4092, 0, n % 32 + 2)
                struct.pack_into(">H", page, 12, 4092)
                struct.pack_into(">I", page, 4092, n)
            pages.append(bytes(page))
        db = tmp_path / "state.db"
        db.write_bytes(b"".join(pages))
        code, _doc, err = check(db)
        assert code == 4
        assert err.count("\n") == 1
        assert "no schema is guessed" in err


class TestSessionsRootDestroyed:
    def test_a_zeroed_sessions_page_is_a_loss(self, tmp_path: Path) -> None:
        """Page 1 and the schema zeroed, and a zeroed block over the only sessions page
        (fuzz seed 289): the layout is taken from messages and the other tables, and the
        report says every row of sessions is lost (loss detected, exit 3), never "no
        loss". Before, no layout was taken without sessions: exit 4, nothing recovered."""
        case = fuzz.fuzz_case(
            tmp_path / "db", fuzz.PAGE1_FINDINGS["zeroed_sessions_page"], page1=True
        )
        code, rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (3, "")
        assert rep["tables_lost"] == ["sessions"]
        assert rep["loss_detected"] is True
        assert rows(out, "SELECT count(*) FROM sessions") == [(0,)]
        assert rows(out, "SELECT count(*) FROM messages") == [(len(case.intact("messages")),)]
        _, text_out, _ = run_ctl(
            "recover", "--source", str(case.db), "--output", str(out.with_name("t.db"))
        )
        assert "all rows of sessions" in text_out

    def test_a_sessions_root_with_its_header_zeroed_is_carved(self, tmp_path: Path) -> None:
        """Page 1 and the schema zeroed, and the header of the only sessions page (a root
        leaf) zeroed with it (fuzz seed 364): the page is found by its cells and taken as
        the sessions root, and every session (all intact) comes back as Hermes wrote it. Before,
        no layout was taken: exit 4, nothing recovered."""
        seed = fuzz.PAGE1_FINDINGS["zeroed_sessions_root_header"]
        case = fuzz.fuzz_case(tmp_path / "db", seed, page1=True)
        code, _rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (0, "")  # every session came back: no loss
        got = {r[0]: r for r in rows(out, "SELECT rowid, * FROM sessions")}
        intact = case.intact("sessions")
        assert intact
        assert {r: got.get(r) for r in intact} == {r: case.truth["sessions"][r][0] for r in intact}


class TestOldIndexesAsWitnesses:
    def test_a_scribbled_timestamp_comes_back_from_the_old_indexes(self, tmp_path: Path) -> None:
        """Page 1 and the schema zeroed, and random bytes over a message's timestamp
        only (fuzz seed 113): the rebuilt indexes are filled from that same row, but the
        two old indexes that hold the timestamp, their pages still in the file, agree on
        the real one; it comes back from them and is listed as restored. Before, the
        changed timestamp was written out as a good row."""
        seed = fuzz.PAGE1_FINDINGS["scribbled_real_with_the_schema"]
        case = fuzz.fuzz_case(tmp_path / "db", seed, page1=True)
        code, rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (3, "")
        want = case.truth["messages"][306][0]
        assert rows(out, "SELECT rowid, * FROM messages WHERE rowid = 306") == [want]
        restored = [e for e in rep["restored_from_copies"] if e["rowid"] == 306]
        assert [(e["table"], e["column"]) for e in restored] == [("messages", "timestamp")]
        assert sorted(restored[0]["from"]) == [
            "index idx_messages_session (its pages left in the file)",
            "index idx_messages_session_active (its pages left in the file)",
        ]


def zero_tree(db: Path, pristine: Path, table: str) -> None:
    """Zero every page of ``table``'s b-tree in ``db`` (as laid out in ``pristine``)."""
    pf = PristineFile(pristine)
    interior, leaves = pf.tree_pages(corruption.schema_roots(pristine)[table])
    with open(db, "r+b") as f:
        for n in interior + leaves:
            f.seek((n - 1) * pf.page_size)
            f.write(bytes(pf.page_size))


class TestMessagesTreeDestroyed:
    def test_messages_gone_while_sessions_count_them_is_a_loss(self, tmp_path: Path) -> None:
        """Page 1, the schema and every page of the messages b-tree zeroed: the layout is
        taken from sessions and the other tables, and since sessions count messages the
        report names messages in tables_lost (exit 3); each session comes back, its
        count written as the messages recovered (none). Before, no layout was taken
        without messages: exit 4."""
        case = corruption.zeroed_page1(tmp_path / "db", schema_leaves=True)
        zero_tree(case.db, case.pristine, "messages")
        code, rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (3, "")
        assert rep["tables_lost"] == ["messages"]
        sql = "SELECT rowid, * FROM sessions ORDER BY rowid"
        assert but_the_count(out, sql) == but_the_count(case.pristine, sql)
        assert {m["written"] for m in rep["count_mismatches"]} == {0}

    def test_no_messages_ever_written_is_no_loss(self, tmp_path: Path) -> None:
        """The same on a file whose messages were all deleted and vacuumed away (sessions
        count none), page 1 and the schema zeroed: no
        page proves a message existed, so none is named lost and the sessions all come
        back: exit 0. Calling every missing table lost would claim a loss that is not."""
        case = corruption.fresh_copy(tmp_path / "db")
        conn = apsw.Connection(str(case.db))
        with conn:
            conn.execute("DELETE FROM messages")
            corruption.recount_messages(conn)
        conn.execute("VACUUM")  # no freed page keeps the deleted messages
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        conn.close()
        want = rows(case.db, "SELECT rowid, * FROM sessions ORDER BY rowid")
        pf = PristineFile(case.db)
        interior, leaves = pf.tree_pages(1)
        with open(case.db, "r+b") as f:
            for n in {1, *interior, *leaves}:
                f.seek((n - 1) * pf.page_size)
                f.write(bytes(pf.page_size))
        code, rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (0, ""), rep.get("notes")
        assert rep["tables_lost"] == []
        assert rows(out, "SELECT rowid, * FROM sessions ORDER BY rowid") == want


def delete_and_destroy_page1(case: corruption.Case, sessions: str) -> dict[str, list[Any]]:
    """Delete the messages of the sessions ``sessions`` picks (every message if none) as
    plain SQL does, the sessions with them, no VACUUM, then zero page 1 with its header
    and every schema page; return each table's live rows before the damage."""
    conn = apsw.Connection(str(case.db))
    with conn:
        if sessions:
            conn.execute(f"DELETE FROM messages WHERE session_id IN ({sessions})")
            conn.execute(f"DELETE FROM sessions WHERE id IN ({sessions})")
        else:
            conn.execute("DELETE FROM messages")
        corruption.recount_messages(conn)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    conn.close()
    assert int(str(rows(case.db, "PRAGMA freelist_count")[0][0])) > 0
    live = {
        t: rows(case.db, f"SELECT rowid, * FROM {t} ORDER BY rowid")
        for t in ("sessions", "messages")
    }
    pf = PristineFile(case.db)
    interior, leaves = pf.tree_pages(1)
    for n in {1, *interior, *leaves}:  # the page size read once: the header goes first
        corruption._write(case.db, (n - 1) * pf.page_size, bytes(pf.page_size))
    return live


class TestDeletedRowsNeverResurrect:
    @pytest.mark.parametrize(
        "sessions",
        [
            "",
            "SELECT id FROM sessions ORDER BY id LIMIT 3",
            "SELECT id FROM sessions ORDER BY id LIMIT 60",
        ],
    )
    def test_deleted_messages_stay_deleted(self, tmp_path: Path, sessions: str) -> None:
        """Every message deleted (or the messages of 3 or 60 sessions, with the sessions),
        no VACUUM, then page 1 with its header and the schema pages zeroed: the freed
        table and index pages keep their cells, but a freed page is no live row's home
        and a freed index page vouches for nothing; the output holds exactly the live
        sessions and messages. Before, the deleted messages came back."""
        case = corruption.fresh_copy(tmp_path / "db")
        live = delete_and_destroy_page1(case, sessions)
        code, _rep, err, out = recover(case.db, tmp_path)
        assert (code in (0, 3), err) == (True, "")
        for table, want in live.items():
            assert rows(out, f"SELECT rowid, * FROM {table} ORDER BY rowid") == want, table

    @pytest.mark.parametrize("layout", ["30-external", "30-legacy"])
    def test_no_false_loss_on_schema_30(self, tmp_path: Path, layout: str) -> None:
        """Every message deleted, no VACUUM, then page 1 with its header and the schema
        pages zeroed, on a schema-30 file born on main or upgraded from 0.19.0: the
        small tables whose rows fit two tables alike (state_meta and system_prompts,
        compression_locks and session_turn_leases) each come back whole into their own
        table, no tree is left out and nothing live was lost: exit 0. Before, the freed
        messages leaves broke the count of the roots in creation order, two trees were
        left out (rows_left_out) and the run exited 3."""
        case = corruption.fresh_copy(tmp_path / "db", SPECS[layout])
        live = delete_and_destroy_page1(case, "")
        code, rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (0, "")
        assert (rep["rows_left_out"], rep["loss_detected"]) == ([], False)
        for table in base_tables(case.pristine):
            if table.startswith("messages_fts"):
                continue  # rebuilt from the messages
            sql = f"SELECT rowid, * FROM {table} ORDER BY rowid"
            want = live[table] if table in live else rows(case.pristine, sql)
            assert rows(out, sql) == want, table

    def test_upgraded_layout(self, tmp_path: Path) -> None:
        """The same with every message deleted, on a file of the legacy schema-30 layout
        (its newer tables created by upgrades, after rows were written): the output
        holds exactly the live sessions and no message."""
        case = corruption.fresh_copy(tmp_path / "db", MAIN_LEGACY)
        live = delete_and_destroy_page1(case, "")
        _code, _rep, err, out = recover(case.db, tmp_path)
        assert err == ""
        for table, want in live.items():
            assert rows(out, f"SELECT rowid, * FROM {table} ORDER BY rowid") == want, table


def cut_last_child(db: Path, root: int) -> list[int]:
    """Drop the right-most child of the interior page ``root`` (its last cell's child
    becomes the right child): that leaf, intact, is reached by no tree. Returns its
    rowids."""
    pf = PristineFile(db)
    page = bytearray(pf.page(root))
    assert page[0] == 0x05
    (count,) = struct.unpack(">H", page[3:5])
    (child,) = struct.unpack(">I", page[pf.cell_offsets(root)[-1] :][:4])
    (cut,) = struct.unpack(">I", page[8:12])
    struct.pack_into(">I", page, 8, child)
    struct.pack_into(">H", page, 3, count - 1)
    corruption._write(db, (root - 1) * pf.page_size, bytes(page))
    return pf.leaf_rowids(cut)


class TestUpgradedLayout:
    def test_a_leaf_no_tree_reaches_is_vouched_by_the_later_indexes(self, tmp_path: Path) -> None:
        """A file of the legacy schema-30 layout (upgraded from 0.19.0), the last leaf of
        messages cut off from its root, then page 1 with its header and the schema pages
        zeroed: the creation order proves the roots of 0.19.0's objects only, so the
        indexes the upgrade created later (idx_messages_session_id and the others)
        vouch through every page of their shape, the proven ones through the pages their
        roots reach; the leaf's rows are listed by all of them and every message comes
        back, no loss (exit 0). Before, the cut-off leaf counted among the roots,
        the creation order placed no tree that fits two tables alike, and the run
        exited 3; with the later indexes' pages dropped, its rows were not taken."""
        case = corruption.fresh_copy(tmp_path / "db", MAIN_LEGACY)
        cut = cut_last_child(case.db, case.roots["messages"])
        assert cut
        pf = PristineFile(case.db)
        interior, leaves = pf.tree_pages(1)
        for n in {1, *interior, *leaves}:
            corruption._write(case.db, (n - 1) * pf.page_size, bytes(pf.page_size))
        code, rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (0, "")
        assert (rep["loss_detected"], rep["rows_left_out"]) == (False, [])
        assert rep["tables"]["messages"]["recovered_from_pages"] == len(cut)
        assert_every_table_pristine(out, case.pristine)


class TestFreelistFromItsTrunks:
    @pytest.mark.parametrize("layout", ["0.19.0", "30-legacy"])
    def test_the_freelist_is_read_without_page_1(self, tmp_path: Path, layout: str) -> None:
        """Every message deleted (no VACUUM), then page 1 with its header and the schema
        pages zeroed: the header named the freelist's first trunk page, but the trunk
        pages themselves are found by their shape, and the pages they list are exactly
        the freelist SQLite kept before the damage."""
        case = corruption.fresh_copy(tmp_path / "db", SPECS[layout])
        conn = apsw.Connection(str(case.db))
        with conn:
            conn.execute("DELETE FROM messages")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        conn.close()
        db = DatabaseFile(case.db)
        try:
            freelist, page_size = db.freelist_pages(), db.page_size
        finally:
            db.close()
        assert len(freelist) > 1
        pf = PristineFile(case.db)
        interior, leaves = pf.tree_pages(1)
        for n in {1, *interior, *leaves}:
            corruption._write(case.db, (n - 1) * page_size, bytes(page_size))
        db = DatabaseFile(case.db, page_size=page_size)
        try:
            assert freed_pages(db) == freelist
        finally:
            db.close()
