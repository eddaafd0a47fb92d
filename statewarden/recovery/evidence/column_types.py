"""Values Hermes never writes in a column: a row holding one changed on disk.

SQLite checks no record against its table's declared types, and a bit flipped in a
record header reads as another type (``compacted`` 0 as an empty blob) or shifts the
columns after it (a timestamp of 3.55e161); ``integrity_check`` says nothing of either.
Hermes writes its tables through Python's sqlite3 with ``str``, ``int``, ``float`` and
``None`` only, and SQLite's column affinity does the rest, so in its tables:

- an INTEGER or REAL column never holds a blob;
- a TEXT column never holds a blob, nor a number (TEXT affinity stores numbers as text);
- a REAL epoch column (``timestamp``, ``*_at``, ``first_seen``, ``last_seen``) holds a
  number inside Hermes' own window, ``hermes_cli.timefmt.EPOCH_MIN..EPOCH_MAX`` (0 to
  4.2e9, year 2103): the window Hermes 0.22 refuses to write a message's timestamp
  outside of, and reads every other epoch through.

Nothing else is held against a value: Hermes enforces no set of roles (``append_message``
stores the role it is given, ``session_meta`` among them) nor any shape of a tool call
id, so a flipped bit that keeps such text valid UTF-8 ('user' read as 'useR') cannot be
told from a value Hermes wrote, unless a witness (an index entry, an FTS copy) holds the
column. The rules apply to the tables of Hermes' known layouts only (``known_schemas``).

A witness works the other way too (:func:`unwitnessed`): a value an index entry of the
same row holds as well was written through SQLite as it reads (a change on disk does
not reach the index too), so it is a value someone wrote, not damage, however odd: a
timestamp of -1.5, a session id stored as a blob. ``check`` calls it no damage and
``recover`` copies it as it is (it once wrote a placeholder, then the index's value
back, and ``check`` called its own output damaged).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import apsw

from statewarden.recovery.decoding.schema import Schema, SchemaObject
from statewarden.recovery.evidence.copies import rowids_shown
from statewarden.recovery.evidence.known_schemas import LAYOUTS
from statewarden.sqlite import quote_ident, raise_if_interrupted, raise_if_machine

# hermes_cli/timefmt.py (Hermes 0.22): EPOCH_MIN, EPOCH_MAX.
EPOCH_MIN = 0.0
EPOCH_MAX = 4_200_000_000.0

# Each Hermes table's CREATE TABLE texts, as Hermes' known layouts store them, up to the
# closing parenthesis: ALTER TABLE ... ADD COLUMN writes the new column there, so a table
# a later Hermes widened still begins with one of them.
HERMES_TEXTS: dict[str, frozenset[str]] = {}
for _layout in LAYOUTS.values():
    for _kind, _name, _tbl, _sql in _layout.objects:
        if _kind == "table" and _sql and not _sql.startswith("CREATE VIRTUAL"):
            _open = _sql[: _sql.rstrip().rfind(")")]
            HERMES_TEXTS[_name] = HERMES_TEXTS.get(_name, frozenset()) | {_open}


def hermes_table(obj: SchemaObject) -> bool:
    """Is ``obj`` a table Hermes wrote: its name one of Hermes' tables and its text one
    Hermes writes for it (or that text widened by ALTER TABLE)? Another program's table
    of the same name is held to no rule of Hermes'."""
    texts = HERMES_TEXTS.get(obj.name, frozenset())
    return obj.sql is not None and any(obj.sql.startswith(t) for t in texts)


# The kinds of check: the storage classes a column never holds (and, for an epoch,
# numbers outside the window).
NUMBER = "number"  # INTEGER or REAL affinity: never a blob
TEXT = "text"  # TEXT affinity: never a blob or a number
EPOCH = "epoch"  # a REAL epoch column: a number inside the window, never a blob

_PY_KINDS: dict[str, frozenset[type]] = {
    NUMBER: frozenset({bytes}),
    TEXT: frozenset({bytes, int, float}),
    EPOCH: frozenset({bytes}),
}
_SQL_KINDS: dict[str, str] = {
    NUMBER: "('blob')",
    TEXT: "('blob', 'integer', 'real')",
    EPOCH: "('blob')",
}


def _is_epoch(name: str) -> bool:
    n = name.lower()
    return n == "timestamp" or n.endswith("_at") or n in ("first_seen", "last_seen")


def column_checks(obj: SchemaObject) -> list[tuple[int, str, str]]:
    """(position among the stored columns, name, kind) of each column of ``obj`` held
    to a rule; none for a table no Hermes layout has."""
    if obj.without_rowid or not hermes_table(obj):
        return []
    out = []
    for i, col in enumerate(obj.stored_columns):
        t = col.decl_type.upper()
        if col.text_affinity:
            out.append((i, col.name, TEXT))
        elif "INT" in t:
            out.append((i, col.name, NUMBER))
        elif any(k in t for k in ("REAL", "FLOA", "DOUB")):
            out.append((i, col.name, EPOCH if _is_epoch(col.name) else NUMBER))
    return out


def misfit_columns(checks: list[tuple[int, str, str]], values: list[Any]) -> list[str]:
    """The columns of one row (its stored values, in order) holding a value Hermes
    never writes there."""
    out = []
    n = len(values)
    for i, name, kind in checks:
        v = values[i] if i < n else None
        if v is None:
            continue
        if type(v) in _PY_KINDS[kind] or (
            kind == EPOCH and type(v) in (int, float) and not EPOCH_MIN <= v <= EPOCH_MAX
        ):
            out.append(name)
    return out


def _misfit_sql(name: str, kind: str) -> str:
    q = quote_ident(name)
    sql = f"typeof({q}) IN {_SQL_KINDS[kind]}"
    if kind == EPOCH:
        number = f"typeof({q}) IN ('integer', 'real')"
        sql += f" OR ({number} AND {q} NOT BETWEEN {EPOCH_MIN} AND {EPOCH_MAX})"
    return f"({sql})"


@dataclass
class Misfits:
    """Rows of one table holding a value Hermes never writes in its column: rowid ->
    the columns. ``complete``: the full scan read every row (else a read error ended
    it; the rows past it are held to the rules as they are copied)."""

    table: str
    rows: dict[int, list[str]] = field(default_factory=dict)
    complete: bool = True

    def findings(self) -> list[str]:
        if not self.rows:
            return []
        n = len(self.rows)
        cols = sorted({c for cs in self.rows.values() for c in cs})
        return [
            f"{self.table}: {n} row{'s' if n != 1 else ''} holding a value Hermes never"
            f" writes in its column ({', '.join(cols)}): changed on disk"
            f" ({rowids_shown(sorted(self.rows))})"
        ]


def find_misfits(conn: apsw.Connection, schema: Schema) -> list[Misfits]:
    """Each Hermes table's rows holding a value Hermes never writes in its column that no
    index entry of the row holds too (:func:`unwitnessed`), by one full scan per table
    (``NOT INDEXED``); a read error ends a table's scan, keeping what it found. Only
    tables with such rows are listed."""
    out = []
    for obj in schema.base_tables():
        checks = column_checks(obj)
        if not checks or obj.rowid_name is None:
            continue
        found = Misfits(obj.name)
        exprs = [_misfit_sql(name, kind) for _i, name, kind in checks]
        sql = (
            f"SELECT {obj.rowid_sql}, {', '.join(exprs)} FROM {quote_ident(obj.name)}"
            f" NOT INDEXED WHERE {' OR '.join(exprs)}"
        )
        hits: list[tuple[int, list[str]]] = []
        try:
            for row in conn.execute(sql):
                misfit = [name for (_i, name, _k), hit in zip(checks, row[1:], strict=True) if hit]
                hits.append((int(row[0]), misfit))
        except apsw.Error as exc:
            raise_if_interrupted(exc)
            found.complete = False
        for rowid, misfit in hits:
            if left := unwitnessed(conn, schema, obj, rowid=rowid, misfit=misfit):
                found.rows[rowid] = left
        if found.rows:
            out.append(found)
    return out


def unwitnessed(
    conn: apsw.Connection, schema: Schema, obj: SchemaObject, *, rowid: int, misfit: list[str]
) -> list[str]:
    """Of the ``misfit`` columns of row ``rowid``, those no index vouches for: an entry
    of an index of ``obj`` that lists every row, on plain columns, holding this row's
    value there. Compared in SQL, value to value, so a row with text that is not UTF-8
    elsewhere is asked the same (Python cannot read such text)."""
    if not misfit or obj.rowid_name is None:
        return misfit
    columns = {c.name for c in obj.stored_columns}
    indexes: list[list[str]] = []
    for idx in schema.full_indexes(obj.name):
        try:
            info = conn.execute(f"PRAGMA index_info({quote_ident(idx.name)})").fetchall()
        except apsw.Error as exc:
            raise_if_machine(exc)
            continue
        names = [None if r[2] is None else str(r[2]) for r in info]
        if names and all(n is not None and n in columns for n in names):
            indexes.append([idx.name, *[str(n) for n in names]])
    return [
        c
        for c in misfit
        if not any(_held(conn, obj, rowid=rowid, column=c, index=ix) for ix in indexes)
    ]


def _held(
    conn: apsw.Connection, obj: SchemaObject, *, rowid: int, column: str, index: list[str]
) -> bool:
    """Whether ``index`` (its name, then its columns) holds row ``rowid`` with its
    columns up to ``column`` as the row's record has them: the index's own entry, found
    through it (``INDEXED BY``), each value taken from the record by rowid."""
    name, columns = index[0], index[1:]
    if column not in columns:
        return False
    table, rid = quote_ident(obj.name), obj.rowid_sql
    lead = columns[: columns.index(column) + 1]
    where = " AND ".join(
        f"{quote_ident(c)} IS (SELECT {quote_ident(c)} FROM {table} NOT INDEXED WHERE {rid} = ?1)"
        for c in lead
    )
    sql = f"SELECT 1 FROM {table} INDEXED BY {quote_ident(name)} WHERE {where} AND {rid} = ?1"
    try:
        return conn.execute(sql, (rowid,)).fetchone() is not None
    except apsw.Error as exc:
        raise_if_machine(exc)
        return False
