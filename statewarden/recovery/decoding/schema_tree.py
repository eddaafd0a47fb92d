"""The schema's own b-tree read raw from page 1, as far as it goes: its records, the
rowids it lacks (schema rows lost with a destroyed leaf), and the highest page its
trees and the freelist reach (what the header's database size must cover). Call with
no SQLite connection open to the file (docs/safety.md rule 2)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.pages import DatabaseFile, _tree_leaves
from statewarden.recovery.decoding.schema_root import _schema_record


def schema_records(path: Path) -> list[list[Any]]:
    """The ``sqlite_schema`` rows (type, name, tbl_name, rootpage, sql) its b-tree
    from page 1 still reaches, read raw. Call with no SQLite connection open to
    ``path`` (docs/safety.md rule 2)."""
    db = DatabaseFile(path)
    try:
        return [v for _, v in _schema_rows(db) if _schema_record(v)]
    finally:
        db.close()


def _schema_rows(db: DatabaseFile) -> Iterator[tuple[int, list[Any]]]:
    """The rows of the leaves the b-tree from page 1 reaches (none of a leaf that does
    not read)."""
    for n in _tree_leaves(db, 1):
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
    db = DatabaseFile(path)
    try:
        size = db.page_count
        if size >= db.file_pages:
            return None
        db.page_count = db.file_pages
        highest = _highest_reached(db)
        return highest if highest > size else None
    finally:
        db.close()


def highest_reached_with(path: Path, images: dict[int, bytes]) -> int:
    """The highest page the b-trees of the schema or the freelist reach in the file at
    ``path`` with the page ``images`` (page number -> image, a WAL's replayed frames)
    read in place of its pages: the database size those pages make."""
    db = DatabaseFile(path)
    try:
        db.overlay = {n: img for n, img in images.items() if len(img) == db.page_size}
        db.page_count = max([db.file_pages, *db.overlay])
        if 1 in db.overlay:
            db.freelist_trunk = struct.unpack(">I", db.overlay[1][32:36])[0]
        return _highest_reached(db)
    finally:
        db.close()


def _highest_reached(db: DatabaseFile) -> int:
    roots = [1, *(v[3] for _, v in _schema_rows(db) if _schema_record(v) and v[3] > 0)]
    return max(db.reachable(roots), default=0)


def schema_rowid_gaps(path: Path) -> list[tuple[int, int]]:
    """Rowid stretches ``sqlite_schema`` lacks, from 1 to its highest rowid: schema
    rows lost with a destroyed leaf when page 1 was rebuilt from the leaves left
    (``rebuild_schema_root``). SQLite numbers schema rows 1, 2, 3, ...; a stretch
    missing here held objects (tables, indexes) the rebuilt schema no longer names.
    Call with no SQLite connection open to ``path`` (docs/safety.md rule 2)."""
    db = DatabaseFile(path)
    try:
        rowids = {r for r, _ in _schema_rows(db)}
    finally:
        db.close()
    gaps: list[tuple[int, int]] = []
    expect = 1
    for r in sorted(rowids):
        if r > expect:
            gaps.append((expect, r - 1))
        expect = max(expect, r + 1)
    return gaps
