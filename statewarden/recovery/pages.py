"""Page-level salvage: rows that the b-tree can no longer reach, decoded from the file.

A damaged interior page orphans every leaf below it: the rows are still on disk but no
query can get to them. SQLite's own ``.recover`` needs the ``sqlite_dbpage`` virtual
table, which neither Debian's SQLite nor apsw's bundled one has, so this module reads
the file itself (sqlite.org/fileformat2.html):

1. walk every b-tree from the roots in ``sqlite_schema`` and the freelist, marking the
   pages they reach (a page that fails to parse is simply not descended into);
2. every table-leaf page (type 0x0D) that nothing reaches is an orphan; its cells are
   decoded (varints, the record format, overflow chains) into ``(rowid, values)``;
3. an orphan leaf is given to the wanted table whose column count its records fit
   (records never have more fields than the table has columns; fewer after an
   ``ALTER TABLE ADD COLUMN``). Freelist pages are never read for rows: they hold
   deleted data.

Call only with no SQLite connection open to ``path`` in this process (docs/safety.md rule 2).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Any

from statewarden.recovery.schema import Schema
from statewarden.sqlite import parse_header

PAGE_TABLE_INTERIOR = 0x05
PAGE_TABLE_LEAF = 0x0D
PAGE_INDEX_INTERIOR = 0x02
PAGE_INDEX_LEAF = 0x0A
_INTERIOR = (PAGE_TABLE_INTERIOR, PAGE_INDEX_INTERIOR)
_BTREE_TYPES = (PAGE_TABLE_INTERIOR, PAGE_TABLE_LEAF, PAGE_INDEX_INTERIOR, PAGE_INDEX_LEAF)
MAX_OVERFLOW_PAGES_PER_CELL = 1 << 20

Row = tuple[int, list[Any]]


class PageFormatError(ValueError):
    """A page or cell does not follow the file format."""


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the big-endian varint at ``pos`` (1-9 bytes)."""
    value = 0
    for i in range(8):
        if pos + i >= len(buf):
            raise PageFormatError("varint runs past the end of the page")
        b = buf[pos + i]
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            return value, pos + i + 1
    if pos + 8 >= len(buf):
        raise PageFormatError("varint runs past the end of the page")
    value = (value << 8) | buf[pos + 8]
    if value >= 1 << 63:
        value -= 1 << 64
    return value, pos + 9


class DatabaseFile:
    """The pages of a closed database file, read with plain reads."""

    def __init__(self, path: Path) -> None:
        # Mapped, not read: a multi-gigabyte database need not fit in memory.
        with open(path, "rb") as f:
            self.data: bytes | mmap.mmap = (
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                if os.fstat(f.fileno()).st_size
                else b""
            )
        header = parse_header(bytes(self.data[:100]), str(path))
        self.page_size = header.page_size
        self.usable = self.page_size - self.data[20]
        self.encoding = header.text_encoding
        self.page_count = len(self.data) // self.page_size
        self.freelist_trunk = header.freelist_trunk

    def page(self, n: int) -> bytes:
        if not 1 <= n <= self.page_count:
            raise PageFormatError(f"page {n} is outside the file")
        return bytes(self.data[(n - 1) * self.page_size : n * self.page_size])

    def close(self) -> None:
        if isinstance(self.data, mmap.mmap):
            self.data.close()

    def btree_header(self, n: int) -> tuple[int, int, int]:
        """(page type, header offset, cell count) of a b-tree page."""
        pg = self.page(n)
        h = 100 if n == 1 else 0
        kind = pg[h]
        if kind not in _BTREE_TYPES:
            raise PageFormatError(f"page {n} is not a b-tree page (type {kind})")
        (count,) = struct.unpack(">H", pg[h + 3 : h + 5])
        return kind, h, count

    def cell_offsets(self, n: int) -> list[int]:
        kind, h, count = self.btree_header(n)
        pg = self.page(n)
        start = h + (12 if kind in _INTERIOR else 8)
        if start + 2 * count > self.usable:
            raise PageFormatError(f"page {n}: cell pointer array overflows the page")
        offs = [struct.unpack(">H", pg[start + 2 * i : start + 2 * i + 2])[0] for i in range(count)]
        if any(not start + 2 * count <= o < self.usable for o in offs):
            raise PageFormatError(f"page {n}: a cell pointer points outside the content area")
        return offs

    def children(self, n: int) -> list[int]:
        kind, h, _ = self.btree_header(n)
        if kind not in _INTERIOR:
            return []
        pg = self.page(n)
        out = [struct.unpack(">I", pg[o : o + 4])[0] for o in self.cell_offsets(n)]
        out.append(struct.unpack(">I", pg[h + 8 : h + 12])[0])
        return out

    # -- reachability ----------------------------------------------------------------

    def reachable(self, roots: list[int]) -> set[int]:
        """Pages reached from the b-tree roots (with overflow pages) and the freelist."""
        seen: set[int] = set()
        stack = [r for r in roots if r]
        while stack:
            n = stack.pop()
            if n in seen or not 1 <= n <= self.page_count:
                continue
            seen.add(n)
            try:
                kind, _, _ = self.btree_header(n)
                stack.extend(self.children(n))
                if kind in (PAGE_TABLE_LEAF, PAGE_INDEX_LEAF, PAGE_INDEX_INTERIOR):
                    for off in self.cell_offsets(n):
                        seen.update(self._overflow_pages_of(n, kind, off))
            except PageFormatError:
                continue
        seen.update(self.freelist_pages())
        return seen

    def freelist_pages(self) -> set[int]:
        out: set[int] = set()
        trunk = self.freelist_trunk
        while trunk and trunk not in out and 1 <= trunk <= self.page_count:
            out.add(trunk)
            pg = self.page(trunk)
            nxt, count = struct.unpack(">II", pg[:8])
            for i in range(min(count, (self.usable - 8) // 4)):
                (leaf,) = struct.unpack(">I", pg[8 + 4 * i : 12 + 4 * i])
                out.add(leaf)
            trunk = nxt
        return out

    def _overflow_pages_of(self, n: int, kind: int, off: int) -> list[int]:
        pg = self.page(n)
        pos = off + (4 if kind == PAGE_INDEX_INTERIOR else 0)
        size, pos = varint(pg, pos)
        if kind == PAGE_TABLE_LEAF:
            _, pos = varint(pg, pos)
        local = self._local_size(size, table=kind == PAGE_TABLE_LEAF)
        if local == size:
            return []
        (first,) = struct.unpack(">I", pg[pos + local : pos + local + 4])
        out: list[int] = []
        while first and len(out) < MAX_OVERFLOW_PAGES_PER_CELL and 1 <= first <= self.page_count:
            out.append(first)
            (first,) = struct.unpack(">I", self.page(first)[:4])
        return out

    def _local_size(self, payload: int, *, table: bool) -> int:
        u = self.usable
        x = u - 35 if table else ((u - 12) * 64 // 255) - 23
        if payload <= x:
            return payload
        m = ((u - 12) * 32 // 255) - 23
        k = m + (payload - m) % (u - 4)
        return k if k <= x else m

    # -- decoding --------------------------------------------------------------------

    def leaf_rows(self, n: int) -> tuple[list[tuple[int, list[Any]]], int]:
        """Decoded cells of a table leaf: (rows, cells that failed to decode)."""
        kind, _, _ = self.btree_header(n)
        if kind != PAGE_TABLE_LEAF:
            raise PageFormatError(f"page {n} is not a table leaf")
        rows, bad = [], 0
        for off in self.cell_offsets(n):
            try:
                rows.append(self._table_cell(n, off))
            except (PageFormatError, struct.error, UnicodeDecodeError, IndexError):
                bad += 1
        return rows, bad

    def _table_cell(self, n: int, off: int) -> tuple[int, list[Any]]:
        pg = self.page(n)
        size, pos = varint(pg, off)
        rowid, pos = varint(pg, pos)
        local = self._local_size(size, table=True)
        if pos + local > self.usable:
            raise PageFormatError(f"page {n}: cell at {off} runs past the page")
        payload = bytearray(pg[pos : pos + local])
        if local < size:
            (nxt,) = struct.unpack(">I", pg[pos + local : pos + local + 4])
            hops = 0
            while len(payload) < size:
                if not nxt or hops > MAX_OVERFLOW_PAGES_PER_CELL:
                    raise PageFormatError(f"page {n}: overflow chain ends early")
                ov = self.page(nxt)
                (following,) = struct.unpack(">I", ov[:4])
                payload += ov[4 : min(self.usable, 4 + size - len(payload))]
                nxt = following
                hops += 1
        return rowid, self.record(bytes(payload))

    def record(self, payload: bytes) -> list[Any]:
        hsize, pos = varint(payload, 0)
        if not 0 < hsize <= len(payload):
            raise PageFormatError("record header size out of range")
        types = []
        while pos < hsize:
            t, pos = varint(payload, pos)
            types.append(t)
        values: list[Any] = []
        body = hsize
        for t in types:
            value, body = self._value(payload, body, t)
            values.append(value)
        if body != len(payload):
            raise PageFormatError("record body length does not match its header")
        return values

    def _value(self, p: bytes, pos: int, t: int) -> tuple[Any, int]:
        if t == 0:
            return None, pos
        if 1 <= t <= 6:
            width = (0, 1, 2, 3, 4, 6, 8)[t]
            if pos + width > len(p):
                raise PageFormatError("integer runs past the record")
            return int.from_bytes(p[pos : pos + width], "big", signed=True), pos + width
        if t == 7:
            if pos + 8 > len(p):
                raise PageFormatError("real runs past the record")
            return struct.unpack(">d", p[pos : pos + 8])[0], pos + 8
        if t in (8, 9):
            return t - 8, pos
        if t in (10, 11):
            raise PageFormatError(f"reserved serial type {t}")
        length = (t - 12) // 2 if t % 2 == 0 else (t - 13) // 2
        if pos + length > len(p):
            raise PageFormatError("blob or text runs past the record")
        raw = p[pos : pos + length]
        if t % 2 == 0:
            return bytes(raw), pos + length
        return raw.decode(self.encoding), pos + length


def orphan_table_leaves(db: DatabaseFile, roots: list[int]) -> list[int]:
    reached = db.reachable(roots)
    out = []
    for n in range(1, db.page_count + 1):
        if n in reached:
            continue
        try:
            kind, _, _ = db.btree_header(n)
        except PageFormatError:
            continue
        if kind == PAGE_TABLE_LEAF:
            out.append(n)
    return out


def salvage_rows(path: Path, schema: Schema, tables: list[str]) -> dict[str, list[Row]]:
    """Rows on orphaned table leaves, assigned to the wanted ``tables`` by record shape.

    A leaf goes to a table when every decodable record has at most as many fields as
    the table has stored columns and at least one record has exactly that many; when
    several wanted tables fit, the leaf is left out (it cannot be attributed safely).
    """
    db = DatabaseFile(path)
    try:
        return _salvage(db, schema, tables)
    finally:
        db.close()


def _salvage(db: DatabaseFile, schema: Schema, tables: list[str]) -> dict[str, list[Row]]:
    roots = [o.rootpage for o in schema.objects if o.rootpage] + [1]
    widths = {}
    for name in tables:
        obj = schema.by_name(name)
        if obj is not None and not obj.without_rowid:
            widths[name] = len(obj.stored_columns)
    out: dict[str, list[Row]] = {name: [] for name in widths}
    for leaf in orphan_table_leaves(db, roots):
        try:
            rows, _bad = db.leaf_rows(leaf)
        except PageFormatError:
            continue
        if not rows:
            continue
        most = max(len(v) for _, v in rows)
        fits = [name for name, w in widths.items() if most == w]
        if len(fits) == 1:
            out[fits[0]].extend(rows)
    for rows in out.values():
        rows.sort(key=lambda r: r[0])
    return out
