"""Rows whose values are zero, lying where a search for zeroed sectors looks.

A local model's usage rows cost nothing: ``session_model_usage`` holds 0.0 in both cost
columns and 0 tokens. SQLite writes an integral REAL as an integer of no bytes, but a
copy made by ``INSERT ... SELECT`` (as ``recover`` makes its output of a damaged file)
writes each 0.0 as eight zero bytes: sixteen in a row in every such record. Where
those sixteen bytes lie across (or end or start on) a 512-byte boundary, on a leaf
whose free space holds a wholly zeroed sector, they look like what is left of a zeroed
sector, and the row was taken for one that ran into zeroed bytes.

:func:`zeros_on_a_boundary` makes a Hermes database whose ``recover`` output has such a
record: its usage rows set to zero, and the text after the costs of the row with the
highest rowid (the last cell written, at the lowest offset of its leaf) padded until
its sixteen zero bytes lie on a boundary. :func:`zero_runs` reads the runs of a file
raw, sharing no code with ``statewarden/recovery/``, so a test can prove the file is
what it claims before it holds ``check`` to it.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import apsw

from statewarden.demo.damage import PristineFile, duplicate_cell, schema_roots, varint

TABLE = "session_model_usage"
SECTOR = 512
# The shortest run of zero bytes the zeroed-sector search takes for part of a sector.
RUN = 16
_RUN_RE = re.compile(rb"\x00{%d,}" % RUN)


@dataclass(frozen=True)
class ZeroRun:
    leaf: int
    rowid: int
    lo: int  # offsets in the leaf page
    hi: int
    leaf_has_zeroed_sector: bool

    @property
    def on_a_boundary(self) -> bool:
        """Does the run cross a 512-byte boundary, or start or end on one?"""
        return (
            self.lo // SECTOR != (self.hi - 1) // SECTOR
            or self.lo % SECTOR == 0
            or self.hi % SECTOR == 0
        )

    @property
    def looks_zeroed(self) -> bool:
        """What a zeroed-sector search sees: a run on a boundary, on a leaf that holds
        a wholly zeroed 512-byte sector."""
        return self.on_a_boundary and self.leaf_has_zeroed_sector


def zero_runs(db: Path, table: str = TABLE) -> list[ZeroRun]:
    """Runs of ``RUN`` or more zero bytes inside the records (in the cell, not on
    overflow pages) of ``table``'s leaves, read raw from the closed file ``db``."""
    pf = PristineFile(db)
    out = []
    for leaf in pf.tree_pages(schema_roots(db)[table])[1]:
        pg = pf.page(leaf)
        whole = any(pg[s : s + SECTOR] == bytes(SECTOR) for s in range(0, len(pg), SECTOR))
        for off in pf.cell_offsets(leaf):
            size, pos = varint(pg, off)
            rowid, pos = varint(pg, pos)
            end = min(pos + size, len(pg))
            for m in _RUN_RE.finditer(pg, pos, end):
                out.append(ZeroRun(leaf, rowid, m.start(), m.end(), whole))
    return out


def zero_usage_rows(db: Path) -> None:
    """Every ``session_model_usage`` row of ``db`` as a local model's: costs 0.0 and no
    tokens (a closed file; nothing else holds it)."""
    conn = apsw.Connection(str(db))
    try:
        conn.execute(
            f"UPDATE {TABLE} SET estimated_cost_usd = 0.0, actual_cost_usd = 0.0,"
            " input_tokens = 0, output_tokens = 0, cache_read_tokens = 0,"
            " cache_write_tokens = 0, reasoning_tokens = 0"
        )
    finally:
        conn.close()


def _pad(db: Path, rowid: int, pad: int) -> None:
    conn = apsw.Connection(str(db))
    try:
        conn.execute(f"UPDATE {TABLE} SET cost_status = ? WHERE rowid = ?", ("x" * pad, rowid))
    finally:
        conn.close()


def zeros_on_a_boundary(db: Path, work: Path, before: int = 8, tries: int = 5) -> ZeroRun:
    """Make ``db`` (a closed Hermes database) one whose ``recover`` output, once a
    ``sessions`` row is stored twice (``duplicate_cell``), holds a usage record whose
    sixteen zero bytes start ``before`` bytes ahead of a 512-byte boundary (``before``
    0: on it; 16: ending on it) on a leaf with a wholly zeroed sector. Returns that run
    as a trial recover (in ``work``) wrote it; LookupError when the layout cannot be
    had."""
    from statewarden.recovery.recover import recover

    zero_usage_rows(db)
    conn = apsw.Connection(str(db))
    try:
        found = conn.execute(f"SELECT max(rowid) FROM {TABLE}").fetchone()
        if found is None or found[0] is None:
            raise LookupError(f"{db}: {TABLE} has no rows")
        rowid = int(found[0])
    finally:
        conn.close()
    pad = 0
    work.mkdir(parents=True, exist_ok=True)
    for n in range(tries):
        # recover of an undamaged file keeps each record's bytes (the zeros stay
        # integers of no bytes); of a damaged one it writes each 0.0 as eight zero
        # bytes: the trial copy has the phantom row.
        damaged = work / f"try-{n}" / "state.db"
        damaged.parent.mkdir()
        shutil.copyfile(db, damaged)
        duplicate_cell(damaged, "sessions")
        probe = work / f"probe-{n}.db"
        recover(damaged, probe)
        runs = [r for r in zero_runs(probe) if r.rowid == rowid]
        if not runs:
            raise LookupError(f"{TABLE} rowid {rowid}: no run of zero bytes in the output")
        run = runs[0]
        if (run.lo + before) % SECTOR == 0:
            if run.looks_zeroed and run.hi - run.lo == RUN:
                return run
            raise LookupError(f"{run}: on a boundary but not as a zeroed sector looks")
        # The cell grows by the pad and so starts that much lower; its costs come
        # before the padded text, so they move down with it.
        target = (run.lo + before) // SECTOR * SECTOR - before
        pad += run.lo - target
        _pad(db, rowid, pad)
    raise LookupError(f"{TABLE} rowid {rowid}: not placed on a boundary in {tries} tries")
