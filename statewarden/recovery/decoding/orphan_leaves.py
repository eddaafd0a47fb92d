"""Rows that the b-tree can no longer reach, salvaged from their leaves.

A damaged interior page orphans every leaf below it: the rows are still on disk but no
query can get to them. SQLite's own ``.recover`` needs the ``sqlite_dbpage`` virtual
table, which neither Debian's SQLite nor apsw's bundled one has, so the file is read
itself (sqlite.org/fileformat2.html):

1. walk every b-tree from the roots in ``sqlite_schema`` and the freelist, marking the
   pages they reach (a page that fails to parse is simply not descended into), or take
   the "never used" pages of a completed integrity check;
2. every table-leaf page (type 0x0D) that nothing reaches is an orphan; its cells are
   decoded (varints, the record format, overflow chains) into ``(rowid, values)``;
3. an orphan leaf is given to the one table whose shape its records fit (field count,
   the rowid alias stored as NULL, no number in a TEXT column, no NULL in a NOT NULL
   one: ``record_fits``). Freelist pages are never read for rows: they hold deleted
   data.

Call only with no SQLite connection open to the file in this process (docs/safety.md
rule 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.page_format import PAGE_TABLE_LEAF, Row
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.schema import Schema, SchemaObject


def orphan_table_leaves(db: DatabaseFile, roots: list[int]) -> list[int]:
    reached = db.reachable(roots)
    out = []
    for n in range(1, db.page_count + 1):
        if n not in reached and db.page_kind(n) == PAGE_TABLE_LEAF:
            out.append(n)
    return out


def record_fits(obj: SchemaObject, values: list[Any]) -> bool:
    """Could this record be a row of ``obj``, by its shape alone?

    At most as many fields as the table stores (fewer after an ``ALTER TABLE ADD
    COLUMN``); the INTEGER PRIMARY KEY column stored as NULL (its value is the rowid);
    no number in a TEXT column (SQLite converts them to text); no NULL in a NOT NULL one.
    """
    cols = obj.stored_columns
    if len(values) > len(cols):
        return False
    alias = obj.rowid_alias
    for col, v in zip(cols, values, strict=False):
        if col.name == alias:
            if v is not None:
                return False
        elif v is None:
            if col.notnull:
                return False
        elif col.text_affinity and isinstance(v, int | float):
            return False
    return True


def salvage_rows(
    path: Path, schema: Schema, tables: list[str], unreached: list[int] | None = None
) -> dict[str, list[Row]]:
    """Rows on orphaned table leaves, assigned to the wanted ``tables`` by record shape.

    A leaf goes to a table when every decodable record fits it (``record_fits``) and at
    least one record has all its columns; every rowid table of the schema (FTS shadow
    tables included) is a candidate, and a leaf that fits more than one is left out: it
    cannot be attributed safely. ``unreached``, when given, lists the pages no b-tree
    or the freelist reaches (from a completed integrity check's "never used" lines),
    which spares the walk over every page.
    """
    db = DatabaseFile(path)
    try:
        if unreached is not None:
            leaves = []
            for n in unreached:
                try:
                    if db.page_kind(n) == PAGE_TABLE_LEAF:
                        leaves.append(n)
                except PageFormatError:
                    continue
            return _assign(db, schema, tables, leaves)
        return _salvage(db, schema, tables)
    finally:
        db.close()


def _salvage(db: DatabaseFile, schema: Schema, tables: list[str]) -> dict[str, list[Row]]:
    roots = [o.rootpage for o in schema.objects if o.rootpage] + [1]
    return _assign(db, schema, tables, orphan_table_leaves(db, roots))


def _assign(
    db: DatabaseFile, schema: Schema, tables: list[str], leaves: list[int]
) -> dict[str, list[Row]]:
    candidates = [
        o
        for o in schema.tables()
        if o.rootpage and not o.without_rowid and not o.is_virtual and o.stored_columns
    ]
    out: dict[str, list[Row]] = {name: [] for name in tables if schema.by_name(name) is not None}
    for leaf in leaves:
        try:
            rows, _bad = db.leaf_rows(leaf)
        except PageFormatError:
            continue
        if not rows:
            continue
        most = max(len(v) for _, v in rows)
        fits = [
            o.name
            for o in candidates
            if most == len(o.stored_columns) and all(record_fits(o, v) for _, v in rows)
        ]
        if len(fits) == 1 and fits[0] in out:
            out[fits[0]].extend(rows)
    for rows in out.values():
        rows.sort(key=lambda r: r[0])
    return out
