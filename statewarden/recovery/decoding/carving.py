"""Rows read from table leaves by their shape, where their table's b-tree no longer
gives them (sqlite.org/fileformat2.html).

Leaves no b-tree reaches (``salvage_rows``): a damaged interior page orphans every leaf
below it, the rows still on disk but out of any query's reach. Every b-tree is walked
from the roots in ``sqlite_schema`` and the freelist (a page that fails to parse is not
descended), or the "never used" pages of a completed integrity check are taken; each
table leaf (type 0x0D) nothing reaches is decoded into ``(rowid, values)`` and given to
the one table whose shape its records fit (field count, the rowid alias stored as NULL,
no number in a TEXT column, no NULL in a NOT NULL one: ``record_fits``). Freelist pages
are never read for rows: they hold deleted data.

Rows carved from the leaves of a table whose page structure is damaged: a leaf whose
header or cell pointers do not read is carved whole (every offset tried), one whose
pointers read but whose cells are garbled, or whose cells and free space do not fill it
(a pointer a flipped bit moved), gives its pointed cells and then the whole cells no
pointer reaches. A carved row is taken only when an intact index or FTS copy vouches
for it (the caller's rule): a deleted row's bytes can stay on a page.

Call only with no SQLite connection open to the file in this process (docs/safety.md
rule 2).
"""

from __future__ import annotations

import contextlib
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.page_format import (
    BTREE_TYPES,
    PAGE_TABLE_LEAF,
    Row,
    _header_of,
    varint,
)
from statewarden.recovery.decoding.pages import DatabaseFile, table_tree
from statewarden.recovery.decoding.schema import Schema, SchemaObject


def carve_damaged_leaves(
    path: Path, schema: Schema, tables: list[str], *, unreached: list[int] | None = None
) -> dict[str, list[Row]]:
    """Rows carved from the leaves of ``tables`` whose page structure is damaged.

    A leaf the table's b-tree points to but whose header or cell-pointer array is
    damaged (not a b-tree page any more, or pointers outside the content area) still
    holds its cells. They are found by trying every offset of the page: a cell is
    taken when its payload-size varint, its rowid varint and its record agree (the
    record's own header sums to exactly that payload size, lies in the page, decodes
    to the end) and the record fits the table (``record_fits``) with every column
    stored, or as many fields as the rows on the table's readable leaves hold (rows
    written before an ``ALTER TABLE ADD COLUMN`` keep their shorter records). The
    bytes of deleted rows can stay in a page's free space, so the caller takes a
    carved row only when an intact index or FTS copy vouches for it. Call with no
    SQLite connection open to ``path`` (docs/safety.md rule 2).

    ``unreached``: the pages no b-tree and no freelist reaches (a complete integrity
    check's "never used" pages, or ``[]`` to look at none, when the freelist is not
    known: its pages would pass for unreached). A leaf whose header was destroyed and
    that its parent no longer names (a torn interior page) is among them: such a page
    is carved whole too, its rows given to the one table they all fit. None: they are
    found by walking every b-tree.
    """
    with DatabaseFile(path) as db:
        out: dict[str, list[Row]] = {}
        counts_of: dict[str, set[int]] = {}
        for name in tables:
            obj = schema.by_name(name)
            if obj is None or not obj.rootpage or obj.without_rowid or obj.is_virtual:
                continue
            rows = out.setdefault(name, [])
            leaves, damaged, _ = table_tree(db, obj.rootpage)
            garbled, unreadable, counts = survey_leaves(db, leaves)
            counts.add(len(obj.stored_columns))
            counts_of[name] = counts
            if not (damaged or unreadable or garbled):
                continue
            for leaf in sorted(damaged + unreadable):
                rows.extend(r for r in _carve(db, leaf) if _fits_whole(obj, r[1], counts))
            for leaf in garbled:
                # Its pointers read: the cells they point to that decode and are not
                # zeroed, then the cells no pointer reaches any more (a pointer moved
                # by a flipped bit, a torn write) for rowids those lack. A stale copy
                # of a deleted row is carved too: the caller takes a carved row only
                # when an intact index or FTS copy vouches for it.
                pointed = [r for r in db.leaf_rows(leaf)[0] if _fits_whole(obj, r[1], counts)]
                have = {r for r, _ in pointed}
                rows.extend(pointed)
                carved = [r for r in _carve(db, leaf) if r[0] not in have]
                rows.extend(r for r in carved if _fits_whole(obj, r[1], counts))
        for carved in _headerless_pages(db, schema, unreached):
            owners = [n for n, c in counts_of.items() if _all_fit(schema, n, carved, c)]
            if len(owners) == 1:
                out[owners[0]].extend(carved)
        return {name: _one_version(rows) for name, rows in out.items() if rows}


def _headerless_pages(
    db: DatabaseFile, schema: Schema, unreached: list[int] | None
) -> Iterator[list[Row]]:
    """The rows carved from each page no b-tree or freelist reaches whose first byte
    is no b-tree page's type (its header destroyed), page by page; ``unreached`` as
    ``carve_damaged_leaves`` takes it."""
    if unreached is None:
        reached = db.reachable([o.rootpage for o in schema.objects if o.rootpage] + [1])
        unreached = [n for n in range(1, db.page_count + 1) if n not in reached]
    for n in unreached:
        try:
            if db.page_kind(n) in BTREE_TYPES:
                continue
        except PageFormatError:
            continue
        rows = _carve(db, n)
        if rows:
            yield rows


def _all_fit(schema: Schema, name: str, rows: list[Row], counts: set[int]) -> bool:
    obj = schema.by_name(name)
    return obj is not None and all(_fits_whole(obj, values, counts) for _, values in rows)


def _one_version(rows: list[Row]) -> list[Row]:
    """Rows by rowid, a rowid carved twice with different records left out: which
    one is current (and which a stale copy) cannot be told."""
    by: dict[int, list[list[Any]]] = {}
    for rowid, values in rows:
        by.setdefault(rowid, []).append(values)
    return [(r, vs[0]) for r, vs in sorted(by.items()) if all(v == vs[0] for v in vs)]


def survey_leaves(db: DatabaseFile, leaves: list[int]) -> tuple[list[int], list[int], set[int]]:
    """Each of the table ``leaves`` read once: (those whose header and cell pointers
    read but whose cells do not hold rowids in increasing order, or do not fit in the
    page (garbled cells): a scan through SQLite can stop at such a cell, or seek past
    the cells after it; those whose cell pointers do not read; the field counts of the
    records in the cells of the other leaves, read from each record's header alone (a
    cell whose header does not read is passed over))."""
    garbled = []
    unreadable = []
    counts: set[int] = set()
    for n in leaves:
        pg = db.page(n)
        try:
            offsets = db._offsets_of(n, pg, _header_of(n, pg))
        except (PageFormatError, struct.error, IndexError):
            unreadable.append(n)  # carved whole
            continue
        fields: set[int] = set()
        try:
            prev = None
            used = 0
            for off in offsets:
                size, pos = varint(pg, off)
                rowid, pos = varint(pg, pos)
                local = db._local_size(size, table=True)
                end = pos + local + (4 if local < size else 0)
                if end > db.usable or (prev is not None and rowid <= prev):
                    raise PageFormatError(f"page {n}: garbled cell at {off}")
                prev = rowid
                used += end - off
                record = pg[pos : pos + min(size, local)]
                with contextlib.suppress(PageFormatError, struct.error, IndexError):
                    hsize, at = varint(record, 0)
                    if 0 < hsize <= len(record):
                        fields.add(_header_fields(record, at, hsize))
            if not _space_accounted(db, n, pg, used):
                raise PageFormatError(f"page {n}: its cells and free space do not fill it")
        except (PageFormatError, struct.error, IndexError):
            garbled.append(n)
            continue
        counts |= fields
    return garbled, unreadable, counts


def _space_accounted(db: DatabaseFile, n: int, pg: bytes, used: int) -> bool:
    """Do the cells the pointers name (``used`` bytes), the free blocks and the
    fragmented bytes fill the content area of leaf ``n`` exactly, as SQLite keeps
    them? A pointer that a bit flip moved lands inside another cell or in free space:
    the cell it named is then reached by no pointer, and the bytes no longer add up."""
    h = 100 if n == 1 else 0
    start = int.from_bytes(pg[h + 5 : h + 7], "big") or 65536
    free = pg[h + 7]
    block = int.from_bytes(pg[h + 1 : h + 3], "big")
    seen = 0
    while block and seen < db.usable:
        if block + 4 > db.usable:
            return False
        free += int.from_bytes(pg[block + 2 : block + 4], "big")
        block = int.from_bytes(pg[block : block + 2], "big")
        seen += 1
    return used + free == db.usable - start


def _fits_whole(obj: SchemaObject, values: list[Any], counts: set[int]) -> bool:
    """Does a carved record fit ``obj`` (``record_fits``) with a field count its
    table's readable rows show (``counts``: every column stored, or as many as rows
    written before an ``ALTER TABLE ADD COLUMN`` hold)?"""
    return len(values) in counts and record_fits(obj, values)


def _carve(db: DatabaseFile, n: int) -> list[Row]:
    pg = db.page(n)
    out: list[Row] = []
    off = 8  # past the smallest leaf header
    while off < db.usable - 3:
        try:
            size, pos = varint(pg, off)
            rowid, pos = varint(pg, pos)
            end = pos + size
            local = size > 0 and end <= db.usable and db._local_size(size, table=True) == size
            if local and rowid > 0:
                record = db.record(bytes(pg[pos:end]))
                if not db.runs_into_zeros(n, off):
                    out.append((rowid, record))
                off = end
                continue
        except (PageFormatError, struct.error, IndexError, UnicodeDecodeError):
            pass
        off += 1
    return out


_HIGH_BIT_RUN = re.compile(rb"[\x80-\xff]{8}")
_LOW_BYTES = bytes(range(0x80))


def _header_fields(record: bytes, at: int, hsize: int) -> int:
    """How many serial types the record header ``record[at:hsize]`` holds: one per
    varint. Each varint of at most 8 bytes ends in the one byte of it whose high bit
    is clear, so they are counted in C; a header with a 9-byte varint or whose last
    varint runs past its end is read varint by varint (raising as ``varint`` does)."""
    header = record[at:hsize]
    if hsize <= len(record) and header and header[-1] < 0x80 and not _HIGH_BIT_RUN.search(header):
        return len(header) - len(header.translate(None, _LOW_BYTES))
    fields = 0
    while at < hsize:
        _, at = varint(record, at)
        fields += 1
    return fields


# -- leaves no b-tree reaches, given to a table by their records' shape -------------


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
    with DatabaseFile(path) as db:
        if unreached is not None:
            leaves = []
            for n in unreached:
                try:
                    if db.page_kind(n) == PAGE_TABLE_LEAF:
                        leaves.append(n)
                except PageFormatError:
                    continue
            return _assign(db, schema, tables, leaves)
        roots = [o.rootpage for o in schema.objects if o.rootpage] + [1]
        return _assign(db, schema, tables, orphan_table_leaves(db, roots))


def rowid_tables(schema: Schema) -> list[SchemaObject]:
    """The tables of ``schema`` that keep rows in a rowid b-tree of their own (FTS
    shadow tables included): the tables a leaf read by its shape may belong to."""
    return [
        o
        for o in schema.tables()
        if o.rootpage and not o.without_rowid and not o.is_virtual and o.stored_columns
    ]


def _assign(
    db: DatabaseFile, schema: Schema, tables: list[str], leaves: list[int]
) -> dict[str, list[Row]]:
    candidates = rowid_tables(schema)
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
