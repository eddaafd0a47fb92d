"""Diagnosis: the damage in a database, by object and logical table, and its class.

The uncapped integrity check and the attribution of its lines live in
``integrity.py``; here are the facts added to it and the verdict. Counts come
from full scans (``NOT INDEXED``, DESIGN.md rule 7) next to what the planner answers,
because an index may be the broken part (story 3).

Damage classes, worst last: ``none``; ``derived`` (only indexes and FTS shadow tables,
which can be rebuilt from base tables without loss); ``base`` (a table holding data is
damaged: rows may be lost); ``unreadable`` (header, schema or page 1).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.errors import (
    EXIT_BASE_DAMAGE,
    EXIT_DERIVED_DAMAGE,
    EXIT_OK,
    EXIT_UNREADABLE,
    DatabaseUnreadable,
)
from statewarden.progress import ProgressFn
from statewarden.recovery.integrity import (
    ErrorGroup,
    fts_from_integrity_lines,
    group_errors,
    run_integrity_check,
)
from statewarden.recovery.scan import MAX_ROWID, MIN_ROWID, ScanResult, scan_table
from statewarden.recovery.schema import Schema, SchemaObject, read_schema
from statewarden.sqlite import classify_error, quote_ident

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

    def findings(self) -> list[str]:
        out = []
        key = "ids" if self.key == ["id"] else ("rowids" if self.key == ["rowid"] else "keys")
        extra = self.scan_rows - self.distinct_keys
        if extra > 0:
            phantoms = sum(n - 1 for n in self.duplicate_rowids.values())
            parts = []
            if phantoms:
                rowids = ", ".join(str(r) for r in sorted(self.duplicate_rowids))
                s = "s" if phantoms != 1 else ""
                rs = "s" if len(self.duplicate_rowids) != 1 else ""
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
        if self.planner_error:
            out.append(f"{self.name}: the planner's count failed: {self.planner_error}")
        for lo, hi in self.unreadable_ranges:
            if (lo, hi) == (MIN_ROWID, MAX_ROWID):
                out.append(f"{self.name}: no row can be read by a full scan")
            else:
                out.append(f"{self.name}: {describe_range(lo, hi)} cannot be read")
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
    orphans: dict[str, int]  # foreign_key_check rows per table
    notes: list[str]
    error_lines: list[str] = field(default_factory=list)
    foreign_key_check_complete: bool = True

    def findings(self) -> list[str]:
        out = [f"{g.label()}: {g.errors} error{'s' if g.errors != 1 else ''}" for g in self.groups]
        for t in self.tables:
            out.extend(t.findings())
        out.extend(
            f"{name}: FTS integrity-check: {res}" for name, res in self.fts.items() if res != "ok"
        )
        out.extend(
            f"{t}: {n} orphan row{'s' if n != 1 else ''} (foreign_key_check)"
            for t, n in self.orphans.items()
        )
        return out + self.notes

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for t in data["tables"]:
            t["duplicate_rowids"] = {str(k): v for k, v in t["duplicate_rowids"].items()}
        data["findings"] = self.findings()
        return data


def exit_code_for(damage: str) -> int:
    """0 healthy, 1 derived damage only, 3 base damage, 4 unreadable."""
    return {
        "none": EXIT_OK,
        "derived": EXIT_DERIVED_DAMAGE,
        "base": EXIT_BASE_DAMAGE,
        "unreadable": EXIT_UNREADABLE,
    }[damage]


def worst(*classes: str) -> str:
    return max(classes, key=DAMAGE_ORDER.index)


def diagnose(
    db: Path, *, progress: ProgressFn | None = None, truncated: str | None = None
) -> Diagnosis:
    """Diagnose ``db``, which must be a private copy (see ``bundle.make_work_copy``).

    The copy is opened read-write only so that FTS5's ``integrity-check`` command (an
    INSERT that changes nothing) can run.
    """
    try:
        conn = apsw.Connection(str(db))
    except apsw.Error as exc:
        raise classify_error(db, exc) from None
    try:
        try:
            schema = read_schema(conn)
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise DatabaseUnreadable(
                f"{db}: the schema (sqlite_schema) cannot be read: {exc}"
            ) from None
        return _diagnose(conn, db, schema, progress, truncated)
    finally:
        conn.close()


def _diagnose(
    conn: apsw.Connection,
    db: Path,
    schema: Schema,
    progress: ProgressFn | None,
    truncated: str | None,
) -> Diagnosis:
    notes = [truncated] if truncated else []
    table_names = [o.name for o in schema.tables() if o.rootpage]
    lines, complete, abort = run_integrity_check(conn, progress, table_names)
    if abort:
        notes.append(f"the integrity check stopped early: {abort}")
    groups = group_errors(lines, schema)
    base = schema.base_tables()
    tables = []
    for i, obj in enumerate(base):
        if progress:
            progress("scan tables", i, len(base))
        tables.append(table_facts(conn, obj))
    if progress:
        progress("scan tables", len(base), len(base))
    if complete:
        fts = fts_from_integrity_lines(lines, schema)
    else:
        fts = fts_integrity(conn, schema, progress)
    orphans, fk_errors = foreign_key_orphans(conn, base)
    notes.extend(f"foreign_key_check failed on {e}" for e in fk_errors)
    damage = classify(groups, tables, fts, complete=complete, truncated=truncated is not None)
    return Diagnosis(
        path=str(db),
        damage=damage,
        integrity_ok=not lines and complete,
        integrity_complete=complete,
        integrity_errors=len(lines),
        groups=groups,
        tables=tables,
        fts=fts,
        orphans=orphans,
        notes=notes,
        error_lines=lines,
        foreign_key_check_complete=not fk_errors,
    )


def table_facts(conn: apsw.Connection, obj: SchemaObject) -> TableFacts:
    """Planner count, full-scan count, distinct keys and phantom duplicates of one table."""
    key = obj.key_columns
    key_cols = [c for c in key if c != "rowid"]
    rowids: Counter[int] = Counter()
    keys: dict[Any, int] = {}
    duplicate_keys: set[Any] = set()

    def on_row(row: tuple[Any, ...]) -> None:
        rowid = int(row[0])
        rowids[rowid] += 1
        k = tuple(row[1:]) if key_cols else rowid
        prev = keys.setdefault(k, rowid)
        if prev != rowid:
            duplicate_keys.add(k)

    result: ScanResult = scan_table(conn, obj.name, key_cols, on_row)
    planner: int | None = None
    planner_error = None
    try:
        row = conn.execute(f"SELECT count(*) FROM {quote_ident(obj.name)}").fetchone()
        planner = int(row[0]) if row else None
    except apsw.Error as exc:
        planner_error = str(exc).split("\n", 1)[0]
    return TableFacts(
        name=obj.name,
        key=key,
        planner_rows=planner,
        scan_rows=result.rows_read,
        distinct_keys=len(keys),
        duplicate_rowids={r: n for r, n in rowids.items() if n > 1},
        duplicate_keys=len(duplicate_keys),
        unreadable_rows=result.unreadable_rows,
        unreadable_ranges=result.unreadable_ranges,
        planner_error=planner_error,
        text_repaired=len(result.text_repaired),
    )


def fts_integrity(
    conn: apsw.Connection, schema: Schema, progress: ProgressFn | None = None
) -> dict[str, str]:
    """FTS5's own ``integrity-check`` per FTS table ("ok" or its error)."""
    out: dict[str, str] = {}
    fts_tables = [o for o in schema.tables() if o.module == "fts5"]
    for i, obj in enumerate(fts_tables):
        if progress:
            progress("FTS check", i, len(fts_tables))
        q = quote_ident(obj.name)
        try:
            conn.execute(f"INSERT INTO {q}({q}) VALUES('integrity-check')")
            out[obj.name] = "ok"
        except apsw.Error as exc:
            if isinstance(exc, apsw.InterruptError):
                raise
            out[obj.name] = str(exc).split("\n", 1)[0]
    return out


def foreign_key_orphans(
    conn: apsw.Connection, tables: list[SchemaObject]
) -> tuple[dict[str, int], list[str]]:
    """Rows per table whose parent row is missing (``foreign_key_check``), table by table
    so that one unreadable table does not hide the others."""
    counts: dict[str, int] = {}
    errors = []
    for obj in tables:
        try:
            n = sum(1 for _ in conn.execute(f"PRAGMA foreign_key_check({quote_ident(obj.name)})"))
        except apsw.Error as exc:
            errors.append(f"{obj.name}: {str(exc).split(chr(10), 1)[0]}")
            continue
        if n:
            counts[obj.name] = n
    return counts, errors


def classify(
    groups: list[ErrorGroup],
    tables: list[TableFacts],
    fts: dict[str, str],
    *,
    complete: bool,
    truncated: bool = False,
) -> str:
    damage = "none"
    for g in groups:
        if g.kind == "schema":
            return "unreadable"
        damage = worst(damage, "derived" if g.derived else "base")
    for t in tables:
        if (
            t.scan_rows != t.distinct_keys
            or t.unreadable_ranges
            or t.duplicate_keys
            or t.text_repaired
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
