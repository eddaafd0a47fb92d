"""Rows of the wrong shape: another table's leaf reached through a flipped child
pointer, two records swapped on their leaf, two indexes' leaves swapped, a CREATE TABLE
text short of a column. On the fuzz lab's Hermes-written file (``lab/row_shapes.py``);
what is expected comes from the pristine file, never from the code under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import row_shapes
from lab.corruption import table_rows
from tests.recovery.test_recover import recover_json

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

