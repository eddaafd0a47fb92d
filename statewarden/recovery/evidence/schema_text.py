"""A table's CREATE TABLE text held against its records: a text short of a column.

SQLite maps a record's fields to the columns its stored CREATE TABLE text declares,
by position, and ignores fields past the last one. A text that lost a column line (a
changed byte in ``sqlite_schema`` that still parses) therefore reads every row with
its values shifted one column left, and no read fails. Records never carry more
fields than their table has columns (``ALTER TABLE ... DROP COLUMN`` rewrites every
row), so a record with more is the proof: the stored text is damaged, not the rows.

When one of Hermes' known texts for that table (``known_schemas.py``) has exactly as
many columns as the longest records, holds every column the damaged text still names
in the same order, and fits every record sampled (``carving.record_fits``), that text (of
several, the one of the layout sharing most texts with the file) is put back in the
private copy's ``sqlite_schema``, and the note says so; the rows then read in their
own columns. Without such a text the note says the table's rows cannot
be read in their columns. Only the private copy is written; call with no SQLite
connection open to it (docs/safety.md rule 2).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.carving import record_fits
from statewarden.recovery.decoding.page_format import PAGE_TABLE_INTERIOR, PAGE_TABLE_LEAF
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.schema import SchemaObject, read_schema
from statewarden.recovery.evidence.known_schemas import KNOWN_SCHEMAS

# Leaves of a table decoded to count its records' fields: spread over the tree, the
# last one (the newest rows, written after any column was added) always among them.
LEAVES_SAMPLED = 8


@dataclass
class ShortText:
    """A table whose records carry more fields than its stored text declares."""

    table: str
    declared: int  # columns the stored text declares
    fields: int  # fields of its longest record sampled
    known: tuple[str, str] | None  # (layout description, Hermes' text) that fits


def put_back_short_texts(copy: Path, source: Path) -> str | None:
    """Find the tables of ``copy`` whose stored CREATE TABLE text declares fewer
    columns than their records carry; put Hermes' known text back where one fits.
    Returns the note for the report, or None when every text fits its records."""
    conn = apsw.Connection(str(copy))
    try:
        schema = read_schema(conn)
    except apsw.Error:
        return None  # an unreadable schema is told elsewhere
    finally:
        conn.close()
    tables = [
        o for o in schema.base_tables() if o.rootpage and not o.without_rowid and o.stored_columns
    ]
    stored = {o.name: o.sql for o in schema.objects if o.sql is not None}
    with DatabaseFile(copy) as db:
        short = [s for o in tables if (s := _short_text(db, o, stored)) is not None]
    if not short:
        return None
    _write_texts(copy, [s for s in short if s.known is not None])
    return _note(source, short)


def _short_text(db: DatabaseFile, obj: SchemaObject, stored: dict[str, str]) -> ShortText | None:
    """``obj``'s damage, if its records carry more fields than it declares: most of
    those on its last leaf (the newest rows carry every column; one garbled cell that
    decodes with many fields is no proof)."""
    leaves = _sampled_leaves(db, obj.rootpage)
    last = _records(db, leaves[-1]) if leaves else []
    declared = len(obj.stored_columns)
    longer = [len(v) for v in last if len(v) > declared]
    if 2 * len(longer) <= len(last):
        return None  # (the other leaves sampled are read only for a text to put back)
    records = [r for n in leaves[:-1] for r in _records(db, n)] + last
    most = max(longer)
    return ShortText(obj.name, declared, most, _known_text(obj, records, most, stored))


def _known_text(
    obj: SchemaObject, records: list[list[Any]], fields: int, stored: dict[str, str]
) -> tuple[str, str] | None:
    """The one known text of ``obj``'s table with ``fields`` columns, keeping the
    declared columns in order, that every record fits. Where texts of several layouts
    fit (a fresh file of a Hermes and one it upgraded can name the same columns in the
    same order in texts that differ), the one of the layouts whose texts equal most of
    the file's other stored texts (``stored``: name -> sql), if one: Hermes compares a
    stored text with its own byte for byte."""
    names = [c.name for c in obj.stored_columns]
    found: dict[str, tuple[int, str]] = {}  # text -> (texts its layout shares, layout)
    for description, rows in KNOWN_SCHEMAS.values():
        shared = sum(1 for _k, name, _t, sql in rows if sql is not None and stored.get(name) == sql)
        for kind, name, _tbl, sql in rows:
            if kind != "table" or name != obj.name or sql is None:
                continue
            known = _parsed(name, sql)
            if known is None or len(known.stored_columns) != fields:
                continue
            if not _in_order(names, [c.name for c in known.stored_columns]):
                continue
            if all(record_fits(known, v) for v in records) and shared >= found.get(sql, (-1,))[0]:
                found[sql] = (shared, description)
    most = max((shared for shared, _ in found.values()), default=0)
    best = [(description, sql) for sql, (shared, description) in found.items() if shared == most]
    return best[0] if len(best) == 1 else None


def _parsed(name: str, sql: str) -> SchemaObject | None:
    """The table ``sql`` creates, its columns as SQLite reads them."""
    conn = apsw.Connection(":memory:")
    try:
        conn.execute(sql)
        return read_schema(conn).by_name(name)
    except apsw.Error:
        return None
    finally:
        conn.close()


def _in_order(some: list[str], every: list[str]) -> bool:
    """Is ``some`` ``every`` with columns left out, the rest in the same order?"""
    it = iter(every)
    return all(name in it for name in some)


def _records(db: DatabaseFile, leaf: int) -> list[list[Any]]:
    """The records of table leaf ``leaf`` that decode."""
    try:
        rows, _bad = db.leaf_rows(leaf)
    except (PageFormatError, struct.error):
        return []
    return [values for _, values in rows]


def _sampled_leaves(db: DatabaseFile, root: int) -> list[int]:
    """Leaves reached from ``root`` through evenly spread children of its first
    interior level, each followed down its last child: the table's last leaf is one."""
    try:
        if db.page_kind(root) == PAGE_TABLE_LEAF:
            return [root]
        kids = db.children(root) if db.page_kind(root) == PAGE_TABLE_INTERIOR else []
    except (PageFormatError, struct.error):
        return []
    step = max(1, len(kids) // LEAVES_SAMPLED)
    picked = [*kids[::step][: LEAVES_SAMPLED - 1], *kids[-1:]]
    leaves = []
    for child in dict.fromkeys(picked):
        n, seen = child, set()
        try:
            while n not in seen and db.page_kind(n) == PAGE_TABLE_INTERIOR:
                seen.add(n)
                n = db.children(n)[-1]
            if db.page_kind(n) == PAGE_TABLE_LEAF:
                leaves.append(n)
        except (PageFormatError, struct.error):
            continue
    return leaves


def _write_texts(copy: Path, texts: list[ShortText]) -> None:
    """Put each known text in the copy's ``sqlite_schema`` (its rootpage kept)."""
    if not texts:
        return
    conn = apsw.Connection(str(copy))
    try:
        conn.execute("PRAGMA writable_schema=ON")
        with conn:
            for s in texts:
                assert s.known is not None
                conn.execute(
                    "UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = ?",
                    (s.known[1], s.table),
                )
    finally:
        conn.close()


def _note(source: Path, short: list[ShortText]) -> str:
    parts = []
    for s in short:
        said = (
            f"the CREATE TABLE text of {s.table} in sqlite_schema declares {s.declared}"
            f" columns while its rows carry {s.fields} fields: the stored text is damaged"
        )
        if s.known is not None:
            said += (
                f"; the text {s.known[0]} writes for {s.table}, which the rows fit, was put"
                " back in the private copy"
            )
        else:
            said += (
                "; no known text of Hermes fits its rows, so they read shifted into the"
                " wrong columns"
            )
        parts.append(said)
    return f"{source}: " + "; ".join(parts)
