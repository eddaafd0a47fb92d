"""What a diagnosis holds: each table's facts (``TableFacts``) and the whole file's
(``Diagnosis``), the findings they make and their JSON; and the damage class.

Damage classes, worst last: ``none``; ``derived`` (only indexes and FTS shadow tables,
which can be rebuilt from base tables without loss, ``sqlite_sequence``'s counters, set
again from the rows, or a table's b-tree whose every row still reads once while its
indexes or FTS copies list no other); ``base`` (a table
holding data is damaged: rows are missing or may be, as SQLite reads the file, or
committed WAL transactions are dropped); ``unreadable`` (header, schema or page 1).
``classify`` is the one definition; check and recover both use it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from statewarden.recovery.decoding.integrity import (
    ErrorGroup,
)
from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.pages import ZeroedCells
from statewarden.recovery.decoding.scan import MAX_ROWID, MIN_ROWID
from statewarden.recovery.evidence.column_types import Misfits
from statewarden.recovery.evidence.copies import CopyCheck, rowids_shown, sample
from statewarden.recovery.evidence.foreign_cells import Records
from statewarden.recovery.evidence.lost_writes import LostWrites

DAMAGE_ORDER = ("none", "derived", "base", "unreadable")


@dataclass
class TableFacts:
    name: str
    key: list[str]
    planner_rows: int | None
    scan_rows: int
    distinct_keys: int
    duplicate_rowids: dict[int, int]  # rowid -> times stored
    duplicate_keys: int  # distinct keys held by more than one rowid
    unreadable_rows: int
    unreadable_ranges: list[list[int]]
    planner_error: str | None = None
    text_repaired: int = 0  # rows whose key text is not valid UTF-8
    # Rowids the table lacks although its FTS copies hold them: rows missing.
    missing_rows: list[int] = field(default_factory=list)
    # Rowids only an index lists (no FTS copy has them): entries a delete left behind.
    stale_index_entries: list[int] = field(default_factory=list)
    # The integrity check found a page of this table referenced twice: a rowid met twice
    # by the scan was read twice through it, not stored twice.
    page_referenced_twice: bool = False
    # An index of the whole table or an FTS copy cross-checks the full scan's rowids.
    witnessed: bool = False
    # The stretches the full scan could not read held no row: every index of the whole
    # table that the integrity check walked and found nothing in lists exactly the
    # rowids the scan read (``diagnose._unread_held_nothing``).
    unread_held_nothing: bool = False
    # The rowids the table's FTS copies hold (``copies.fts_rowids``), as read for the
    # diagnosis, when ``fts_copies_read``: the rebuild takes them from here rather than
    # read them again (``TableFill.read_fts_rowids``). Not part of the JSON.
    fts_copies: KeySet | None = field(default=None, repr=False, compare=False)
    fts_copies_read: bool = field(default=False, repr=False, compare=False)

    def every_row_accounted_for(self) -> bool:
        """Every row reads, once, and its witnesses (indexes, FTS copies) agree."""
        return (
            self.witnessed
            and self.scan_rows == self.distinct_keys
            and (not self.unreadable_ranges or self.unread_held_nothing)
            and not self.unreadable_rows
            and not self.duplicate_keys
            and not self.duplicate_rowids
            and not self.text_repaired
            and not self.missing_rows
            and self.planner_error is None
            and self.planner_rows == self.scan_rows
        )

    def findings(self) -> list[str]:
        out = []
        key = "ids" if self.key == ["id"] else ("rowids" if self.key == ["rowid"] else "keys")
        extra = self.scan_rows - self.distinct_keys
        if extra > 0:
            phantoms = sum(n - 1 for n in self.duplicate_rowids.values())
            parts = []
            if phantoms:
                rowids = sample(sorted(self.duplicate_rowids))
                s = "s" if phantoms != 1 else ""
                rs = "s" if len(self.duplicate_rowids) != 1 else ""
                if self.page_referenced_twice:
                    parts.append(
                        f"{phantoms} row{s} read twice through a page the b-tree references"
                        f" twice (stored once), rowid{rs} {rowids}"
                    )
                else:
                    parts.append(f"{phantoms} phantom duplicate{s}, rowid{rs} {rowids}")
            if extra - phantoms > 0:
                n = extra - phantoms
                parts.append(
                    f"{n} row{'s' if n != 1 else ''} under another rowid claiming"
                    f" {'an id' if key == 'ids' else 'a key'} held by another row"
                )
            out.append(
                f"{self.name}: {self.scan_rows} stored rows, {self.distinct_keys}"
                f" distinct {key}: {'; '.join(parts)}"
            )
        if self.planner_rows is not None and self.planner_rows != self.scan_rows:
            out.append(
                f"{self.name}: the query planner counts {self.planner_rows} rows,"
                f" a full scan {self.scan_rows}"
            )
        if self.text_repaired:
            out.append(f"{self.name}: {self.text_repaired} keys are text that is not valid UTF-8")
        if self.missing_rows:
            n = len(self.missing_rows)
            out.append(
                f"{self.name}: {n} row{'s are' if n != 1 else ' is'} missing from the table"
                f" but {'their' if n != 1 else 'its'} text is still in its FTS copies"
                f" ({rowids_shown(self.missing_rows)})"
            )
        if self.stale_index_entries:
            n = len(self.stale_index_entries)
            out.append(
                f"{self.name}: {n} index entr{'ies' if n != 1 else 'y'} name rowids the table"
                " lacks and no FTS copy holds: left behind by deletes, not lost rows"
                f" ({rowids_shown(self.stale_index_entries)})"
            )
        if self.planner_error:
            out.append(f"{self.name}: the planner's count failed: {self.planner_error}")
        for lo, hi in self.unreadable_ranges:
            if (lo, hi) == (MIN_ROWID, MAX_ROWID):
                out.append(f"{self.name}: no row can be read by a full scan")
            else:
                out.append(f"{self.name}: {describe_range(lo, hi)} cannot be read")
        if self.unreadable_ranges and self.unread_held_nothing:
            out.append(
                f"{self.name}: its intact indexes list exactly the {self.scan_rows} rows"
                " read: what could not be read held no other row"
            )
        return out


def describe_range(lo: int, hi: int) -> str:
    if lo == MIN_ROWID and hi == MAX_ROWID:
        return "every rowid"
    if hi == MAX_ROWID:
        return f"rowids from {lo} on"
    if lo == MIN_ROWID:
        return f"rowids up to {hi}"
    return f"rowid {lo}" if lo == hi else f"rowids {lo}..{hi}"


@dataclass
class Diagnosis:
    path: str
    damage: str
    integrity_ok: bool
    integrity_complete: bool
    integrity_errors: int
    groups: list[ErrorGroup]
    tables: list[TableFacts]
    fts: dict[str, str]  # FTS table -> "ok" or the error
    orphans: dict[str, int]  # rows with a missing parent, per table (orphan_rows)
    notes: list[str]
    error_lines: list[str] = field(default_factory=list)
    foreign_key_check_complete: bool = True
    wal_dropped_commits: int = 0  # committed transactions SQLite does not replay
    copies: list[CopyCheck] = field(default_factory=list)  # rows vs their FTS copies
    # FTS tables whose tokenizer cannot be loaded here (tokenizers.py) -> why: their
    # index cannot be verified; that is not damage.
    unverifiable: dict[str, str] = field(default_factory=dict)
    # CPU seconds of the threads that ran the FTS tables' own checks (not in the calling
    # thread's CPU time); not part of the JSON.
    helper_cpu_s: float = 0.0
    # The integrity check got through SQLite's page accounting, whole, even if it
    # stopped early afterwards (``integrity._check``); not part of the JSON.
    pages_accounted: bool = False
    # Rows whose record runs into zeroed sectors, per table: rowid -> the positions of
    # the columns hit (None: its header was hit). SQLite reads them with the zeros as
    # their values, and no integrity check sees it (damaged_cells.zeroed_cells).
    zeroed_cells: dict[str, ZeroedCells] = field(default_factory=dict)
    # Cells that begin in zeroed bytes, per table: SQLite reads each as a row of rowid 0
    # with nothing stored; the row the cell held is lost (damaged_cells._destroyed_on).
    destroyed_cells: dict[str, int] = field(default_factory=dict)
    # Rows whose overflow chain leads into pages another row's chain owns, per table
    # (rowid -> positions of the columns past the cell), and the pages claimed twice
    # and their owners' (damaged_cells.cross_linked_cells).
    cross_linked: dict[str, ZeroedCells] = field(default_factory=dict)
    cross_linked_pages: list[int] = field(default_factory=list)
    # Hermes' sessions whose message_count disagrees with the messages the file holds
    # for them: (rowid, message_count, messages counted) (``counts_disagree``).
    counts_disagree: list[tuple[int, int, int]] = field(default_factory=list)
    # Rows older than their index entries, rowids given out but gone (``lost_writes.py``).
    lost_writes: LostWrites = field(default_factory=LostWrites)
    # Per table, other tables' cells its b-tree reaches: no rows of it (``foreign_cells``).
    foreign_cells: dict[str, Records] = field(default_factory=dict)
    # Rows holding a value Hermes never writes in its column (``column_types.py``).
    misfits: list[Misfits] = field(default_factory=list)

    def findings(self) -> list[str]:
        out = [f"{g.label()}: {g.errors} error{'s' if g.errors != 1 else ''}" for g in self.groups]
        for t in self.tables:
            out.extend(t.findings())
        out.extend(
            f"{name}: FTS integrity-check: {res}" for name, res in self.fts.items() if res != "ok"
        )
        for c in self.copies:
            out.extend(c.findings())
        out.extend(f for m in self.misfits for f in m.findings())
        if self.counts_disagree:
            n = len(self.counts_disagree)
            shown = sample(sorted(r for r, _, _ in self.counts_disagree))
            out.append(
                f"sessions: {n} row{'s' if n != 1 else ''} whose message_count disagrees with"
                f" the messages stored for {'them' if n != 1 else 'it'} (rowids {shown}):"
                " a write lost (a page back to an older image) or messages lost"
            )
        out.extend(self.lost_writes.findings())
        for name, cells in self.cross_linked.items():
            n = len(cells)
            out.append(
                f"{name}: {n} row{'s' if n != 1 else ''} whose overflow chain leads into"
                f" another row's pages ({rowids_shown(sorted(cells))})"
            )
        for name, cells in self.zeroed_cells.items():
            n = len(cells)
            out.append(
                f"{name}: {n} row{'s' if n != 1 else ''} run into zeroed bytes, read as"
                f" values by SQLite ({rowids_shown(sorted(cells))})"
            )
        for name, n in self.destroyed_cells.items():
            out.append(
                f"{name}: {n} cell{'s' if n != 1 else ''} destroyed by zeroed bytes, read by"
                " SQLite as rows of rowid 0 with nothing stored (the rows they held are lost)"
            )
        out.extend(
            f"{t}: {n} orphan row{'s' if n != 1 else ''} (foreign_key_check)"
            for t, n in self.orphans.items()
        )
        return out + self.notes

    def to_json(self) -> dict[str, Any]:
        # Without the FTS copies' rowids, which asdict would copy whole.
        data = asdict(replace(self, tables=[replace(t, fts_copies=None) for t in self.tables]))
        del data["helper_cpu_s"], data["pages_accounted"]
        for t in data["tables"]:
            del t["fts_copies"], t["fts_copies_read"]
            t["duplicate_rowids"] = {str(k): v for k, v in t["duplicate_rowids"].items()}
        data["zeroed_cells"] = {t: sorted(c) for t, c in self.zeroed_cells.items()}
        data["cross_linked"] = {t: sorted(c) for t, c in self.cross_linked.items()}
        data["lost_writes"] = self.lost_writes.to_json()
        data["findings"] = self.findings()
        return data


def worst(*classes: str) -> str:
    return max(classes, key=DAMAGE_ORDER.index)


def classify(
    groups: list[ErrorGroup],
    tables: list[TableFacts],
    fts: dict[str, str],
    *,
    complete: bool,
    truncated: bool = False,
) -> str:
    damage = "none"
    by_name = {t.name: t for t in tables}
    for g in groups:
        if g.kind == "schema":
            return "unreadable"
        facts = by_name.get(g.object) if g.kind == "table" else None
        if (
            facts is not None
            and (complete or facts.unread_held_nothing)
            and facts.every_row_accounted_for()
        ):
            # The b-tree is damaged but every row reads, once, and the table's indexes
            # or FTS copies list no other: a rebuild loses nothing (leaves swapped, a
            # freelist that also lists a live page). Where the scan could not read
            # stretches of it, its intact indexes listing exactly the rows read is the
            # rows-against-indexes check a stopped integrity check did not make.
            damage = worst(damage, "derived")
            continue
        damage = worst(damage, "derived" if g.derived else "base")
    for t in tables:
        if (
            t.scan_rows != t.distinct_keys
            or (t.unreadable_ranges and not t.unread_held_nothing)
            or t.duplicate_keys
            or t.text_repaired
            or t.missing_rows
        ):
            damage = worst(damage, "base")
        elif t.planner_rows != t.scan_rows:
            damage = worst(damage, "derived")
    if any(res != "ok" for res in fts.values()):
        damage = worst(damage, "derived")
    if truncated:
        damage = worst(damage, "base")
    if not complete and damage == "none":
        damage = "base"  # the check could not finish: never call that healthy
    return damage
