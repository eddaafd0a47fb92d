"""Page 1 rebuilt as the root of the ``sqlite_schema`` leaves still intact, and what
tells a ``sqlite_schema`` record (five fields: a type SQLite knows, three strings, an
integer, SQL text) from other rows. The schema's own b-tree read raw from page 1, as far
as it goes: its records, the rowids it lacks (schema rows lost with a destroyed leaf),
and the highest page its trees and the freelist reach (what the header's database size
must cover).

Call only with no SQLite connection open to the file in this process (docs/safety.md
rule 2)."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.page_format import (
    PAGE_TABLE_INTERIOR,
    PAGE_TABLE_LEAF,
    encode_varint,
    place_cells,
    varint,
)
from statewarden.recovery.decoding.pages import ZERO_SCAN_CHUNK, DatabaseFile, table_tree

SCHEMA_TYPES = ("table", "index", "view", "trigger")


def is_schema_record(values: list[Any]) -> bool:
    """Does this record look like a row of ``sqlite_schema`` (type, name, tbl_name,
    rootpage, sql)?"""
    if len(values) != 5:
        return False
    kind, name, tbl, root, sql = values
    return (
        kind in SCHEMA_TYPES
        and isinstance(name, str)
        and isinstance(tbl, str)
        and isinstance(root, int)
        and (sql is None or isinstance(sql, str))
    )


def rebuild_schema_root(path: Path) -> int:
    """Rewrite page 1 of a private copy as the interior root of the ``sqlite_schema``
    leaves found intact elsewhere in the file; return how many leaves it points to.

    When ``sqlite_schema`` grew past one page, page 1 is an interior page and its rows
    live on leaves; if page 1 is damaged past its 100-byte header, those leaves still
    hold every object's name, SQL and root page. The leaves are recognised by their
    records (five fields: a type SQLite knows, three strings, an integer, SQL text),
    freelist pages excluded, and must not overlap in rowid. The header is kept. Returns
    0 (and writes nothing) when no such leaf exists. Call with no SQLite connection
    open to ``path`` (docs/safety.md rule 2).
    """
    with DatabaseFile(path) as db:
        leaves = _schema_leaves(db)
        leaves.sort()
        if any(a[1] >= b[0] for a, b in itertools.pairwise(leaves)):
            return 0  # two versions of one stretch: which is current cannot be told
        if not leaves:
            return 0
        page = bytearray(db.page(1))
        page_size = db.page_size
        usable = db.usable
    cells = [struct.pack(">I", n) + encode_varint(hi) for _, hi, n in leaves[:-1]]
    content, pointers = place_cells(page, cells, usable)
    h = 100
    if h + 12 + 2 * len(cells) > content:
        return 0  # pragma: no cover - thousands of schema leaves
    page[h : h + 12] = struct.pack(
        ">BHHHBI", PAGE_TABLE_INTERIOR, 0, len(cells), content, 0, leaves[-1][2]
    )
    page[h + 12 : h + 12 + 2 * len(cells)] = b"".join(struct.pack(">H", p) for p in pointers)
    page[h + 12 + 2 * len(cells) : content] = bytes(content - (h + 12 + 2 * len(cells)))
    with open(path, "r+b") as f:
        f.seek(0)
        f.write(bytes(page[:page_size]))
    return len(leaves)


def _schema_leaves(db: DatabaseFile) -> list[tuple[int, int, int]]:
    """(first rowid, last rowid, page) of each table leaf past page 1 whose every cell
    decodes to a ``sqlite_schema`` record, freelist pages excluded. The pages are read
    in one stream of page-aligned chunks; a leaf is decoded only when its first cell
    may hold such a record (``_may_open_schema_leaf``), so a file of millions of
    message leaves costs one read of its pages, not a decoding of every row."""
    free = db.freelist_pages()
    words = tuple(w.encode(db.encoding) for w in SCHEMA_TYPES)
    ps = db.page_size
    per_chunk = max(1, ZERO_SCAN_CHUNK // ps)
    leaves: list[tuple[int, int, int]] = []
    for first in range(2, db.page_count + 1, per_chunk):
        data = db.raw_pages(first, min(per_chunk, db.page_count - first + 1))
        for i in range(len(data) // ps):
            n, base = first + i, i * ps
            if data[base] != PAGE_TABLE_LEAF or n in free:
                continue
            if not _may_open_schema_leaf(db, data[base : base + ps], words):
                continue
            try:
                rows, bad = db.leaf_rows(n)
            except PageFormatError:
                continue
            if rows and not bad and all(is_schema_record(v) for _, v in rows):
                rowids = [r for r, _ in rows]
                leaves.append((min(rowids), max(rowids), n))
    return leaves


def _may_open_schema_leaf(db: DatabaseFile, pg: bytes, words: tuple[bytes, ...]) -> bool:
    """Could the table leaf ``pg`` (not page 1) be a ``sqlite_schema`` leaf? False only
    when its first cell surely does not decode to a schema record (``is_schema_record``):
    no cell, or a record held in the cell whose header does not give five columns, the
    first a text that is one of ``words`` (the schema types in the file's encoding).
    Whatever cannot be told from the cell's own bytes is left to the full decoding."""
    if not (pg[3] << 8) | pg[4]:
        return False  # no cell: no row
    try:
        off = (pg[8] << 8) | pg[9]
        size, pos = varint(pg, off)
        _, pos = varint(pg, pos)
        local = pg[pos : pos + min(db._local_size(size, table=True), db.usable - pos)]
        hsize, at = varint(local, 0)
        if not 0 < hsize <= len(local):
            return True
        types = []
        while at < hsize:
            t, at = varint(local, at)
            types.append(t)
    except PageFormatError:
        return True
    if len(types) != 5:
        return False
    width = (types[0] - 13) // 2
    if types[0] < 13 or types[0] % 2 == 0 or not any(len(w) == width for w in words):
        return False
    if hsize + width > len(local):
        return True
    return local[hsize : hsize + width] in words


# -- the schema's own b-tree read raw from page 1 -----------------------------------


def schema_records(path: Path) -> list[list[Any]]:
    """The ``sqlite_schema`` rows (type, name, tbl_name, rootpage, sql) its b-tree
    from page 1 still reaches, read raw. Call with no SQLite connection open to
    ``path`` (docs/safety.md rule 2)."""
    with DatabaseFile(path) as db:
        return [v for _, v in _schema_rows(db) if is_schema_record(v)]


def _schema_rows(db: DatabaseFile) -> Iterator[tuple[int, list[Any]]]:
    """The rows of the leaves the b-tree from page 1 reaches (none of a leaf that does
    not read)."""
    for n in table_tree(db, 1).leaves:
        try:
            rows, _bad = db.leaf_rows(n)
        except (PageFormatError, struct.error, IndexError):
            continue
        yield from rows


def reached_past_size(path: Path) -> int | None:
    """The highest page past the header's database size that the b-trees of the
    schema (read as far as the file goes) or the freelist reach, None if none does
    (or the header's size is not less than the file's). Such a page is a live page:
    the header's size is then the damaged field, not the tail."""
    with DatabaseFile(path) as db:
        size = db.page_count
        if size >= db.file_pages:
            return None
        db.page_count = db.file_pages
        highest = _highest_reached(db)
        return highest if highest > size else None


def highest_reached_with(path: Path, images: dict[int, bytes]) -> int:
    """The highest page the b-trees of the schema or the freelist reach in the file at
    ``path`` with the page ``images`` (page number -> image, a WAL's replayed frames)
    read in place of its pages: the database size those pages make."""
    with DatabaseFile(path) as db:
        db.overlay = {n: img for n, img in images.items() if len(img) == db.page_size}
        db.page_count = max([db.file_pages, *db.overlay])
        if 1 in db.overlay:
            db.freelist_trunk = struct.unpack(">I", db.overlay[1][32:36])[0]
        return _highest_reached(db)


def _highest_reached(db: DatabaseFile) -> int:
    roots = [1, *(v[3] for _, v in _schema_rows(db) if is_schema_record(v) and v[3] > 0)]
    return max(db.reachable(roots), default=0)


def schema_rowid_gaps(path: Path) -> list[tuple[int, int]]:
    """Rowid stretches ``sqlite_schema`` lacks, from 1 to its highest rowid: schema
    rows lost with a destroyed leaf when page 1 was rebuilt from the leaves left
    (``rebuild_schema_root``). SQLite numbers schema rows 1, 2, 3, ...; a stretch
    missing here held objects (tables, indexes) the rebuilt schema no longer names.
    Call with no SQLite connection open to ``path`` (docs/safety.md rule 2)."""
    with DatabaseFile(path) as db:
        rowids = {r for r, _ in _schema_rows(db)}
    gaps: list[tuple[int, int]] = []
    expect = 1
    for r in sorted(rowids):
        if r > expect:
            gaps.append((expect, r - 1))
        expect = max(expect, r + 1)
    return gaps
