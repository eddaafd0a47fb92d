"""Rows and values put back from their second copies: a row lost from its table whose
text survives in its FTS copies, rebuilt into a documented side table
(``rebuild_from_copies``, ``REBUILT_RULE``), and a column that differs from copies that
agree with each other restored from them (``restore_from_copies``)."""

from __future__ import annotations

import json
import re
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import apsw

from statewarden.recovery.decoding.schema import Schema
from statewarden.recovery.evidence.copies import CopyCheck, _copies_agree, feeds, split_outside
from statewarden.recovery.evidence.index_witnesses import index_readings
from statewarden.sqlite import quote_ident, raise_if_interrupted

REBUILT_TABLE_PREFIX = "statewarden_rebuilt_"


REBUILT_RULE = (
    "A row lost from a table whose text survives in its FTS copies is rebuilt into the"
    " side table statewarden_rebuilt_<table>, never into the table itself: source_rowid"
    " is its rowid; each column an intact index of the table still holds for that rowid"
    " (for Hermes' messages: session_id, timestamp, active) is copied exactly; search_text"
    " is the text the FTS copies hold (for Hermes: content, tool name and tool calls"
    " joined by spaces, which cannot be split back into columns); rebuilt_from names the"
    " copy each value came from. Columns with no surviving copy (the role) are not"
    " invented."
)


@dataclass
class RebuiltRow:
    rowid: int
    values: dict[str, Any]  # table column -> value, from an index entry of this rowid
    sources: dict[str, str]  # column (or search_text) -> the copy it came from
    search_text: str | None


def rebuild_from_copies(
    conn: apsw.Connection,
    schema: Schema,
    table: str,
    rowids: AbstractSet[int],
    *,
    broken_roots: set[int],
) -> list[RebuiltRow]:
    """Rows ``rowids`` of ``table`` (lost from the table itself) as far as the intact
    indexes (read as covering indexes: the table is not touched) and FTS copies still
    hold them. Indexes whose own b-tree is damaged are not read."""
    if not rowids:
        return []
    out = {r: RebuiltRow(r, {}, {}, None) for r in sorted(rowids)}
    for reading in index_readings(conn, schema, table, broken_roots=broken_roots):
        try:
            for row in conn.execute(reading.sql):
                got = out.get(int(row[0]))
                if got is None:
                    continue
                for c, v in zip(reading.columns, row[1:], strict=True):
                    if c not in got.values:
                        got.values[c] = v
                        got.sources[c] = f"index {reading.name}"
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_interrupted(exc)
            continue
    for f in feeds(schema):
        if f.table != table or "c0" not in f.columns:
            continue
        content = quote_ident(f"{f.fts}_content")
        for r in out.values():
            if r.search_text is not None:
                continue
            try:
                row = conn.execute(f"SELECT c0 FROM {content} WHERE id = ?", (r.rowid,)).fetchone()
            except (apsw.Error, UnicodeDecodeError) as exc:
                raise_if_interrupted(exc)
                break
            if row is not None and isinstance(row[0], str):
                r.search_text = row[0]
                r.sources["search_text"] = f"FTS copy {f.fts}"
    return [r for r in out.values() if r.values or r.search_text is not None]


def write_rebuilt(dst: apsw.Connection, table: str, rows: list[RebuiltRow]) -> str:
    """Create the side table for ``table`` in ``dst`` and put ``rows`` in it; its name."""
    name = f"{REBUILT_TABLE_PREFIX}{table}"
    cols = list(dict.fromkeys(c for r in rows for c in r.values))
    defs = "".join(f", {quote_ident(c)}" for c in cols)
    dst.execute(
        f"CREATE TABLE main.{quote_ident(name)}(source_rowid INTEGER PRIMARY KEY{defs},"
        " search_text TEXT, rebuilt_from TEXT NOT NULL)"
    )
    names = ", ".join(
        ["source_rowid", *(quote_ident(c) for c in cols), "search_text", "rebuilt_from"]
    )
    marks = ", ".join("?" for _ in range(len(cols) + 3))
    dst.executemany(
        f"INSERT INTO main.{quote_ident(name)}({names}) VALUES ({marks})",
        [
            (r.rowid, *(r.values.get(c) for c in cols), r.search_text, json.dumps(r.sources))
            for r in rows
        ],
    )
    return name


_COLUMN_PART_RE = re.compile(
    r"^(?:COALESCE\(\s*b\.[\"`\[]?(\w+)[\"`\]]?\s*,\s*''\s*\)|b\.[\"`\[]?(\w+)[\"`\]]?)$", re.I
)


_LITERAL_PART_RE = re.compile(r"^'((?:[^']|'')*)'$")


def _parts(expr: str) -> list[tuple[str, str]] | None:
    """An expression ``a || ' ' || COALESCE(b.x, '')`` as [("text", " "), ("column",
    "x"), ...]; None for any other shape (it cannot be solved for a column)."""
    out: list[tuple[str, str]] = []
    for part in split_outside(expr, "||"):
        if m := _LITERAL_PART_RE.match(part):
            out.append(("text", m.group(1).replace("''", "'")))
        elif m := _COLUMN_PART_RE.match(part):
            out.append(("column", m.group(1) or m.group(2)))
        else:
            return None
    return out


def solve_for_one_column(expr: str, row: dict[str, Any], copy: str) -> dict[str, str]:
    """Each column whose value, put in place of the stored one with every other column
    as stored, makes ``expr`` (the trigger's expression) give exactly ``copy``: the
    column -> that value. Only TEXT values are solved for."""
    parts = _parts(expr)
    if parts is None:
        return {}
    names = [v for k, v in parts if k == "column"]

    def text(k: str, v: str) -> str:
        if k == "text":
            return v
        value = row.get(v)
        return "" if value is None else str(value)

    out: dict[str, str] = {}
    for i, (kind, col) in enumerate(parts):
        if kind != "column" or names.count(col) != 1:
            continue
        head = "".join(text(k, v) for k, v in parts[:i])
        tail = "".join(text(k, v) for k, v in parts[i + 1 :])
        if len(copy) < len(head) + len(tail) or not copy.startswith(head):
            continue
        if tail and not copy.endswith(tail):
            continue
        value = copy[len(head) : len(copy) - len(tail)]
        if value == "" and row.get(col) is None:
            continue  # COALESCE(NULL, ''): the copy agrees with the stored NULL
        if value != row.get(col) and isinstance(row.get(col), str | None):
            out[col] = value
    return out


@dataclass
class Restored:
    table: str
    rowid: int
    column: str
    stored: Any  # what the file held
    value: str  # what the copies say it was
    copies: list[str]


def restore_from_copies(
    src: apsw.Connection,
    dst: apsw.Connection,
    schema: Schema,
    check: CopyCheck,
    also: set[int] = frozenset(),  # type: ignore[assignment]
) -> list[Restored]:
    """Rows of ``check.table`` that differ from two FTS copies that agree with each
    other (``rows_rotted``), and the rows ``also`` (known changed on disk: text that
    is not UTF-8, zeroed bytes) whose copies agree, restored in ``dst`` from the
    copies: when exactly one column, changed alone, makes the row give the copies'
    text again, that column is set to it. A row for which no such column, or more
    than one, exists is left as it is (returned nowhere)."""
    fs = [f for f in feeds(schema) if f.table == check.table and f.fts in check.copies]
    agreed = set(also)
    if len(fs) >= 2 and agreed:
        try:
            agreed = _copies_agree(src, fs[0], fs[1], agreed)
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_interrupted(exc)
            agreed = set()
    rowids = sorted(set(check.rows_rotted) | agreed)
    if not fs or not rowids:
        return []
    feed = fs[0]
    if list(feed.columns) != ["c0"]:
        return []
    obj = schema.by_name(check.table)
    if obj is None:
        return []
    names = [c.name for c in obj.stored_columns]
    t = quote_ident(check.table)
    # Text that is not UTF-8 (changed bytes) is read as bytes and decoded leniently.
    sel = ", ".join(
        f"CASE WHEN typeof({q}) = 'text' THEN CAST({q} AS BLOB) ELSE {q} END"
        for q in (quote_ident(c) for c in names)
    )
    content = quote_ident(f"{feed.fts}_content")
    out = []
    for rowid in rowids:
        try:
            got = src.execute(f"SELECT c0 FROM {content} WHERE id = ?", (rowid,)).fetchone()
            values = dst.execute(f"SELECT {sel} FROM main.{t} WHERE rowid = ?", (rowid,)).fetchone()
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_interrupted(exc)
            continue
        if got is None or values is None or not isinstance(got[0], str):
            continue
        row = {
            c: v.decode("utf-8", "replace") if isinstance(v, bytes) else v
            for c, v in zip(names, values, strict=True)
        }
        solved = solve_for_one_column(feed.columns["c0"], row, got[0])
        if len(solved) != 1:
            continue
        ((col, value),) = solved.items()
        dst.execute(f"UPDATE main.{t} SET {quote_ident(col)} = ? WHERE rowid = ?", (value, rowid))
        out.append(Restored(check.table, rowid, col, row[col], value, list(check.copies)))
    return out
