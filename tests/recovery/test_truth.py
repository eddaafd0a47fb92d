"""`check` and `recover` against damage whose truth the corruption lab records exactly.

Each case comes with its ground truth (which rows are gone for good, which are still
intact on disk); recover must bring back every intact row, exactly as Hermes wrote it,
report exactly the rows it could not, and `check` must name what recover can prove.
"""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from lab import corruption
from lab.corruption import table_rows as rows
from lab.hermes_fixtures import MAIN_CJK, SMALL, built_db
from tests.support.cli import run_ctl
from tests.support.recovery import check_json, recover_json


def assert_rows_are_pristine(
    out: Path,
    pristine: Path,
    table: str,
    missing: set[int] = frozenset(),  # type: ignore[assignment]
) -> None:
    """The output holds exactly the pristine rows of ``table`` but ``missing``, equal."""
    sql = f"SELECT rowid, * FROM {table} ORDER BY rowid"
    want = [r for r in rows(pristine, sql) if r[0] not in missing]
    assert rows(out, sql) == want


class TestScanOrderIsNotKeyOrder:
    def test_a_garbled_rowid_does_not_skip_the_rows_after_it(self, tmp_path: Path) -> None:
        """One sessions cell garbled to read as rowid 95 in the middle of its leaf: only
        its own row is lost; the 15 rows after it on the leaf and every other leaf come
        back whole (they were dropped as "already passed"); the lost range is the gap
        between the garbled cell's neighbours, not the garbage rowid."""
        case = corruption.garbled_cell(tmp_path / "db")
        (lost,) = case.lost_rowids["sessions"]
        n = rows(built_db(SMALL), "SELECT count(*) FROM sessions")[0][0]
        code, doc, out = recover_json(case, tmp_path)
        assert code == 3
        s = doc["tables"]["sessions"]
        assert (s["source_rows"], s["recovered"]) == (n - 1, n - 1)  # type: ignore[operator]
        assert s["unreadable_ranges"] == [[lost, lost]]
        assert doc["lost"] == {"sessions": 1}
        assert_rows_are_pristine(out, case.pristine, "sessions", {lost})
        assert_rows_are_pristine(out, case.pristine, "messages")

    def test_a_garbled_cell_that_decodes_is_no_row(self, tmp_path: Path) -> None:
        """The same garbled cell, its payload a well-formed record: SQLite reads a
        session 95 that never existed (every column NULL but one). Above the row after
        it and listed by no index, it is not copied; every real row is, exactly; and
        check, which counted it as the lost row, calls it base damage (not derived)."""
        case = corruption.garbled_cell(tmp_path / "db", decodable=True)
        (lost,) = case.lost_rowids["sessions"]
        code, checked = check_json(case)  # a row is lost: base damage, as recover shows
        assert (code, checked["databases"][0]["damage"]) == (3, "base")
        code, doc, out = recover_json(case, tmp_path)
        assert code == 3
        assert doc["set_aside"] == []
        assert doc["lost"] == {"sessions": 1}
        assert_rows_are_pristine(out, case.pristine, "sessions", {lost})
        assert_rows_are_pristine(out, case.pristine, "messages")
        assert any("rowids 95" in n for n in doc["notes"])


def fts_matches(path: Path, fts: str, word: str) -> list[tuple[object, ...]]:
    return rows(path, f"SELECT rowid FROM {fts} WHERE {fts} MATCH '{word}' ORDER BY rowid")


class TestFtsOnlyDamage:
    @pytest.mark.parametrize("damage", ["zeroed_fts_config", "zeroed_fts_structure"])
    def test_fts_that_cannot_open_is_derived_damage(self, tmp_path: Path, damage: str) -> None:
        """FTS5 cannot open messages_fts (its config page, or its structure record,
        zeroed): check says derived damage (exit 1, not "unreadable" 4), recover copies
        every base row (exit 0, no loss) and builds messages_fts anew: it passes FTS5's
        own check and finds what the pristine one finds."""
        case = getattr(corruption, damage)(tmp_path / "db")
        code, doc = check_json(case)
        (d,) = doc["databases"]
        assert (code, d["damage"]) == (1, "derived")
        assert [g["object"] for g in d["groups"] if not g["derived"]] == []
        code, rep, out = recover_json(case, tmp_path)
        assert code == 0
        assert (rep["loss_detected"], rep["lost"], rep["verified"]) == (False, {}, True)
        for table in ("sessions", "messages"):
            assert_rows_are_pristine(out, case.pristine, table)
            assert rep["tables"][table]["lost_keys"] == []
        n = rows(case.pristine, "SELECT count(*) FROM messages")[0][0]
        assert rows(out, "SELECT count(*) FROM messages_fts") == [(n,)]
        assert fts_matches(out, "messages_fts", "the") == fts_matches(
            case.pristine, "messages_fts", "the"
        )
        conn = apsw.Connection(str(out))
        try:  # raises on any disagreement between the index and the content
            conn.execute("INSERT INTO messages_fts(messages_fts) VALUES('integrity-check')")
        finally:
            conn.close()

    @pytest.mark.parametrize("shadow", ["messages_fts_cjk_config", "messages_fts_cjk_data"])
    def test_carried_fts_with_a_damaged_shadow_page(self, tmp_path: Path, shadow: str) -> None:
        """Hermes main's CJK FTS table (a tokenizer that cannot load here, so carried
        over as it is) with its config or data root page zeroed: the output opened no
        more (exit 1, "invalid fts5 file format", or the structure record missing).
        Its version row is written back, or its index carried empty:
        exit 0, verified, every base row as Hermes wrote it."""
        case = corruption.zeroed_shadow_root(tmp_path / "db", shadow, MAIN_CJK)
        code, rep, out = recover_json(case, tmp_path)
        assert (code, rep["verified"], rep["loss_detected"]) == (0, True, False)
        for table in ("sessions", "messages"):
            assert_rows_are_pristine(out, case.pristine, table)
        assert rows(out, "SELECT name FROM sqlite_schema WHERE name = 'messages_fts_cjk'") == [
            ("messages_fts_cjk",)
        ]


class TestSayOnlyWhatIsTrue:
    @pytest.mark.parametrize("table", ["messages_fts_content", "messages_fts_trigram_content"])
    def test_a_cell_read_as_rowid_0_is_no_lost_row(self, tmp_path: Path, table: str) -> None:
        """A zeroed cell header in an FTS content table reads as rowid 0: the copies
        never vouched for a message 0, so nothing is lost (exit 0, no lost_keys) and
        check calls it derived damage (exit 1), not base; the FTS table is rebuilt
        with every message."""
        case = corruption.zeroed_cell_header(tmp_path / "db", table)
        code, doc = check_json(case)
        (d,) = doc["databases"]
        assert (code, d["damage"]) == (1, "derived")
        code, rep, out = recover_json(case, tmp_path)
        assert code == 0
        assert (rep["loss_detected"], rep["lost"]) == (False, {})
        assert rep["tables"]["messages"]["lost_keys"] == []
        assert_rows_are_pristine(out, case.pristine, "messages")
        fts = table.removesuffix("_content")
        n = rows(case.pristine, "SELECT count(*) FROM messages")[0][0]
        assert rows(out, f"SELECT count(*) FROM {fts}") == [(n,)]

    def test_every_row_back_is_no_loss_and_exit_0(self, tmp_path: Path) -> None:
        """Rowid gaps left by deleted messages, then the messages interior page zeroed:
        every row comes back from the orphaned leaves and the intact indexes list
        exactly those rows, so the gaps are not "unreadable ranges": no loss, exit 0."""
        case = corruption.gaps_then_zeroed_interior(tmp_path / "db")
        n = rows(case.pristine, "SELECT count(*) FROM messages")[0][0]
        code, rep, out = recover_json(case, tmp_path)
        m = rep["tables"]["messages"]
        assert (m["recovered"], m["unreadable_ranges"], m["lost_keys"]) == (n, [], [])
        assert (rep["loss_detected"], rep["lost"], code) == (False, {}, 0)
        assert_rows_are_pristine(out, case.pristine, "messages")


class TestWalDamageInTheMiddle:
    def test_commits_after_a_zeroed_frame_header_come_back(self, tmp_path: Path) -> None:
        """One WAL frame header zeroed (salts included): the frames after it still carry
        the WAL's salts, so they are the current generation, not an older one. check
        counts the commits SQLite does not replay (base damage, exit 3); recover brings
        every message and session of the pristine file back from the frame images and
        names the damaged frame."""
        case = corruption.wal_zeroed_frame_header(tmp_path / "db")
        folded = tmp_path / "folded.db"
        corruption.fold_copy(case.db, folded)
        sqlite_sees = rows(folded, "SELECT count(*) FROM messages")[0][0]
        want = rows(case.pristine, "SELECT rowid, * FROM messages ORDER BY rowid")
        assert isinstance(sqlite_sees, int)
        assert sqlite_sees < len(want)
        code, doc = check_json(case)
        (d,) = doc["databases"]
        assert (code, d["damage"]) == (3, "base")
        assert d["wal_dropped_commits"] > 0
        code, rep, out = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"], rep["strategy"]) == (0, False, "salvage")
        assert rep["tables"]["messages"]["recovered_from_wal"] == len(want) - sqlite_sees
        assert any("has a damaged header" in n for n in rep["notes"])
        assert rows(out, "SELECT rowid, * FROM messages ORDER BY rowid") == want
        for t in ("sessions", "session_model_usage"):
            assert_rows_are_pristine(out, case.pristine, t)


class TestFlippedPayloadSize:
    @pytest.mark.parametrize(("rowid", "bit"), [(50, 0x20), (700, 0x01)])
    def test_the_record_comes_back_whole(self, tmp_path: Path, rowid: int, bit: int) -> None:
        """One bit of a message cell's payload-size varint flipped (shorter, longer):
        the record itself is intact, so the row comes back whole, every column equal to
        what Hermes wrote, not as a partial row with filled-in columns: no loss, exit 0,
        and the search index finds it as the pristine one does."""
        case = corruption.flipped_payload_size(tmp_path / "db", rowid, bit)
        code, rep, out = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"], rep["partial_rows"]) == (0, False, [])
        m = rep["tables"]["messages"]
        assert (m["partial"], m["lost_keys"], m["unreadable_ranges"]) == (0, [], [])
        assert_rows_are_pristine(out, case.pristine, "messages")
        (content,) = rows(case.pristine, f"SELECT content FROM messages WHERE id = {rowid}")[0]
        word = next(w for w in str(content).split() if w.isalpha() and len(w) >= 4)
        assert (rowid,) in fts_matches(out, "messages_fts", word)
        assert fts_matches(out, "messages_fts", word) == fts_matches(
            case.pristine, "messages_fts", word
        )


class TestForeignWal:
    def test_a_wal_of_another_hermes_database_is_set_aside(self, tmp_path: Path) -> None:
        """The -wal of another Hermes database (valid header, salts, checksums, page
        size and schema cookie) next to an intact file: replayed, it scrambles the
        file (most rows lost). Recognised by what it does to the file, it is set aside
        and named; every row of the file comes back (exit 0). check says base damage
        (exit 3): as SQLite, and so Hermes, reads the bundle, the rows are not there."""
        case = corruption.foreign_hermes_wal(tmp_path)
        wal_bytes = Path(f"{case.db}-wal").read_bytes()
        code, doc = check_json(case)
        (d,) = doc["databases"]
        assert (code, d["damage"]) == (3, "base")
        assert any("belongs to another database" in f for f in d["findings"])
        code, rep, out = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"], rep["lost"]) == (0, False, {})
        assert any("set aside, it belongs to another database" in n for n in rep["notes"])
        for t in ("sessions", "messages", "session_model_usage"):
            assert_rows_are_pristine(out, case.pristine, t)
        assert Path(f"{case.db}-wal").read_bytes() == wal_bytes  # the source is only read


class TestCellsUnderDamagedPageStructure:
    @pytest.mark.parametrize("what", ["header", "pointers"])
    def test_intact_cells_are_carved(self, tmp_path: Path, what: str) -> None:
        """A messages leaf whose header or cell-pointer array is zeroed: its cells are
        carved from the page (each record checked by its header against the cell's
        size and the table's columns, and vouched for by the intact index), so every
        message comes back exactly; the zeroed pointers' phantom cells (rowid 0) are
        not rows: no loss, exit 0."""
        case = corruption.damaged_leaf_structure(tmp_path / "db", what)
        _, checked = check_json(case)
        assert not any("rowid 0" in f for f in checked["databases"][0]["findings"])
        code, rep, out = recover_json(case, tmp_path)
        m = rep["tables"]["messages"]
        assert m["recovered_from_pages"] == len(case.unreached["messages"])
        assert (code, rep["loss_detected"], rep["lost"], rep["set_aside"]) == (0, False, {}, [])
        assert_rows_are_pristine(out, case.pristine, "messages")
        assert_rows_are_pristine(out, case.pristine, "sessions")


def blob_rows(path: Path, table: str) -> dict[object, tuple[object, ...]]:
    """Rows of ``table`` by rowid, every column read as bytes (damaged text may not be
    valid UTF-8)."""
    cols = [r[1] for r in rows(path, f"PRAGMA table_info({table})")]
    sel = ", ".join(f'CAST("{c}" AS BLOB)' for c in cols)
    return {r[0]: r for r in rows(path, f"SELECT rowid, {sel} FROM {table} ORDER BY rowid")}


class TestRandomBytes:
    @pytest.mark.parametrize("seed", [2, 7, 10, 22, 29])
    def test_every_intact_row_comes_back(self, tmp_path: Path, seed: int) -> None:
        """64 random bytes on one leaf (seed 10: a garbled cell whose payload runs past
        the page made recover fail with an unexpected error): every row whose cell the
        bytes do not touch comes back exactly, no row that never existed appears, and
        only touched rows may be reported lost."""
        case = corruption.random_bytes(tmp_path / "db", seed)
        ((table, hit),) = case.lost_rowids.items()
        code, rep, out = recover_json(case, tmp_path)
        assert code in (0, 3)
        want, got = blob_rows(case.pristine, table), blob_rows(out, table)
        assert {k: v for k, v in got.items() if k not in hit} == {
            k: v for k, v in want.items() if k not in hit
        }
        assert set(got) <= set(want)
        assert rep["lost"].get(table, 0) <= len(hit)


class TestCellsThatStraddleAZeroedSector:
    def test_a_record_that_runs_into_zeros_is_never_a_good_row(self, tmp_path: Path) -> None:
        """The sector holding the tail of a message's record zeroed (its cell header
        intact, so SQLite reads the row with NULs for text and 0 for numbers): check
        names the row and calls it base damage; recover writes no row the sector
        touched as read: its zeroed text comes back from the two agreeing FTS copies
        and a zeroed number from the intact indexes that hold it (listed in
        restored_from_copies), else the row is partial with its zeroed columns listed
        and why, or not written; every other message exactly as Hermes wrote it, loss
        detected for the row whose start was zeroed. (The row was written out with
        NUL bytes, rc 0, "no loss".)"""
        case = corruption.zeroed_sector_in_cell(tmp_path / "db")
        rowid = case.phantom["messages"]
        hit = set(case.lost_rowids["messages"])
        code, checked = check_json(case)
        (d,) = checked["databases"]
        assert (code, d["damage"]) == (3, "base")
        assert rowid in d["zeroed_cells"]["messages"]
        assert any("run into zeroed bytes" in f for f in d["findings"])
        code, rep, out = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"]) == (3, True)
        partial = {p["rowid"]: p for p in rep["partial_rows"] if p["table"] == "messages"}
        restored = {r["rowid"] for r in rep["restored_from_copies"] if r["table"] == "messages"}
        # The zeroed text comes back from its two agreeing FTS copies, a zeroed number
        # from the intact indexes that hold it: restored, and said so.
        assert rowid in restored
        sql = "SELECT rowid, * FROM messages ORDER BY rowid"
        want = {r[0]: r for r in rows(case.pristine, sql)}
        got = {r[0]: r for r in rows(out, sql)}
        for r in hit:
            if r in got and r not in partial:  # a good row only when put back whole
                assert r in restored
                assert got[r] == want[r]
        for p in partial.values():
            assert p["why"] == "its record runs into zeroed bytes"
            assert set(p["changed"]) <= set(p["columns"])
        assert all(got[r] == want[r] for r in want if r not in hit)
        assert all("\x00" not in str(v) for r in hit if r in got for v in got[r])


class TestBitRotWithTwoAgreeingCopies:
    def test_the_text_comes_back_from_the_copies(self, tmp_path: Path) -> None:
        """One letter of a message's text changed on disk, its two FTS copies agreeing
        on the original: check calls it base damage; recover restores the text from
        the copies and says so (restored_from_copies, a note): the row equals what
        Hermes wrote, no loss, exit 0. (The altered text was kept, rc 0.)"""
        case = corruption.bit_rot(tmp_path / "db", "row")
        rowid = case.phantom["messages"]
        code, checked = check_json(case)
        assert (code, checked["databases"][0]["damage"]) == (3, "base")
        code, rep, out = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"]) == (0, False)
        [fix] = rep["restored_from_copies"]
        assert (fix["table"], fix["rowid"], fix["column"]) == ("messages", rowid, "content")
        assert any("restored from their search-index copies" in n for n in rep["notes"])
        assert_rows_are_pristine(out, case.pristine, "messages")


class TestLostWrites:
    def test_stale_and_missing_rows_are_named(self, tmp_path: Path) -> None:
        """The sessions page a batch of Hermes transactions changed back to its older
        image, the messages, indexes and FTS copies kept new: every page is well
        formed. check calls it base damage (exit 3), naming the sessions whose
        message_count disagrees with their messages; recover names each stale session
        (older than its messages) in count_mismatches, writes the count the recovered
        messages prove where they do, and names the session the page lost in lost_keys:
        loss detected, never "no loss". (check said derived, recover wrote the stale
        rows as good ones.)"""
        case = corruption.lost_writes(tmp_path / "db")
        code, checked = check_json(case)
        (d,) = checked["databases"]
        assert (code, d["damage"]) == (3, "base")
        assert any("message_count disagrees" in f for f in d["findings"])
        code, rep, out = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"]) == (3, True)
        stale = [m for m in rep["count_mismatches"] if m["what"] == "stale"]
        sql = "SELECT rowid, * FROM sessions"
        want = {r[0]: r for r in rows(case.pristine, sql)}
        got = {r[0]: r for r in rows(out, sql)}
        differ = {r for r in got if got[r] != want.get(r)}
        # A stale count the output proves is written true (the row then is Hermes'
        # again); the others are written as the messages recovered, and differ.
        written = {m["rowid"] for m in stale if m["proven"]}
        assert {m["rowid"] for m in stale} - written == differ
        assert all(got[r] == want[r] for r in written)
        assert len(stale) == case.phantom["sessions"]
        assert rep["tables"]["sessions"]["stale"] == len(stale)
        (lost,) = case.lost_rowids["sessions"]
        [(sid,)] = rows(case.pristine, f"SELECT id FROM sessions WHERE rowid = {lost}")
        assert [sid] in rep["tables"]["sessions"]["lost_keys"]
        assert_rows_are_pristine(out, case.pristine, "messages")


class TestCrossLinkedOverflowChains:
    def test_neither_row_is_written_with_the_others_text(self, tmp_path: Path) -> None:
        """Two messages whose overflow pointers lead to the same page (the second's own
        overflow page intact but reached by nothing): check names the second row and
        calls it base damage; recover gives the shared page to the row its FTS copies
        vouch for, and the other row its own unattached chain: both rows exactly as
        Hermes wrote them, no loss, exit 0. (The second message was written out with
        the first one's text.)"""
        case = corruption.cross_linked_overflow(tmp_path / "db")
        a, b = case.unreached["messages"]
        code, checked = check_json(case)
        (d,) = checked["databases"]
        assert (code, d["damage"]) == (3, "base")
        assert d["cross_linked"]["messages"]
        assert any("leads into another row's pages" in f for f in d["findings"])
        code, rep, out = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"], rep["partial_rows"]) == (0, False, [])
        assert_rows_are_pristine(out, case.pristine, "messages")
        assert rep["tables"]["messages"]["recovered_from_pages"] >= 1
        q = "SELECT content FROM messages WHERE rowid = ?"
        text_a, text_b = (rows(out, q.replace("?", str(r)))[0][0] for r in (a, b))
        assert text_a != text_b


# Hermes' own history on a healthy file: a rewind marks messages inactive and leaves
# message_count as it was; a compaction archives the active ones and sets the count
# to the new active rows; more messages follow each.
_HONEST_HISTORY = """
import os, sys
os.environ["HERMES_HOME"] = sys.argv[1]
from hermes_state import SessionDB
db = SessionDB()
for sid in ("rewound", "compacted", "both"):
    db.create_session(sid, "cli")
    ids = [db.append_message(sid, "user" if i % 2 == 0 else "assistant", f"{sid} turn {i}")
           for i in range(8)]
    if sid in ("rewound", "both"):
        db.rewind_to_message(sid, ids[4])
    if sid in ("compacted", "both"):
        db.archive_and_compact(sid, [{"role": "user", "content": f"{sid} summary"}])
    if sid == "both":
        db.rewind_to_message(sid, db.append_message(sid, "user", "after the compaction"))
    db.append_message(sid, "assistant", f"{sid} goes on")
db.close()
"""


class TestHonestCounts:
    def test_rewind_and_compaction_are_no_lost_writes(self, tmp_path: Path) -> None:
        """Hermes' own rewind (messages marked inactive, message_count kept) and
        compaction (the count set to the new active rows), one after the other too,
        leave counts that differ from the active messages: check calls the file
        healthy (exit 0) and recover names no count mismatch and no loss. (The lost-
        write rule took a rewound session for one that lost messages: base damage.)"""
        import subprocess
        import sys

        home = tmp_path / "home"
        home.mkdir()
        subprocess.run([sys.executable, "-c", _HONEST_HISTORY, str(home)], check=True)
        db = home / "state.db"
        counts = {
            r[0]: (r[1], r[2])
            for r in corruption.table_rows(
                db,
                "SELECT s.id, s.message_count, (SELECT count(*) FROM messages m"
                " WHERE m.session_id = s.id AND m.active = 1) FROM sessions s",
            )
        }
        # The rewound sessions count more than their active messages.
        assert counts["rewound"] == (9, 5), counts
        assert counts["both"] == (3, 2), counts
        code, stdout, stderr = run_ctl("check", "--db", str(db), "--json", "--progress", "none")
        assert (code, stderr) == (0, "")
        (d,) = json.loads(stdout)["databases"]
        assert d["damage"] == "none"
        out = tmp_path / "out" / "recovered.db"
        out.parent.mkdir()
        code, stdout, stderr = run_ctl(
            "recover", "--source", str(db), "--output", str(out), "--json"
        )
        rep = json.loads(stdout)
        assert (code, rep["loss_detected"], rep["count_mismatches"]) == (0, False, [])
