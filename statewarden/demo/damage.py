"""Byte damage to a closed database file: the phantom row and FTS damage of docs/stories.md.

A small reader of SQLite's file format (pages, b-tree children, leaf rowids) that shares
no code with ``statewarden/recovery/decoding/pages.py``, and two edits made with it:

- :func:`duplicate_cell`: one cell pointer of a table leaf written twice, so the same
  row is stored twice with one rowid (a *phantom row*); every index still lists it once.
- :func:`point_cells_at_first`: every cell pointer of one leaf aimed at its first cell,
  hundreds of "out of order" errors (in an FTS shadow table: FTS damage that fills a
  capped ``quick_check`` before it reaches the phantom row).

Both edit only a closed file that no process holds. ``statewardenctl demo`` and the
corruption lab (``lab/corruption.py``) use them.
"""

from __future__ import annotations

import struct
from pathlib import Path

import apsw

PAGE_TABLE_INTERIOR = 0x05
PAGE_TABLE_LEAF = 0x0D
PAGE_INDEX_INTERIOR = 0x02
PAGE_INDEX_LEAF = 0x0A
# A leaf's header is 8 bytes, an interior page's 12; page 1 starts after the file header.
FILE_HEADER_BYTES = 100


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the SQLite varint at ``pos``."""
    value = 0
    for i in range(8):
        b = buf[pos + i]
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            return value, pos + i + 1
    return (value << 8) | buf[pos + 8], pos + 9


class PristineFile:
    """Read-only view of a closed database file: pages, b-tree children, leaf rowids."""

    def __init__(self, path: Path) -> None:
        self.data = path.read_bytes()
        (raw,) = struct.unpack(">H", self.data[16:18])
        self.page_size = 65536 if raw == 1 else raw

    def page(self, n: int) -> bytes:
        return self.data[(n - 1) * self.page_size : n * self.page_size]

    def _hdr(self, n: int) -> int:
        return FILE_HEADER_BYTES if n == 1 else 0

    def page_type(self, n: int) -> int:
        return self.page(n)[self._hdr(n)]

    def cell_offsets(self, n: int) -> list[int]:
        pg, h = self.page(n), self._hdr(n)
        (count,) = struct.unpack(">H", pg[h + 3 : h + 5])
        start = h + (12 if pg[h] in (PAGE_TABLE_INTERIOR, PAGE_INDEX_INTERIOR) else 8)
        return [struct.unpack(">H", pg[start + 2 * i : start + 2 * i + 2])[0] for i in range(count)]

    def children(self, n: int) -> list[int]:
        """Child pages of an interior page, left to right (right-most pointer last)."""
        pg, h = self.page(n), self._hdr(n)
        if pg[h] not in (PAGE_TABLE_INTERIOR, PAGE_INDEX_INTERIOR):
            return []
        out = [struct.unpack(">I", pg[off : off + 4])[0] for off in self.cell_offsets(n)]
        out.append(struct.unpack(">I", pg[h + 8 : h + 12])[0])
        return out

    def leaf_rowids(self, n: int) -> list[int]:
        pg = self.page(n)
        rowids = []
        for off in self.cell_offsets(n):
            _, pos = varint(pg, off)
            rowid, _ = varint(pg, pos)
            rowids.append(rowid)
        return rowids

    def tree_pages(self, root: int) -> tuple[list[int], list[int]]:
        """(interior pages, leaf pages) of the b-tree at ``root``, leaves in key order."""
        interior: list[int] = []
        leaves: list[int] = []

        def walk(n: int) -> None:
            if self.page_type(n) in (PAGE_TABLE_INTERIOR, PAGE_INDEX_INTERIOR):
                interior.append(n)
                for child in self.children(n):
                    walk(child)
            else:
                leaves.append(n)

        walk(root)
        return interior, leaves


def schema_roots(path: Path) -> dict[str, int]:
    """Root page of every b-tree in a closed file, by name."""
    conn = apsw.Connection(
        f"file:{path}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        return {
            str(name): int(root)
            for name, root in conn.execute("SELECT name, rootpage FROM sqlite_schema")
            if root
        }
    finally:
        conn.close()


def write_at(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def duplicate_cell(db: Path, table: str = "sessions", cell: int = 5) -> tuple[int, int]:
    """Store one row of ``table`` twice: a phantom row. Returns (leaf page, rowid).

    In the first leaf with room, the pointer array gets one more entry (a copy of
    pointer ``cell``, placed right after it) and the cell count goes up by one; the
    cell itself is not touched, so every index still holds the row once.
    """
    pf = PristineFile(db)
    _, leaves = pf.tree_pages(schema_roots(db)[table])
    for leaf in leaves:
        pg = pf.page(leaf)
        offs = pf.cell_offsets(leaf)
        (content_start,) = struct.unpack(">H", pg[5:7])
        free_gap = content_start - (8 + 2 * len(offs))
        if len(offs) > cell and free_gap >= 2:
            break
    else:
        raise LookupError(f"no {table} leaf with room for one more cell pointer")
    rowid = pf.leaf_rowids(leaf)[cell]
    new_offs = [*offs[: cell + 1], offs[cell], *offs[cell + 1 :]]
    base = (leaf - 1) * pf.page_size
    write_at(db, base + 3, struct.pack(">H", len(new_offs)))
    write_at(db, base + 8, b"".join(struct.pack(">H", o) for o in new_offs))
    return leaf, rowid


def point_cells_at_first(
    db: Path, tree: str = "messages_fts_trigram_docsize", which: int = 1
) -> tuple[int, int]:
    """Aim every cell pointer of leaf ``which`` of ``tree`` at its first cell.
    Returns (leaf page, number of pointers)."""
    pf = PristineFile(db)
    _, leaves = pf.tree_pages(schema_roots(db)[tree])
    leaf = leaves[which]
    offs = pf.cell_offsets(leaf)
    write_at(db, (leaf - 1) * pf.page_size + 8, struct.pack(">H", offs[0]) * len(offs))
    return leaf, len(offs)
