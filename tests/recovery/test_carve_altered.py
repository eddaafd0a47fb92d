"""Carving the leaf of a table that grew by ``ALTER TABLE ADD COLUMN``: its rows written
before the new columns keep records with fewer fields, and a carved record of that
shape is the table's row as much as one with every column stored.
"""

from __future__ import annotations

from pathlib import Path

from lab import corruption
from lab.hermes_fixtures import MAIN_LEGACY
from tests.support.recovery import assert_every_table_pristine
from tests.support.recovery import recover_with_stderr as recover


class TestCarvedLeafOfAnAlteredTable:
    def test_short_records_are_carved(self, tmp_path: Path) -> None:
        """A 0.19.0 file opened by Hermes main (schema 30: messages grew five columns,
        its old rows hold 21 fields of 26) with page 1, the schema pages and the header
        and cell pointers of one messages leaf zeroed: the leaf's 12 rows are carved,
        vouched for by the old indexes, and every table comes back as Hermes wrote it
        (exit 0, no loss). Before, carving took only records with all 26 fields: 0 of
        the 12 rows came back (exit 3)."""
        case = corruption.page1_and_leaf_pointers(tmp_path / "db", MAIN_LEGACY)
        code, rep, err, out = recover(case.db, tmp_path)
        assert (code, err) == (0, "")
        assert (rep["loss_detected"], rep["lost"], rep["verified"]) == (False, {}, True)
        carved = len(case.unreached["messages"])
        assert carved == 12
        assert rep["tables"]["messages"]["recovered_from_pages"] == carved
        assert_every_table_pristine(out, case.pristine)
