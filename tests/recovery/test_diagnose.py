"""`statewardenctl check` and diagnose.py on real Hermes databases with real byte damage.

Every expected number comes from the corruption lab's ground truth (its own b-tree
walker on the pristine file), never from the code under test.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab import corruption
from lab.hermes_fixtures import SMALL, built_db
from statewarden.demo import damage
from statewarden.recovery.bundle import fingerprint
from statewarden.recovery.check import check_database
from statewarden.recovery.decoding.scan import scan_table
from statewarden.recovery.diagnose import diagnose, diagnose_ahead_of_fts
from statewarden.recovery.diagnosis import Diagnosis
from tests.support.cli import run_ctl
from tests.support.recovery import fts_version_changed, scramble_fts_index, scrambled_fts_index


def check_json(db: Path, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    code, out, err = run_ctl("check", "--db", str(db), "--json", "--work-dir", str(tmp_path / "w"))
    assert err == ""
    doc = json.loads(out)
    return code, doc["databases"][0]


def groups(doc: dict[str, Any]) -> dict[str, int]:
    return {g["object"]: g["errors"] for g in doc["groups"]}


def table(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in doc["tables"] if t["name"] == name)


def pristine_rows(sql: str) -> list[tuple[object, ...]]:
    return corruption.table_rows(built_db(SMALL), sql)


def pristine_count(sql: str) -> int:
    value = corruption.table_rows(built_db(SMALL), sql)[0][0]
    assert isinstance(value, int)
    return value


class TestHealthy:
    def test_pristine_hermes_database_is_healthy(self, tmp_path: Path) -> None:
        """A database Hermes wrote and closed: exit 0, damage none, counts agree."""
        case = corruption.fresh_copy(tmp_path / "db")
        code, doc = check_json(case.db, tmp_path)
        assert code == 0
        assert doc["damage"] == "none"
        assert doc["integrity_ok"] is True
        assert doc["groups"] == []
        msgs = table(doc, "messages")
        n = pristine_count("SELECT count(*) FROM messages")
        assert (msgs["planner_rows"], msgs["scan_rows"], msgs["distinct_keys"]) == (n, n, n)
        assert doc["fts"] == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
        assert doc["orphans"] == {}

    def test_source_bundle_is_not_touched(self, tmp_path: Path) -> None:
        """The check works on a copy: the source's bytes, times and inode stay the same
        and no -wal/-shm appears next to it; the work dir is removed."""
        case = corruption.phantom_row(tmp_path / "db")
        before = fingerprint(case.db)
        data = case.db.read_bytes()
        run_ctl("check", "--db", str(case.db), "--work-dir", str(tmp_path / "w"))
        assert fingerprint(case.db) == before
        assert case.db.read_bytes() == data
        assert sorted(os.listdir(case.db.parent)) == ["state.db"]
        assert os.listdir(tmp_path / "w") == []

    def test_text_output_says_healthy(self, tmp_path: Path) -> None:
        """The human output names the verdict on its last line."""
        case = corruption.fresh_copy(tmp_path / "db")
        code, out, _ = run_ctl("check", "--db", str(case.db), "--work-dir", str(tmp_path / "w"))
        assert code == 0
        assert out.splitlines()[-1] == "  damage: none (healthy)"
        assert "  integrity check: ok" in out


class TestPhantomRow:
    def test_phantom_row_is_base_damage_named_by_rowid(self, tmp_path: Path) -> None:
        """docs/stories.md story 3: the planner counts 64 sessions, the full scan 65, 64 distinct
        ids; the check names the phantom duplicate by its rowid and exits 3."""
        case = corruption.phantom_row(tmp_path / "db")
        rowid = case.phantom["sessions"]
        n = pristine_count("SELECT count(*) FROM sessions")
        code, doc = check_json(case.db, tmp_path)
        assert code == 3
        assert doc["damage"] == "base"
        s = table(doc, "sessions")
        assert (s["planner_rows"], s["scan_rows"], s["distinct_keys"]) == (n, n + 1, n)
        assert s["duplicate_rowids"] == {str(rowid): 2}
        assert (
            f"sessions: {n + 1} stored rows, {n} distinct ids: 1 phantom duplicate, rowid {rowid}"
            in doc["findings"]
        )
        assert groups(doc)["sessions"] == 2  # "Rowid out of order" + "Multiple uses for byte"
        assert groups(doc)["sqlite_autoindex_sessions_1"] == 1


class TestDuplicateKeys:
    def test_two_rows_claiming_one_id_is_base_damage(self, tmp_path: Path) -> None:
        """A later session stored under an earlier session's id (a different rowid): the
        full scan sees one id fewer than rows, and says so; exit 3."""
        case = corruption.duplicate_key(tmp_path / "db")
        n = pristine_count("SELECT count(*) FROM sessions")
        code, doc = check_json(case.db, tmp_path)
        assert code == 3
        s = table(doc, "sessions")
        assert (s["scan_rows"], s["distinct_keys"], s["duplicate_keys"]) == (n, n - 1, 1)
        assert s["duplicate_rowids"] == {}
        assert (
            f"sessions: {n} stored rows, {n - 1} distinct ids: 1 row under another rowid"
            " claiming an id held by another row" in doc["findings"]
        )

    def test_two_rows_claiming_one_title_is_derived(self, tmp_path: Path) -> None:
        """Two sessions with one title: only the UNIQUE title index disagrees; a rebuild
        keeps both rows (the later one renamed), so the damage is derived; exit 1."""
        case = corruption.duplicate_title(tmp_path / "db")
        code, doc = check_json(case.db, tmp_path)
        assert code == 1
        assert groups(doc) == {"idx_sessions_title_unique": 1}


class TestCappedCheckTrap:
    def test_default_cap_hides_sessions_but_check_finds_it(self, tmp_path: Path) -> None:
        """docs/stories.md story 2: SQLite's quick_check with its default cap of 100 shows only
        the FTS tree; the uncapped check also finds the damage in sessions."""
        case = corruption.capped_check_trap(tmp_path / "db")
        conn = apsw.Connection(
            f"file:{case.db}?mode=ro&immutable=1",
            flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI,
        )
        capped = "\n".join(r[0] for r in conn.execute("PRAGMA quick_check"))
        conn.close()
        root = case.roots["sessions"]
        assert f"Tree {root} " not in capped
        assert capped.count("\n") >= 99
        code, doc = check_json(case.db, tmp_path)
        assert code == 3
        g = groups(doc)
        assert g["messages_fts_trigram_docsize"] > 100
        assert g["sessions"] == 2
        assert doc["damage"] == "base"
        # FTS5's own check ran inside integrity_check and names the trigram table only.
        assert doc["fts"]["messages_fts"] == "ok"
        assert doc["fts"]["messages_fts_trigram"] == (
            "malformed inverted index for FTS5 table main.messages_fts_trigram"
        )

    def test_text_output_names_fts_of_messages(self, tmp_path: Path) -> None:
        """Errors are shown by object and logical table, worst first."""
        case = corruption.capped_check_trap(tmp_path / "db")
        code, out, _ = run_ctl("check", "--db", str(case.db), "--work-dir", str(tmp_path / "w"))
        assert code == 3
        lines = out.splitlines()
        assert lines[2].startswith("  messages_fts_trigram_docsize (FTS of messages): ")
        assert "  sessions: 2 errors" in lines


class TestDerivedDamage:
    def test_fts_shadow_pages_are_derived(self, tmp_path: Path) -> None:
        """Zeroed leaves of messages_fts_data and messages_fts_trigram_data: derived
        damage only (exit 1); every message is still readable by a full scan."""
        case = corruption.scribbled_trees(
            tmp_path / "db", {"messages_fts_data": 2, "messages_fts_trigram_data": 3}
        )
        code, doc = check_json(case.db, tmp_path)
        assert code == 1
        assert doc["damage"] == "derived"
        g = groups(doc)
        assert g["messages_fts_data"] == 2
        assert g["messages_fts_trigram_data"] == 3
        assert all(x["derived"] for x in doc["groups"])
        n = pristine_count("SELECT count(*) FROM messages")
        assert table(doc, "messages")["scan_rows"] == n
        assert doc["fts"]["messages_fts"] != "ok"

    def test_index_page_is_derived(self, tmp_path: Path) -> None:
        """A zeroed leaf of idx_messages_session: derived damage (exit 1)."""
        case = corruption.scribbled_trees(tmp_path / "db", {"idx_messages_session": 1})
        code, doc = check_json(case.db, tmp_path)
        assert code == 1
        assert doc["damage"] == "derived"
        assert groups(doc) == {"idx_messages_session": 2}
        n = pristine_count("SELECT count(*) FROM messages")
        m = table(doc, "messages")
        assert (m["scan_rows"], m["distinct_keys"], m["unreadable_ranges"]) == (n, n, [])


class TestBaseDamage:
    def test_zeroed_messages_leaf_names_the_lost_rowids(self, tmp_path: Path) -> None:
        """A zeroed messages leaf: base damage, and the unreadable rowid range is exactly
        the rowids that lived on that page."""
        case = corruption.zeroed_leaf(tmp_path / "db")
        lost = case.lost_rowids["messages"]
        n = pristine_count("SELECT count(*) FROM messages")
        code, doc = check_json(case.db, tmp_path)
        assert code == 3
        m = table(doc, "messages")
        assert m["scan_rows"] == n - len(lost)
        assert m["unreadable_ranges"] == [[lost[0], lost[-1]]]
        assert lost == list(range(lost[0], lost[-1] + 1))
        assert f"messages: rowids {lost[0]}..{lost[-1]} cannot be read" in doc["findings"]

    def test_zeroed_interior_page_makes_every_row_unreachable(self, tmp_path: Path) -> None:
        """The only interior page of messages zeroed: a full scan reaches no row; the
        leaves are reported as pages no b-tree uses."""
        case = corruption.zeroed_interior(tmp_path / "db")
        code, doc = check_json(case.db, tmp_path)
        assert code == 3
        assert table(doc, "messages")["scan_rows"] == 0
        _, leaves = corruption.PristineFile(case.pristine).tree_pages(case.roots["messages"])
        assert groups(doc)["(unattached pages)"] >= len(leaves)


class TestUnreadableInputs:
    @pytest.mark.parametrize(
        ("name", "content", "message"),
        [
            ("empty.db", b"", "the file is empty (0 bytes), not a SQLite database"),
            (
                "text.db",
                b"hello, this is a text file\n",
                "not a SQLite database (no SQLite header)",
            ),
            (
                "zeroed.db",
                b"\x00" * 8192,
                "the database header is zeroed; the file is unreadable as SQLite",
            ),
            ("short.db", b"SQLite format 3\x00\x10\x00", "truncated inside the 100-byte header"),
        ],
    )
    def test_not_a_database(self, tmp_path: Path, name: str, content: bytes, message: str) -> None:
        """Each prints one line naming the file and exits 4, no traceback."""
        path = tmp_path / name
        path.write_bytes(content)
        code, out, err = run_ctl("check", "--db", str(path))
        assert (code, out) == (4, "")
        assert err == f"statewardenctl: error: {path}: {message}\n"

    def test_zeroed_header_of_a_real_database(self, tmp_path: Path) -> None:
        """The first 100 bytes of a Hermes database zeroed: exit 4, unreadable, and the
        check goes on with the page size the pages prove (tests/recovery/test_page1.py)."""
        case = corruption.fresh_copy(tmp_path / "db")
        with open(case.db, "r+b") as f:
            f.write(b"\x00" * 100)
        code, out, err = run_ctl("check", "--db", str(case.db))
        assert (code, err) == (4, "")
        assert "the database header is destroyed" in out
        assert "damage: unreadable" in out

    def test_file_truncated_inside_the_schema(self, tmp_path: Path) -> None:
        """Cut inside page 1: the schema cannot be read; the message says the file is
        truncated and by how much; exit 4."""
        case = corruption.fresh_copy(tmp_path / "db")
        corruption.truncate(case, 3000)
        code, _, err = run_ctl("check", "--db", str(case.db))
        assert code == 4
        assert err == (
            f"statewardenctl: error: {case.db}: the file is truncated: the header says"
            f" {len(corruption.PristineFile(case.pristine).data) // 4096} pages, 0 are present"
            " (3000 bytes); the schema cannot be read\n"
        )

    def test_truncated_file_is_base_damage(self, tmp_path: Path) -> None:
        """Cut in half: SQLite alone refuses the file (its header promises more pages);
        the check reads what is there, names the truncation, and counts exactly the
        messages on the pages that remain; exit 3."""
        total = len(corruption.PristineFile(built_db(SMALL)).data) // 4096
        case = corruption.truncated(tmp_path / "db", total // 2)
        lost = case.lost_rowids["messages"]
        code, doc = check_json(case.db, tmp_path)
        assert code == 3
        assert (
            f"the file is truncated: the header says {total} pages, {total // 2} are present"
            f" ({total // 2 * 4096} bytes)" in doc["findings"]
        )
        n = pristine_count("SELECT count(*) FROM messages")
        assert table(doc, "messages")["scan_rows"] == n - len(lost)

    def test_directory(self, tmp_path: Path) -> None:
        """check --db on a directory is one error line saying so, exit 4."""
        code, _, err = run_ctl("check", "--db", str(tmp_path))
        assert code == 4
        assert err == f"statewardenctl: error: {tmp_path}: is a directory, not a database\n"

    def test_missing_file_is_a_usage_error(self, tmp_path: Path) -> None:
        """A path that does not exist is the caller's mistake: exit 2."""
        code, _, err = run_ctl("check", "--db", str(tmp_path / "nope.db"))
        assert code == 2
        assert err == f"statewardenctl: error: {tmp_path / 'nope.db'}: no such file\n"

    def test_wal_from_another_database(self, tmp_path: Path) -> None:
        """A -wal written for a different database is refused with a clear line, exit 4,
        and the source bundle is left exactly as it was."""
        case = corruption.foreign_wal(tmp_path / "db")
        before = fingerprint(case.db)
        code, _, err = run_ctl("check", "--db", str(case.db), "--work-dir", str(tmp_path / "w"))
        assert code == 4
        assert err == (
            f"statewardenctl: error: {case.db}-wal: belongs to another database (its schema"
            " cookie 1 is older than the file's 42) (move the -wal aside to read the"
            " database file alone)\n"
        )
        assert fingerprint(case.db) == before


class TestWal:
    def test_commits_dropped_after_a_bad_frame_are_base_damage(self, tmp_path: Path) -> None:
        """A WAL frame with one bit flipped: SQLite's integrity check says ok, but check
        names the frame and the committed transactions SQLite drops after it: base
        damage, exit 3, and the source bundle is left as it was."""
        case = corruption.wal_bad_frame(tmp_path / "db")
        before = fingerprint(case.db)
        code, doc = check_json(case.db, tmp_path)
        assert (code, doc["damage"], doc["integrity_ok"]) == (3, "base", True)
        assert doc["wal_dropped_commits"] > 0
        notes = doc["notes"]
        assert any("fails its checksum; SQLite replays" in n for n in notes)
        assert fingerprint(case.db) == before

    @pytest.mark.parametrize("how", ["zeroed", "magic", "page-size"])
    def test_damaged_wal_header_never_hides_the_database(self, tmp_path: Path, how: str) -> None:
        """A WAL SQLite ignores (zero-filled, magic zeroed, page size flipped) no longer
        makes check give up (exit 4): the database is checked as SQLite reads it and
        the WAL is named as ignored; commits still in it are base damage."""
        case = corruption.wal_header_damage(tmp_path / "db", how)
        code, doc = check_json(case.db, tmp_path)
        assert any("ignored, as SQLite does" in n for n in doc["notes"])
        assert table(doc, "messages")["scan_rows"] == pristine_count(
            "SELECT count(*) FROM messages"
        )
        want = (0, "none") if how == "zeroed" else (3, "base")
        assert (code, doc["damage"]) == want


class TestSecondCopies:
    def test_fts_checksum_mismatch_is_derived_and_named(self, tmp_path: Path) -> None:
        """One letter changed in a message's FTS copy: SQLite's integrity check reports
        'fts5: checksum mismatch for table "messages_fts"'; it is filed under that FTS
        table (not "(other)"), its own check says so too, the copy is named by rowid,
        and the class is derived (exit 1), not base."""
        case = corruption.bit_rot(tmp_path / "db", "fts")
        code, doc = check_json(case.db, tmp_path)
        assert (code, doc["damage"]) == (1, "derived")
        assert groups(doc) == {"messages_fts": 1}
        assert doc["fts"]["messages_fts"].startswith("fts5: checksum mismatch")
        assert doc["fts"]["messages_fts_trigram"] == "ok"
        [copies] = doc["copies"]
        assert copies["copies_rotted"] == {"messages_fts": [case.phantom["messages_fts_content"]]}
        assert copies["rows_rotted"] == []

    def test_silent_bit_rot_in_a_message_is_found(self, tmp_path: Path) -> None:
        """One letter changed in a message row, the record still well formed: SQLite's
        integrity check says ok; check compares the row with its two FTS copies (which
        agree with each other) and names it: base damage, exit 3."""
        case = corruption.bit_rot(tmp_path / "db", "row")
        rowid = case.phantom["messages"]
        code, out, err = run_ctl("check", "--db", str(case.db), "--work-dir", str(tmp_path / "w"))
        assert (code, err) == (3, "")
        assert "integrity check: ok" in out
        assert (
            "messages: 1 row differs from its search-index copies (messages_fts,"
            f" messages_fts_trigram), which agree with each other: changed on disk (rowid {rowid})"
        ) in out


class TestMissingRows:
    def test_stale_index_entries_are_not_lost_rows(self, tmp_path: Path) -> None:
        """Five messages deleted on purpose, their index page written back stale: the
        index lists them, no FTS copy does; check names them as entries left behind by
        deletes, and the class stays derived (exit 1), as recover then agrees."""
        case = corruption.stale_index_entries(tmp_path / "db")
        deleted = case.lost_rowids["messages"]
        code, doc = check_json(case.db, tmp_path)
        assert (code, doc["damage"]) == (1, "derived")
        m = table(doc, "messages")
        assert (m["stale_index_entries"], m["missing_rows"]) == (deleted, [])

    def test_unreached_rows_still_in_the_fts_copies_are_missing_rows(self, tmp_path: Path) -> None:
        """A flipped child pointer: the rows of the leaf no longer reached are named as
        missing from the table while their text is still in the FTS copies (base)."""
        case = corruption.flipped_child_pointer(tmp_path / "db")
        code, doc = check_json(case.db, tmp_path)
        assert (code, doc["damage"]) == (3, "base")
        m = table(doc, "messages")
        assert m["missing_rows"] == case.unreached["messages"]
        assert m["page_referenced_twice"] is True
        assert any(
            "read twice through a page the b-tree references twice" in f for f in doc["findings"]
        )


class TestClassMatchesRecovery:
    def test_swapped_leaves_lose_nothing(self, tmp_path: Path) -> None:
        """Two messages leaves swapped: the table's b-tree is damaged (rowids out of
        order) but every row reads once and the indexes and FTS copies list no other,
        so the class is derived (exit 1), as recover then proves (nothing lost)."""
        case = corruption.swapped_leaves(tmp_path / "db")
        code, doc = check_json(case.db, tmp_path)
        assert (code, doc["damage"]) == (1, "derived")
        assert "messages" in groups(doc)
        m = table(doc, "messages")
        assert (
            m["scan_rows"] == m["distinct_keys"] == pristine_count("SELECT count(*) FROM messages")
        )
        out = tmp_path / "out.db"
        code, _, _ = run_ctl("recover", "--source", str(case.db), "--output", str(out))
        assert code == 0
        q = "SELECT rowid, * FROM messages ORDER BY rowid"
        assert corruption.table_rows(out, q) == pristine_rows(q)


class TestFreelistListsLivePage:
    def test_class_is_derived_and_recover_loses_nothing(self, tmp_path: Path) -> None:
        """A live leaf also on the freelist: the table's b-tree is flagged, but every
        row reads once and its indexes and FTS copies list no other, so the class is
        derived (exit 1); recover then proves it (exit 0, every message identical)."""
        case = corruption.freelist_lists_live_page(tmp_path / "db")
        code, doc = check_json(case.db, tmp_path)
        assert (code, doc["damage"]) == (1, "derived")
        out = tmp_path / "out.db"
        code, _, _ = run_ctl("recover", "--source", str(case.db), "--output", str(out))
        assert code == 0
        q = "SELECT rowid, * FROM messages ORDER BY rowid"
        assert corruption.table_rows(out, q) == corruption.table_rows(case.pristine, q)


class TestLibrary:
    def test_check_database_reports_source_path(self, tmp_path: Path) -> None:
        """The diagnosis names the source, not the private copy."""
        case = corruption.fresh_copy(tmp_path / "db")
        d = check_database(case.db, tmp_path / "w")
        assert d.path == str(case.db)
        assert d.damage == "none"

    def test_progress_json_lines_on_stderr(self, tmp_path: Path) -> None:
        """--progress json writes one JSON object per line on stderr; stdout stays the
        result document."""
        case = corruption.fresh_copy(tmp_path / "db")
        result = run_ctl("check", "--db", str(case.db), "--json", "--progress", "json")
        assert result.exit_code == 0
        events = [json.loads(line) for line in result.stderr.splitlines()]
        assert events
        assert {e["event"] for e in events} == {"progress"}
        assert {e["schema_version"] for e in events} == {1}
        assert "copy" in {e["phase"] for e in events}
        assert json.loads(result.stdout)["damage"] == "none"


class TestHotJournal:
    def test_crashed_writer_is_rolled_back_in_the_copy(self, tmp_path: Path) -> None:
        """A writer died mid-transaction in rollback mode, leaving a hot -journal and a
        half-written file: the check copies both, SQLite rolls the copy back, and every
        message is counted; the source's file and -journal are left as they were."""
        case = corruption.fresh_copy(tmp_path / "db")
        corruption.crash_mid_transaction(case)
        journal = Path(f"{case.db}-journal")
        assert journal.stat().st_size > 0
        before = fingerprint(case.db)
        code, doc = check_json(case.db, tmp_path)
        assert (code, doc["damage"]) == (0, "none")
        assert table(doc, "messages")["scan_rows"] == pristine_count(
            "SELECT count(*) FROM messages"
        )
        assert fingerprint(case.db) == before
        assert journal.exists()


class TestSchemaDamage:
    def test_schema_page_scribbled_behind_an_intact_header(self, tmp_path: Path) -> None:
        """Page 1 past the 100-byte header zeroed (the interior root of sqlite_schema):
        SQLite cannot read the schema, so the class is unreadable (exit 4); the intact
        schema leaves give page 1 back in the private copy, so every table is still
        checked and counted, and the note says what was done. The source is untouched."""
        case = corruption.fresh_copy(tmp_path / "db")
        with open(case.db, "r+b") as f:
            f.seek(100)
            f.write(b"\x00" * (4096 - 100))
        before = fingerprint(case.db)
        code, doc = check_json(case.db, tmp_path)
        assert (code, doc["damage"]) == (4, "unreadable")
        assert doc["notes"][0].startswith(
            f"{case.db}: page 1 (the root of sqlite_schema) is damaged, so SQLite cannot read"
        )
        assert table(doc, "messages")["scan_rows"] == pristine_count(
            "SELECT count(*) FROM messages"
        )
        assert table(doc, "sessions")["scan_rows"] == pristine_count(
            "SELECT count(*) FROM sessions"
        )
        assert fingerprint(case.db) == before

    def test_schema_leaf_page_zeroed_too(self, tmp_path: Path) -> None:
        """Page 1 and every schema leaf zeroed: no page says where a table lives; exit 4,
        the schema taken from the known Hermes layout the rows fit
        (tests/recovery/test_page1.py)."""
        case = corruption.fresh_copy(tmp_path / "db")
        pf = corruption.PristineFile(case.db)
        _, leaves = pf.tree_pages(1)
        with open(case.db, "r+b") as f:
            f.seek(100)
            f.write(b"\x00" * (4096 - 100))
        for leaf in leaves:
            corruption.zero_page(case, leaf)
        code, out, err = run_ctl("check", "--db", str(case.db), "--work-dir", str(tmp_path / "w"))
        assert (code, err) == (4, "")
        assert "from the known schema of Hermes 0.19.0" in out


class TestScan:
    @pytest.mark.parametrize("with_hints", [False, True], ids=["no-hints", "index-hints"])
    def test_scattered_damaged_leaves(self, tmp_path: Path, with_hints: bool) -> None:
        """Three non-adjacent messages leaves zeroed: the scan reads every other row and
        reports exactly three unreadable ranges, one per zeroed leaf, with or without
        index rowids to guide the search."""
        case = corruption.fresh_copy(tmp_path / "db")
        pf = corruption.PristineFile(case.db)
        _, leaves = pf.tree_pages(case.roots["messages"])
        chosen = [leaves[3], leaves[9], leaves[10 + 7]]
        lost = [pf.leaf_rowids(leaf) for leaf in chosen]
        for leaf in chosen:
            corruption.zero_page(case, leaf)
        hints = (
            [int(str(r[0])) for r in pristine_rows("SELECT rowid FROM messages")]
            if with_hints
            else []
        )
        conn = apsw.Connection(str(case.db), flags=apsw.SQLITE_OPEN_READONLY)
        seen: list[int] = []
        try:
            result = scan_table(conn, "messages", [], lambda row: seen.append(row[0]), hints=hints)
        finally:
            conn.close()
        assert result.unreadable_ranges == [[rs[0], rs[-1]] for rs in lost]
        n = pristine_count("SELECT count(*) FROM messages")
        assert len(seen) == n - sum(len(rs) for rs in lost)
        assert not set(seen) & {r for rs in lost for r in rs}


class TestAheadOfFts:
    def test_healthy_file_comes_back_before_its_fts_checks(self, tmp_path: Path) -> None:
        """A healthy file: the diagnosis is handed back with its FTS checks pending, and
        joining them gives the same diagnosis as waiting for them."""
        case = corruption.fresh_copy(tmp_path / "db")
        ahead, pending = diagnose_ahead_of_fts(case.db)
        assert pending is not None
        assert pending.join(ahead)
        waited = diagnose(case.db)
        assert ahead.damage == waited.damage == "none"
        assert _comparable(ahead) == _comparable(waited)

    def test_fts_damage_found_by_its_own_check_alone(self, tmp_path: Path) -> None:
        """An FTS index scrambled inside its pages (no b-tree error): the joined
        diagnosis names it and classes the file derived, as a diagnosis that waited for
        the check does; before the join it looked healthy."""
        case = scrambled_fts_index(tmp_path / "db")
        waited = diagnose(case.db)
        assert waited.damage == "derived"
        assert waited.fts["messages_fts"] != "ok"
        assert waited.error_lines == [] or all("messages_fts" in ln for ln in waited.error_lines)
        ahead, pending = diagnose_ahead_of_fts(case.db)
        assert pending is not None
        assert ahead.damage == "none"
        assert pending.join(ahead)
        assert _comparable(ahead) == _comparable(waited)

    def test_fts_check_that_stops_is_left_to_a_new_diagnosis(self, tmp_path: Path) -> None:
        """An FTS table FTS5 refuses to open (every b-tree intact): its check stops with
        an error, which the join cannot take alone; it says so and leaves the diagnosis
        as it was, while a diagnosis that waits classes the file derived."""
        case = fts_version_changed(tmp_path / "db")
        waited = diagnose(case.db)
        assert waited.damage == "derived"
        assert "invalid fts5 file format" in waited.fts["messages_fts"]
        ahead, pending = diagnose_ahead_of_fts(case.db)
        assert pending is not None
        before = _comparable(ahead)
        assert not pending.join(ahead)
        assert _comparable(ahead) == before
        assert ahead.damage == "none"

    def test_damaged_file_comes_back_before_its_fts_checks(self, tmp_path: Path) -> None:
        """A file with base damage (a phantom row) is handed back with its FTS checks
        pending too, and joining them gives the diagnosis that waited for them."""
        case = corruption.phantom_row(tmp_path / "db")
        ahead, pending = diagnose_ahead_of_fts(case.db)
        assert pending is not None
        assert ahead.damage == "base"
        assert pending.join(ahead)
        waited = diagnose(case.db)
        assert _comparable(ahead) == _comparable(waited)

    def test_fts_damage_found_alone_joined_into_a_damaged_file(self, tmp_path: Path) -> None:
        """A phantom row and an FTS index scrambled inside its pages: before the join
        the FTS table looks intact; the joined diagnosis names it as the one that
        waited does (its verdict, its group, its lines)."""
        case = corruption.phantom_row(tmp_path / "db")
        scramble_fts_index(case)
        waited = diagnose(case.db)
        assert waited.fts["messages_fts"] != "ok"
        assert "messages_fts" in {g.object for g in waited.groups}
        ahead, pending = diagnose_ahead_of_fts(case.db)
        assert pending is not None
        assert ahead.fts["messages_fts"] == "ok"
        assert pending.join(ahead)
        assert pending.join(ahead)  # a second join answers as the first
        assert _comparable(ahead) == _comparable(waited)

    def test_zeroed_leaf_with_its_check_cut_short(self, tmp_path: Path) -> None:
        """A zeroed leaf of messages ends SQLite's check early: the FTS verdicts come
        from the checks of their own, and the join gives what waiting gives."""
        case = corruption.zeroed_leaf(tmp_path / "db")
        ahead, pending = diagnose_ahead_of_fts(case.db)
        assert pending is not None
        assert pending.join(ahead)
        waited = diagnose(case.db)
        assert not waited.integrity_complete
        assert _comparable(ahead) == _comparable(waited)

    def test_fts_check_that_stops_in_a_damaged_file(self, tmp_path: Path) -> None:
        """A phantom row and an FTS table FTS5 refuses to open: the join cannot take
        the stopped check alone and leaves the diagnosis unchanged, to be made again."""
        case = fts_version_changed(tmp_path / "db")
        damage.duplicate_cell(case.db, "sessions", 5)
        ahead, pending = diagnose_ahead_of_fts(case.db)
        assert pending is not None
        before = _comparable(ahead)
        assert not pending.join(ahead)
        assert _comparable(ahead) == before
        assert diagnose(case.db).damage == ahead.damage == "base"


def _comparable(diag: Diagnosis) -> dict[str, Any]:
    doc = diag.to_json()
    del doc["path"]
    return doc


def test_the_fts_copies_rowids_are_kept_for_the_rebuild_and_left_out_of_the_json(
    tmp_path: Path,
) -> None:
    """The rowids the FTS copies hold, read once for the diagnosis, are those a fresh
    read of the copies gives (the rebuild takes them from there); the JSON is without
    them, as before."""
    from statewarden.recovery.decoding.schema import read_schema
    from statewarden.recovery.evidence.copies import fts_rowids

    case = corruption.phantom_row(tmp_path / "db", spec=SMALL)
    diag = diagnose(case.db)
    messages = next(t for t in diag.tables if t.name == "messages")
    assert messages.fts_copies_read
    conn = apsw.Connection(str(case.db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        fresh = fts_rowids(conn, read_schema(conn), "messages")
        count = conn.execute("SELECT count(*) FROM messages").get
    finally:
        conn.close()
    assert fresh is not None
    assert messages.fts_copies is not None
    assert set(messages.fts_copies) == set(fresh)
    assert len(fresh) == count > 0
    doc = diag.to_json()
    assert all("fts_copies" not in t and "fts_copies_read" not in t for t in doc["tables"])
    json.dumps(doc)
