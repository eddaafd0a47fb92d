"""Diagnosis: every error the integrity check finds, by b-tree, object and logical table.

``PRAGMA quick_check`` and ``integrity_check`` stop after 100 errors by default; in
HERMES.md story 2 the first 100 were all in one FTS tree and hid damage in ``sessions``.
Here the check is uncapped and every line is attributed: the root page of its b-tree ->
the object (table, index, FTS shadow table) -> the logical table it serves. Counts come
from full scans (``NOT INDEXED``, DESIGN.md rule 7) next to what the planner answers,
because an index may be the broken part (story 3).

Damage classes, worst last: ``none``; ``derived`` (only indexes and FTS shadow tables,
which can be rebuilt from base tables without loss); ``base`` (a table holding data is
damaged: rows may be lost); ``unreadable`` (header, schema or page 1).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.bundle import make_work_copy
from statewarden.errors import (
    EXIT_BASE_DAMAGE,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREADABLE,
    DatabaseUnreadable,
)
from statewarden.scan import MAX_ROWID, MIN_ROWID, ScanResult, scan_table
from statewarden.schema import SCHEMA_ROOT_PAGE, Schema, SchemaObject, read_schema
from statewarden.sqlite import classify_error, quote_ident

DAMAGE_ORDER = ("none", "derived", "base", "unreadable")
# The check's error cap is set above anything a file can produce; --max-errors only
# shortens what is printed.
UNCAPPED_ERRORS = 2**31 - 1
PROGRESS_EVERY_VM_STEPS = 100_000
SAMPLE_LINES_PER_GROUP = 5

ProgressFn = Callable[[str, int, int], None]

_TREE_RE = re.compile(r"^Tree (\d+) ")
_NEVER_USED_RE = re.compile(r"^Page (\d+)(?: is)?:? never used")
_INDEX_RE = re.compile(
    r"^(?:wrong # of entries in index|row \d+ missing from index|"
    r"non-unique entry in UNIQUE index) (\S+)"
)
_TABLE_VALUE_RE = re.compile(r"^(?:NULL|TEXT|INTEGER|REAL|BLOB|NUMERIC) value in ([^.\s]+)\.")
_CHECK_RE = re.compile(r"^CHECK constraint failed in (\S+)")
_FTS_RE = re.compile(r"\bFTS5 table (?:main\.)?(\S+)")
_FREELIST_RE = re.compile(r"^(?:Freelist|Main freelist)")


@dataclass
class ErrorGroup:
    """The integrity errors of one b-tree (or of the pages no b-tree reaches)."""

    object: str
    kind: str  # table | index | fts-shadow | schema | unattached | freelist | unknown
    logical_table: str | None
    root_page: int | None
    derived: bool
    errors: int = 0
    sample: list[str] = field(default_factory=list)

    def label(self) -> str:
        if self.kind in ("fts-shadow", "fts"):
            return f"{self.object} (FTS of {self.logical_table})"
        if self.kind == "index":
            return f"{self.object} (index on {self.logical_table})"
        return self.object


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
        "derived": EXIT_FAILED,
        "base": EXIT_BASE_DAMAGE,
        "unreadable": EXIT_UNREADABLE,
    }[damage]


def check_database(
    source: Path, work_parent: Path, *, progress: ProgressFn | None = None
) -> Diagnosis:
    """Copy ``source``'s bundle into a private work dir under ``work_parent``, diagnose the
    copy, remove it. The source is only read (see ``bundle.make_work_copy``)."""
    work = make_work_copy(source, work_parent, progress=progress)
    try:
        result = diagnose(work.db, progress=progress, truncated=work.truncated_note)
    finally:
        work.cleanup()
    result.path = str(source)
    return result


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
        except apsw.Error as exc:
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


def run_integrity_check(
    conn: apsw.Connection, progress: ProgressFn | None = None, tables: list[str] | None = None
) -> tuple[list[str], bool, str | None]:
    """All error lines of an uncapped ``integrity_check``; (lines, finished, abort note).

    SQLite reports the b-tree errors first; checking rows against indexes afterwards may
    hit a damaged page and end the pragma with an error, so the cross-checks of the
    tables after that one would never run. When that happens the check is run again
    table by table (``PRAGMA integrity_check(T)``) so that one damaged table does not
    hide the others; lines are kept once each, in order.
    """
    steps = [0]

    def tick() -> bool:
        steps[0] += 1
        if progress:
            progress("integrity check", steps[0], 0)
        return False

    conn.set_progress_handler(tick, PROGRESS_EVERY_VM_STEPS)
    try:
        rows, abort = _pragma_rows(conn, f"PRAGMA integrity_check({UNCAPPED_ERRORS})")
        if rows == ["ok"]:
            return [], True, None
        lines = dict.fromkeys(_lines(rows))
        stopped_on: list[str] = []
        if abort is not None:
            for name in tables or []:
                # One table per pragma takes no error cap (SQLite's default of 100
                # applies); the b-tree errors are already all in the first run's lines.
                more, t_abort = _pragma_rows(conn, f"PRAGMA integrity_check({quote_ident(name)})")
                if more != ["ok"]:
                    lines.update(dict.fromkeys(_lines(more)))
                if t_abort is not None:
                    stopped_on.append(name)
    finally:
        conn.set_progress_handler(None)
    note = None
    if abort is not None:
        where = f" on {', '.join(stopped_on)}" if stopped_on else ""
        note = f"{abort}{where}"
    return list(lines), abort is None, note


def _pragma_rows(conn: apsw.Connection, sql: str) -> tuple[list[str], str | None]:
    rows: list[str] = []
    try:
        for (row,) in conn.execute(sql):
            rows.append(str(row))
    except apsw.Error as exc:
        if isinstance(exc, apsw.InterruptError):
            raise
        return rows, str(exc).split("\n", 1)[0]
    return rows, None


def _lines(rows: list[str]) -> list[str]:
    return [
        ln for row in rows for ln in row.split("\n") if ln and not ln.startswith("*** in database")
    ]


def _group_for(obj: SchemaObject, schema: Schema) -> ErrorGroup:
    if obj.rootpage == SCHEMA_ROOT_PAGE:
        kind = "schema"
    elif obj.shadow_of is not None:
        kind = "fts-shadow"
    elif obj.module == "fts5":
        kind = "fts"
    else:
        kind = obj.type
    return ErrorGroup(
        object=obj.name,
        kind=kind,
        logical_table=schema.logical_table(obj),
        root_page=obj.rootpage or None,
        derived=schema.is_derived(obj),
    )


def group_errors(lines: list[str], schema: Schema) -> list[ErrorGroup]:
    """Attribute each error line to a b-tree; a line with no tree of its own (``Multiple
    uses for byte ...``) belongs to the tree named by the line before it."""
    roots = schema.by_root()
    groups: dict[str, ErrorGroup] = {}
    current: ErrorGroup | None = None

    def group(key: str, make: Callable[[], ErrorGroup]) -> ErrorGroup:
        if key not in groups:
            groups[key] = make()
        return groups[key]

    for line in lines:
        g: ErrorGroup | None = None
        if m := _TREE_RE.match(line):
            root = int(m.group(1))
            obj = roots.get(root)
            if root == SCHEMA_ROOT_PAGE:
                g = group(
                    "sqlite_schema", lambda: ErrorGroup("sqlite_schema", "schema", None, 1, False)
                )
            elif obj is not None:
                g = group(obj.name, lambda o=obj: _group_for(o, schema))  # type: ignore[misc]
            current = g
        elif _NEVER_USED_RE.match(line):
            g = group(
                "(unattached pages)",
                lambda: ErrorGroup("(unattached pages)", "unattached", None, None, True),
            )
            current = None
        elif (
            m := _INDEX_RE.match(line)
            or _TABLE_VALUE_RE.match(line)
            or _CHECK_RE.match(line)
            or _FTS_RE.search(line)
        ) and (obj := schema.by_name(m.group(1))):
            g = group(obj.name, lambda o=obj: _group_for(o, schema))  # type: ignore[misc]
            current = None
        elif _FREELIST_RE.match(line):
            g = group("(freelist)", lambda: ErrorGroup("(freelist)", "freelist", None, None, True))
            current = None
        elif current is not None:
            g = current
        if g is None:
            g = group("(other)", lambda: ErrorGroup("(other)", "unknown", None, None, False))
        g.errors += 1
        if len(g.sample) < SAMPLE_LINES_PER_GROUP:
            g.sample.append(line)
    return sorted(groups.values(), key=lambda x: (-x.errors, x.object))


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
    )


def fts_from_integrity_lines(lines: list[str], schema: Schema) -> dict[str, str]:
    """FTS verdicts from a finished ``integrity_check``.

    Since SQLite 3.44 ``PRAGMA integrity_check`` runs every virtual table's xIntegrity,
    which for FTS5 is its ``integrity-check`` command; running that again would double
    the most expensive part of the check (1.9 s of 4.5 s on the 266 MB fixture).
    """
    out: dict[str, str] = {}
    for obj in schema.tables():
        if obj.module != "fts5":
            continue
        own = [ln for ln in lines if (m := _FTS_RE.search(ln)) and m.group(1) == obj.name]
        out[obj.name] = "ok" if not own else "; ".join(own[:3])
    return out


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
        if t.scan_rows != t.distinct_keys or t.unreadable_ranges or t.duplicate_keys:
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
