"""`check` and `recover` against damage whose truth the corruption lab records exactly.

Each case comes with its ground truth (which rows are gone for good, which are still
intact on disk); recover must bring back every intact row, exactly as Hermes wrote it,
report exactly the rows it could not, and `check` must name what recover can prove.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab import corruption
from lab.hermes_fixtures import SMALL, built_db
from tests.support.cli import run_ctl


def recover_json(case: corruption.Case, tmp_path: Path) -> tuple[int, dict[str, Any], Path]:
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    code, stdout, stderr = run_ctl(
        "recover", "--source", str(case.db), "--output", str(out), "--json"
    )
    assert stderr == ""
    return code, json.loads(stdout), out


def check_json(case: corruption.Case) -> tuple[int, dict[str, Any]]:
    code, stdout, stderr = run_ctl("check", "--db", str(case.db), "--json", "--progress", "none")
    assert stderr == ""
    return code, json.loads(stdout)


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    return corruption.table_rows(path, sql)


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
