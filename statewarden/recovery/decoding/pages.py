"""The pages of a closed database file read with plain reads (SQLite's own
``.recover`` needs the ``sqlite_dbpage`` virtual table, which neither Debian's SQLite
nor apsw's bundled one has): ``DatabaseFile`` reads a page when wanted, decodes a
table leaf's cells (varints, the record format, overflow chains) into ``(rowid,
values)`` and tells the pages the b-trees and the freelist reach; the walks down one
table's b-tree (the leaf that holds a rowid, the leaves it reaches) read through it.
Where its wholly zeroed 512-byte sectors lie (a census of every page taken in one
sequential read: each page's first four bytes, and its stretches of zeroed sectors where
those may lie in a record's bytes; the search of single pages), and which columns of one
table-leaf cell lie in zeroed bytes (where each stretch of its payload lies, the runs of
it in zeroed sectors, and whether its own bytes prove those zeros a sector's and not the
record's: a real of 0.0 is eight zero bytes SQLite wrote).

Call only with no SQLite connection open to ``path`` in this process (docs/safety.md rule 2).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import struct
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.page_format import (
    _INTERIOR,
    MAX_OVERFLOW_PAGES_PER_CELL,
    PAGE_INDEX_INTERIOR,
    PAGE_INDEX_LEAF,
    PAGE_TABLE_INTERIOR,
    PAGE_TABLE_LEAF,
    _header_of,
    _serial_size,
    _whole_by_size,
    varint,
)
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
        self._reached: dict[tuple[tuple[int, ...], int], set[int]] = {}

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

    def __enter__(self) -> DatabaseFile:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

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
        """Pages reached from the b-tree roots (with overflow pages) and the freelist;
        walked once per roots while no page image overlays the file's."""
        key = (tuple(roots), self.page_count)
        if not self.overlay and key in self._reached:
            return self._reached[key]
        seen = self._reach(roots)
        if not self.overlay:
            self._reached[key] = seen
        return seen

    def _reach(self, roots: list[int]) -> set[int]:
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
                seen.update(self._overflow_pages_of(pg, kind, off))
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

    def _overflow_pages_of(self, pg: bytes, kind: int, off: int) -> list[int]:
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


class TableTree(NamedTuple):
    """The pages the table b-tree at a root reaches (``table_tree``)."""

    leaves: list[int]  # its table leaves
    damaged: list[int]  # pages that do not parse as table pages: header or children
    interiors: list[int]  # its interior pages whose children parse

    @property
    def pages(self) -> set[int]:
        return {*self.leaves, *self.damaged, *self.interiors}


def tree_walk(
    db: DatabaseFile, roots: list[int], interior: int = PAGE_TABLE_INTERIOR
) -> Iterator[tuple[int, int, list[int] | None]]:
    """Each page of the file the b-trees at ``roots`` reach, once: (page, its type byte,
    its children when it is an ``interior`` page whose children read, else None). A page
    whose children do not read is not descended; only interior pages are read whole (a
    leaf is known by its type byte: ``DatabaseFile.page_kind``)."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n in seen or not 1 <= n <= db.page_count:
            continue
        seen.add(n)
        kind = db.page_kind(n)
        kids = None
        if kind == interior:
            with contextlib.suppress(PageFormatError, struct.error, IndexError):
                kids = db.children(n)
                stack.extend(kids)
        yield n, kind, kids


def table_tree(db: DatabaseFile, root: int) -> TableTree:
    """The pages the table b-tree at ``root`` reaches (``tree_walk``)."""
    tree = TableTree([], [], [])
    for n, kind, kids in tree_walk(db, [root]):
        if kind == PAGE_TABLE_LEAF:
            tree.leaves.append(n)
        elif kids is not None:
            tree.interiors.append(n)
        else:
            tree.damaged.append(n)
    return tree


def table_cell_start(db: DatabaseFile, n: int, off: int) -> tuple[bytes, int, int, int, int]:
    """(page ``n`` as read, payload size, rowid, where the payload starts, how much of
    it the cell holds) of the table-leaf cell at ``off`` of page ``n``; PageFormatError
    when the part the cell holds runs past the page."""
    pg = db.page(n)
    size, pos = varint(pg, off)
    rowid, pos = varint(pg, pos)
    local = db._local_size(size, table=True)
    if pos + local > db.usable:
        raise PageFormatError(f"page {n}: cell at {off} runs past the page")
    return pg, size, rowid, pos, local


# -- where a file's wholly zeroed sectors lie ---------------------------------------

SECTOR = 512
# The shortest run of zero bytes taken for (part of) a zeroed sector.
MIN_ZERO_STRETCH = 16
_ZERO_RUN_RE = re.compile(rb"\x00{%d,}" % MIN_ZERO_STRETCH)
_ZERO_STRETCH = bytes(MIN_ZERO_STRETCH)
# How much of the file the zeroed-sector search reads at once.
ZERO_SCAN_CHUNK = 4 << 20


@dataclass
class PageCensus:
    """What one sequential read of every page of a file tells (the file's own bytes,
    no overlay): each page's first four bytes as a big-endian number (a b-tree page's
    type byte is its top byte, an overflow or freelist trunk page's next page is all
    of it), and the pages that hold a wholly zeroed 512-byte sector: with their
    stretches of zeroed sectors (:func:`zeroed_sectors`) where those may lie in a
    record's bytes, in ``passed`` where they cannot (an index or interior page; a
    table leaf with no zero byte in its cell content area that a stretch could hold)."""

    first_words: array[int]
    zeroed: dict[int, list[tuple[int, int]]]
    passed: set[int]


def _take_census(db: DatabaseFile) -> PageCensus:
    """The :class:`PageCensus` of ``db``, read in page-aligned chunks of
    ``ZERO_SCAN_CHUNK`` bytes (memory bounded at any size)."""
    census = PageCensus(array("I"), {}, set())
    ps = db.page_size
    per_chunk = max(1, ZERO_SCAN_CHUNK // ps)
    for first in range(1, db.page_count + 1, per_chunk):
        count = min(per_chunk, db.page_count - first + 1)
        data = db.raw_pages(first, count)
        data = data[: len(data) // ps * ps]  # (a file cut short meanwhile)
        census.first_words.frombytes(memoryview(data).cast("I")[:: ps // 4].tobytes())
        for i in _zeroed_sector_pages(data, ps):
            n, base = first + i, i * ps
            if not _may_hold_zeroed_payload(data, base, ps, 100 if n == 1 else 0):
                census.passed.add(n)
            elif stretches := _zeroed_stretches(data, base, ps):
                census.zeroed[n] = stretches
    if sys.byteorder == "little":
        census.first_words.byteswap()
    census.first_words.extend(itertools.repeat(0, db.page_count - len(census.first_words)))
    return census


def _may_hold_zeroed_payload(data: bytes, base: int, ps: int, h: int) -> bool:
    """Could a stretch of zeroed sectors of the page at ``base`` of ``data`` lie in a
    record's bytes (``_may_hold_payload``, which this never contradicts)? Not on an
    index or interior page; on a table leaf only when a zero byte of its cell content
    area could belong to one: the first (a stretch running into the area) or one of
    ``MIN_ZERO_STRETCH`` in a row inside it."""
    kind = data[base + h]
    if kind in (PAGE_TABLE_INTERIOR, PAGE_INDEX_INTERIOR, PAGE_INDEX_LEAF):
        return False
    if kind != PAGE_TABLE_LEAF:
        return True
    content = int.from_bytes(data[base + h + 5 : base + h + 7], "big") or 65536
    if content >= ps:
        return False
    return data[base + content] == 0 or data.find(_ZERO_STRETCH, base + content, base + ps) >= 0


def zeroed_sectors_of(db: DatabaseFile, pages: set[int]) -> dict[int, list[tuple[int, int]]]:
    """:func:`zeroed_sectors` of ``pages`` alone (each read by itself)."""
    out: dict[int, list[tuple[int, int]]] = {}
    for n in pages:
        if 1 <= n <= db.page_count:
            out.update(_zeroed_in(db.raw_pages(n, 1), n, db.page_size))
    return out


def _zeroed_in(data: bytes, first: int, page_size: int) -> dict[int, list[tuple[int, int]]]:
    """:func:`zeroed_sectors` of ``data``, the pages from ``first`` on."""
    out: dict[int, list[tuple[int, int]]] = {}
    for i in _zeroed_sector_pages(data, page_size):
        if stretches := _zeroed_stretches(data, i * page_size, page_size):
            out[first + i] = stretches
    return out


def _zeroed_sector_pages(data: bytes, page_size: int) -> list[int]:
    """Indexes (from 0) of the pages of ``data`` that hold a wholly zeroed sector (one
    of the whole 512-byte sectors from ``data``'s start). Each sector's first and last
    bytes are taken at once (a sliced step, for the whole of ``data``); only a sector
    whose both are zero is compared whole, and only up to a page's first such one."""
    zero = bytes(SECTOR)
    whole = len(data) // SECTOR
    end = whole * SECTOR
    # A zero byte at i: sector i's first and last bytes are both zero.
    ends = int.from_bytes(data[0:end:SECTOR], "little") | int.from_bytes(
        data[SECTOR - 1 : end : SECTOR], "little"
    )
    marks = ends.to_bytes(whole, "little")
    per_page = page_size // SECTOR
    pages: list[int] = []
    i = marks.find(0)
    while i >= 0:
        base = i * SECTOR
        if data[base : base + SECTOR] == zero:
            page = i // per_page
            pages.append(page)
            i = marks.find(0, (page + 1) * per_page)  # the page is a candidate
        else:
            i = marks.find(0, i + 1)
    return pages


def _zeroed_stretches(data: bytes, base: int, page_size: int) -> list[tuple[int, int]]:
    """The stretches of zeroed sectors of the page at ``base`` of ``data``."""
    out = []
    for m in _ZERO_RUN_RE.finditer(data, base, base + page_size):
        lo, hi = m.start() - base, m.end() - base
        if lo // SECTOR == (hi - 1) // SECTOR and lo % SECTOR and hi % SECTOR:
            continue  # inside one sector, touching neither of its ends: not a sector's
        out.append((lo, hi))
    return out


# -- which columns of a cell lie in zeroed bytes ------------------------------------

# A record may end in a zero byte or two of its own (an integer, a real); this many of
# its bytes in a wholly zeroed sector are the sector's, not the record's. (A sector
# that holds the start of a cell is never zero: a cell starts with its payload size.)
MIN_ZEROED_RUN = 4
# The most zero bytes a record can end in by itself: an 8-byte real or integer whose
# low bytes are zero (2.0 ends in seven).
MAX_NUMBER_ZEROS = 7

# rowid -> positions of the columns whose bytes were zeroed (None: its record header
# was, so no column can be trusted).
ZeroedCells = dict[int, list[int] | None]


class ZeroRun(NamedTuple):
    """A stretch ``lo`` .. ``hi`` of a record's payload (payload offsets) that lies in
    zeros, ``stretch`` (offsets in ``page``) the whole run of zeros it lies in.
    ``short``: zeros that run on past the payload's end, no more than a number's own
    low bytes (``MAX_NUMBER_ZEROS``) followed by unused space. ``proven``: zeroed
    whatever the record says (bytes past the cell that another row's chain owns)."""

    lo: int
    hi: int
    short: bool
    page: int = 0
    stretch: tuple[int, int] = (0, 0)
    proven: bool = False


# (payload offset, length, page, offset in the page) of one stretch of a payload
Segment = tuple[int, int, int, int]


def _payload_segments(db: DatabaseFile, n: int, off: int) -> tuple[int, list[Segment]]:
    """(rowid, stretches) of a table-leaf cell: where each stretch of its payload lies
    (in the cell, then on its overflow pages)."""
    pg, size, rowid, pos, local = table_cell_start(db, n, off)
    segs: list[Segment] = [(0, local, n, pos)]
    if local < size:
        (nxt,) = struct.unpack(">I", pg[pos + local : pos + local + 4])
        at = local
        seen: set[int] = set()
        while at < size and nxt and 1 <= nxt <= db.page_count and nxt not in seen:
            seen.add(nxt)
            length = min(db.usable - 4, size - at)
            segs.append((at, length, nxt, 4))
            at += length
            (nxt,) = struct.unpack(">I", db.page(nxt)[:4])
    return rowid, segs


def _zeroed_runs(segs: list[Segment], zeroed: dict[int, list[tuple[int, int]]]) -> list[ZeroRun]:
    """Stretches of a payload that lie in stretches of zeros that reach a sector's
    boundary (``zeroed``), each at least ``MIN_ZEROED_RUN`` long (``ZeroRun``: only
    text or a blob counts a *short* one). Whether they are a zeroed sector's or the
    record's own zeros is for ``_columns_hit`` to prove."""
    runs = []
    for at, length, page, start in segs:
        for lo, hi in zeroed.get(page, ()):
            a, b = max(lo, start), min(hi, start + length)
            if b - a >= MIN_ZEROED_RUN:
                short = hi > start + length and b - a <= MAX_NUMBER_ZEROS
                runs.append(ZeroRun(at + a - start, at + b - start, short, page, (lo, hi)))
    return runs


def _columns_hit(
    db: DatabaseFile, segs: list[Segment], runs: list[ZeroRun], *, text_proves: bool = True
) -> list[int] | None:
    """Positions of the record's columns whose bytes overlap the runs of ``runs`` its
    bytes prove zeroed (``_zeros_proven``; a short run only text or a blob: see
    ``ZeroRun``); None when such a run reaches its header (or the header cannot be
    read). A run of zeros the record's own values explain (a real of 0.0, serial types
    of NULL) is no damage: a row whose costs are 0.0 is the row that was written.
    ``text_proves``: the table's writer puts no NUL character in text (Hermes'), so
    zeros in text prove a zeroed sector (``_zeros_proven``)."""
    _, length, page, start = segs[0]
    local = bytes(db.page(page)[start : start + length])
    columns: list[tuple[int, int, int]] = []  # (serial type, body offset, width)
    try:
        hsize, pos = varint(local, 0)
        if hsize > len(local):
            return None
        body = hsize
        while pos < hsize:
            t, pos = varint(local, pos)
            columns.append((t, body, _serial_size(t)))
            body += columns[-1][2]
    except PageFormatError:
        return None
    # A header that does not account for the payload byte for byte is not the header
    # SQLite wrote (a serial type zeroed into NULL takes no bytes).
    whole = body == sum(length for _, length, _, _ in segs)
    zeroed = [
        r
        for r in runs
        if r.proven
        or _zeros_proven(
            db, segs, r, hsize=hsize, whole=whole, columns=columns, text_proves=text_proves
        )
    ]
    if any(r.lo < max(hsize, 1) for r in zeroed):
        return None
    return [
        i
        for i, (t, at, width) in enumerate(columns)
        if width
        and any(r.lo < at + width and at < r.hi and (t >= 12 or not r.short) for r in zeroed)
    ]


def _zeros_proven(
    db: DatabaseFile,
    segs: list[Segment],
    run: ZeroRun,
    *,
    hsize: int,
    whole: bool,
    columns: list[tuple[int, int, int]],
    text_proves: bool,
) -> bool:
    """Do the bytes prove ``run``'s zeros a zeroed sector's, not the record's own? They
    do when they take a byte that is never zero where SQLite wrote it: the header's
    size (the first byte of the payload), a serial type of a header that no longer
    accounts for the payload, the first byte of a cell on the leaf (a payload size),
    a byte of text where its writer puts no NUL character (``text_proves``: Hermes'
    tables; another program may), or the high bytes of an integer (SQLite writes each
    integer in the fewest bytes that hold it: zeroed high bytes leave one it would have
    written shorter). Zeros in a blob (a ``zeroblob``, an R-Tree node, a sparse image
    are zeros written), in reals (0.0 is eight of them), in the serial types of NULLs
    and in an integer's low bytes prove nothing."""
    if run.lo == 0 or (run.lo < hsize and not whole):
        return True
    if run.page == segs[0][2] and _holds_a_cell_start(db, run):
        return True
    for t, at, width in columns:
        if not width or not (run.lo < at + width and at < run.hi):
            continue
        if t >= 13 and t % 2 and text_proves:
            return True  # text
        if t <= 6 and not _fewest_bytes(_payload_bytes(db, segs, at, width), t):
            return True
    return False


def _holds_a_cell_start(db: DatabaseFile, run: ZeroRun) -> bool:
    """Does the run of zeros ``run`` lies in take the first byte of a cell of its page
    (a payload size, never zero: a record has at least its header's size)?"""
    lo, hi = run.stretch
    try:
        return any(lo <= off < hi for off in db.cell_offsets(run.page))
    except (PageFormatError, struct.error):
        return False


def _payload_bytes(db: DatabaseFile, segs: list[Segment], at: int, width: int) -> bytes:
    """Bytes ``at`` .. ``at + width`` of the payload ``segs`` locates (fewer where its
    chain ends early)."""
    out = bytearray()
    for pat, length, page, start in segs:
        a, b = max(at, pat), min(at + width, pat + length)
        if a < b:
            out += db.page(page)[start + a - pat : start + b - pat]
    return bytes(out)


def _fewest_bytes(raw: bytes, t: int) -> bool:
    """Is ``raw``, an integer of serial type ``t`` (1 to 6), in the fewest bytes SQLite
    would write it in (0 and 1 in none: types 8 and 9)? True when ``raw`` is cut short
    (nothing to tell)."""
    if len(raw) != _serial_size(t):
        return True
    v = int.from_bytes(raw, "big", signed=True)
    if v in (0, 1):
        return False
    for fewer, bits in enumerate((8, 16, 24, 32, 48), 1):
        if -(1 << (bits - 1)) <= v < 1 << (bits - 1):
            return t == fewer
    return t == 6
