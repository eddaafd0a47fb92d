"""One build of the output file, as its parts share it: what it reads (``RebuildInputs``),
the open build (``Build``: the work copy on its own read-only connection, the output,
each table's copy so far) and the words its parts use for a row they cannot take as it
is. The parts: ``table_fill.py`` (rows into the output, the dedupe rule), ``salvage_inserts.py``
(rows from unreached leaves, carved cells, WAL transactions and other copies),
``row_repair.py`` (columns restored from witnesses), ``fts_fill.py`` (the FTS tables);
``rebuild.py`` runs them in order."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.progress import ProgressFn
from statewarden.recovery.bundle import WorkCopy
from statewarden.recovery.decoding.integrity import broken_trees
from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.scan import scan_table
from statewarden.recovery.decoding.schema import Schema, SchemaObject
from statewarden.recovery.decoding.wal_rows import WalRows
from statewarden.recovery.diagnosis import Diagnosis
from statewarden.recovery.evidence.old_indexes import IndexPage
from statewarden.recovery.evidence.other_copies import (
    OtherCopy,
)
from statewarden.recovery.fts_checks import FtsPending
from statewarden.recovery.report import Report, TableReport
from statewarden.sqlite import quote_ident

PROGRESS_EVERY_ROWS = 1000
RENAME_SUFFIX = " (duplicate, rowid {rowid})"
SalvagedRows = dict[str, list[tuple[int, list[Any]]]]


@dataclass
class TableCopy:
    obj: SchemaObject
    report: TableReport
    # Keys and rowids are KeySets (keysets.py): a million messages' keys held five
    # times over as Python sets needed hundreds of MiB.
    source_keys: KeySet = field(default_factory=KeySet)
    index_keys: KeySet = field(default_factory=KeySet)  # from indexes with no error
    indexed: bool = False  # an index with no error listed every row (index_keys)
    hint_keys: KeySet = field(default_factory=KeySet)  # from every readable index
    hint_rowids: KeySet = field(default_factory=KeySet)  # the rowids those entries name
    intact_indexes: int = 0  # indexes of the whole table whose own b-tree is intact
    listed_by: KeySet = field(default_factory=KeySet)  # rowids an intact index lists
    page_keys: KeySet = field(default_factory=KeySet)
    page_rowids: KeySet = field(default_factory=KeySet)  # rowids of those rows
    rowids: KeySet = field(default_factory=KeySet)  # rowids read through the b-tree
    fts_rowids: KeySet = field(default_factory=KeySet)  # rowids the table's FTS copies hold
    has_fts_copies: bool = False  # the table feeds an FTS copy that could be read
    sequence: int | None = None  # the source's sqlite_sequence for it (AUTOINCREMENT)
    # Rowids of cells the b-tree walk reached that decode to no row the table could
    # store (``TableFill.insert_row``): each a row lost, its key unknown, unless the
    # output holds a row under the same rowid (recover.py ``_garbled_lost``).
    garbled: list[int] = field(default_factory=list)

    def known_keys(self) -> KeySet:
        """Keys known to exist besides the rows read: the rowids the FTS copies hold
        when the table has readable ones (they decide: an index entry they do not hold
        was left behind by a delete, since Hermes' delete triggers remove the copies
        with the row), else what the intact indexes list."""
        return (self.fts_rowids if self.has_fts_copies else self.index_keys).copy()


def key_fn(obj: SchemaObject) -> Callable[[tuple[Any, ...]], Any]:
    """Key of a scanned row ``(rowid, *key columns)``. A table no name reaches by rowid
    and with no primary key declared has nothing that names a row: each scan numbers
    its rows from 0, so the key sets of two scans compare as their counts do."""
    n = len(obj.key_names)
    if not n:
        if obj.rowid_name is None:
            place = itertools.count()
            return lambda row: next(place)
        return lambda row: int(row[0])
    return lambda row: tuple(row[1 : 1 + n])


def count_source_keys(conn: apsw.Connection, tc: TableCopy) -> None:
    """Every row of ``tc``'s table that a scan reads past damage (``scan_table``),
    counted and keyed into ``tc`` (``source_rows``, ``source_keys``), none written."""
    keyf = key_fn(tc.obj)

    def on_row(row: tuple[Any, ...]) -> None:
        tc.report.source_rows += 1
        tc.source_keys.add(keyf(row))

    scan_table(conn, tc.obj.name, tc.obj.key_names, on_row)


# The index entries of this many rows are sorted at a time (``_index_witnesses``): about
# 15 MiB of SQLite's memory an index of Hermes' messages.
WITNESS_WINDOW_ROWS = 1 << 18
# More rows than this differing from their index entries (a whole index older or newer
# than its table): their entries are read in one sorted pass, not picked out by rowid.
DIFFERING_ROWS_MOST = 10_000

ZEROED_REASON = "its record runs into zeroed bytes"
BAD_TEXT_REASON = "its text is not valid UTF-8 (changed on disk)"
CROSS_LINKED = "its overflow chain leads into another row's pages"
MISFIT_REASON = "it holds a value Hermes never writes in the column (changed on disk)"
UNLISTED = (
    "read through the b-tree, but none of the table's intact indexes lists its rowid"
    " and no search-index copy holds it: a garbled cell, not a row"
)
ABOVE_SEQUENCE = (
    "read through the b-tree with columns that do not read, under a rowid above the"
    " table's AUTOINCREMENT sequence ({seq}), which SQLite never gave out, and listed by"
    " no index or search-index copy: a garbled cell, not a row"
)


def zeroed_columns(hit: list[int] | None, cols: list[str], key_idx: list[int]) -> list[str] | None:
    """Names of the columns a zeroed sector hit; None when no column can be trusted
    (the record header, or a key column, was hit)."""
    if hit is None or any(i + 1 in key_idx for i in hit):
        return None
    return [cols[i] for i in hit if i < len(cols)]


def stored_names(obj: SchemaObject) -> list[str]:
    """The columns a row's record holds, in its order (``SchemaObject.stored_columns``)."""
    return [c.name for c in obj.stored_columns]


@dataclass(frozen=True)
class RowShape:
    """How one table's rows are written: ``rowid``, the name its rowid is given under
    (None where a column is its alias, or no name reaches it: SQLite gives one), and
    its generated columns, whose values SQLite computes (an INSERT naming one fails)."""

    table: str
    rowid: str | None
    generated: frozenset[str]

    @classmethod
    def of(cls, obj: SchemaObject) -> RowShape:
        return cls(obj.name, None if obj.rowid_alias else obj.rowid_name, obj.generated)

    def insert(
        self, cols: list[str], rowid: int | None, values: list[Any]
    ) -> tuple[str, list[Any]]:
        """The INSERT of one row (``values`` of ``cols``, read under ``rowid``) and its
        parameters; the statement written once per table and columns, not per row."""
        if self.generated:
            kept = [i for i, c in enumerate(cols) if c not in self.generated]
            cols, values = [cols[i] for i in kept], [values[i] for i in kept]
        sql = insert_statement(self.table, self.rowid, tuple(cols))
        return sql, values if self.rowid is None else [rowid, *values]


@functools.lru_cache(maxsize=256)
def insert_statement(table: str, rowid: str | None, cols: tuple[str, ...]) -> str:
    rid = [rowid] if rowid is not None else []
    names = ", ".join(quote_ident(c) for c in [*rid, *cols])
    marks = ", ".join("?" for _ in range(len(rid) + len(cols)))
    return f"INSERT INTO main.{quote_ident(table)}({names}) VALUES ({marks})"


@dataclass(frozen=True)
class RebuildInputs:
    """What one build reads: the work copy, where the output goes, the source's schema
    and diagnosis, and the rows decoded for it before the build."""

    work: WorkCopy
    built: Path  # the output file, in the work folder
    schema: Schema
    diag: Diagnosis
    damaged: set[str]  # tables copied row by row
    # Rows decoded from leaves no b-tree reaches (``carving.salvage_rows``).
    salvaged: SalvagedRows = field(default_factory=dict)
    # False when the freelist is damaged: an unreached leaf may then be a freed page
    # holding deleted rows, so only rows an index or FTS copy vouches for are taken.
    trust_unreached: bool = True
    # What committed WAL transactions SQLite does not replay did: rows, deletions.
    wal_rows: WalRows = field(default_factory=WalRows)
    # Cells carved from leaves whose page structure is damaged (carving.py).
    carved: SalvagedRows = field(default_factory=dict)
    # Rowids of carved and unreached rows the old indexes of a schema rebuilt from
    # Hermes' known schema list with their values (``lost_schema``): they vouch too.
    listed_by_old_indexes: dict[str, set[int]] = field(default_factory=dict)
    # The index pages of the file (``old_indexes.index_pages``): the rows read are held
    # against those of the old indexes as against intact indexes.
    index_pages: list[IndexPage] = field(default_factory=list)
    # Verified other copies (snapshot, retired WAL captures, backups), newest first.
    others: list[OtherCopy] = field(default_factory=list)
    # FTS5's own checks of the work copy, still running (``diagnose_ahead_of_fts``):
    # ``diag`` takes their verdicts just before the FTS tables are filled.
    fts_pending: FtsPending | None = None


@dataclass
class Build:
    """One build, open: the work copy on its own read-only connection (``src``; attached
    to the output's connection as ``src`` when ``attached``), the output (``dst``), and
    each base table's copy so far, by name."""

    inputs: RebuildInputs
    report: Report
    progress: ProgressFn | None
    src: apsw.Connection
    dst: apsw.Connection
    attached: bool
    copies: dict[str, TableCopy] = field(default_factory=dict)

    def unwitnessed_roots(self) -> set[int]:
        """Roots of the b-trees whose entries witness nothing: those the integrity check
        names, and the indexes filled from their own tables (``rebuilt_index_roots``)."""
        return broken_trees(self.inputs.diag.error_lines) | self.rebuilt_index_roots()

    def rebuilt_index_roots(self) -> set[int]:
        """Roots of the indexes filled from their own tables in the copy (a schema
        rebuilt from Hermes' known schema): no witness of those tables' rows."""
        names = set(self.inputs.work.rebuilt_indexes)
        return {o.rootpage for o in self.inputs.schema.objects if o.name in names}


class BuildPart:
    """A part of one build: the build's inputs, report and connections under the names
    every part uses."""

    def __init__(self, build: Build) -> None:
        self.build = build
        self.inputs = build.inputs
        self.report = build.report
        self.progress = build.progress
        self.src = build.src
        self.dst = build.dst
        self.attached = build.attached
        self.copies = build.copies
