"""The pages of a closed database file read with plain reads (SQLite's own
``.recover`` needs the ``sqlite_dbpage`` virtual table, which neither Debian's SQLite
nor apsw's bundled one has): ``DatabaseFile`` reads a page when wanted, decodes a
table leaf's cells (varints, the record format, overflow chains) into ``(rowid,
values)`` and tells the pages the b-trees and the freelist reach; the walks down one
table's b-tree (the leaf that holds a rowid, the leaves it reaches) read through it.

Call only with no SQLite connection open to ``path`` in this process (docs/safety.md rule 2).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.page_format import (
    _INTERIOR,
    MAX_OVERFLOW_PAGES_PER_CELL,
    PAGE_INDEX_INTERIOR,
    PAGE_TABLE_INTERIOR,
    PAGE_TABLE_LEAF,
    _header_of,
    _whole_by_size,
    table_cell_start,
    varint,
)
from statewarden.recovery.decoding.zeroed_columns import (
    _columns_hit,
    _payload_segments,
    _zeroed_runs,
)
from statewarden.recovery.decoding.zeroed_sectors import PageCensus, _take_census, zeroed_sectors_of
from statewarden.sqlite import parse_header


class DatabaseFile:
    """The pages of a closed database file, read with plain reads."""

    def __init__(self, path: Path, page_size: int | None = None) -> None:
        """``page_size``: read a file whose header is destroyed with this page size (no
        reserved bytes, UTF-8, no freelist known) instead of the header's."""
        # Each page read when wanted (pread), neither mapped nor read whole: memory stays
        # bounded whatever the file's size (a mapping's pages count as the process's
        # memory once touched).
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(self._fd).st_size
            first = os.pread(self._fd, 100, 0)
            header = None if page_size else parse_header(first, str(path))
        except BaseException:
            os.close(self._fd)
            raise
        if header is None:
            assert page_size is not None
            self.page_size = page_size
            self.usable = page_size
            self.encoding = "utf-8"
            self.freelist_trunk = 0
        else:
            self.page_size = header.page_size
            self.usable = self.page_size - first[20]
            self.encoding = header.text_encoding
            self.freelist_trunk = header.freelist_trunk
        self.file_pages = self.page_count = size // self.page_size
        if header is not None and header.page_count_valid and header.page_count < self.page_count:
            # Pages past the header's database size are no pages of the database: SQLite
            # reads none of them (a stale tail, left by a crash between a checkpoint and
            # its truncate). ``reached_past_size`` tells when the size field is the damage.
            self.page_count = header.page_count
        # Newer page images (from WAL frames) read in place of the file's pages.
        self.overlay: dict[int, bytes] = {}
        self._zeroed: dict[int, list[tuple[int, int]]] | None = None
        self._census: PageCensus | None = None

    def runs_into_zeros(self, n: int, off: int) -> bool:
        """Does the table-leaf cell at ``off`` of page ``n`` run into a zeroed sector
        (``zeroed_cells``)? Its record would decode with the zeros as its values."""
        try:
            _, segs = _payload_segments(self, n, off)
        except (PageFormatError, struct.error, IndexError):
            return False
        segs = [s for s in segs if s[2] not in self.overlay]
        # Only the cell's own pages are searched (once each): never the whole file.
        if self._zeroed is None:
            self._zeroed = {}
        # (not a set difference with the keys: that walks every page looked at so far)
        wanted = {s[2] for s in segs if s[2] not in self._zeroed}
        found = zeroed_sectors_of(self, wanted)
        for page in wanted:
            self._zeroed[page] = found.get(page, [])
        runs = _zeroed_runs(segs, self._zeroed)
        return bool(runs) and _columns_hit(self, segs, runs) != []

    def page(self, n: int) -> bytes:
        if n in self.overlay:
            return self.overlay[n]
        if not 1 <= n <= self.page_count:
            raise PageFormatError(f"page {n} is outside the file")
        return os.pread(self._fd, self.page_size, (n - 1) * self.page_size)

    def raw_pages(self, first: int, count: int) -> bytes:
        """Pages ``first`` .. ``first + count - 1`` as the file holds them (no overlay)."""
        return os.pread(self._fd, count * self.page_size, (first - 1) * self.page_size)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def btree_header(self, n: int) -> tuple[int, int, int]:
        """(page type, header offset, cell count) of a b-tree page."""
        return _header_of(n, self.page(n))

    def cell_offsets(self, n: int) -> list[int]:
        pg = self.page(n)
        return self._offsets_of(n, pg, _header_of(n, pg))

    def _offsets_of(self, n: int, pg: bytes, header: tuple[int, int, int]) -> list[int]:
        """:meth:`cell_offsets` of page ``n`` read as ``pg``, its header ``header``."""
        kind, h, count = header
        start = h + (12 if kind in _INTERIOR else 8)
        end = start + 2 * count
        if end > self.usable:
            raise PageFormatError(f"page {n}: cell pointer array overflows the page")
        offs = list(struct.unpack_from(f">{count}H", pg, start))
        if offs and not (end <= min(offs) and max(offs) < self.usable):
            raise PageFormatError(f"page {n}: a cell pointer points outside the content area")
        return offs

    def children(self, n: int) -> list[int]:
        pg = self.page(n)
        header = _header_of(n, pg)
        if header[0] not in _INTERIOR:
            return []
        return self._children_of(n, pg, header)

    def _children_of(self, n: int, pg: bytes, header: tuple[int, int, int]) -> list[int]:
        """:meth:`children` of the interior page ``n`` read as ``pg``."""
        out = [struct.unpack(">I", pg[o : o + 4])[0] for o in self._offsets_of(n, pg, header)]
        out.append(struct.unpack(">I", pg[header[1] + 8 : header[1] + 12])[0])
        return out

    def page_kind(self, n: int) -> int:
        """The type byte of page ``n`` (``btree_header``'s first field, whether or not
        it names a b-tree page), from the census when one was taken."""
        if n in self.overlay:
            return self.overlay[n][100 if n == 1 else 0]
        if not 1 <= n <= self.page_count:
            raise PageFormatError(f"page {n} is outside the file")
        if self._census is not None and n != 1:
            return self._census.first_words[n - 1] >> 24
        return os.pread(self._fd, 1, (n - 1) * self.page_size + (100 if n == 1 else 0))[0]

    def census(self) -> PageCensus:
        """The file's :class:`PageCensus`, taken on the first call (one sequential read
        of every page)."""
        if self._census is None:
            self._census = _take_census(self)
        return self._census

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
            pg = self.page(n)
            try:
                header = _header_of(n, pg)
                kind = header[0]
                if kind in _INTERIOR:
                    stack.extend(self._children_of(n, pg, header))
                if kind != PAGE_TABLE_INTERIOR:
                    self._add_overflow_pages(n, pg, kind, self._offsets_of(n, pg, header), seen)
            except (PageFormatError, struct.error):
                continue  # (struct.error: a child pointer cut off by the page's end)
        seen.update(self.freelist_pages())
        return seen

    def _add_overflow_pages(
        self, n: int, pg: bytes, kind: int, offsets: list[int], seen: set[int]
    ) -> None:
        """Add to ``seen`` the overflow pages of the cells at ``offsets`` of page ``n``
        (read as ``pg``, of type ``kind``), cell by cell: a cell whose payload runs past
        the page is passed over, a varint that does (PageFormatError) ends the page."""
        table = kind == PAGE_TABLE_LEAF
        most = self._max_local(table=table)
        skip = 4 if kind == PAGE_INDEX_INTERIOR else 0
        # Both varints of a cell this far from the page's end read within the page.
        safe = len(pg) - 18 - skip
        for off in offsets:
            # Most cells hold their payload whole: its size alone says so.
            if off <= safe and _whole_by_size(pg, off + skip, most):
                continue
            try:
                seen.update(self._overflow_pages_of(n, pg, kind, off))
            except (struct.error, IndexError):
                continue  # a garbled cell whose payload runs past the page

    def freelist_pages(self) -> set[int]:
        """The freelist's trunk and leaf pages. A leaf number past the database's pages
        (or 0) is damage of the trunk page that holds it, no page the freelist reaches:
        never evidence that the database is larger than its size says."""
        out: set[int] = set()
        trunk = self.freelist_trunk
        while trunk and trunk not in out and 1 <= trunk <= self.page_count:
            out.add(trunk)
            pg = self.page(trunk)
            nxt, count = struct.unpack(">II", pg[:8])
            for i in range(min(count, (self.usable - 8) // 4)):
                (leaf,) = struct.unpack(">I", pg[8 + 4 * i : 12 + 4 * i])
                if 1 <= leaf <= self.page_count:
                    out.add(leaf)
            trunk = nxt
        return out

    def _overflow_pages_of(self, n: int, pg: bytes, kind: int, off: int) -> list[int]:
        pos = off + (4 if kind == PAGE_INDEX_INTERIOR else 0)
        size, pos = varint(pg, pos)
        if kind == PAGE_TABLE_LEAF:
            _, pos = varint(pg, pos)
        local = self._local_size(size, table=kind == PAGE_TABLE_LEAF)
        if local == size:
            return []
        (first,) = struct.unpack(">I", pg[pos + local : pos + local + 4])
        out: list[int] = []
        chain: set[int] = set()
        # A chain that comes back to a page of its own would only repeat its pages.
        while (
            first
            and first not in chain
            and len(out) < MAX_OVERFLOW_PAGES_PER_CELL
            and 1 <= first <= self.page_count
        ):
            out.append(first)
            chain.add(first)
            (first,) = struct.unpack(">I", self.page(first)[:4])
        return out

    def _max_local(self, *, table: bool) -> int:
        """The largest payload a cell holds whole (no overflow page)."""
        u = self.usable
        return u - 35 if table else ((u - 12) * 64 // 255) - 23

    def _local_size(self, payload: int, *, table: bool) -> int:
        u = self.usable
        x = self._max_local(table=table)
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
                row = self._table_cell(n, off)
            except (PageFormatError, struct.error, UnicodeDecodeError, IndexError):
                bad += 1
                continue
            if self.runs_into_zeros(n, off):
                bad += 1  # decodes, but with zeroed bytes for values: not the row
                continue
            rows.append(row)
        return rows, bad

    def _table_cell(self, n: int, off: int) -> tuple[int, list[Any]]:
        pg, size, rowid, pos, local = table_cell_start(self, n, off)
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
            t = payload[pos]
            if t < 0x80:
                pos += 1
            else:
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


def find_leaf(db: DatabaseFile, root: int, rowid: int) -> int | None:
    """The table leaf that holds (or would hold) ``rowid``, walking down from ``root``."""
    n = root
    for _ in range(64):  # deeper than any real b-tree: a loop in a damaged one
        kind, h, _count = db.btree_header(n)
        if kind == PAGE_TABLE_LEAF:
            return n
        if kind != PAGE_TABLE_INTERIOR:
            return None
        pg = db.page(n)
        nxt = struct.unpack(">I", pg[h + 8 : h + 12])[0]
        for off in db.cell_offsets(n):
            key, _ = varint(pg, off + 4)
            if rowid <= key:
                nxt = struct.unpack(">I", pg[off : off + 4])[0]
                break
        n = nxt
    return None


def _walk_table_tree(db: DatabaseFile, root: int) -> tuple[list[int], list[int]]:
    """(the table leaves the b-tree at ``root`` reaches, the pages it reaches that do
    not parse as table pages: header or children); a page that does not parse is not
    descended. Only interior pages are read whole: a leaf is known by its type byte
    (``DatabaseFile.page_kind``), its cells are not read."""
    leaves: list[int] = []
    damaged: list[int] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if n in seen or not 1 <= n <= db.page_count:
            continue
        seen.add(n)
        kind = db.page_kind(n)
        if kind == PAGE_TABLE_INTERIOR:
            try:
                stack.extend(db.children(n))
            except (PageFormatError, struct.error, IndexError):
                damaged.append(n)
        elif kind == PAGE_TABLE_LEAF:
            leaves.append(n)
        else:
            damaged.append(n)
    return leaves, damaged


# -- cells that run into zeroed sectors ---------------------------------------------


def _tree_leaves(db: DatabaseFile, root: int) -> list[int]:
    """Table leaves a b-tree reaches (a page that does not parse is not descended);
    only its interior pages are read, the leaves known by their type byte."""
    return _walk_table_tree(db, root)[0]


# -- overflow chains that lead to the same pages ------------------------------------
