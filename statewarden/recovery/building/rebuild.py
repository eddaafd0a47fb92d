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
import re
from collections.abc import Callable
from copy import deepcopy
from pathlib import Path

import apsw

from statewarden.errors import FtsCopyFailed, FtsModesChanged, FtsVerdictsMissing
from statewarden.progress import ProgressFn
from statewarden.recovery.building.build import Build, RebuildInputs, RowShape, TableCopy
from statewarden.recovery.building.fts_fill import FtsFill
from statewarden.recovery.building.keyed_fill import count_only, keyed_copy
from statewarden.recovery.building.row_repair import RowRepair
from statewarden.recovery.building.salvage_inserts import SalvageInserts
from statewarden.recovery.building.table_fill import TableFill
from statewarden.recovery.decoding.schema import Schema, SchemaObject, inserts_into
from statewarden.recovery.evidence.copies import Feed
from statewarden.recovery.report import Report, TableReport
from statewarden.sidecars import BUNDLE_SUFFIXES, sidecar
from statewarden.sqlite import quote_ident, raise_if_machine, uri_for

_ENCODINGS = {"utf-8": "UTF-8", "utf-16le": "UTF-16le", "utf-16be": "UTF-16be"}


def _made_as_shadow(conn: apsw.Connection, table: str) -> bool:
    """Is ``table`` in ``conn``'s main database a shadow table its virtual table made?"""
    row = conn.execute(
        "SELECT type FROM pragma_table_list WHERE schema = 'main' AND name = ?", (table,)
    ).fetchone()
    return row is not None and row[0] == "shadow"


def _feeding_triggers(schema: Schema, fts_names: set[str]) -> set[str]:
    """The triggers that insert into any of the FTS tables ``fts_names``."""
    out = set()
    for obj in schema.objects:
        if obj.type == "trigger" and obj.sql:
            for name in fts_names:
                if inserts_into(obj.sql, name):
                    out.add(obj.name)
    return out


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


class Rebuild:
    """One build of the output file from a work copy."""

    def __init__(
        self, inputs: RebuildInputs, *, report: Report, progress: ProgressFn | None
    ) -> None:
        self.inputs = inputs
        self.report = report
        self.progress = progress
        self.copies: dict[str, TableCopy] = {}
        # What the last build's FTS part found (``FtsFill``), read by the verification.
        self.fts_unchanged: set[str] = set()
        self.fts_reconciled: dict[str, Feed] = {}
        self.fts_reindexed: dict[str, Feed] = {}
        # Kept across the builds of one run (a build that starts over keeps them):
        self.force_triggers: set[str] = set()  # FTS tables filled by triggers
        self.indexes_first = False  # every index built before the rows (``_can_wait``)
        self._shapes: dict[str, RowShape] = {}  # table -> how its rows are written
        self._copy_verdicts: dict[Path, str | None] = {}  # other copies judged

    def run(self) -> dict[str, TableCopy] | None:
        """Build the output; None (nothing built) when FTS5's own checks, joined before
        the FTS tables are filled, gave no verdicts the diagnosis can take alone: the
        file must then be diagnosed again (``FtsPending.join``)."""
        bulk = True
        before = deepcopy(vars(self.report))
        while True:
            try:
                return self._run(bulk=bulk)
            except FtsVerdictsMissing:
                self._reset()
                return None
            except FtsModesChanged:
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
            except FtsCopyFailed as exc:
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
        """One build: the output's objects, the rows table by table (read, salvaged,
        repaired), the indexes, the FTS tables, the triggers."""
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
        self._not_created: set[str] = set()  # objects the output could not create
        # shadow table -> its virtual table, where the virtual table made it
        self._made_shadows: dict[str, str] = {}
        # virtual table -> its rows written through it (None: its read failed)
        self._through: dict[str, int | None] = {}
        dst = self.dst
        try:
            dst.execute(f"PRAGMA page_size={hdr.page_size}")
            dst.execute(f"PRAGMA encoding='{_ENCODINGS.get(hdr.text_encoding, 'UTF-8')}'")
            # MEMORY, not OFF: with no journal a failed statement cannot be undone alone.
            dst.execute("PRAGMA journal_mode=MEMORY")
            dst.execute("PRAGMA synchronous=OFF")
            dst.execute("PRAGMA foreign_keys=OFF")  # orphans are kept, not refused
            if bulk:
                dst.execute("ATTACH ? AS src", (ro,))
            build = Build(self.inputs, self.report, self.progress, self.src, dst, bulk, self.copies)
            fill = TableFill(build, self._shapes)
            repair = RowRepair(build)
            fts = FtsFill(build, repair, self.force_triggers)
            fts_mode = fts.modes()
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
            self._fill_tables(fill, SalvageInserts(build, fill, self._copy_verdicts), bulk=bulk)
            repair.restore_from_copies()
            for tc in self.copies.values():
                repair.restore_from_indexes(tc)
            for tc in self.copies.values():
                SalvageInserts(build, fill, self._copy_verdicts).rebuild_lost_from_copies(tc)
            self._build_indexes(waits)
            # Views first: an external-content FTS table may be built over one.
            self._create(lambda o: o.type == "view")
            self._fill_fts_tables(fts, fts_mode)
            self._create(lambda o: o.type == "trigger" and o.name not in early)
            dst.execute("COMMIT")
            fts.confirm_unchanged()
            self.fts_unchanged = fts.fts_unchanged
            self.fts_reconciled = fts.fts_reconciled
            self.fts_reindexed = fts.fts_reindexed
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

    def _fill_tables(self, fill: TableFill, salvage: SalvageInserts, *, bulk: bool) -> None:
        """Each base table's rows: its own (copied whole when clean and ``bulk``, else
        row by row), then what salvage adds; then the AUTOINCREMENT sequences."""
        tables = self.inputs.schema.base_tables()
        for i, obj in enumerate(tables):
            if self.progress:
                self.progress("copy tables", i, len(tables))
            tc = TableCopy(obj, TableReport())
            self.copies[obj.name] = tc
            fill.read_index_keys(tc)
            fill.read_fts_rowids(tc)
            if obj.name in self._not_created:
                count_only(fill, tc)  # nowhere to write them: every row lost, counted
                continue
            if obj.name in self._made_shadows and not self._take_shadow(fill, tc):
                continue
            if not bulk or obj.name in self.inputs.damaged or not fill.bulk_copy(tc):
                if obj.rowid_name is None:
                    keyed_copy(fill, tc)
                else:
                    fill.row_copy(tc)
            if obj.rowid_name is None and not obj.without_rowid:
                continue  # rows decoded from pages are placed by a rowid no SQL reaches
            salvage.add_unreached(tc)
            salvage.add_carved(tc)
            salvage.add_wal_rows(tc)
            if obj.name in self.inputs.damaged:
                salvage.add_from_other_copies(tc)
        self._copy_sequences()
        copy_statistics(self.src, self.dst, self.inputs.schema, self.report.notes)

    def _owner_of(self, shadow: str) -> str:
        """The virtual table a shadow table is named after (``<table>_<suffix>``)."""
        owners = [o.name for o in self.inputs.schema.tables() if o.is_virtual]
        return max((o for o in owners if shadow.startswith(f"{o}_")), key=len, default="")

    def _take_shadow(self, fill: TableFill, tc: TableCopy) -> bool:
        """A shadow table its virtual table made in the output: emptied to take the
        source's rows (True), unless a shadow table of the same virtual table is
        damaged: rows read from them would not agree with each other. The virtual table
        then takes its rows as it reads them in the source, through itself
        (``_rows_through``), its shadow tables made by it (False); where that read
        fails, it is left as its creation made it (empty), its shadow tables' rows
        counted lost, and it is named in ``tables_lost`` (False)."""
        owner = self._made_shadows[tc.obj.name]
        family = {s for s, o in self._made_shadows.items() if o == owner}
        if not owner or not family & self.inputs.damaged:
            self.dst.execute(f"DELETE FROM main.{quote_ident(tc.obj.name)}")
            return True
        if owner not in self._through and owner not in self.report.tables_lost:
            self._through[owner] = self._rows_through(owner)
        if self._through.get(owner) is not None:
            del self.copies[tc.obj.name]  # its virtual table wrote it: no rows of its own
            return False
        count_only(fill, tc)
        if owner not in self.report.tables_lost:
            self.report.tables_lost.append(owner)
            self.report.notes.append(
                f"{owner}: its shadow tables ({', '.join(sorted(family))}) are damaged and"
                " it does not read through itself either: left empty, as creating it makes it"
            )
        return False

    def _rows_through(self, table: str) -> int | None:
        """The rows of the virtual table ``table`` as it reads them in the source
        (rowid and columns), written through it in the output; how many, or None (and
        nothing written) when the read fails."""
        obj = self.inputs.schema.by_name(table)
        cols = [quote_ident(c.name) for c in obj.columns if not c.hidden] if obj else []
        if not cols:
            return None
        names, q = ", ".join(["rowid", *cols]), quote_ident(table)
        marks = ", ".join("?" for _ in range(len(cols) + 1))
        self.dst.execute("SAVEPOINT through")
        try:
            rows = self.src.execute(f"SELECT {names} FROM {q}").fetchall()
            self.dst.executemany(f"INSERT INTO main.{q}({names}) VALUES ({marks})", rows)
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_machine(exc)
            self.dst.execute("ROLLBACK TO through")
            self.dst.execute("RELEASE through")
            return None
        self.dst.execute("RELEASE through")
        self.report.notes.append(
            f"{table}: its shadow tables are damaged; its {len(rows)} rows, read through it"
            " in the source, were written through it again (it made its shadow tables)"
        )
        return len(rows)

    def _fill_fts_tables(self, fts: FtsFill, fts_mode: dict[str, str]) -> None:
        with self.report.timed("fts"):
            ahead = fts.copy_ahead(fts_mode)
        fts_mode = fts.settle_modes(fts_mode, ahead)
        with self.report.timed("fts"):
            for i, (name, mode) in enumerate(fts_mode.items()):
                if self.progress:
                    self.progress("fill FTS tables", i, len(fts_mode))
                fts.fill(name, mode, copied=name in ahead)
            if self.progress:
                self.progress("fill FTS tables", len(fts_mode), len(fts_mode))

    def _create(self, which: Callable[[SchemaObject], bool]) -> None:
        for obj in self.inputs.schema.objects:
            if obj.sql and which(obj) and obj.name != "sqlite_sequence":
                try:
                    self.dst.execute(obj.sql)
                except apsw.Error as exc:
                    raise_if_machine(exc)
                    if obj.type == "table" and _made_as_shadow(self.dst, obj.name):
                        # Its virtual table (an R-Tree, FTS4) made it, with rows of its
                        # own: it takes the source's rows instead (``_fill_tables``).
                        self._made_shadows[obj.name] = self._owner_of(obj.name)
                        continue
                    self.report.notes.append(f"could not create {obj.type} {obj.name}: {exc}")
                    self._not_created.add(obj.name)

    def _waiting_indexes(self) -> list[SchemaObject]:
        """The indexes built once the rows are in (``_can_wait``), in schema order."""
        return [
            o
            for o in self.inputs.schema.objects
            if o.type == "index" and _can_wait(o) and o.tbl_name not in self._not_created
        ]

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

    def _copy_sequences(self) -> None:
        """Keep AUTOINCREMENT counters at least where the source had them (no id reuse)."""
        if self.inputs.schema.by_name("sqlite_sequence") is None:
            return  # no table of the source has AUTOINCREMENT
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


STATISTICS = ("sqlite_stat1", "sqlite_stat4")


def copy_statistics(
    src: apsw.Connection, dst: apsw.Connection, schema: Schema, notes: list[str]
) -> None:
    """The query planner's statistics (``sqlite_stat1``, ``sqlite_stat4``: what
    ``ANALYZE`` and ``PRAGMA optimize`` wrote) copied as the source holds them: rows that
    read are never left out unnamed. SQLite makes the tables itself (``ANALYZE`` of the
    schema table, which measures nothing); one it cannot make, or whose rows do not
    read, is named in the notes (``ANALYZE`` makes them again)."""
    present = [name for name in STATISTICS if schema.by_name(name) is not None]
    if not present:
        return
    with contextlib.suppress(apsw.Error):
        dst.execute("ANALYZE main.sqlite_schema")
    for name in present:
        try:
            rows = src.execute(f"SELECT * FROM {name}").fetchall()
            dst.execute(f"DELETE FROM main.{name}")
            if rows:
                marks = ", ".join("?" * len(rows[0]))
                dst.executemany(f"INSERT INTO main.{name} VALUES ({marks})", rows)
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_machine(exc)
            notes.append(
                f"{name} (the query planner's statistics) not copied: {str(exc).splitlines()[0]};"
                " ANALYZE makes them again"
            )
