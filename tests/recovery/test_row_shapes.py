"""Rows of the wrong shape: another table's leaf reached through a flipped child
pointer, two records swapped on their leaf, two indexes' leaves swapped, a CREATE TABLE
text short of a column. On the fuzz lab's Hermes-written file (``lab/row_shapes.py``);
what is expected comes from the pristine file, never from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lab import fuzz, row_shapes
from lab.corruption import table_rows
from lab.hermes_fixtures import MEDIUM, built_db
from statewarden.recovery.building.salvage import never_used
from tests.support.cli import run_ctl
from tests.support.recovery import recover_reported as recover_json

ALL_MESSAGES = "SELECT rowid, * FROM messages ORDER BY rowid"


class TestForeignLeaf:
    @pytest.mark.parametrize(
        "target", ["sqlite_schema", "messages_fts_trigram_content", "messages_fts_docsize"]
    )
    def test_the_unreached_leaf_comes_back_whole(self, tmp_path: Path, target: str) -> None:
        """A child pointer of the messages root now names another table's leaf, whose
        rowids messages uses too: those cells are not messages and never claim the
        rowids of the real leaf, whose rows (intact, no longer reached) come back from
        its page. Every message equals the one Hermes wrote; none is lost."""
        case = row_shapes.child_pointer_to_foreign_leaf(tmp_path / "db", target)
        unreached = case.unreached["messages"]
        assert unreached
        _code, doc, out = recover_json(case, tmp_path)
        m = doc["tables"]["messages"]
        assert m["lost_keys"] == []
        assert m["recovered_from_pages"] == len(unreached)
        assert table_rows(out, ALL_MESSAGES) == table_rows(case.pristine, ALL_MESSAGES)

    @pytest.mark.parametrize(
        "target", ["sqlite_schema", "messages_fts_trigram_content", "messages_fts_docsize"]
    )
    def test_its_cells_are_no_stale_rows(self, tmp_path: Path, target: str) -> None:
        """The same damage seen by check: the other table's cells, read through the
        messages b-tree under rowids messages uses, do not fit messages (a NOT NULL
        column with no field), so they are not held against the messages indexes as
        "rows older than their index entries"; base damage all the same (a leaf of
        messages is no longer reached)."""
        case = row_shapes.child_pointer_to_foreign_leaf(tmp_path / "db", target)
        code, diag = check_json(case.db)
        assert (code, diag["damage"]) == (3, "base")
        assert diag["lost_writes"]["stale_rows"] == []

    @pytest.mark.parametrize(
        "target", ["sqlite_schema", "messages_fts_trigram_content", "messages_fts_docsize"]
    )
    def test_recover_detects_no_loss(self, tmp_path: Path, target: str) -> None:
        """Nothing was lost: the other table's cells are not messages, so they are
        neither held against the messages' search-index copies nor counted unverified
        ("kept as stored"), nor read as source rows and set aside under the rowids of
        real messages; a note says they were left out. recover exits 0 with no loss
        detected, every message back."""
        case = row_shapes.child_pointer_to_foreign_leaf(tmp_path / "db", target)
        pristine = table_rows(case.pristine, ALL_MESSAGES)
        code, doc, out = recover_json(case, tmp_path)
        m = doc["tables"]["messages"]
        assert (code, doc["loss_detected"], m["unverified"]) == (0, False, 0)
        assert (m["source_rows"], m["set_aside"], doc["set_aside"]) == (len(pristine), 0, [])
        assert not [n for n in doc["notes"] if "kept as stored" in n]
        assert [n for n in doc["notes"] if "cells of another table's leaf" in n]
        assert table_rows(out, ALL_MESSAGES) == pristine

    @pytest.mark.parametrize(
        "target", ["sqlite_schema", "messages_fts_trigram_content", "messages_fts_docsize"]
    )
    def test_check_reads_them_as_no_rows(self, tmp_path: Path, target: str) -> None:
        """check scans messages without the other table's cells: no row read twice, no
        row differing from its search-index copies, no orphan; the messages counted are
        the rows its b-tree reaches of its own (the pristine file's, but the unreached
        leaf's), and the damage stays base (exit 3)."""
        case = row_shapes.child_pointer_to_foreign_leaf(tmp_path / "db", target)
        unreached = set(case.unreached["messages"])
        code, diag = check_json(case.db)
        assert (code, diag["damage"]) == (3, "base")
        t = next(t for t in diag["tables"] if t["name"] == "messages")
        reached = [
            r for (r, *_rest) in table_rows(case.pristine, ALL_MESSAGES) if r not in unreached
        ]
        assert (t["scan_rows"], t["distinct_keys"]) == (len(reached), len(reached))
        assert t["duplicate_rowids"] == {}
        assert diag["orphans"] == {}
        c = next(c for c in diag["copies"] if c["table"] == "messages")
        assert (c["rows_rotted"], c["rows_bad_text"], c["copies_rotted"]) == ([], [], {})
        lines = "\n".join(diag["findings"])
        for wrong in ("read twice", "search-index copies", "orphan"):
            assert wrong not in lines

    def test_an_integrity_check_without_page_accounting(self, tmp_path: Path) -> None:
        """SQLite's integrity check skips its page accounting ("never used") and still
        answers in full when the first object of its schema hash has no root page (it
        depends on the order of the schema's rows: one Hermes file has it, another not).
        The pointer moved onto a docsize leaf of the 8,000-message file: whether SQLite
        names the unreached page or not, every page is read when a "2nd reference" shows
        a leaf is unreached, and the intact messages there come back. Exit 0, no loss,
        every message as Hermes wrote it."""
        source = built_db(MEDIUM)
        case = row_shapes.child_pointer_to_foreign_leaf(
            tmp_path / "db", "messages_fts_docsize", source=source
        )
        unreached = case.unreached["messages"]
        assert unreached
        code, diag = check_json(case.db)
        assert (code, diag["damage"]) == (3, "base")
        # The accounting skipped: the same lines without "never used" ones.
        lines = [ln for ln in diag["error_lines"] if "never used" not in ln]
        assert any("2nd reference" in ln for ln in lines)
        assert never_used(lines, complete=True) is None  # every page is read
        assert never_used(lines, complete=False) is None
        assert never_used(["Page 7: never used", *lines], complete=True) == [7]
        code, doc, out = recover_json(case, tmp_path)
        m = doc["tables"]["messages"]
        assert (code, doc["loss_detected"], m["lost_keys"]) == (0, False, [])
        assert m["recovered_from_pages"] == len(unreached)
        assert table_rows(out, ALL_MESSAGES) == table_rows(case.pristine, ALL_MESSAGES)


def check_json(db: Path) -> tuple[int, dict[str, Any]]:
    code, stdout, stderr = run_ctl("check", "--db", str(db), "--json", "--progress", "none")
    assert stderr == ""
    doc = json.loads(stdout)["databases"][0]
    assert isinstance(doc, dict)
    return code, doc


BASE_TABLES = ("sessions", "messages", "session_model_usage", "gateway_routing")


class TestSwappedIndexLeaves:
    def test_entries_of_another_shape_are_no_witnesses(self, tmp_path: Path) -> None:
        """A leaf of idx_messages_session and one of idx_messages_session_active trade
        places: their entries (3 fields where the index has 4, and the other way round)
        are not the index's, and say nothing of the rows. Derived damage, exit 0 from
        check; recover brings every row back exactly and detects no loss."""
        case = row_shapes.swapped_index_leaves(tmp_path / "db")
        code, diag = check_json(case.db)
        assert (code, diag["damage"]) == (1, "derived")
        assert diag["lost_writes"]["stale_rows"] == []
        code, doc, out = recover_json(case, tmp_path)
        for table in BASE_TABLES:
            q = f"SELECT rowid, * FROM {table} ORDER BY rowid"
            assert table_rows(out, q) == table_rows(case.pristine, q)
        assert (doc["stale_rows"], doc["loss_detected"], code) == ([], False, 0)


class TestSwappedRecords:
    def test_a_row_contradicted_twice_is_named_never_patched(self, tmp_path: Path) -> None:
        """The records of two messages of one session traded on their leaf: each rowid
        holds the other's role, content and timestamp. The other rowid's index entries
        hold its timestamp and the other's FTS copies its text: it holds the other's
        record, so no column is "restored" into a mix no one wrote; each row is named
        by rowid (with the rowid whose record it holds), loss is reported (exit 3), and
        the lab's judge finds no promise broken."""
        case = row_shapes.swapped_records(tmp_path / "db")
        swapped = case.collision["messages"]
        code, diag = check_json(case.db)
        assert (code, diag["damage"]) == (3, "base")
        stale = {s["rowid"]: s for s in diag["lost_writes"]["stale_rows"]}
        assert sorted(stale) == swapped
        assert not any(s["restorable"] for s in stale.values())
        a, b = swapped
        assert (stale[a]["record_of"], stale[b]["record_of"]) == (b, a)
        code, doc, out = recover_json(case, tmp_path)
        assert (code, doc["loss_detected"]) == (3, True)
        assert doc["restored_from_copies"] == []
        assert sorted(s["rowid"] for s in doc["stale_rows"]) == swapped
        judged = fuzz.FuzzCase(
            db=case.db,
            pristine=case.pristine,
            older=case.pristine,
            seed=-1,
            truth=fuzz.carve_truth(case.pristine, case.db),
        )
        assert fuzz.violations(judged, doc, out) == []


class TestSchemaTextShortOfAColumn:
    @pytest.mark.parametrize(
        ("table", "column"),
        [("messages", "tool_call_id"), ("sessions", "system_prompt"), ("messages", "token_count")],
    )
    def test_hermes_text_is_put_back(self, tmp_path: Path, table: str, column: str) -> None:
        """A CREATE TABLE text that lost a column line while every record still carries
        the field: records with more fields than declared prove the text damaged, so
        check says the schema is (exit 4, the table named), and recover reads the rows
        with Hermes' own text for the table: every row in its own columns, the table
        created as Hermes created it, nothing lost (exit 0)."""
        case = row_shapes.schema_short_of_column(tmp_path / "db", table, column)
        code, diag = check_json(case.db)
        assert (code, diag["damage"]) == (4, "unreadable")
        assert any(f"CREATE TABLE text of {table}" in n for n in diag["notes"])
        code, doc, out = recover_json(case, tmp_path)
        assert (code, doc["loss_detected"], doc["set_aside"]) == (0, False, [])
        for name in BASE_TABLES:
            q = f"SELECT rowid, * FROM {name} ORDER BY rowid"
            assert table_rows(out, q) == table_rows(case.pristine, q)
        q = f"SELECT sql FROM sqlite_schema WHERE name = '{table}'"
        assert table_rows(out, q) == table_rows(case.pristine, q)
