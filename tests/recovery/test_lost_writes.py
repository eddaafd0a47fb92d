"""Lost writes (``statewarden/recovery/evidence/lost_writes.py``): pages Hermes changed written
back as they were before, every page well formed (``lab/lost_writes.py``).

``check`` must call a stale or missing row base damage, an index older than its row
derived damage, and a file after Hermes' own deletes, rewinds, compactions and prunes
healthy; ``recover`` must name each row that is stale or may be lost, never "no loss".
"""

from __future__ import annotations

from pathlib import Path

from lab import lost_writes
from lab.corruption import Case
from lab.corruption import table_rows as rows
from lab.hermes_fixtures import SMALL, built_db
from tests.support.recovery import but_the_count, check_json, recover_json


class TestRowsOlderThanTheirIndexes:
    def test_rewound_messages_on_a_page_back_to_its_older_image(self, tmp_path: Path) -> None:
        """Hermes rewinds a session (16 messages set inactive), then the messages pages
        that changed go back to their images from before: the rows read active while
        the one index holding the flag says inactive. check calls it base damage and
        names each row (the row or its one entry is older: nothing tells which); recover
        keeps them as stored and names them stale: loss detected. (check said derived:
        a rebuild of the index would have made the stale rows good.)"""
        case = lost_writes.reverted(tmp_path / "db", "rewind", ("messages",))
        stale = case.unreached["messages"]
        assert len(stale) == 16
        assert case.lost_rowids["messages"] == []
        code, checked = check_json(case)
        (d,) = checked["databases"]
        assert (code, d["damage"]) == (3, "base")
        found = d["lost_writes"]["stale_rows"]
        assert [s["rowid"] for s in found] == stale
        assert all(not s["certain"] and list(s["columns"]) == ["active"] for s in found)
        assert {
            (s["columns"]["active"]["row"], s["columns"]["active"]["indexes"]) for s in found
        } == {(1, 0)}
        assert any("nothing tells which" in f for f in d["findings"])
        code, rep, out = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"]) == (3, True)
        assert [s["rowid"] for s in rep["stale_rows"]] == stale
        sql = "SELECT rowid, * FROM messages ORDER BY rowid"
        assert rows(out, sql) == rows(case.db, sql)  # kept as stored, named

    def test_one_index_older_than_its_rows_cannot_be_told_apart(self, tmp_path: Path) -> None:
        """The same rewind with the index page back instead: the rows read inactive
        while their one index entry says active, the mirror image of the stale rows
        above, and nothing in the file tells the two apart. check says so and calls it
        base damage (the rows may be stale); recover keeps the rows as stored, which
        here are what Hermes wrote, and names them as not proven: loss detected, never
        "no loss" for a row that may be stale."""
        case = lost_writes.reverted(tmp_path / "db", "rewind", ("idx_messages_session_active",))
        assert case.damaged_pages
        code, checked = check_json(case)
        (d,) = checked["databases"]
        assert (code, d["damage"]) == (3, "base")
        found = d["lost_writes"]["stale_rows"]
        assert len(found) == 16
        assert {(s["columns"]["active"]["row"], s["certain"]) for s in found} == {(0, False)}
        code, rep, out = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"]) == (3, True)
        assert [s["rowid"] for s in rep["stale_rows"]] == [s["rowid"] for s in found]
        sql = "SELECT rowid, * FROM messages ORDER BY rowid"
        assert rows(out, sql) == rows(case.pristine, sql)

    def test_a_session_older_than_indexes_that_agree_is_named_stale(self, tmp_path: Path) -> None:
        """Hermes deletes the newest session and opens one that takes its rowid, then
        the sessions page goes back: the row is the deleted session while seven
        indexes, agreeing with each other, hold the new one. check names it stale for
        certain (base damage); recover keeps the row as it was once written (not
        patched with the indexes' id and start time into a session nobody wrote) and
        names it stale, and the new session as lost. (recover wrote the mixed row and
        called the stale row's count "messages missing".)"""
        case = lost_writes.reverted(tmp_path / "db", "reuse", ("sessions",))
        (rowid,) = case.unreached["sessions"]
        code, checked = check_json(case)
        (d,) = checked["databases"]
        assert (code, d["damage"]) == (3, "base")
        (s,) = d["lost_writes"]["stale_rows"]
        assert (s["table"], s["rowid"], s["certain"]) == ("sessions", rowid, True)
        assert s["columns"]["id"]["indexes"] == "opened_after_the_delete"
        code, rep, out = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"]) == (3, True)
        assert [(s["table"], s["rowid"]) for s in rep["stale_rows"]] == [("sessions", rowid)]
        assert [(m["rowid"], m["what"]) for m in rep["count_mismatches"]] == [(rowid, "stale")]
        [(new_id,)] = rows(case.pristine, f"SELECT id FROM sessions WHERE rowid = {rowid}")
        assert rep["tables"]["sessions"]["lost_keys"] == [[new_id]]
        sql = f"SELECT rowid, * FROM sessions WHERE rowid = {rowid}"
        assert but_the_count(out, sql) == but_the_count(case.db, sql)
        assert but_the_count(out, sql) != but_the_count(case.pristine, sql)

    def test_an_index_entry_older_than_its_row_is_derived(self, tmp_path: Path) -> None:
        """The same history with only idx_sessions_started's page back: its entry is
        older than the row, which three other indexes holding started_at agree with.
        check calls it derived damage (exit 1) and names the entry; recover rebuilds
        the index and every row comes back as Hermes wrote it: no loss."""
        case = lost_writes.reverted(tmp_path / "db", "reuse", ("idx_sessions_started",))
        assert case.damaged_pages
        code, checked = check_json(case)
        (d,) = checked["databases"]
        assert (code, d["damage"]) == (1, "derived")
        lw = d["lost_writes"]
        assert (lw["stale_rows"], list(lw["older_entries"])) == ([], ["idx_sessions_started"])
        code, rep, out = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"], rep["stale_rows"]) == (0, False, [])
        for table in ("sessions", "messages"):
            sql = f"SELECT rowid, * FROM {table} ORDER BY rowid"
            assert rows(out, sql) == rows(case.pristine, sql)


class TestRowidsGivenOut:
    def test_messages_only_the_indexes_list_above_the_highest_rowid(self, tmp_path: Path) -> None:
        """Hermes appends six messages; then the messages, sessions and FTS pages go
        back, while both messages indexes and sqlite_sequence keep the write: the
        sequence stands above the highest rowid and two indexes list the six rowids in
        between. check calls it base damage (the rows may be lost) and names them;
        recover names them as maybe lost: loss detected. (check called the entries left
        behind by deletes, derived, and recover said no loss.)"""
        shadows = lost_writes.fts_shadows(built_db(SMALL))
        case = lost_writes.reverted(tmp_path / "db", "append", ("messages", "sessions", *shadows))
        gone = case.lost_rowids["messages"]
        assert len(gone) == 6
        code, checked = check_json(case)
        (d,) = checked["databases"]
        assert (code, d["damage"]) == (3, "base")
        (g,) = d["lost_writes"]["given_out"]
        assert (g["table"], g["rowids"], g["sequence"]) == ("messages", gone, gone[-1])
        (m,) = [t for t in d["tables"] if t["name"] == "messages"]
        assert m["stale_index_entries"] == []  # not called left behind by deletes
        code, rep, _ = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"]) == (3, True)
        assert [g["rowids"] for g in rep["given_out"]] == [gone]


class TestRowsReferencedButGone:
    def test_a_session_its_messages_and_indexes_name_is_lost(self, tmp_path: Path) -> None:
        """Hermes opens a session and stores three messages in it; then the sessions
        page goes back to its image from before. The session is gone while every
        sessions index lists it and its three messages reference it: check calls it
        base damage and names it; recover reports it lost. (check called it derived:
        only the planner's count and the indexes disagreed.)"""
        case = lost_writes.reverted(tmp_path / "db", "open", ("sessions",))
        (lost,) = case.lost_rowids["sessions"]
        code, checked = check_json(case)
        (d,) = checked["databases"]
        assert (code, d["damage"]) == (3, "base")
        (r,) = d["lost_writes"]["referenced"]
        assert (r["table"], r["rowids"], r["keys"]) == ("sessions", [lost], ["opened_later"])
        assert (r["by"], r["column"], r["references"]) == ("messages", "id", 3)
        code, rep, out = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"]) == (3, True)
        assert rep["tables"]["sessions"]["lost_keys"] == [["opened_later"]]
        assert rows(out, "SELECT count(*) FROM messages WHERE session_id = 'opened_later'") == [
            (3,)
        ]


class TestHermesOwnDeletes:
    def test_deletes_rewinds_compactions_and_prunes_are_no_lost_writes(
        self, tmp_path: Path
    ) -> None:
        """Hermes deletes its newest session (the messages' sqlite_sequence now stands
        above their highest rowid), deletes empty sessions, clears a session's
        messages, rewinds one, compacts one and prunes old sessions: check calls the
        file healthy (exit 0) and recover names nothing stale or maybe lost."""
        db = lost_writes.after_history(tmp_path / "db", "deletes")
        [(seq, top)] = rows(
            db,
            "SELECT (SELECT seq FROM sqlite_sequence WHERE name = 'messages'),"
            " (SELECT max(rowid) FROM messages)",
        )
        assert seq > top  # type: ignore[operator]
        [(inactive,)] = rows(db, "SELECT count(*) FROM messages WHERE active = 0")
        assert inactive
        case = Case(db=db, pristine=db, roots={})
        code, checked = check_json(case)
        (d,) = checked["databases"]
        assert (code, d["damage"], d["findings"]) == (0, "none", [])
        assert d["lost_writes"] == {
            "stale_rows": [],
            "older_entries": {},
            "given_out": [],
            "referenced": [],
            "misshapen_entries": {},
        }
        code, rep, _ = recover_json(case, tmp_path)
        assert (code, rep["loss_detected"], rep["stale_rows"], rep["given_out"]) == (
            0,
            False,
            [],
            [],
        )
