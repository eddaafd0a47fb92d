"""A row whose values are zero is no row run into zeroed bytes: what recover writes passes check.

A local model's usage rows cost nothing (0.0, 0.0) and count no tokens. recover writes
each 0.0 as eight zero bytes, sixteen in a row per record; on a leaf whose free space
holds a wholly zeroed 512-byte sector, sixteen of them across a sector boundary were
taken for what is left of a zeroed sector: `check` of recover's own output (the file
maintenance swaps in) said base damage, "1 row run into zeroed bytes", while SQLite's
integrity check was ok and the row equal to the one Hermes wrote. Zeros count as a
zeroed sector only where the bytes prove it (``lab/zero_values.py`` builds the case).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lab import corruption, zero_values
from lab.hermes_fixtures import SMALL, TINY, Spec
from statewarden.demo.damage import PristineFile, duplicate_cell, write_at
from statewarden.recovery.check import check_database
from tests.support.cli import run_ctl

USAGE = f"SELECT rowid, * FROM {zero_values.TABLE} ORDER BY rowid"


def check_json(db: Path) -> tuple[int, dict[str, Any]]:
    code, out, err = run_ctl("check", "--db", str(db), "--json", "--progress", "none")
    assert err == ""
    [doc] = json.loads(out)["databases"]
    return code, doc


def recovered_with_zeros_on_a_boundary(
    tmp_path: Path, spec: Spec, before: int
) -> tuple[Path, Path, zero_values.ZeroRun]:
    """(source, recover's output, the run of zero bytes on a boundary in it): a copy of
    ``spec``'s database with its usage rows at zero, a ``sessions`` row stored twice."""
    case = corruption.fresh_copy(tmp_path / "db", spec)
    run = zero_values.zeros_on_a_boundary(case.db, tmp_path / "trial", before)
    duplicate_cell(case.db, "sessions")
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    code, stdout, err = run_ctl(
        "recover", "--source", str(case.db), "--output", str(out), "--json", "--progress", "none"
    )
    doc = json.loads(stdout)
    assert (code, err, doc["verified"], doc["loss_detected"]) == (0, "", True, False)
    # The output is what the case claims: the record's zeros lie on the boundary.
    assert run in zero_values.zero_runs(out)
    return case.db, out, run


@pytest.mark.parametrize(
    ("spec", "before"),
    [(TINY, 0), (TINY, 8), (TINY, 16), (SMALL, 8)],
    ids=["tiny-starting-on", "tiny-across", "tiny-ending-on", "small-across"],
)
def test_check_of_recovers_output_is_clean(tmp_path: Path, spec: Spec, before: int) -> None:
    """Sixteen zero bytes of costs starting on a 512-byte boundary, across it, ending on
    it: check of recover's output is clean (exit 0, damage none, no finding, no zeroed
    cell), as SQLite's integrity check is, and every usage row equals the source's."""
    src, out, _ = recovered_with_zeros_on_a_boundary(tmp_path, spec, before)
    assert corruption.table_rows(out, "PRAGMA integrity_check") == [("ok",)]
    code, doc = check_json(out)
    assert (code, doc["damage"], doc["zeroed_cells"], doc["findings"]) == (0, "none", {}, [])
    assert corruption.table_rows(out, USAGE) == corruption.table_rows(src, USAGE)


def test_a_zeroed_sector_over_zero_valued_columns_is_still_found(tmp_path: Path) -> None:
    """The same output with the sector after the boundary zeroed (as a disk loses one):
    the row whose costs run into it is named, its second cost among the columns hit
    though that cost was zero already, and check says base damage."""
    _, out, run = recovered_with_zeros_on_a_boundary(tmp_path, TINY, 8)
    page_size = len(PristineFile(out).page(1))
    write_at(out, (run.leaf - 1) * page_size + run.lo + 8, bytes(zero_values.SECTOR))
    code, doc = check_json(out)
    assert (code, doc["damage"]) == (3, "base")
    assert run.rowid in doc["zeroed_cells"][zero_values.TABLE]
    work = tmp_path / "work"
    work.mkdir()
    diag = check_database(out, work)
    actual_cost_usd = 13  # its position among the table's columns
    columns = diag.zeroed_cells[zero_values.TABLE][run.rowid]
    assert columns is not None
    assert actual_cost_usd in columns
