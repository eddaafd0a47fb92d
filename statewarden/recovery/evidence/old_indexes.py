"""The old indexes' pages, left in a file whose schema was rebuilt from a known layout.

When page 1 and the schema pages are destroyed (``lost_schema.py``), the indexes of the
rebuilt schema are new, filled from the rows the tables' b-trees still reach; the file
still holds the old indexes' pages, no schema naming them. They vouch for the rows
carved or read from leaves no b-tree reaches (``listed_by_old_indexes``) and are
witnesses of the rows read (``old_index_witnesses``), as intact indexes are; an old
index whose root the creation order proves (``found_trees.created_roots``) only through
the pages that root reaches (a freed index page still holds the entries of the rows
deleted). Pages are read raw: call with no SQLite connection open to the file
(docs/safety.md rule 2).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.page_format import (
    PAGE_INDEX_INTERIOR,
    PAGE_INDEX_LEAF,
    Row,
    varint,
)
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.schema import Schema, SchemaObject
from statewarden.recovery.evidence.found_trees import btree_objects, btree_roots, created_roots
from statewarden.sqlite import quote_ident

# -- the rows the old indexes list ------------------------------------------------------


def listed_by_old_indexes(
    pages: list[IndexPage], schema: Schema, found: dict[str, list[Row]]
) -> dict[str, set[int]]:
    """Of the rows ``found`` on a table's pages (carved from its damaged leaves, read
    from leaves no b-tree reaches), the rowids every index of the table lists with the
    row's own values in the index pages left in the file, by table.

    When page 1 and the schema are destroyed, the indexes of the rebuilt schema are new
    (filled from the rows the tables' b-trees still reach), so no index of the schema
    vouches for such a row; the file still holds the old indexes' pages, no schema
    naming them. A carved cell may be a deleted row's bytes, or an older version of an
    updated row, left in the free space of its page, and an unreached leaf a freed page
    holding deleted rows; a row's entries leave the index pages' cells when it is
    deleted and change with it. So such a row is taken when,
    for each index of its table that lists every row (no ``WHERE``), an entry read
    through its page's cell pointers holds exactly the row's values of that index's
    columns and its rowid: the row was live with those values. A table with no such
    index gets none, nor a rowid found with two different records. An entry whose
    payload overflows its page is not read (Hermes' index keys are short), nor one on
    a page that cannot be that index's (``IndexPage.may_hold``: an index whose root
    the creation order proves lists only through the pages that root reaches).
    ``pages``: every index page of the file (``index_pages``)."""
    # the entry an index would hold for a carved row -> (table, rowid, which index)
    wanted: dict[tuple[Any, ...], set[tuple[str, int, int]]] = {}
    needed: dict[str, int] = {}  # table -> indexes that list every row
    index_names: dict[tuple[str, int], str] = {}
    for name, rows in found.items():
        obj = schema.by_name(name)
        if obj is None or obj.without_rowid or not rows:
            continue
        indexes = _index_positions(schema, obj)
        needed[name] = len(indexes)
        index_names.update(((name, i), idx) for i, (idx, _) in enumerate(indexes))
        versions: dict[int, list[list[Any]]] = {}
        for rowid, values in rows:
            versions.setdefault(rowid, []).append(values)
        one = [(r, vs[0]) for r, vs in versions.items() if all(v == vs[0] for v in vs)]
        for i, (_name, positions) in enumerate(indexes):
            for rowid, values in one:
                if any(p >= len(values) for p in positions):
                    continue
                key = tuple(rowid if p < 0 else values[p] for p in positions)
                wanted.setdefault((*key, rowid), set()).add((name, rowid, i))
    listing: dict[tuple[str, int], set[int]] = {}
    for page in pages:
        for entry in page.entries:
            for name, rowid, i in wanted.get(entry, ()):
                if page.may_hold(index_names[name, i]):
                    listing.setdefault((name, rowid), set()).add(i)
    out: dict[str, set[int]] = {}
    for (name, rowid), listed in listing.items():
        if len(listed) == needed[name]:
            out.setdefault(name, set()).add(rowid)
    return out


def indexed_columns(schema: Schema, obj: SchemaObject) -> set[str]:
    """The columns of ``obj`` an index that lists every row holds (its old pages vouch
    for them: ``old_index_witnesses``)."""
    names = [c.name for c in obj.stored_columns]
    return {names[p] for _, positions in _index_positions(schema, obj) for p in positions if p >= 0}


def _index_positions(schema: Schema, obj: SchemaObject) -> list[tuple[str, list[int]]]:
    """For each index of ``obj`` on plain columns that lists every row (no ``WHERE``),
    its name and the positions of its columns in the table's records (-1: the rowid),
    read from an in-memory database."""
    names = [c.name for c in obj.stored_columns]
    out: list[tuple[str, list[int]]] = []
    if obj.sql is None:
        return out
    conn = apsw.Connection(":memory:")
    try:
        conn.execute(obj.sql)
        for idx in schema.full_indexes(obj.name):
            if idx.sql is None:
                continue
            try:
                conn.execute(idx.sql)
                info = conn.execute(f"PRAGMA index_info({quote_ident(idx.name)})").fetchall()
            except apsw.Error:
                continue
            cols = [(r[1], None if r[2] is None else str(r[2])) for r in info]
            if not cols or any(c is None and cid != -1 for cid, c in cols):
                continue  # an expression: not a column's value
            if any(c is not None and c not in names for _, c in cols):
                continue
            positions = [
                -1 if c is None or c == obj.rowid_alias else names.index(c) for _, c in cols
            ]
            out.append((idx.name, positions))
    finally:
        conn.close()
    return out


def _index_entries(db: DatabaseFile, n: int) -> list[tuple[Any, ...]]:
    """The entries of index page ``n`` its cell pointers reach, whole in the page (none
    when it is no index page)."""
    try:
        kind, _, _ = db.btree_header(n)
        if kind not in (PAGE_INDEX_LEAF, PAGE_INDEX_INTERIOR):
            return []
        offsets = db.cell_offsets(n)
    except (PageFormatError, struct.error):
        return []
    pg = db.page(n)
    most = (db.usable - 12) * 64 // 255 - 23  # the largest payload an index cell holds whole
    out = []
    for off in offsets:
        try:
            size, pos = varint(pg, off + (4 if kind == PAGE_INDEX_INTERIOR else 0))
            if size > most or pos + size > db.usable:
                continue  # its payload overflows the page
            out.append(tuple(db.record(bytes(pg[pos : pos + size]))))
        except (PageFormatError, struct.error, IndexError, UnicodeDecodeError):
            continue
    return out


# -- the old indexes as witnesses of the rows read ------------------------------------


@dataclass
class IndexPage:
    """An index page of the file: its entries (indexed values, then the rowid) and
    whether an index of the schema (or the freelist the header names) reaches it."""

    entries: list[tuple[Any, ...]]
    reached: bool
    # the old index whose root the creation order proves reaches this page
    owner: str | None = None
    # the old indexes whose roots the creation order proves: an unreached page none
    # of them reaches is no page of theirs (a page ``DELETE`` freed keeps its entries)
    proven: frozenset[str] = frozenset()

    def may_hold(self, index: str) -> bool:
        """May this page hold entries of the old index ``index``?"""
        if self.reached:
            return True
        return self.owner == index if self.owner else index not in self.proven


# What the old indexes hold for a table's rows: rowid -> column -> [(value, by), ...]
Witnesses = dict[int, dict[str, list[tuple[Any, str]]]]


def index_pages(path: Path, schema: Schema) -> list[IndexPage]:
    """Every index page in the file with the entries its cell pointers reach. Those no
    index of ``schema`` reaches (nor the freelist the header names) are the pages of
    the old indexes left in the file when the schema was rebuilt from Hermes' known
    schema. When the creation order proves an old index's root (``created_roots``),
    only the pages that root reaches are that index's (``IndexPage.owner``): an index
    page ``DELETE`` freed (the freelist that named it is gone with page 1) still holds
    the deleted rows' entries, and vouches for none of them; when it proves them all,
    no other page is kept. Call with no SQLite connection open to ``path``
    (docs/safety.md rule 2)."""
    with DatabaseFile(path) as db:
        roots = [o.rootpage for o in schema.objects if o.type == "index" and o.rootpage]
        reached = db.reachable(roots)
        created = created_roots(btree_roots(db), schema)
        indexes = {name for name, is_index in btree_objects(schema) if is_index}
        proven = frozenset(indexes & set(created))
        freed = db.freelist_pages()
        owner: dict[int, str] = {}
        for name in proven:
            for n in db.reachable([created[name]]) - freed:
                owner.setdefault(n, name)
        every = bool(proven) and proven == indexes
        out = []
        for n in range(2, db.page_count + 1):
            mine = owner.get(n)
            if every and mine is None and n not in reached:
                continue
            if entries := _index_entries(db, n):
                out.append(IndexPage(entries, n in reached, mine, proven))
        return out


def old_index_witnesses(
    pages: list[IndexPage], schema: Schema, table: str, rows: dict[int, list[Any]]
) -> Witnesses:
    """What the old indexes' pages (of ``index_pages``, those no index of the schema
    reaches) hold for the rows of ``table`` (rowid -> the row's values as read), in
    the shape of ``index_witnesses.indexed_values``: for each rowid, each indexed column's
    values, one per old index entry listing it.

    No schema names those pages, so each is given to the index of the table (one that
    lists every row, on plain columns) whose entries of its shape agree with the rows
    read in the most entries, when that index is the only one with that many and they
    are most of the page's entries of that shape; a page no index wins is left out, and
    a page is given only to an index it may be a page of (``IndexPage.may_hold``). A
    page can hold an older entry of an updated row (a freed page): a row with a column
    no entry of an index agrees with is held against them by the caller, not here."""
    obj = schema.by_name(table)
    if obj is None or obj.without_rowid or not pages:
        return {}
    names = [c.name for c in obj.stored_columns]
    indexes = _index_positions(schema, obj)
    reals = {
        i
        for i, c in enumerate(obj.stored_columns)
        if any(k in c.decl_type.upper() for k in ("REAL", "FLOA", "DOUB"))
    }
    out: Witnesses = {}
    for page in (p for p in pages if not p.reached):
        entries = page.entries
        agree = [
            sum(1 for e in entries if _agrees(e, pos, rows)) if page.may_hold(name) else 0
            for name, pos in indexes
        ]
        top = max(agree, default=0)
        if not top or agree.count(top) > 1:
            continue
        name, positions = indexes[agree.index(top)]
        shaped = [e for e in entries if len(e) == len(positions) + 1 and isinstance(e[-1], int)]
        if 2 * top <= len(shaped):
            continue
        by = f"{name} (its pages left in the file)"
        for e in shaped:
            got = out.setdefault(int(e[-1]), {})
            for p, v in zip(positions, e, strict=False):
                if p >= 0:
                    # SQLite stores a REAL with no fraction as an integer on disk.
                    real = isinstance(v, int) and p in reals
                    got.setdefault(names[p], []).append((float(v) if real else v, by))
    return out


def _agrees(entry: tuple[Any, ...], positions: list[int], rows: dict[int, list[Any]]) -> bool:
    """Is ``entry`` what an index on ``positions`` holds for a row read?"""
    if len(entry) != len(positions) + 1 or not isinstance(entry[-1], int):
        return False
    values = rows.get(entry[-1])
    if values is None:
        return False
    want = [entry[-1] if p < 0 else values[p] if p < len(values) else None for p in positions]
    return all(_same(a, b) for a, b in zip(want, entry, strict=False))


def _same(a: Any, b: Any) -> bool:
    """The same value: equal numbers (a REAL may be stored as an integer), or equal
    values of one type."""
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers):
        return not isinstance(a, bool) and not isinstance(b, bool) and a == b
    return type(a) is type(b) and a == b
