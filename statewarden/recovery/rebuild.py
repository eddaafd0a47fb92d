"""The rebuild: a fresh database from the source's own schema, filled row by row where
the source is damaged, with the dedupe rule applied to each conflicting row.

Objects are created from the copy's ``sqlite_schema``: tables and FTS tables, then
indexes (before the data, so that a UNIQUE conflict fails one row, never a batch:
HERMES.md story 3), then the triggers that feed FTS tables (when an FTS table is to be
repopulated from its base table), then the data, then views (an external-content FTS
table may read one), the FTS contents, and the other triggers.

SQLite leaves a write transaction unusable once a statement in it has read a corrupt
page, so the source is read on its own read-only connection; only tables the diagnosis
found clean are copied with one ``INSERT ... SELECT`` through an ATTACH, and if one of
those meets damage after all the whole build starts over row by row.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.progress import ProgressFn
from statewarden.recovery.bundle import WorkCopy
from statewarden.recovery.diagnose import Diagnosis
from statewarden.recovery.report import Report, TableReport, json_value
from statewarden.recovery.scan import scan_table
from statewarden.recovery.schema import Schema, SchemaObject
from statewarden.sidecars import BUNDLE_SUFFIXES, sidecar
from statewarden.sqlite import quote_ident, uri_for

PROGRESS_EVERY_ROWS = 1000
RENAME_SUFFIX = " (duplicate, rowid {rowid})"
_UNIQUE_RE = re.compile(r"UNIQUE constraint failed: (.+)$")
_ENCODINGS = {"utf-8": "UTF-8", "utf-16le": "UTF-16le", "utf-16be": "UTF-16be"}
SalvagedRows = dict[str, list[tuple[int, list[Any]]]]


@dataclass
class TableCopy:
    obj: SchemaObject
    report: TableReport
    source_keys: set[Any] = field(default_factory=set)
    index_keys: set[Any] = field(default_factory=set)
    page_keys: set[Any] = field(default_factory=set)


def key_fn(obj: SchemaObject) -> Callable[[tuple[Any, ...]], Any]:
    """Key of a scanned row ``(rowid, *key columns)``."""
    if obj.key_columns == ["rowid"]:
        return lambda row: int(row[0])
    n = len(obj.key_columns)
    return lambda row: tuple(row[1 : 1 + n])


def _columns(obj: SchemaObject) -> list[str]:
    return [c.name for c in obj.stored_columns]


def _insert_sql(obj: SchemaObject, cols: list[str]) -> str:
    rid = [] if obj.rowid_alias else ["rowid"]
    names = ", ".join(quote_ident(c) for c in [*rid, *cols])
    marks = ", ".join("?" for _ in range(len(rid) + len(cols)))
    return f"INSERT INTO main.{quote_ident(obj.name)}({names}) VALUES ({marks})"


def _in_ranges(
    rows: list[tuple[int, list[Any]]], ranges: list[list[int]]
) -> list[tuple[int, list[Any]]]:
    return [(rid, vals) for rid, vals in rows if any(lo <= rid <= hi for lo, hi in ranges)]


def _fts_modes(schema: Schema, damaged: set[str], diag: Diagnosis) -> dict[str, str]:
    """How each FTS table gets its contents: ``copy`` its intact shadow tables,
    ``triggers`` (repopulated as the feeding table is copied), ``rebuild`` (external
    content), or ``none`` (contentless)."""
    bad_fts = {g.object for g in diag.groups if g.kind == "fts"}
    for g in diag.groups:
        obj = schema.by_name(g.object)
        if obj is not None and obj.shadow_of:
            bad_fts.add(obj.shadow_of)
    bad_fts |= {name for name, res in diag.fts.items() if res != "ok"}
    modes = {}
    for obj in schema.tables():
        if obj.module != "fts5":
            continue
        owner = schema.fts_owner.get(obj.name)
        if obj.fts_content == "":
            modes[obj.name] = "none"
        elif obj.fts_content:
            modes[obj.name] = "rebuild"
        elif owner is not None and (obj.name in bad_fts or owner in damaged):
            modes[obj.name] = "triggers"
        else:
            modes[obj.name] = "copy"
    return modes


def _feeding_triggers(schema: Schema, fts_names: set[str]) -> set[str]:
    out = set()
    for obj in schema.objects:
        if obj.type == "trigger" and obj.sql:
            for name in fts_names:
                if re.search(
                    r"\bINSERT\s+INTO\s+[\"`\[]?" + re.escape(name) + r"\b", obj.sql, re.I
                ):
                    out.add(obj.name)
    return out


class _FtsCopyFailed(Exception):
    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


class Rebuild:
    """One build of the output file from a work copy."""

    def __init__(
        self,
        work: WorkCopy,
        built: Path,
        schema: Schema,
        diag: Diagnosis,
        *,
        damaged: set[str],
        salvaged: SalvagedRows,
        report: Report,
        progress: ProgressFn | None,
    ) -> None:
        self.work = work
        self.built = built
        self.schema = schema
        self.diag = diag
        self.damaged = damaged
        self.salvaged = salvaged
        self.report = report
        self.progress = progress
        self.copies: dict[str, TableCopy] = {}
        self.force_triggers: set[str] = set()

    def run(self) -> dict[str, TableCopy]:
        bulk = True
        while True:
            try:
                return self._run(bulk=bulk)
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
        for suffix in BUNDLE_SUFFIXES:
            sidecar(self.built, suffix).unlink(missing_ok=True)

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
        hdr = self.work.source_header
        ro = uri_for(self.work.db, mode="ro")
        self.src = apsw.Connection(ro, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        self.dst = apsw.Connection(
            str(self.built),
            flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_URI,
        )
        self.copies = {}
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
            fts_mode = _fts_modes(self.schema, self.damaged, self.diag)
            for name in self.force_triggers:
                fts_mode[name] = "triggers"
            early = _feeding_triggers(
                self.schema, {n for n, m in fts_mode.items() if m == "triggers"}
            )
            dst.execute("BEGIN")
            self._create(lambda o: o.type == "table" and o.shadow_of is None and not o.is_internal)
            self._create(lambda o: o.type == "index" and o.sql is not None)
            self._create(lambda o: o.name in early)
            tables = self.schema.base_tables()
            for i, obj in enumerate(tables):
                if self.progress:
                    self.progress("copy tables", i, len(tables))
                tc = TableCopy(obj, TableReport())
                self.copies[obj.name] = tc
                self._index_keys(tc)
                if not bulk or obj.name in self.damaged or not self._bulk_copy(tc):
                    self._row_copy(tc)
                rows = _in_ranges(self.salvaged.get(obj.name, []), tc.report.unreadable_ranges)
                for rowid, values in rows:
                    self._insert_salvaged(tc, rowid, values)
            self._copy_sequences()
            # Views first: an external-content FTS table may be built over one.
            self._create(lambda o: o.type == "view")
            for name, mode in fts_mode.items():
                self._fill_fts(name, mode)
            self._create(lambda o: o.type == "trigger" and o.name not in early)
            dst.execute("COMMIT")
            dst.execute(f"PRAGMA user_version={hdr.user_version}")
            dst.execute(f"PRAGMA application_id={hdr.application_id}")
            if bulk:
                dst.execute("DETACH src")
            dst.execute(f"PRAGMA journal_mode={'WAL' if hdr.journal_mode == 'wal' else 'DELETE'}")
            return self.copies
        finally:
            dst.close()
            self.src.close()

    def _create(self, which: Callable[[SchemaObject], bool]) -> None:
        for obj in self.schema.objects:
            if obj.sql and which(obj) and obj.name != "sqlite_sequence":
                try:
                    self.dst.execute(obj.sql)
                except apsw.Error as exc:
                    self.report.notes.append(f"could not create {obj.type} {obj.name}: {exc}")

    def _fill_fts(self, name: str, mode: str) -> None:
        q = quote_ident(name)
        if mode == "rebuild":
            try:
                self.dst.execute(f"INSERT INTO main.{q}({q}) VALUES('rebuild')")
            except apsw.Error as exc:
                self.report.notes.append(f"{name}: FTS 'rebuild' failed: {exc}")
        elif mode == "copy":
            for obj in self.schema.tables():
                if obj.shadow_of != name:
                    continue
                s = quote_ident(obj.name)
                self.dst.execute(f"DELETE FROM main.{s}")
                try:
                    rows = self.src.execute(f"SELECT * FROM {s} NOT INDEXED").fetchall()
                except (apsw.Error, UnicodeDecodeError) as exc:
                    if name in self.schema.fts_owner and name not in self.force_triggers:
                        raise _FtsCopyFailed(name, str(exc)) from None
                    self.report.notes.append(f"{name}: copying {obj.name} failed: {exc}")
                    continue
                if rows:
                    marks = ", ".join("?" for _ in rows[0])
                    self.dst.executemany(f"INSERT INTO main.{s} VALUES ({marks})", rows)
        elif mode == "none":
            self.report.notes.append(
                f"{name}: contentless FTS table left empty (nothing to rebuild it from)"
            )

    def _copy_sequences(self) -> None:
        """Keep AUTOINCREMENT counters at least where the source had them (no id reuse)."""
        try:
            rows = self.src.execute("SELECT name, seq FROM sqlite_sequence NOT INDEXED").fetchall()
        except apsw.Error as exc:
            self.report.notes.append(f"sqlite_sequence unreadable, counters follow the rows: {exc}")
            return
        for name, seq in rows:
            self.dst.execute(
                "UPDATE main.sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (seq, name)
            )
            if self.dst.changes() == 0:
                self.dst.execute(
                    "INSERT INTO main.sqlite_sequence(name, seq) VALUES (?, ?)", (name, seq)
                )

    def _index_keys(self, tc: TableCopy) -> None:
        """Keys listed by the source's intact indexes: rows known to exist even when the
        table's own pages can no longer be read."""
        obj = tc.obj
        key_cols = [c for c in obj.key_columns if c != "rowid"]
        t = quote_ident(obj.name)
        for idx in self.schema.objects:
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
            try:
                rows = self.src.execute(
                    f"SELECT {select} FROM {t} INDEXED BY {quote_ident(idx.name)} ORDER BY {order}"
                ).fetchall()
            except (apsw.Error, UnicodeDecodeError):
                continue  # a damaged index says nothing reliable
            tc.index_keys.update(tuple(r) if key_cols else int(r[0]) for r in rows)  # type: ignore[arg-type]

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
        try:
            keys = [
                keyf(tuple(r))
                for r in self.src.execute(f"SELECT {rowids}{sel} FROM {t} NOT INDEXED")
            ]
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
        tc.report.source_rows += len(keys)
        tc.source_keys.update(keys)
        return True

    def _row_copy(self, tc: TableCopy) -> None:
        obj = tc.obj
        cols = _columns(obj)
        key_idx = [cols.index(c) + 1 for c in obj.key_columns if c != "rowid"]
        seen = [0]

        def on_row(row: tuple[Any, ...]) -> None:
            tc.report.source_rows += 1
            key = int(row[0]) if not key_idx else tuple(row[i] for i in key_idx)
            tc.source_keys.add(key)
            self._insert_row(tc, int(row[0]), list(row[1:]), cols)
            seen[0] += 1
            if self.progress and seen[0] % PROGRESS_EVERY_ROWS == 0:
                self.progress(f"copy {obj.name}", seen[0], 0)

        hints = [k for k in tc.index_keys if isinstance(k, int)] if not key_idx else []
        result = scan_table(self.src, obj.name, cols, on_row, hints=hints)
        tc.report.unreadable_rows = result.unreadable_rows
        tc.report.unreadable_ranges = result.unreadable_ranges
        if result.text_repaired:
            shown = ", ".join(str(r) for r in result.text_repaired[:20])
            self.report.notes.append(
                f"{obj.name}: {len(result.text_repaired)} rows held text that is not valid"
                f" UTF-8; kept, with U+FFFD for the bad bytes (rowids {shown})"
            )

    def _insert_row(self, tc: TableCopy, rowid: int, values: list[Any], cols: list[str]) -> bool:
        """Insert one row; on a conflict apply the dedupe rule. True if the row is in."""
        obj = tc.obj
        try:
            self.dst.execute(
                _insert_sql(obj, cols), values if obj.rowid_alias else [rowid, *values]
            )
            return True
        except apsw.ConstraintError as exc:
            return self._conflict(tc, rowid, values, cols, str(exc))
        except apsw.Error as exc:
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

    def _insert_salvaged(self, tc: TableCopy, rowid: int, values: list[Any]) -> None:
        obj = tc.obj
        cols = _columns(obj)[: len(values)]
        values = values[: len(cols)]
        if obj.rowid_alias and obj.rowid_alias in cols:
            values[cols.index(obj.rowid_alias)] = rowid
        tc.report.source_rows += 1
        key_cols = [c for c in obj.key_columns if c != "rowid"]
        if key_cols and not set(key_cols) <= set(cols):
            return
        key = rowid if not key_cols else tuple(values[cols.index(c)] for c in key_cols)
        tc.page_keys.add(key)
        if self._insert_row(tc, rowid, values, cols):
            tc.report.recovered_from_pages += 1
