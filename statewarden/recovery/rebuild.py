"""The rebuild: a fresh database from the source's own schema, filled row by row where
the source is damaged, with the dedupe rule applied to each conflicting row.

Objects are created from the copy's ``sqlite_schema``: tables and FTS tables, then
indexes (before the data, so that a UNIQUE conflict fails one row, never a batch:
docs/stories.md story 3), then the triggers that feed FTS tables (when an FTS table is to be
repopulated from its base table), then the data, then views (an external-content FTS
table may read one), the FTS contents, and the other triggers.

SQLite leaves a write transaction unusable once a statement in it has read a corrupt
page, so the source is read on its own read-only connection; only tables the diagnosis
found clean are copied with one ``INSERT ... SELECT`` through an ATTACH, and if one of
those meets damage after all the whole build starts over row by row.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import re
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.errors import StatewardenError
from statewarden.progress import ProgressFn
from statewarden.recovery.bundle import WorkCopy
from statewarden.recovery.copies import (
    MACHINE_ERRORS,
    Feed,
    IndexReading,
    Witnesses,
    agrees_with_copies,
    feeds,
    fts_rowids,
    index_readings,
    indexed_values,
    indexed_values_in_order,
    indexed_values_of,
    rebuild_from_copies,
    restore_from_copies,
    write_rebuilt,
)
from statewarden.recovery.diagnose import Diagnosis, FtsPending
from statewarden.recovery.foreign_cells import OwnRows
from statewarden.recovery.keysets import KeySet
from statewarden.recovery.lost_writes import drop_misshapen
from statewarden.recovery.old_indexes import IndexPage, indexed_columns, old_index_witnesses
from statewarden.recovery.other_copies import (
    OtherCopy,
    changed_fts_copies,
    foreign,
    fts_disagreement,
    index_disagreement,
)
from statewarden.recovery.pages import WalRows
from statewarden.recovery.report import Report, TableReport
from statewarden.recovery.scan import ScanResult, scan_table
from statewarden.recovery.schema import Schema, SchemaObject, inserts_into
from statewarden.sidecars import BUNDLE_SUFFIXES, sidecar
from statewarden.sqlite import json_value, quote_ident, uri_for

PROGRESS_EVERY_ROWS = 1000
# FTS5's structure record of an index with no segment (cookie 0, no level, no segment,
# write counter 0), as FTS5 itself writes it for a new table.
EMPTY_FTS5_STRUCTURE = bytes(7)
RENAME_SUFFIX = " (duplicate, rowid {rowid})"
_TREE_RE = re.compile(r"^Tree (\d+) ")
_UNIQUE_RE = re.compile(r"UNIQUE constraint failed: (.+)$")
_ENCODINGS = {"utf-8": "UTF-8", "utf-16le": "UTF-16le", "utf-16be": "UTF-16be"}
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
    page_versions_skipped: int = 0  # rows on unreached leaves whose rowid the tree holds

    def known_keys(self) -> KeySet:
        """Keys known to exist besides the rows read: the rowids the FTS copies hold
        when the table has readable ones (they decide: an index entry they do not hold
        was left behind by a delete, since Hermes' delete triggers remove the copies
        with the row), else what the intact indexes list."""
        return (self.fts_rowids if self.has_fts_copies else self.index_keys).copy()


def key_fn(obj: SchemaObject) -> Callable[[tuple[Any, ...]], Any]:
    """Key of a scanned row ``(rowid, *key columns)``."""
    if obj.key_columns == ["rowid"]:
        return lambda row: int(row[0])
    n = len(obj.key_columns)
    return lambda row: tuple(row[1 : 1 + n])


# The index entries of this many rows are sorted at a time (``_index_witnesses``): about
# 15 MiB of SQLite's memory an index of Hermes' messages.
WITNESS_WINDOW_ROWS = 1 << 18
# More rows than this differing from their index entries (a whole index older or newer
# than its table): their entries are read in one sorted pass, not picked out by rowid.
DIFFERING_ROWS_MOST = 10_000

ZEROED_REASON = "its record runs into zeroed bytes"
BAD_TEXT_REASON = "its text is not valid UTF-8 (changed on disk)"
CROSS_LINKED = "its overflow chain leads into another row's pages"
UNLISTED = (
    "read through the b-tree, but none of the table's intact indexes lists its rowid"
    " and no search-index copy holds it: a garbled cell, not a row"
)


def _zeroed_columns(hit: list[int] | None, cols: list[str], key_idx: list[int]) -> list[str] | None:
    """Names of the columns a zeroed sector hit; None when no column can be trusted
    (the record header, or a key column, was hit)."""
    if hit is None or any(i + 1 in key_idx for i in hit):
        return None
    return [cols[i] for i in hit if i < len(cols)]


def _columns(obj: SchemaObject) -> list[str]:
    return [c.name for c in obj.stored_columns]


def _insert_sql(obj: SchemaObject, cols: list[str]) -> str:
    """The INSERT of one row of ``obj`` with ``cols`` (and its rowid, unless a column
    is its alias); written once per table and columns, not per row."""
    return _insert_statement(obj.name, not obj.rowid_alias, tuple(cols))


@functools.lru_cache(maxsize=256)
def _insert_statement(table: str, with_rowid: bool, cols: tuple[str, ...]) -> str:
    rid = ["rowid"] if with_rowid else []
    names = ", ".join(quote_ident(c) for c in [*rid, *cols])
    marks = ", ".join("?" for _ in range(len(rid) + len(cols)))
    return f"INSERT INTO main.{quote_ident(table)}({names}) VALUES ({marks})"


def _fts_modes(schema: Schema, damaged: set[str], diag: Diagnosis) -> dict[str, str]:
    """How each FTS table gets its contents: ``copy`` its intact shadow tables (then,
    when its base table was copied row by row, ``reconcile`` them with the rows the
    output holds); ``reindex``: copy only its intact content table and let FTS5's
    ``'rebuild'`` make the index (then reconcile); ``triggers`` (repopulated as the
    feeding table is copied); ``rebuild`` (external content); ``none`` (contentless).

    Shadow tables are intact when no integrity error touches them and FTS5's own check
    (index against content) passed: copying them is far cheaper than tokenising every
    row again. An intact external-content table is copied too (``external``: its
    index is then checked against the output's rows, and rebuilt if it disagrees), so
    that its shadow rows come back as they were. ``carry``: its tokenizer cannot be
    loaded here (``tokenizers.py``), so it can be neither checked nor rebuilt: its
    shadow tables are copied as rows and its schema row written as it was."""
    bad_fts = {g.object for g in diag.groups if g.kind == "fts"}
    for g in diag.groups:
        obj = schema.by_name(g.object)
        if obj is not None and obj.shadow_of:
            bad_fts.add(obj.shadow_of)
    bad_fts |= {name for name, res in diag.fts.items() if res != "ok"}
    rotted = {fts for c in diag.copies for fts in c.copies_rotted}
    bad_fts |= rotted
    flagged = {g.object for g in diag.groups} | set(diag.zeroed_cells)
    fed = {f.fts for f in feeds(schema)}
    modes = {}
    for obj in schema.tables():
        if obj.module != "fts5":
            continue
        owner = schema.fts_owner.get(obj.name)
        if obj.name in diag.unverifiable:
            modes[obj.name] = "carry"
        elif obj.fts_content == "":
            modes[obj.name] = "none"
        elif obj.fts_content:
            intact = obj.name not in bad_fts and not flagged & _shadows(schema, obj.name)
            modes[obj.name] = "external" if intact else "rebuild"
        elif owner is not None and obj.name in bad_fts:
            content_ok = f"{obj.name}_content" not in flagged and obj.name not in rotted
            modes[obj.name] = "reindex" if content_ok and obj.name in fed else "triggers"
        elif owner is not None and owner in damaged:
            modes[obj.name] = "reconcile" if obj.name in fed else "triggers"
        else:
            modes[obj.name] = "copy"
    return modes


def _savepoint_name(fts: str) -> str:
    """The savepoint of an FTS table's shadow tables copied ahead (``_copy_ahead``)."""
    return quote_ident(f"fts_ahead_{fts}")


def _shadows(schema: Schema, fts: str) -> set[str]:
    return {o.name for o in schema.tables() if o.shadow_of == fts}


def _feeding_triggers(schema: Schema, fts_names: set[str]) -> set[str]:
    """The triggers that insert into any of the FTS tables ``fts_names``."""
    out = set()
    for obj in schema.objects:
        if obj.type == "trigger" and obj.sql:
            for name in fts_names:
                if inserts_into(obj.sql, name):
                    out.add(obj.name)
    return out


class _FtsVerdictsMissing(Exception):
    """FTS5's own checks gave no verdicts the diagnosis can take alone
    (``FtsPending.join``): the file must be diagnosed again and built with that."""


class _FtsModesChanged(Exception):
    """FTS5's own checks, joined after the data went in, found an FTS table damaged
    that must be filled by triggers created before the data: the build starts over."""


class _IndexAfterRowsFailed(Exception):
    """An index built once the rows were in (``_can_wait``) could not be built: SQLite's
    temporary folder out of room for its sort, or anything else. The transaction may
    be gone with it, so the build starts over with every index in place first."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


_UNIQUE_INDEX_RE = re.compile(r"^\s*CREATE\s+UNIQUE\s", re.I)


def _can_wait(index: SchemaObject) -> bool:
    """Can this index be built after the rows go in? Yes for one that refuses no row
    (not UNIQUE: the dedupe rule needs those to refuse a row as it is inserted) and
    that computes nothing that could fail on a row (no expression, no function in a
    partial index's condition: its text has no parenthesis but the column list's).
    Built after the rows, an index is one sort (for a million messages: 1.2 s, not
    the 6 s of keeping two indexes in order row by row)."""
    sql = index.sql or ""
    return bool(sql) and not _UNIQUE_INDEX_RE.match(sql) and sql.count("(") == 1


class _FtsCopyFailed(Exception):
    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


@dataclass(frozen=True)
class RebuildInputs:
    """What one build reads: the work copy, where the output goes, the source's schema
    and diagnosis, and the rows decoded for it before the build."""

    work: WorkCopy
    built: Path  # the output file, in the work folder
    schema: Schema
    diag: Diagnosis
    damaged: set[str]  # tables copied row by row
    # Rows decoded from leaves no b-tree reaches (``pages.salvage_rows``).
    salvaged: SalvagedRows = field(default_factory=dict)
    # False when the freelist is damaged: an unreached leaf may then be a freed page
    # holding deleted rows, so only rows an index or FTS copy vouches for are taken.
    trust_unreached: bool = True
    # What committed WAL transactions SQLite does not replay did: rows, deletions.
    wal_rows: WalRows = field(default_factory=WalRows)
    # Cells carved from leaves whose page structure is damaged (pages.py).
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


class Rebuild:
    """One build of the output file from a work copy."""

    def __init__(
        self, inputs: RebuildInputs, *, report: Report, progress: ProgressFn | None
    ) -> None:
        self.inputs = inputs
        self.report = report
        self.progress = progress
        self.copies: dict[str, TableCopy] = {}
        # FTS tables copied whole from the work copy and left as they were (mode
        # ``copy``, every shadow table copied): the verification need not check their
        # index again (``recover.py``).
        self.fts_unchanged: set[str] = set()
        # Rows each FTS shadow table's copy wrote (``_copy_shadow``), by shadow table.
        self.fts_copied: dict[str, int] = {}
        # FTS tables with their own content, copied whole from the work copy and then
        # reconciled with the output's rows only by ordinary INSERT and DELETE on the FTS
        # table, no row re-indexed from a damaged source (``_reconcile_fts``): FTS5 kept
        # their index from their own stored content. Each with its feed, by which the
        # verification checks them instead of FTS5's own check (``verify.py``).
        self.fts_reconciled: dict[str, Feed] = {}
        # Own-content FTS tables whose index FTS5's 'rebuild' made in the output from
        # the content copied from an intact content table (``_note_reindexed``).
        self.fts_reindexed: dict[str, Feed] = {}
        self.force_triggers: set[str] = set()
        self.attached = False  # the source is attached to the output connection as src
        self.indexes_first = False  # every index built before the rows (``_can_wait``)
        self._aliases: dict[str, str | None] = {}  # table -> its rowid alias column
        # Other copies judged (``_of_this_database``): None, or why it is not of this file.
        self._copy_verdicts: dict[Path, str | None] = {}

    def run(self) -> dict[str, TableCopy] | None:
        """Build the output; None (nothing built) when FTS5's own checks, joined before
        the FTS tables are filled, gave no verdicts the diagnosis can take alone: the
        file must then be diagnosed again (``FtsPending.join``)."""
        bulk = True
        before = deepcopy(vars(self.report))
        while True:
            try:
                return self._run(bulk=bulk)
            except _FtsVerdictsMissing:
                self._reset()
                return None
            except _FtsModesChanged:
                # The report as it was before this build (its timings go on).
                timings = self.report.timings
                vars(self.report).update(deepcopy(before), timings=timings)
                self._reset()
            except _IndexAfterRowsFailed as exc:
                self.indexes_first = True
                self.report.notes.append(
                    f"index {exc.name} could not be built after the rows ({exc.reason});"
                    " the build started over with every index in place before the rows"
                )
                self._reset()
            except _FtsCopyFailed as exc:
                # Its shadow tables looked intact but could not be copied: fill it
                # from its base table instead, in a fresh build.
                self.force_triggers.add(exc.name)
                self.report.notes.append(
                    f"{exc.name}: its shadow tables could not be copied ({exc.reason});"
                    " repopulated from its base table"
                )
                self._reset()

    def _reset(self) -> None:
        self.report.set_aside.clear()
        self.report.renamed.clear()
        self.report.from_other_copies.clear()
        for suffix in BUNDLE_SUFFIXES:
            sidecar(self.inputs.built, suffix).unlink(missing_ok=True)

    def _run(self, *, bulk: bool) -> dict[str, TableCopy]:
        try:
            return self._once(bulk=bulk)
        except apsw.CorruptError as exc:
            if not bulk:
                raise
            self._reset()
            self.report.notes.append(
                f"a bulk copy met damage ({exc}); every table was copied row by row"
            )
            return self._once(bulk=False)

    def _once(self, *, bulk: bool) -> dict[str, TableCopy]:
        hdr = self.inputs.work.source_header
        ro = uri_for(self.inputs.work.db, mode="ro")
        self.src = apsw.Connection(ro, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        # Its sorts (index entries by rowid) stay in memory: a full /tmp, common when the
        # disk is full, must not end a recovery that has room for its output.
        self.src.execute("PRAGMA temp_store=MEMORY")
        self.dst = apsw.Connection(
            str(self.inputs.built),
            flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI,
        )
        self.copies = {}
        self.fts_unchanged = set()
        self.fts_copied = {}
        self.fts_reconciled = {}
        self.fts_reindexed = {}
        dst = self.dst
        try:
            dst.execute(f"PRAGMA page_size={hdr.page_size}")
            dst.execute(f"PRAGMA encoding='{_ENCODINGS.get(hdr.text_encoding, 'UTF-8')}'")
            # MEMORY, not OFF: with no journal a failed statement cannot be undone alone.
            dst.execute("PRAGMA journal_mode=MEMORY")
            dst.execute("PRAGMA synchronous=OFF")
            dst.execute("PRAGMA foreign_keys=OFF")  # orphans are kept, not refused
            self.attached = bulk
            if bulk:
                dst.execute("ATTACH ? AS src", (ro,))
            fts_mode = self._fts_modes()
            carry = {n for n, m in fts_mode.items() if m == "carry"}
            early = _feeding_triggers(
                self.inputs.schema, {n for n, m in fts_mode.items() if m == "triggers"}
            )
            dst.execute("BEGIN")
            self._create(
                lambda o: (
                    o.type == "table"
                    and not o.is_internal
                    and (o.shadow_of in carry if o.shadow_of else o.name not in carry)
                )
            )
            waits = [] if self.indexes_first else self._waiting_indexes()
            later = {o.name for o in waits}
            self._create(lambda o: o.type == "index" and o.sql is not None and o.name not in later)
            self._create(lambda o: o.name in early)
            tables = self.inputs.schema.base_tables()
            for i, obj in enumerate(tables):
                if self.progress:
                    self.progress("copy tables", i, len(tables))
                tc = TableCopy(obj, TableReport())
                self.copies[obj.name] = tc
                self._index_keys(tc)
                self._fts_rowids(tc)
                if not bulk or obj.name in self.inputs.damaged or not self._bulk_copy(tc):
                    self._row_copy(tc)
                self._add_unreached(tc)
                self._add_carved(tc)
                self._add_wal_rows(tc)
                if obj.name in self.inputs.damaged:
                    self._add_from_other_copies(tc)
            self._copy_sequences()
            self._restore_from_copies()
            for tc in self.copies.values():
                self._restore_from_indexes(tc)
            for tc in self.copies.values():
                self._rebuild_lost_from_copies(tc)
            self._build_indexes(waits)
            # Views first: an external-content FTS table may be built over one.
            self._create(lambda o: o.type == "view")
            with self.report.timed("fts"):
                ahead = self._copy_ahead(fts_mode)
            fts_mode = self._settle_fts_modes(fts_mode, ahead)
            with self.report.timed("fts"):
                for i, (name, mode) in enumerate(fts_mode.items()):
                    if self.progress:
                        self.progress("fill FTS tables", i, len(fts_mode))
                    self._fill_fts(name, mode, copied=name in ahead)
                if self.progress:
                    self.progress("fill FTS tables", len(fts_mode), len(fts_mode))
            self._create(lambda o: o.type == "trigger" and o.name not in early)
            dst.execute("COMMIT")
            self._confirm_unchanged()
            for name in sorted(carry):
                self._write_schema_row(name)
            dst.execute(f"PRAGMA user_version={hdr.user_version}")
            dst.execute(f"PRAGMA application_id={hdr.application_id}")
            if bulk:
                dst.execute("DETACH src")
            dst.execute(f"PRAGMA journal_mode={'WAL' if hdr.journal_mode == 'wal' else 'DELETE'}")
            return self.copies
        finally:
            dst.close()
            self.src.close()

    def _fts_modes(self) -> dict[str, str]:
        """How each FTS table is filled (``_fts_modes``), as the diagnosis stands."""
        modes = _fts_modes(self.inputs.schema, self.inputs.damaged, self.inputs.diag)
        for name in self.force_triggers:
            external = bool((obj := self.inputs.schema.by_name(name)) and obj.fts_content)
            modes[name] = "rebuild" if external else "triggers"
        return modes

    def _copy_ahead(self, modes: dict[str, str]) -> set[str]:
        """While FTS5's own checks are still pending: the shadow tables of the FTS
        tables to be copied whole (``copy``, ``reconcile``) copied now, each table's
        inside a savepoint of its own kept open until the verdicts are in
        (``_settle_fts_modes``), which keeps them or undoes them. Returns the tables
        copied; one whose copy failed is undone at once and copied (or not) the usual
        way once the verdicts are in."""
        if self.inputs.fts_pending is None:
            return set()
        ahead: set[str] = set()
        owned = self.inputs.schema.fts_owner
        for i, (name, mode) in enumerate(modes.items()):
            if self.progress:
                self.progress("copy FTS tables ahead", i, len(modes))
            if mode not in ("copy", "reconcile") or name not in owned:
                continue  # (a copy that fails then is noted, not raised: not ahead)
            if name in self.force_triggers:
                continue
            point = _savepoint_name(name)
            self.dst.execute(f"SAVEPOINT {point}")
            try:
                self._copy_shadows(name)
            except _FtsCopyFailed:
                self.dst.execute(f"ROLLBACK TO {point}")
                self.dst.execute(f"RELEASE {point}")
                continue
            ahead.add(name)
        return ahead

    def _settle_fts_modes(self, modes: dict[str, str], ahead: set[str]) -> dict[str, str]:
        """The FTS modes with FTS5's own verdicts, once the base tables are in: those
        chosen before the data with the verdicts still pending stand where they agree.
        A table found damaged is filled its new way (``reindex``, ``rebuild``) unless
        that needed triggers before the data: then the build starts over. Shadow tables
        copied ahead (``_copy_ahead``) are kept where the mode stands; ``ahead`` is left
        with those only, the others' copies undone."""
        pending = self.inputs.fts_pending
        if pending is None:
            return modes
        if not pending.join(self.inputs.diag):
            raise _FtsVerdictsMissing
        now = self._fts_modes()
        if {n for n, m in now.items() if m in ("triggers", "carry")} != {
            n for n, m in modes.items() if m in ("triggers", "carry")
        }:
            raise _FtsModesChanged
        # Savepoints nest: the last one opened is settled first, and undoing one also
        # undoes the copies made after it (kept or not): those are made again.
        opened = [n for n in modes if n in ahead]
        for i in reversed(range(len(opened))):
            point = _savepoint_name(opened[i])
            if now.get(opened[i]) != modes[opened[i]]:
                self.dst.execute(f"ROLLBACK TO {point}")
                ahead.difference_update(opened[i:])
            self.dst.execute(f"RELEASE {point}")
        return now

    def _create(self, which: Callable[[SchemaObject], bool]) -> None:
        for obj in self.inputs.schema.objects:
            if obj.sql and which(obj) and obj.name != "sqlite_sequence":
                try:
                    self.dst.execute(obj.sql)
                except apsw.Error as exc:
                    self.report.notes.append(f"could not create {obj.type} {obj.name}: {exc}")

    def _waiting_indexes(self) -> list[SchemaObject]:
        """The indexes built once the rows are in (``_can_wait``), in schema order."""
        return [o for o in self.inputs.schema.objects if o.type == "index" and _can_wait(o)]

    def _build_indexes(self, indexes: list[SchemaObject]) -> None:
        """Build the indexes that waited for the rows; one that fails starts the build
        over (``_IndexAfterRowsFailed``), since SQLite may have rolled back the whole
        transaction with it."""
        for i, obj in enumerate(indexes):
            if self.progress:
                self.progress("build indexes", i, len(indexes))
            try:
                self.dst.execute(obj.sql or "")
            except apsw.Error as exc:
                raise _IndexAfterRowsFailed(obj.name, str(exc).split("\n", 1)[0]) from exc
        if self.progress and indexes:
            self.progress("build indexes", len(indexes), len(indexes))

    def _write_schema_row(self, name: str) -> None:
        """The ``sqlite_schema`` row of a carried FTS table, as the source has it (its
        module cannot be loaded, so ``CREATE VIRTUAL TABLE`` cannot run here)."""
        obj = self.inputs.schema.by_name(name)
        assert obj is not None
        self.dst.execute("BEGIN")
        self.dst.execute("PRAGMA writable_schema=ON")
        self.dst.execute(
            "INSERT INTO main.sqlite_schema(type, name, tbl_name, rootpage, sql)"
            " VALUES (?, ?, ?, 0, ?)",
            (obj.type, obj.name, obj.tbl_name, obj.sql),
        )
        self.dst.execute("PRAGMA writable_schema=OFF")
        self.dst.execute("COMMIT")

    def _fill_fts(self, name: str, mode: str, *, copied: bool = False) -> None:
        """Fill the FTS table ``name`` its ``mode``'s way (``_fts_modes``); ``copied``:
        its shadow tables are already copied (``_copy_ahead``)."""
        q = quote_ident(name)
        if mode == "carry":
            for obj in self.inputs.schema.tables():
                if obj.shadow_of == name:
                    self._carry_shadow(name, obj.name)
            self._keep_fts_version(name)
            self._keep_fts_structure(name)
            why = self.inputs.diag.unverifiable.get(name, "")
            self.report.notes.append(
                f"{name}: carried over as it was, its index unchecked ({why});"
                " Hermes rebuilds it with `hermes sessions optimize-storage` where the"
                " tokenizer loads"
            )
        elif mode == "external":
            self._copy_shadows(name)
            try:
                self.dst.execute(f"INSERT INTO main.{q}({q}, rank) VALUES('integrity-check', 1)")
            except apsw.Error as exc:
                self.report.notes.append(
                    f"{name}: its copied index disagrees with the recovered rows ({exc});"
                    " rebuilt from them"
                )
                self._fill_fts(name, "rebuild")
        elif mode == "rebuild":
            try:
                self.dst.execute(f"INSERT INTO main.{q}({q}) VALUES('rebuild')")
            except apsw.Error as exc:
                self.report.notes.append(f"{name}: FTS 'rebuild' failed: {exc}")
        elif mode in ("copy", "reconcile", "reindex"):
            if mode == "copy":
                self.fts_unchanged.add(name)
            for obj in self.inputs.schema.tables():
                if obj.shadow_of != name or copied:
                    continue
                if mode == "reindex" and obj.name != f"{name}_content":
                    continue
                self._copy_shadow(name, obj.name)
            if mode == "reindex":
                self.dst.execute(f"INSERT INTO main.{q}({q}) VALUES('rebuild')")
            owner_damaged = self.inputs.schema.fts_owner.get(name) in self.inputs.damaged
            if mode != "copy" and owner_damaged:
                self._reconcile_fts(name)
            if mode == "reindex" and (name in self.fts_reconciled or not owner_damaged):
                self._note_reindexed(name)
        elif mode == "none":
            self.report.notes.append(
                f"{name}: contentless FTS table left empty (nothing to rebuild it from)"
            )

    def _note_reindexed(self, name: str) -> None:
        """An own-content FTS table whose index FTS5's 'rebuild' just made from the
        content it stores in the output, changed since only by ordinary INSERT and
        DELETE of clean rows (``_reconcile_fts``): listed with its feed, by which the
        verification checks it instead of FTS5's own check (``verify.py``)."""
        feed = next((f for f in feeds(self.inputs.schema) if f.fts == name), None)
        fts = self.inputs.schema.by_name(name)
        if feed is not None and fts is not None and fts.fts_content is None:
            self.fts_reindexed[name] = feed

    def _copy_shadows(self, name: str) -> None:
        """Copy every shadow table of the FTS table ``name`` (``_copy_shadow``)."""
        for obj in self.inputs.schema.tables():
            if obj.shadow_of == name:
                self._copy_shadow(name, obj.name)

    def _copy_shadow(self, name: str, shadow: str) -> None:
        """Copy one FTS shadow table from the source (in one statement when the source
        is attached, else row by row through Python)."""
        s = quote_ident(shadow)
        self.dst.execute(f"DELETE FROM main.{s}")
        try:
            if self.attached:
                self.dst.execute(f"INSERT INTO main.{s} SELECT * FROM src.{s} NOT INDEXED")
                self.fts_copied[shadow] = self.dst.changes()
                return
            rows = self.src.execute(f"SELECT * FROM {s} NOT INDEXED").fetchall()
        except (apsw.Error, UnicodeDecodeError) as exc:
            if isinstance(exc, MACHINE_ERRORS):
                raise  # a full disk is no damage of the FTS table's: the run ends
            if name in self.inputs.schema.fts_owner and name not in self.force_triggers:
                raise _FtsCopyFailed(name, str(exc)) from None
            self.report.notes.append(f"{name}: copying {shadow} failed: {exc}")
            self.fts_unchanged.discard(name)
            return
        if rows:
            marks = ", ".join("?" for _ in rows[0])
            self.dst.executemany(f"INSERT INTO main.{s} VALUES ({marks})", rows)
        self.fts_copied[shadow] = len(rows)

    def _confirm_unchanged(self) -> None:
        """Each FTS table taken as copied whole and unchanged (``fts_unchanged``, whose
        index the verification then does not check again) must hold in its small shadow
        tables (all but ``_data`` and ``_content``) the rows its copy wrote. One that
        does not (a copy undone, or never made) is a fault of this build, which an FTS5
        check could miss (an empty index over empty content passes it): the run ends
        and nothing is published."""
        for name in sorted(self.fts_unchanged):
            for obj in self.inputs.schema.tables():
                if obj.shadow_of != name or obj.name in (f"{name}_data", f"{name}_content"):
                    continue
                wrote = self.fts_copied.get(obj.name)
                row = self.dst.execute(
                    f"SELECT count(*) FROM main.{quote_ident(obj.name)}"
                ).fetchone()
                holds = int(row[0]) if row else 0
                if wrote is None or holds != wrote:
                    raise StatewardenError(
                        f"{name}: its copy in the new file is not whole ({obj.name} holds"
                        f" {holds} rows, its copy wrote {wrote if wrote is not None else 'none'});"
                        " the new file was not kept"
                    )

    def _keep_fts_version(self, name: str) -> None:
        """A carried FTS table whose ``_config`` lost its ``version`` row (a damaged
        page) could not be opened at all in the output: the row is written back with
        the file-format version FTS5 gives every table (5 for ``contentless_delete``)."""
        obj = self.inputs.schema.by_name(name)
        config = quote_ident(f"{name}_config")
        try:
            have = self.dst.execute(f"SELECT 1 FROM main.{config} WHERE k = 'version'").fetchone()
        except apsw.Error:
            return  # not a regular FTS5 config table: nothing to restore
        if have is not None:
            return
        delete = bool(obj and re.search(r"contentless_delete\s*=\s*1", obj.sql or "", re.I))
        self.dst.execute(
            f"INSERT INTO main.{config}(k, v) VALUES ('version', ?)", (5 if delete else 4,)
        )
        self.report.notes.append(
            f"{name}: its config had no version row; written back (version {5 if delete else 4})"
        )

    def _keep_fts_structure(self, name: str) -> None:
        """A carried FTS table whose index lost its structure record (``_data`` rowid
        10, the map of its segments) cannot be read or checked at all, and cannot be
        rebuilt here: its index is carried empty instead (an empty structure, no
        segments), its content kept, so that the output opens and Hermes rebuilds it."""
        data = quote_ident(f"{name}_data")
        try:
            have = self.dst.execute(f"SELECT 1 FROM main.{data} WHERE id = 10").fetchone()
        except apsw.Error:
            return  # not a regular FTS5 data table
        if have is not None:
            return
        for shadow in ("_data", "_idx", "_docsize"):
            with contextlib.suppress(apsw.Error):  # _docsize is absent with columnsize=0
                self.dst.execute(f"DELETE FROM main.{quote_ident(name + shadow)}")
        self.dst.execute(
            f"INSERT INTO main.{data}(id, block) VALUES (1, x''), (10, ?)", (EMPTY_FTS5_STRUCTURE,)
        )
        self.report.notes.append(
            f"{name}: its index lost its structure record; carried empty (content kept):"
            " Hermes must rebuild it (`hermes sessions optimize-storage`)"
        )

    def _carry_shadow(self, name: str, shadow: str) -> None:
        """Copy one shadow table of a carried FTS table, keeping what can be read."""
        try:
            self._copy_shadow(name, shadow)
        except _FtsCopyFailed as exc:
            note = (
                f"{name}: {shadow} could not be copied whole ({exc.reason}); Hermes must"
                " rebuild this index (`hermes sessions optimize-storage`)"
            )
            if note not in self.report.notes:  # a build that starts over meets it again
                self.report.notes.append(note)

    def _reconcile_fts(self, name: str) -> None:
        """After copying an intact FTS table whose base table was copied row by row:
        remove entries of rows the output lacks, and (re)index rows that are new or
        differ, with the expressions of the file's own insert trigger (``copies.py``).
        Rows found rotted on disk keep their copies (see ``recover.py``)."""
        feed = next((f for f in feeds(self.inputs.schema) if f.fts == name), None)
        fts = self.inputs.schema.by_name(name)
        if feed is None or fts is None:  # pragma: no cover - only fed tables reconcile
            return
        rotted = {
            r for c in self.inputs.diag.copies if c.table == feed.table for r in c.rows_rotted
        }
        q, content = quote_ident(name), quote_ident(f"{name}_content")
        base = quote_ident(feed.table)
        rid = feed.rowid_expr
        differs = f"NOT {feed.copy_matches()}"
        stale = [
            int(r[0])
            for r in self.dst.execute(
                f"SELECT c.id FROM main.{content} AS c LEFT JOIN main.{base} AS b"
                f" ON ({rid}) = c.id WHERE b.rowid IS NULL"
                f" UNION ALL SELECT c.id FROM main.{content} AS c JOIN main.{base} AS b"
                f" ON ({rid}) = c.id WHERE {differs}"
            )
        ]
        stale = [r for r in stale if r not in rotted]
        self.dst.executemany(f"DELETE FROM main.{q} WHERE rowid = ?", [(r,) for r in stale])
        cols = [c.name for c in fts.columns if not c.hidden]
        names = ", ".join(quote_ident(cols[int(k[1:])]) for k in feed.columns)
        exprs = ", ".join(feed.columns.values())
        lacking = (
            f" FROM main.{base} AS b WHERE NOT EXISTS"
            f" (SELECT 1 FROM main.{content} AS c WHERE c.id = ({rid}))"
        )
        added = {r[0] for r in self.dst.execute(f"SELECT ({rid}){lacking}")}
        if added:  # (none, most of the time: the search is not made twice)
            self.dst.execute(
                f"INSERT INTO main.{q}(rowid, {names}) SELECT ({rid}), {exprs}{lacking}"
            )
        damaged = self._damaged_rowids(feed.table)
        if fts.fts_content is None and damaged is not None and not added & damaged:
            self.fts_reconciled[name] = feed

    def _damaged_rowids(self, table: str) -> set[Any] | None:
        """Rowids of the output's rows of ``table`` whose values did not come whole and
        unchanged through the b-tree of a row that read clean: decoded from pages or WAL
        frames, partial, run into zeroed bytes, cross-linked, changed on disk, restored
        or renamed, from another copy, unverified. None (any row may be) when rows were
        updated from the WAL (those are not listed one by one)."""
        tc = self.copies.get(table)
        diag = self.inputs.diag
        if tc is None or tc.report.updated_from_wal:
            return None
        out: set[Any] = set(tc.page_rowids)
        out.update(diag.zeroed_cells.get(table, {}), diag.cross_linked.get(table, {}))
        for c in diag.copies:
            if c.table == table:
                out.update(c.rows_rotted, c.rows_bad_text)
        report = self.report
        for entries in (
            report.partial_rows,
            report.restored_from_copies,
            report.unverified_rows,
            report.renamed,
            report.from_other_copies,
        ):
            out.update(e["rowid"] for e in entries if e["table"] == table)
        return out

    def _restore_from_copies(self) -> None:
        """Rows that differ from two FTS copies that agree with each other (changed on
        disk) get the changed column back from the copies (``copies.restore_from_copies``);
        each is listed in ``restored_from_copies``; the others stay as stored."""
        for check in self.inputs.diag.copies:
            changed = {
                e["rowid"]
                for e in self.report.partial_rows
                if e["table"] == check.table and e.get("changed")
            }
            if check.table not in self.copies or not (check.rows_rotted or changed):
                continue
            done = restore_from_copies(self.src, self.dst, self.inputs.schema, check, changed)
            restored = {r.rowid for r in done}
            tc = self.copies[check.table]
            for r in done:
                for entry in self.report.partial_rows:
                    if (entry["table"], entry["rowid"]) == (r.table, r.rowid):
                        entry["columns"] = [c for c in entry["columns"] if c != r.column]
                        entry["filled"].pop(r.column, None)
                        if not entry["columns"]:
                            tc.report.partial -= 1
                self.report.restored_from_copies.append(
                    {
                        "table": r.table,
                        "rowid": r.rowid,
                        "column": r.column,
                        "stored": json_value(r.stored),
                        "from": r.copies,
                    }
                )
            # A partial row is already a loss, and may yet be completed (salvage.py).
            partial = {e["rowid"] for e in self.report.partial_rows if e["table"] == check.table}
            kept = [r for r in check.rows_rotted if r not in restored and r not in partial]
            if done:
                shown = ", ".join(str(r) for r in sorted(restored)[:20])
                self.report.notes.append(
                    f"{check.table}: {len(done)} rows changed on disk were restored from"
                    f" their search-index copies ({', '.join(check.copies)}), which agree"
                    f" with each other (rowids {shown})"
                )
            if kept:
                shown = ", ".join(str(r) for r in kept[:20])
                self.report.notes.append(
                    f"{check.table}: {len(kept)} rows differ from their search-index copies,"
                    " which agree with each other, and no single column changed explains"
                    f" it: kept as stored (rowids {shown}); the copies keep the text they had"
                )
                tc.report.unverified += len(kept)

    def _restore_from_indexes(self, tc: TableCopy) -> None:
        """Rows of a table copied row by row are compared with the entries its intact
        indexes hold for their rowid. A column of a row known to be damaged on disk
        (partial, or restored from its FTS copies) that differs from an index entry,
        or a column of any row that differs from the entries of two or more indexes
        agreeing with each other, is set to the indexed value, written with the row
        (a changed real, a filled-in value). A column only one index holds that
        differs in a row with no other damage is left as stored and counted as
        unverified (either may be the changed one)."""
        entries: dict[int, dict[str, list[Any]]] = {}
        try:
            entries = self._fix_from_indexes(tc)
        finally:
            self._settle_partial(tc, entries)

    def _rebuilt_index_roots(self) -> set[int]:
        """Roots of the indexes filled from their own tables in the copy (a schema
        rebuilt from Hermes' known schema): no witness of those tables' rows."""
        names = set(self.inputs.work.rebuilt_indexes)
        return {o.rootpage for o in self.inputs.schema.objects if o.name in names}

    def _index_witnesses(
        self, tc: TableCopy, broken: set[int], suspects: set[int]
    ) -> tuple[Iterator[tuple[int, Witnesses]], set[str]]:
        """The entries the intact indexes of ``tc``'s table hold, by rowid in ascending
        order, and the columns they hold. Where SQLite can name the rows that differ
        from an entry (``_differing_rowids``), the entries of those rows and of
        ``suspects`` only: a row every entry agrees with needs none. Else one rowid at
        a time (memory does not grow with the table), unless the old indexes' pages
        vouch too (a schema rebuilt): then all entries are read at once."""
        obj = tc.obj
        misshapen = self.inputs.diag.lost_writes.misshapen
        if self.inputs.index_pages:
            everything = indexed_values(
                self.src, self.inputs.schema, obj.name, None, broken_roots=broken
            )
            drop_misshapen(everything, misshapen)
            self._add_old_index_entries(tc, everything)
            return iter(sorted(everything.items())), {c for e in everything.values() for c in e}
        readings = index_readings(self.src, self.inputs.schema, obj.name, broken_roots=broken)
        held = {c for r in readings for c in r.columns}
        differ = self._differing_rowids(tc, readings)
        if differ is not None:
            wanted = sorted(differ | suspects)
            picked = indexed_values_of(self.src, readings, wanted)
            drop_misshapen(picked, misshapen)
            return iter(sorted((r, w) for r, w in picked.items() if w)), held
        windows = tc.hint_rowids.windows(WITNESS_WINDOW_ROWS)
        return (
            indexed_values_in_order(self.src, readings, misshapen=misshapen, windows=windows),
            held,
        )

    def _differing_rowids(self, tc: TableCopy, readings: list[IndexReading]) -> KeySet | None:
        """The rowids of the output's rows that differ from an entry an index of
        ``readings`` holds for them (another type, or another value compared byte for
        byte), found by SQLite joining each index to the output table; None when it
        cannot say (the source is not attached, a reading fails, or more than
        ``DIFFERING_ROWS_MOST`` rows differ: then every row is compared)."""
        if not self.attached:
            return None
        t = quote_ident(tc.obj.name)
        out = KeySet()
        found = 0
        for r in readings:
            cols = [quote_ident(c) for c in r.columns]
            picked = ", ".join(f"{c} AS c{i}" for i, c in enumerate(cols))
            where = f" WHERE {r.condition}" if r.condition else ""
            same = " AND ".join(
                f"((d.{c} IS NULL AND s.c{i} IS NULL) OR"
                f" (typeof(d.{c}) = typeof(s.c{i}) AND d.{c} = s.c{i} COLLATE BINARY))"
                for i, c in enumerate(cols)
            )
            sql = (
                f"SELECT s.rid FROM (SELECT rowid AS rid, {picked} FROM src.{t}"
                f" INDEXED BY {quote_ident(r.name)}{where} LIMIT -1) AS s"
                f" JOIN main.{t} AS d ON d.rowid = s.rid WHERE NOT ({same})"
            )
            try:
                for (rowid,) in self.dst.execute(sql):
                    if out.add_new(rowid):
                        found += 1
                        if found > DIFFERING_ROWS_MOST:
                            return None
            except (apsw.Error, UnicodeDecodeError) as exc:
                if isinstance(exc, MACHINE_ERRORS):
                    raise
                if self._unreadable(r):
                    continue  # no witness either way (a partial index the planner refuses)
                return None
        return out

    def _unreadable(self, reading: IndexReading) -> bool:
        """Does the reading's own query fail before it reads a row? Then the index
        witnesses nothing however it is read."""
        try:
            self.src.execute(reading.sql + " LIMIT 0").fetchall()
        except apsw.SQLError:
            return True
        except (apsw.Error, UnicodeDecodeError):
            return False
        return False

    def _compare_rows(
        self,
        tc: TableCopy,
        witnessed: Iterator[tuple[int, Witnesses]],
        indexed: list[str],
        suspects: set[int],
        stale: set[int],
    ) -> tuple[dict[int, Witnesses], list[tuple[int, str, Any, Any, list[str]]], list[int]]:
        """The output's rows beside their index entries, both in rowid order: the
        columns to set from the entries (rowid, column, value, stored, indexes), the rows
        that differ from the one index that holds a column (unverified), and the entries
        kept: those of the rows known damaged (``suspects``: ``_settle_partial`` reads
        them) and of every row that differs from one."""
        entries: dict[int, Witnesses] = {}
        t = quote_ident(tc.obj.name)
        sel = ", ".join(quote_ident(c) for c in indexed)
        # A value renamed by the dedupe rule differs from its index entry on purpose.
        renamed = {
            (e["rowid"], e["column"]) for e in self.report.renamed if e["table"] == tc.obj.name
        }
        unverified: list[int] = []
        fixes: list[tuple[int, str, Any, Any, list[str]]] = []
        ahead = next(witnessed, None)
        for row in self.dst.execute(f"SELECT rowid, {sel} FROM main.{t} ORDER BY rowid"):
            rowid = int(row[0])
            while ahead is not None and ahead[0] < rowid:
                if ahead[0] in suspects:
                    entries[ahead[0]] = ahead[1]
                ahead = next(witnessed, None)
            if ahead is None or ahead[0] != rowid:
                continue
            found = ahead[1]
            if rowid in suspects:
                entries[rowid] = found
            if rowid in stale:
                continue
            for col, stored in zip(indexed, row[1:], strict=True):
                witnesses = found.get(col, [])
                kind = type(stored)
                if all(type(v) is kind and v == stored for v, _ in witnesses):
                    continue  # every entry holds what the row holds (most rows)
                entries[rowid] = found
                if (rowid, col) in renamed:
                    continue
                values = {(type(v), v) for v, _ in witnesses}
                if not witnesses or len(values) != 1:
                    continue
                value = witnesses[0][0]
                if stored == value and type(stored) is type(value):
                    continue
                if rowid in suspects or len(witnesses) >= 2:
                    fixes.append((rowid, col, value, stored, [i for _, i in witnesses]))
                elif rowid not in unverified:
                    unverified.append(rowid)
        for rowid, found in itertools.chain([ahead] if ahead is not None else [], witnessed):
            if rowid in suspects:
                entries[rowid] = found
        return entries, fixes, unverified

    def _fix_from_indexes(self, tc: TableCopy) -> dict[int, dict[str, list[Any]]]:
        """``_restore_from_indexes`` but the settling; returns the index entries read."""
        obj = tc.obj
        if obj.without_rowid or obj.name not in self.inputs.damaged:
            return {}
        suspects = {e["rowid"] for e in self.report.partial_rows if e["table"] == obj.name}
        suspects |= {e["rowid"] for e in self.report.restored_from_copies if e["table"] == obj.name}
        broken = {
            int(m.group(1)) for ln in self.inputs.diag.error_lines if (m := _TREE_RE.match(ln))
        }
        # A row older than its index entries (a lost write) stays as it was once
        # written, named stale (``lost_writes.py``), not patched into a mix.
        stale = {
            s.rowid
            for s in self.inputs.diag.lost_writes.stale_rows
            if s.table == obj.name and not s.restorable
        }
        broken |= self._rebuilt_index_roots()
        witnessed, held = self._index_witnesses(tc, broken, suspects)
        cols = _columns(obj)
        indexed = [c for c in cols if c in held]
        if not indexed:
            return {r: w for r, w in witnessed if r in suspects}
        entries, fixes, unverified = self._compare_rows(tc, witnessed, indexed, suspects, stale)
        t = quote_ident(obj.name)
        for rowid, col, value, stored, by in fixes:
            self.dst.execute(
                f"UPDATE main.{t} SET {quote_ident(col)} = ? WHERE rowid = ?", (value, rowid)
            )
            self.report.restored_from_copies.append(
                {
                    "table": obj.name,
                    "rowid": rowid,
                    "column": col,
                    "stored": json_value(stored),
                    "from": [f"index {i}" for i in by],
                }
            )
            for entry in self.report.partial_rows:
                if (entry["table"], entry["rowid"]) == (obj.name, rowid):
                    entry["columns"] = [c for c in entry["columns"] if c != col]
                    entry["filled"].pop(col, None)
                    if not entry["columns"]:
                        tc.report.partial -= 1
        if fixes:
            shown = ", ".join(str(r) for r in sorted({f[0] for f in fixes})[:20])
            self.report.notes.append(
                f"{obj.name}: {len(fixes)} columns changed on disk were restored from the"
                f" entries of its intact indexes (rowids {shown})"
            )
        if unverified:
            tc.report.unverified += len(unverified)
            for rowid in unverified:
                self.report.unverified_rows.append(
                    {
                        "table": obj.name,
                        "rowid": rowid,
                        "columns": [c for c in indexed if len(entries[rowid].get(c, [])) == 1],
                        "why": "differs from the one intact index that holds the column",
                    }
                )
            shown = ", ".join(str(r) for r in unverified[:20])
            self.report.notes.append(
                f"{obj.name}: {len(unverified)} rows differ from the one intact index that"
                f" holds a column of theirs: kept as stored, unverified (rowids {shown})"
            )
        return entries

    def _add_old_index_entries(
        self, tc: TableCopy, entries: dict[int, dict[str, list[Any]]]
    ) -> None:
        """Add to ``entries`` what the old indexes' pages hold for the rows copied
        (``old_indexes.old_index_witnesses``)."""
        if not self.inputs.index_pages:
            return
        t = quote_ident(tc.obj.name)
        # Only the indexed columns are read (the others stand as NULL: not compared).
        held = indexed_columns(self.inputs.schema, tc.obj)
        sel = ", ".join(quote_ident(c) if c in held else "NULL" for c in _columns(tc.obj))
        rows = {
            int(r[0]): list(r[1:]) for r in self.dst.execute(f"SELECT rowid, {sel} FROM main.{t}")
        }
        old = old_index_witnesses(self.inputs.index_pages, self.inputs.schema, tc.obj.name, rows)
        for rowid, cols in old.items():
            got = entries.setdefault(rowid, {})
            for col, values in cols.items():
                got.setdefault(col, []).extend(values)

    def _settle_partial(self, tc: TableCopy, entries: dict[int, dict[str, list[Any]]]) -> None:
        """A row whose record was damaged on disk: the columns that did read may have
        been changed too. Each such row lists the columns it read but nothing vouches
        for (``unverified``): not its key, not a column an intact index holds for its
        rowid, not a column its FTS copies were found to agree with (restored from
        them). A partial row keeps them in its entry; a row whose unreadable columns
        all came back is listed in ``unverified_rows`` when any is left, else it is
        whole."""
        obj = tc.obj
        cols = _columns(obj)
        keys = set(obj.key_columns) | ({obj.rowid_alias} if obj.rowid_alias else set())
        fed = {
            c
            for f in feeds(self.inputs.schema)
            if f.table == obj.name
            for expr in f.columns.values()
            for c in re.findall(r"\bb\.[\"`\[]?(\w+)", expr)
        }
        by_copies = {
            e["rowid"]
            for e in self.report.restored_from_copies
            if e["table"] == obj.name and not e["from"][0].startswith("index ")
        }
        kept = []
        for entry in self.report.partial_rows:
            if entry["table"] != obj.name:
                kept.append(entry)
                continue
            vouched = keys | set(entries.get(entry["rowid"], {}))
            if entry["rowid"] in by_copies:
                vouched |= fed
            entry["unverified"] = [
                c for c in cols if c not in entry["columns"] and c not in vouched
            ]
            if entry["columns"]:
                kept.append(entry)
            elif entry["unverified"]:
                tc.report.unverified += 1
                self.report.unverified_rows.append(
                    {
                        "table": obj.name,
                        "rowid": entry["rowid"],
                        "columns": entry["unverified"],
                        "why": entry.get("why", ""),
                    }
                )
        self.report.partial_rows = kept

    def _rebuild_lost_from_copies(self, tc: TableCopy) -> None:
        """Rows the FTS copies remember that the output table lacks go, as far as the
        copies hold them, to a documented side table (``copies.REBUILT_RULE``)."""
        if not tc.has_fts_copies:
            return
        have = KeySet(
            r[0] for r in self.dst.execute(f"SELECT rowid FROM main.{quote_ident(tc.obj.name)}")
        )
        lost = tc.fts_rowids - have
        if not lost:
            return
        broken = {
            int(m.group(1)) for ln in self.inputs.diag.error_lines if (m := _TREE_RE.match(ln))
        }
        rows = rebuild_from_copies(
            self.src, self.inputs.schema, tc.obj.name, lost, broken_roots=broken
        )
        if not rows:
            return
        name = write_rebuilt(self.dst, tc.obj.name, rows)
        tc.report.rebuilt_from_copies = len(rows)
        self.report.rebuilt[tc.obj.name] = name

    def _copy_sequences(self) -> None:
        """Keep AUTOINCREMENT counters at least where the source had them (no id reuse)."""
        try:
            rows = self.src.execute("SELECT name, seq FROM sqlite_sequence NOT INDEXED").fetchall()
        except apsw.Error as exc:
            self.report.notes.append(f"sqlite_sequence unreadable, counters follow the rows: {exc}")
            return
        for name, seq in rows:
            if name in self.copies and isinstance(seq, int):
                self.copies[name].sequence = seq
            self.dst.execute(
                "UPDATE main.sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (seq, name)
            )
            if self.dst.changes() == 0:
                self.dst.execute(
                    "INSERT INTO main.sqlite_sequence(name, seq) VALUES (?, ?)", (name, seq)
                )

    def _index_keys(self, tc: TableCopy) -> None:
        """Keys listed by the source's indexes: rows known to exist even when the table's
        own pages can no longer be read. An index whose own b-tree is damaged is no
        witness (its entries may be garbage), but every readable index helps find where
        a damaged scan can resume (``hint_keys``)."""
        broken_trees = {
            int(m.group(1)) for ln in self.inputs.diag.error_lines if (m := _TREE_RE.match(ln))
        }
        broken_trees |= self._rebuilt_index_roots()
        obj = tc.obj
        key_cols = [c for c in obj.key_columns if c != "rowid"]
        t = quote_ident(obj.name)
        for idx in self.inputs.schema.objects:
            if idx.type != "index" or idx.tbl_name != obj.name:
                continue
            if idx.sql and re.search(r"\bWHERE\b", idx.sql, re.I):
                continue  # a partial index lists only some rows
            try:
                info = self.src.execute(f"PRAGMA index_info({quote_ident(idx.name)})")
                cols = [r[2] for r in info]
            except (apsw.Error, UnicodeDecodeError):
                continue
            if not cols or any(c is None for c in cols) or not set(key_cols) <= set(cols):
                continue
            order = ", ".join(quote_ident(str(c)) for c in cols)
            select = ", ".join(quote_ident(c) for c in key_cols) if key_cols else "rowid"
            # Read whole before any of it counts (a damaged index says nothing
            # reliable), into KeySets rather than a list of a million tuples.
            keys, rowids = KeySet(), KeySet()
            sql = (
                f"SELECT {'NULL' if obj.without_rowid else 'rowid'}, {select}"
                f" FROM {t} INDEXED BY {quote_ident(idx.name)} ORDER BY {order}"
            )
            try:
                if key_cols:
                    for r in self.src.execute(sql):
                        keys.add(tuple(r[1:]))
                        if isinstance(r[0], int):
                            rowids.add(r[0])
                else:  # the key is the rowid: one set read once
                    rowids.update(r[0] for r in self.src.execute(sql))
                    keys = rowids
            except (apsw.Error, UnicodeDecodeError):
                continue  # a damaged index says nothing reliable
            if not obj.without_rowid:
                tc.hint_rowids |= rowids
            tc.hint_keys |= keys
            if idx.rootpage not in broken_trees:
                tc.index_keys |= keys
                tc.indexed = True
                tc.intact_indexes += 1
                tc.listed_by |= rowids

    def _bulk_copy(self, tc: TableCopy) -> bool:
        """Copy a clean table in one statement; False (and nothing copied) if it fails.

        The source's keys are read first: if even that fails (text that is not UTF-8 in
        a key column), the table goes row by row, where such rows are handled one by one.
        """
        obj = tc.obj
        key_cols = [c for c in obj.key_columns if c != "rowid"]
        keyf = key_fn(obj)
        sel = "".join(", " + quote_ident(c) for c in key_cols)
        rowids = "rowid" if not obj.without_rowid else "NULL"
        t = quote_ident(obj.name)
        keys, read_rowids = KeySet(), KeySet()
        try:
            cursor = self.src.execute(f"SELECT {rowids}{sel} FROM {t} NOT INDEXED")
            if key_cols:
                for r in cursor:
                    keys.add(keyf(r))
                    if not obj.without_rowid:
                        read_rowids.add(r[0])
            else:  # the key is the rowid
                read_rowids.update(r[0] for r in cursor)
                keys = read_rowids
        except UnicodeDecodeError:
            return False
        cols = ", ".join(quote_ident(c) for c in _columns(obj))
        rid = "" if obj.rowid_alias or obj.without_rowid else "rowid, "
        self.dst.execute("SAVEPOINT bulk")
        try:
            self.dst.execute(
                f"INSERT INTO main.{t}({rid}{cols}) SELECT {rid}{cols} FROM src.{t} NOT INDEXED"
            )
        except apsw.ConstraintError:
            self.dst.execute("ROLLBACK TO bulk")
            self.dst.execute("RELEASE bulk")
            return False
        self.dst.execute("RELEASE bulk")
        # Every row read went in: a rowid (or a WITHOUT ROWID table's key, never NULL)
        # read twice would have failed the INSERT.
        tc.report.source_rows += len(keys) if obj.without_rowid else len(read_rowids)
        tc.source_keys |= keys
        tc.rowids |= read_rowids
        return True

    def _row_copy(self, tc: TableCopy) -> None:
        obj = tc.obj
        cols = _columns(obj)
        key_idx = [cols.index(c) + 1 for c in obj.key_columns if c != "rowid"]
        seen = [0]
        partial: dict[int, list[str]] = {}

        zeroed = self.inputs.diag.zeroed_cells.get(obj.name, {})
        crossed = self.inputs.diag.cross_linked.get(obj.name, {})

        def on_row(row: tuple[Any, ...]) -> None:
            if self._unlisted(tc, int(row[0])):
                # Read through the b-tree, but no intact index of the table lists it
                # (two or more would) and no FTS copy holds it: a garbled cell that
                # decodes, not a row. Set aside, never copied as a good row.
                self._set_aside(tc, int(row[0]), dict(zip(cols, row[1:], strict=True)), UNLISTED)
                return
            tc.report.source_rows += 1
            key = int(row[0]) if not key_idx else tuple(row[i] for i in key_idx)
            tc.source_keys.add(key)
            values = list(row[1:])
            missing = partial.pop(int(row[0]), None)
            why = None
            hit: list[str] | None = []
            if int(row[0]) in crossed and not agrees_with_copies(
                self.src, self.inputs.schema, obj.name, int(row[0])
            ):
                # Its chain leads into pages another row's chain reaches too, and its
                # FTS copies do not vouch for what it reads there: the columns past its
                # cell may be that row's bytes. Its own rest is looked for later
                # (salvage.py).
                hit = _zeroed_columns(crossed[int(row[0])], cols, key_idx)
                why = CROSS_LINKED
            elif int(row[0]) in zeroed:
                hit = _zeroed_columns(zeroed[int(row[0])], cols, key_idx)
                why = ZEROED_REASON
            if hit is not None and int(row[0]) in bad_text and why != CROSS_LINKED:
                # Hermes writes valid UTF-8 only: such text was changed on disk.
                bad = bad_text.pop(int(row[0]))
                hit = None if any(cols.index(c) + 1 in key_idx for c in bad) else [*hit, *bad]
                why = why or BAD_TEXT_REASON
            if hit is None:
                # Its record header (or a key) ran into damage: no column can be trusted.
                zeroed_lost.append(int(row[0]))
                return
            hit_names = set(hit)
            if hit:
                missing = sorted({*(missing or []), *hit}, key=cols.index)
                for c in hit:
                    values[cols.index(c)] = None
            tc.rowids.add(int(row[0]))
            if missing is not None:
                filled = self._fill_missing(obj, cols, values, missing)
            if self._insert_row(tc, int(row[0]), values, cols) and missing is not None:
                tc.report.partial += 1
                entry: dict[str, Any] = {
                    "table": obj.name,
                    "rowid": int(row[0]),
                    "columns": missing,
                    "filled": {c: json_value(v) for c, v in filled.items()},
                }
                if why:
                    entry["why"] = why
                if why and why != CROSS_LINKED:
                    entry["changed"] = [c for c in missing if c in hit_names]
                self.report.partial_rows.append(entry)
            seen[0] += 1
            if self.progress and seen[0] % PROGRESS_EVERY_ROWS == 0:
                self.progress(f"copy {obj.name}", seen[0], 0)

        zeroed_lost: list[int] = []
        bad_text: dict[int, list[str]] = {}
        hints = tc.hint_rowids
        # Another table's cells a wrong child pointer leads to are no rows of this one.
        own = OwnRows(obj, self.inputs.diag.foreign_cells.get(obj.name, {}))
        result = scan_table(
            self.src,
            obj.name,
            own.columns(cols),
            own.keep(cols, on_row),
            hints=hints,
            on_partial=partial.__setitem__,
            on_bad_text=bad_text.__setitem__,
        )
        self._note_row_scan(tc, result, zeroed_lost)
        if own.left_out:
            shown = ", ".join(str(r) for r in own.left_out[:10])
            self.report.notes.append(
                f"{obj.name}: {len(own.left_out)} cells of another table's leaf, which its"
                f" b-tree reaches through a wrong child pointer, are no rows of it: not"
                f" copied (rowids {shown})"
            )

    def _note_row_scan(self, tc: TableCopy, result: ScanResult, zeroed_lost: list[int]) -> None:
        """What a row-by-row copy of the table could not read, in its report and notes."""
        obj = tc.obj
        if result.out_of_order:
            shown = ", ".join(str(r) for r in result.out_of_order[:10])
            self.report.notes.append(
                f"{obj.name}: {len(result.out_of_order)} cells read out of rowid order that no"
                f" index lists (rowids {shown}): garbled cells, not rows; not copied"
            )
        tc.report.unreadable_rows = result.unreadable_rows + len(zeroed_lost)
        tc.report.unreadable_ranges = result.unreadable_ranges
        if zeroed_lost:
            shown = ", ".join(str(r) for r in zeroed_lost[:10])
            self.report.notes.append(
                f"{obj.name}: {len(zeroed_lost)} rows whose record header or key ran into"
                f" zeroed or changed bytes were not copied (rowids {shown})"
            )
        if result.text_repaired:
            shown = ", ".join(str(r) for r in result.text_repaired[:20])
            self.report.notes.append(
                f"{obj.name}: {len(result.text_repaired)} rows held text that is not valid"
                f" UTF-8 (changed on disk): those columns are unreadable, unless their"
                f" search-index copies restore them (rowids {shown})"
            )

    def _unlisted(self, tc: TableCopy, rowid: int) -> bool:
        """Does no intact index of the table list ``rowid``, though two or more of
        them list every row, and no FTS copy hold it?"""
        return (
            tc.intact_indexes >= 2
            and rowid not in tc.listed_by
            and rowid not in tc.fts_rowids
            and not tc.obj.without_rowid
        )

    def _fill_missing(
        self, obj: SchemaObject, cols: list[str], values: list[Any], missing: list[str]
    ) -> dict[str, Any]:
        """Fill the unreadable columns of a partial row in place (the rule is
        ``report.PARTIAL_RULE``); return the values put where NULL is not allowed."""
        filled = {}
        by_name = {c.name: c for c in obj.stored_columns}
        for name in missing:
            col = by_name.get(name)
            if col is None or not col.notnull:
                continue
            value: Any
            if col.default is not None:
                try:
                    row = self.dst.execute(f"SELECT {col.default}").fetchone()
                    value = row[0] if row else None
                except apsw.Error:
                    value = None
            else:
                value = None
            if value is None:
                value = "" if col.text_affinity else 0
            values[cols.index(name)] = value
            filled[name] = value
        return filled

    def _insert_row(self, tc: TableCopy, rowid: int, values: list[Any], cols: list[str]) -> bool:
        """Insert one row; on a conflict apply the dedupe rule. True if the row is in."""
        obj = tc.obj
        try:
            alias = self._aliases.get(obj.name, False)
            if alias is False:  # worked out once a table: the property reads every column
                alias = self._aliases[obj.name] = obj.rowid_alias
            self.dst.execute(
                _insert_statement(obj.name, not alias, tuple(cols)),
                values if alias else [rowid, *values],
            )
            return True
        except apsw.ConstraintError as exc:
            return self._conflict(tc, rowid, values, cols, str(exc))
        except apsw.Error as exc:
            if isinstance(exc, MACHINE_ERRORS):
                raise  # a full disk is no fault of the row's: the run ends
            self._set_aside(
                tc, rowid, dict(zip(cols, values, strict=True)), f"insert failed: {exc}"
            )
            return False

    def _conflict(
        self, tc: TableCopy, rowid: int, values: list[Any], cols: list[str], message: str
    ) -> bool:
        obj = tc.obj
        row = dict(zip(cols, values, strict=True))
        t = quote_ident(obj.name)
        sel = ", ".join(quote_ident(c) for c in cols)
        existing = self.dst.execute(
            f"SELECT {sel} FROM main.{t} WHERE rowid = ?", (rowid,)
        ).fetchone()
        key_cols = [c for c in obj.key_columns if c != "rowid"]
        if existing is None and key_cols:
            where = " AND ".join(f"{quote_ident(c)} IS ?" for c in key_cols)
            existing = self.dst.execute(
                f"SELECT {sel} FROM main.{t} WHERE {where}", [row[c] for c in key_cols]
            ).fetchone()
        if existing is not None:
            if list(existing) == list(values):
                tc.report.duplicates_dropped += 1
                return False
            self._set_aside(tc, rowid, row, f"a different row already has this key ({message})")
            return False
        m = _UNIQUE_RE.search(message)
        if m:
            columns = [c.split(".", 1)[-1].strip() for c in m.group(1).split(",")]
            if all(c in row and c not in key_cols and isinstance(row[c], str) for c in columns):
                return self._rename(tc, rowid, row, columns, message)
        self._set_aside(tc, rowid, row, message)
        return False

    def _rename(
        self, tc: TableCopy, rowid: int, row: dict[str, Any], columns: list[str], message: str
    ) -> bool:
        new = dict(row)
        for c in columns:
            new[c] = f"{row[c]}{RENAME_SUFFIX.format(rowid=rowid)}"
        values = list(new.values())
        try:
            self.dst.execute(
                _insert_sql(tc.obj, list(new)), values if tc.obj.rowid_alias else [rowid, *values]
            )
        except apsw.Error as exc:
            self._set_aside(tc, rowid, row, f"{message}; renaming failed: {exc}")
            return False
        tc.report.renamed += 1
        self.report.renamed.extend(
            {"table": tc.obj.name, "rowid": rowid, "column": c, "old": row[c], "new": new[c]}
            for c in columns
        )
        return True

    def _set_aside(self, tc: TableCopy, rowid: int, row: dict[str, Any], reason: str) -> None:
        tc.report.set_aside += 1
        self.report.set_aside.append(
            {
                "table": tc.obj.name,
                "rowid": rowid,
                "reason": reason,
                "row": {c: json_value(v) for c, v in row.items()},
            }
        )

    def _fts_rowids(self, tc: TableCopy) -> None:
        """Rowids held by the table's FTS copies (Hermes 0.19.0 writes each message's
        text there under the message's id): as the diagnosis read them from the same
        work copy, or read here where it did not (``TableFacts.fts_copies``)."""
        facts = next((t for t in self.inputs.diag.tables if t.name == tc.obj.name), None)
        if facts is not None and facts.fts_copies_read:
            read = facts.fts_copies
            found = None if read is None else read.copy()  # the build changes its own
        else:
            found = fts_rowids(self.src, self.inputs.schema, tc.obj.name)
        tc.has_fts_copies = found is not None and tc.obj.key_columns == ["rowid"]
        tc.fts_rowids = found or KeySet()

    def _add_unreached(self, tc: TableCopy) -> None:
        """Rows decoded from leaves the b-tree no longer reaches, for rowids it lacks.

        A rowid the output holds keeps the b-tree's row (the unreached copy is counted,
        not used). When the freelist cannot be trusted, an unreached row is taken only
        if an intact index or FTS copy of the table lists its key: deleted rows live on
        freed pages, and nothing else remembers them. A rowid the b-tree read but whose
        row was set aside (a child pointer that names another table's leaf reads that
        table's cells under the same rowids) does not block the real row: it is taken
        when those witnesses list it, whatever the freelist says.
        """
        rows = self.inputs.salvaged.get(tc.obj.name, [])
        if not rows:
            return
        known = tc.known_keys() | self.inputs.listed_by_old_indexes.get(tc.obj.name, set())
        vouched = None if self.inputs.trust_unreached else known
        for rowid, values in rows:
            if rowid in tc.rowids:
                witnessed = (tc.has_fts_copies or tc.indexed) and rowid in known
                witnessed = witnessed and not tc.obj.without_rowid
                if not witnessed or self._holds(tc, rowid):
                    tc.page_versions_skipped += 1
                    continue
                tc.rowids.discard(rowid)
                self._insert_salvaged(tc, rowid, values, None)
                continue
            self._insert_salvaged(tc, rowid, values, vouched)

    def _holds(self, tc: TableCopy, rowid: int) -> bool:
        """Does the output hold a row under ``rowid``?"""
        t = quote_ident(tc.obj.name)
        return (
            self.dst.execute(f"SELECT 1 FROM main.{t} WHERE rowid = ?", (rowid,)).fetchone()
            is not None
        )

    def _add_carved(self, tc: TableCopy) -> None:
        """Rows carved from the table's leaves whose header or cell pointers are
        damaged, for rowids the b-tree lacks, each only if an intact index or FTS copy
        of the table lists it (stale cells of deleted rows stay in a page's free
        space)."""
        rows = self.inputs.carved.get(tc.obj.name, [])
        if not rows:
            return
        # Either witness vouches: an intact index drops a row's entry with the row as
        # surely as the FTS copies do (whose own pages may be the damaged ones).
        vouched = tc.known_keys() | tc.index_keys
        vouched |= self.inputs.listed_by_old_indexes.get(tc.obj.name, set())
        for rowid, values in rows:
            if rowid in tc.rowids:
                continue
            self._insert_salvaged(tc, rowid, list(values), vouched)

    def _add_wal_rows(self, tc: TableCopy) -> None:
        """Rows of committed transactions SQLite does not replay: a rowid the output
        lacks is added, a row that differs is replaced by its newer version, and a row
        they deleted is deleted (``_apply_wal_deletes``)."""
        self._apply_wal_deletes(tc)
        rows = self.inputs.wal_rows.rows.get(tc.obj.name, [])
        if not rows:
            return
        obj = tc.obj
        newest: dict[int, list[Any]] = {}
        for rowid, values in rows:
            newest[rowid] = values
        all_cols = _columns(obj)
        t = quote_ident(obj.name)
        for rowid, found in sorted(newest.items()):
            cols = all_cols[: len(found)]
            values = list(found[: len(cols)])
            if obj.rowid_alias and obj.rowid_alias in cols:
                values[cols.index(obj.rowid_alias)] = rowid
            if rowid not in tc.rowids:
                if self._insert_row(tc, rowid, values, cols):
                    tc.rowids.add(rowid)
                    tc.report.source_rows += 1
                    tc.report.recovered_from_wal += 1
                    key_cols = [c for c in obj.key_columns if c != "rowid"]
                    key = rowid if not key_cols else tuple(values[cols.index(c)] for c in key_cols)
                    tc.page_keys.add(key)
                    tc.page_rowids.add(rowid)
                continue
            sel = ", ".join(quote_ident(c) for c in cols)
            have = self.dst.execute(
                f"SELECT {sel} FROM main.{t} WHERE rowid = ?", (rowid,)
            ).fetchone()
            if have is None or list(have) == values:
                continue
            sets = ", ".join(f"{quote_ident(c)} = ?" for c in cols)
            try:
                self.dst.execute(f"UPDATE main.{t} SET {sets} WHERE rowid = ?", [*values, rowid])
            except apsw.Error as exc:
                self.report.notes.append(
                    f"{obj.name} rowid {rowid}: its newer version from the -wal was not"
                    f" applied: {exc}"
                )
                continue
            tc.report.updated_from_wal += 1

    def _apply_wal_deletes(self, tc: TableCopy) -> None:
        """Rows committed transactions SQLite does not replay deleted are not the
        database's: taken out of the output and of the keys read (their index and FTS
        entries were deleted with them). Rows they may have deleted (a page of the table
        is a damaged frame's) are kept, listed as unverified."""
        obj = tc.obj
        gone = sorted(self.inputs.wal_rows.gone.get(obj.name, set()) & tc.rowids)
        key_cols = [c for c in obj.key_columns if c != "rowid"]
        sel = "".join(", " + quote_ident(c) for c in key_cols)
        t = quote_ident(obj.name)
        for rowid in gone:
            row = self.dst.execute(f"SELECT rowid{sel} FROM main.{t} WHERE rowid = ?", (rowid,))
            found = row.fetchone()
            if found is None:
                continue
            self.dst.execute(f"DELETE FROM main.{t} WHERE rowid = ?", (rowid,))
            key = rowid if not key_cols else tuple(found[1:])
            for keys in (tc.source_keys, tc.page_keys, tc.index_keys, tc.hint_keys):
                keys.discard(key)
                keys.discard(rowid)
            for rowids in (tc.rowids, tc.page_rowids, tc.fts_rowids, tc.hint_rowids):
                rowids.discard(rowid)
            tc.report.source_rows -= 1
            tc.report.deleted_by_wal.append(rowid)
        if gone:
            shown = ", ".join(str(r) for r in gone[:20])
            self.report.notes.append(
                f"{obj.name}: {len(gone)} rows deleted by committed -wal transactions SQLite"
                f" does not replay were left out (rowids {shown})"
            )
        unsure = sorted(self.inputs.wal_rows.unsure.get(obj.name, set()) & tc.rowids)
        tc.report.unverified += len(unsure)
        for rowid in unsure:
            self.report.unverified_rows.append(
                {
                    "table": obj.name,
                    "rowid": rowid,
                    "columns": _columns(obj),
                    "why": "a committed -wal transaction SQLite does not replay may have"
                    " deleted it: its page image there is damaged",
                }
            )

    def _add_from_other_copies(self, tc: TableCopy) -> None:
        """Rows the output lacks that another verified copy holds, newest copy first,
        each only where the evidence says it was lost, not deleted (docs/safety.md,
        "Rows from other copies"): when the table has witnesses (readable FTS copies,
        which Hermes' delete triggers empty with the row, or an index whose own b-tree
        is intact, which lists every row), a row comes back only if they list it; with
        none, only if its rowid lies in a stretch of the table that could not be read
        (a stretch that reads without it is where it was deleted). Only from a copy that
        proves it is of this database, and only a row that agrees with every witness
        this file still has of it (``_take_from_copy``, docs/safety.md rule 15)."""
        obj = tc.obj
        if not self.inputs.others or obj.without_rowid:
            return
        witnesses = tc.has_fts_copies or tc.indexed
        known = tc.known_keys()
        ranges = [(lo, hi) for lo, hi in tc.report.unreadable_ranges]
        cols = _columns(obj)
        key_cols = [c for c in obj.key_columns if c != "rowid"]
        for copy in self.inputs.others:
            if not self._of_this_database(copy):
                continue
            rows = copy.rows(obj)
            if rows is None:
                self.report.notes.append(f"{obj.name}: not in {copy.label}, or other columns")
                continue
            lost = []
            for rowid, values in rows:
                if rowid in tc.rowids:
                    continue
                key = rowid if not key_cols else tuple(values[cols.index(c)] for c in key_cols)
                if witnesses:
                    gone = key not in known and rowid not in known
                else:
                    gone = not any(lo <= rowid <= hi for lo, hi in ranges)
                if gone:
                    tc.report.deleted_since_copy += 1
                else:
                    lost.append((rowid, values))
            self._take_from_copy(tc, copy, lost)

    def _of_this_database(self, copy: OtherCopy) -> bool:
        """Does ``copy`` prove it is of this database (``other_copies.foreign``)? Judged
        once per copy; one that does not is named in the notes, and no row of it is
        taken."""
        if copy.path not in self._copy_verdicts:
            app_id = self.inputs.work.source_header.application_id
            self._copy_verdicts[copy.path] = foreign(copy, self.src, app_id, self.inputs.diag)
        why = self._copy_verdicts[copy.path]
        note = f"{copy.label}: not used, it is not a copy of this database ({why})"
        if why is not None and note not in self.report.notes:
            self.report.notes.append(note)
        return why is None

    def _take_from_copy(self, tc: TableCopy, copy: OtherCopy, rows: list[tuple[int, Any]]) -> None:
        """Insert the lost ``rows`` of ``copy``, each only when it agrees with the entries
        this file's intact indexes hold for its rowid and with the text of its FTS copies;
        the others are named in one note and stay lost."""
        if not rows:
            return
        obj = tc.obj
        cols = _columns(obj)
        broken = {
            int(m.group(1)) for ln in self.inputs.diag.error_lines if (m := _TREE_RE.match(ln))
        } | self._rebuilt_index_roots()
        readings = index_readings(self.src, self.inputs.schema, obj.name, broken_roots=broken)
        entries = indexed_values_of(self.src, readings, [r for r, _ in rows])
        drop_misshapen(entries, self.inputs.diag.lost_writes.misshapen)
        fed = [f for f in feeds(self.inputs.schema) if f.table == obj.name]
        changed = changed_fts_copies(self.inputs.diag, obj.name)
        refused: list[tuple[int, str]] = []
        for rowid, values in rows:
            why = index_disagreement(dict(zip(cols, values, strict=True)), entries.get(rowid, {}))
            self.dst.execute("SAVEPOINT other")
            try:
                if why is None:
                    self.dst.execute(
                        _insert_sql(obj, cols), values if obj.rowid_alias else [rowid, *values]
                    )
                    why = fts_disagreement((self.dst, self.src), fed, changed, obj.name, rowid)
            except apsw.Error as exc:
                self.dst.execute("ROLLBACK TO other")
                self.dst.execute("RELEASE other")
                self.report.notes.append(
                    f"{obj.name} rowid {rowid} from {copy.label}: not taken ({exc})"
                )
                continue
            if why is not None:
                self.dst.execute("ROLLBACK TO other")
                self.dst.execute("RELEASE other")
                refused.append((rowid, why))
                continue
            self.dst.execute("RELEASE other")
            tc.rowids.add(rowid)
            tc.report.recovered_from_other_copies += 1
            self.report.from_other_copies.append(
                {"table": obj.name, "rowid": rowid, "from": copy.label, "copy_taken_at": copy.taken}
            )
        if refused:
            shown = "; ".join(f"rowid {r}: {why}" for r, why in refused[:20])
            note = (
                f"{obj.name}: {len(refused)} rows of {copy.label} not taken, they disagree"
                f" with what this file still holds of them ({shown})"
            )
            if note not in self.report.notes:
                self.report.notes.append(note)

    def _insert_salvaged(
        self, tc: TableCopy, rowid: int, values: list[Any], vouched: AbstractSet[Any] | None = None
    ) -> None:
        obj = tc.obj
        cols = _columns(obj)[: len(values)]
        values = values[: len(cols)]
        if obj.rowid_alias and obj.rowid_alias in cols:
            values[cols.index(obj.rowid_alias)] = rowid
        key_cols = [c for c in obj.key_columns if c != "rowid"]
        if key_cols and not set(key_cols) <= set(cols):
            return
        key = rowid if not key_cols else tuple(values[cols.index(c)] for c in key_cols)
        if vouched is not None and key not in vouched and rowid not in vouched:
            tc.report.unvouched_skipped += 1
            return
        tc.rowids.add(rowid)
        tc.report.source_rows += 1
        tc.page_keys.add(key)
        tc.page_rowids.add(rowid)
        if self._insert_row(tc, rowid, values, cols):
            tc.report.recovered_from_pages += 1
