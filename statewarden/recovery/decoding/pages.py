"""Page-level salvage: rows that the b-tree can no longer reach, decoded from the file.

A damaged interior page orphans every leaf below it: the rows are still on disk but no
query can get to them. SQLite's own ``.recover`` needs the ``sqlite_dbpage`` virtual
table, which neither Debian's SQLite nor apsw's bundled one has, so this module reads
the file itself (sqlite.org/fileformat2.html):

1. walk every b-tree from the roots in ``sqlite_schema`` and the freelist, marking the
   pages they reach (a page that fails to parse is simply not descended into), or take
   the "never used" pages of a completed integrity check;
2. every table-leaf page (type 0x0D) that nothing reaches is an orphan; its cells are
   decoded (varints, the record format, overflow chains) into ``(rowid, values)``;
3. an orphan leaf is given to the one table whose shape its records fit (field count,
   the rowid alias stored as NULL, no number in a TEXT column, no NULL in a NOT NULL
   one: ``record_fits``). Freelist pages are never read for rows: they hold deleted
   data.

The same decoding reads page images of WAL frames SQLite does not replay
(``rows_from_images``), the columns of a row past a break in its overflow chain from
the rest of the chain among unreached pages (``partial_columns``), and rebuilds page 1
as the root of the ``sqlite_schema`` leaves still intact (``rebuild_schema_root``).

Call only with no SQLite connection open to ``path`` in this process (docs/safety.md rule 2).
"""

from __future__ import annotations

import itertools
import os
import re
import struct
import sys
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.schema import Schema, SchemaObject
from statewarden.sqlite import parse_header

PAGE_TABLE_INTERIOR = 0x05
PAGE_TABLE_LEAF = 0x0D
PAGE_INDEX_INTERIOR = 0x02
PAGE_INDEX_LEAF = 0x0A
_INTERIOR = (PAGE_TABLE_INTERIOR, PAGE_INDEX_INTERIOR)
_BTREE_TYPES = (PAGE_TABLE_INTERIOR, PAGE_TABLE_LEAF, PAGE_INDEX_INTERIOR, PAGE_INDEX_LEAF)
MAX_OVERFLOW_PAGES_PER_CELL = 1 << 20

Row = tuple[int, list[Any]]


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the big-endian varint at ``pos`` (1-9 bytes)."""
    if pos < len(buf) and buf[pos] < 0x80:
        return buf[pos], pos + 1  # one byte: most sizes, serial types and rowids
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


def _header_of(n: int, pg: bytes) -> tuple[int, int, int]:
    """(page type, header offset, cell count) of b-tree page ``n``, read as ``pg``."""
    h = 100 if n == 1 else 0
    kind = pg[h]
    if kind not in _BTREE_TYPES:
        raise PageFormatError(f"page {n} is not a b-tree page (type {kind})")
    return kind, h, (pg[h + 3] << 8) | pg[h + 4]


def _whole_by_size(pg: bytes, at: int, most: int) -> bool:
    """Does the payload-size varint at ``at`` of ``pg`` say the payload is at most
    ``most`` bytes (held whole in its cell)? Read only when it takes one or two bytes
    (False otherwise); ``pg`` holds two bytes from ``at``."""
    b = pg[at]
    if b < 0x80:
        return b <= most
    c = pg[at + 1]
    return c < 0x80 and ((b & 0x7F) << 7) | c <= most


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


@dataclass
class WalRows:
    """What committed WAL transactions SQLite does not replay did to the tables
    (``rows_from_images``), by table."""

    rows: dict[str, list[Row]] = field(default_factory=dict)  # on their new leaf images
    gone: dict[str, set[int]] = field(default_factory=dict)  # rowids they deleted
    # rowids they may have deleted: a page their tree reaches was written by a damaged
    # frame, so what those commits left there is not known
    unsure: dict[str, set[int]] = field(default_factory=dict)

    def changed(self) -> tuple[dict[str, Any], ...]:
        return (self.rows, self.gone, self.unsure)


def rows_from_images(
    path: Path,
    schema: Schema,
    tables: list[str],
    images: dict[int, bytes],
    unknown: set[int] | frozenset[int] = frozenset(),
) -> WalRows:
    """The tables as the page ``images`` (page number -> newest image of WAL commits
    SQLite does not replay) leave them over the file at ``path``, whole transactions:
    each table's b-tree is walked with the images in place of the file's pages. Rows
    on its new leaf images are taken; rowids on its leaves the images rewrote or the
    tree no longer reaches, and on none of its new leaves, were deleted (``gone``).
    ``unknown``: pages whose newest image is a damaged frame's (0: any page); when the
    new tree reaches one, its deletions are only ``unsure`` and the images' table leaves
    it does not reach are assigned by record shape (they may be its own)."""
    base = DatabaseFile(path)
    final = DatabaseFile(path)
    try:
        final.overlay = {n: img for n, img in images.items() if len(img) == final.page_size}
        final.page_count = max([final.page_count, *final.overlay])
        out = WalRows()
        reached: set[int] = set()
        shaky = False
        for name in tables:
            obj = schema.by_name(name)
            if obj is None or not obj.rootpage or obj.without_rowid or obj.is_virtual:
                continue
            new_leaves, gone, seen = _table_changes(base, final, obj.rootpage, unknown)
            reached |= seen
            out.rows[name] = [r for n in new_leaves for r in _rows_of(final, n)]
            gone -= {rowid for n in new_leaves for rowid in _leaf_rowids(final, n)}
            if unknown & seen or 0 in unknown:
                shaky = True
                out.unsure[name] = gone
            else:
                out.gone[name] = gone
        if shaky:
            stray = sorted(n for n in final.overlay if n not in reached)
            for name, rows in _assign(final, schema, tables, stray).items():
                out.rows.setdefault(name, []).extend(rows)
        for rows in out.rows.values():
            rows.sort(key=lambda r: r[0])
        return out
    finally:
        base.close()
        final.close()


def _table_changes(
    base: DatabaseFile, final: DatabaseFile, root: int, unknown: set[int] | frozenset[int]
) -> tuple[list[int], set[int], set[int]]:
    """(the leaves of the tree at ``root`` that are new images in ``final``, the
    rowids on the leaves of ``base``'s tree that ``final`` rewrote, no longer reaches
    or holds as an ``unknown`` page, every page ``final``'s tree reaches)."""
    base_leaves, _ = _walk_table_tree(base, root)
    leaves, bad = _walk_table_tree(final, root)
    seen = set(leaves) | set(bad) | _interiors(final, root)
    changed = [n for n in base_leaves if n in final.overlay or n not in seen or n in unknown]
    gone: set[int] = set()
    for n in changed:
        gone.update(_leaf_rowids(base, n))
    return [n for n in leaves if n in final.overlay], gone, seen


def _interiors(db: DatabaseFile, root: int) -> set[int]:
    """The interior pages of the table b-tree at ``root`` (those that parse)."""
    out: set[int] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if n in out or not 1 <= n <= db.page_count or db.page_kind(n) != PAGE_TABLE_INTERIOR:
            continue
        try:
            kids = db.children(n)
        except (PageFormatError, struct.error, IndexError):
            continue
        out.add(n)
        stack.extend(kids)
    return out


def _rows_of(db: DatabaseFile, n: int) -> list[Row]:
    try:
        return db.leaf_rows(n)[0]
    except (PageFormatError, struct.error, IndexError):
        return []


def _leaf_rowids(db: DatabaseFile, n: int) -> list[int]:
    """The rowids of the cells of table leaf ``n`` (their records not decoded)."""
    try:
        pg = db.page(n)
        out = []
        for off in db.cell_offsets(n):
            _, pos = varint(pg, off)
            out.append(varint(pg, pos)[0])
        return out
    except (PageFormatError, struct.error, IndexError):
        return []


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


SCHEMA_TYPES = ("table", "index", "view", "trigger")


def _schema_record(values: list[Any]) -> bool:
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


def encode_varint(v: int) -> bytes:
    """SQLite's big-endian varint (1-9 bytes) for ``v`` >= 0."""
    if v < 0 or v >= 1 << 64:
        raise ValueError(f"varint out of range: {v}")
    if v >= 1 << 56:
        out = [v & 0xFF]
        v >>= 8
        for _ in range(8):
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        return bytes(reversed(out))
    parts = [v & 0x7F]
    v >>= 7
    while v:
        parts.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(reversed(parts))


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
    db = DatabaseFile(path)
    try:
        leaves = _schema_leaves(db)
        leaves.sort()
        if any(a[1] >= b[0] for a, b in itertools.pairwise(leaves)):
            return 0  # two versions of one stretch: which is current cannot be told
        if not leaves:
            return 0
        page = bytearray(db.page(1))
        page_size = db.page_size
        usable = db.usable
    finally:
        db.close()
    cells = [struct.pack(">I", n) + encode_varint(hi) for _, hi, n in leaves[:-1]]
    content = usable
    pointers = []
    for cell in cells:
        content -= len(cell)
        page[content : content + len(cell)] = cell
        pointers.append(content)
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
            if rows and not bad and all(_schema_record(v) for _, v in rows):
                rowids = [r for r, _ in rows]
                leaves.append((min(rowids), max(rowids), n))
    return leaves


def _may_open_schema_leaf(db: DatabaseFile, pg: bytes, words: tuple[bytes, ...]) -> bool:
    """Could the table leaf ``pg`` (not page 1) be a ``sqlite_schema`` leaf? False only
    when its first cell surely does not decode to a schema record (``_schema_record``):
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


def record_by_its_header(path: Path, root: int, rowid: int) -> list[Any] | None:
    """The record of row ``rowid``, read by its own header when its cell's payload-size
    varint is wrong (a flipped bit): the header lists every column's serial type, so
    it gives the record's length itself. Taken only when that record lies wholly in
    the cell's page (no overflow), overlaps no other cell and decodes to the end
    exactly (``record``); None otherwise. Call with no SQLite connection open to
    ``path`` (docs/safety.md rule 2)."""
    db = DatabaseFile(path)
    try:
        return _record_by_its_header(db, root, rowid)
    except (PageFormatError, struct.error, IndexError, UnicodeDecodeError):
        return None
    finally:
        db.close()


def _record_by_its_header(db: DatabaseFile, root: int, rowid: int) -> list[Any] | None:
    leaf = find_leaf(db, root, rowid)
    if leaf is None:
        return None
    pg = db.page(leaf)
    offsets = db.cell_offsets(leaf)
    for off in offsets:
        _size, pos = varint(pg, off)
        rid, pos = varint(pg, pos)
        if rid == rowid:
            break
    else:
        return None
    hsize, hpos = varint(pg, pos)
    if not 0 < hsize <= db.usable - pos:
        return None
    total = hsize
    while hpos < pos + hsize:
        t, hpos = varint(pg, hpos)
        total += _serial_size(t)
    end = pos + total
    if end > db.usable or db._local_size(total, table=True) != total:
        return None  # longer than the page holds: it would need an overflow chain
    if any(off < o < end for o in offsets):
        return None  # runs into another cell: the header is not this record's
    return db.record(bytes(pg[pos:end]))


def _serial_size(t: int) -> int:
    if t < 12:
        if t in (10, 11):
            raise PageFormatError(f"reserved serial type {t}")
        return (0, 1, 2, 3, 4, 6, 8, 8, 0, 0)[t]
    return (t - 12) // 2 if t % 2 == 0 else (t - 13) // 2


def _chain(db: DatabaseFile, first: int, limit: int) -> list[int] | None:
    """Overflow pages from ``first`` while they look like a chain (None if not)."""
    out: list[int] = []
    n = first
    while n:
        if n in out or len(out) > limit or not 1 <= n <= db.page_count:
            return None
        out.append(n)
        n = struct.unpack(">I", db.page(n)[:4])[0]
    return out


def partial_columns(
    path: Path,
    root: int,
    rowid: int,
    roots: list[int],
    foreign: frozenset[int] | set[int] = frozenset(),
) -> dict[int, Any]:
    """Columns (by position) of row ``rowid`` recoverable from the file when its
    overflow chain is broken.

    The cell's local part and the chain up to the break are read in place; the rest of
    the chain is looked for among pages no b-tree reaches: one chain of such pages whose
    length makes the payload come out at its recorded size, once the pages lost at the
    break are counted as whole pages. A column whose bytes all lie in known parts is
    decoded; the others are left out. ``foreign`` are overflow pages another row's
    chain owns (``cross_linked_cells``): the chain breaks where it reaches one, and
    its own rest may then start right there. Call with no SQLite connection open to
    ``path`` (docs/safety.md rule 2).
    """
    db = DatabaseFile(path)
    try:
        return _partial_columns(db, root, rowid, roots, foreign)
    except (PageFormatError, struct.error, IndexError):
        return {}
    finally:
        db.close()


def _partial_columns(
    db: DatabaseFile, root: int, rowid: int, roots: list[int], foreign: frozenset[int] | set[int]
) -> dict[int, Any]:
    leaf = find_leaf(db, root, rowid)
    if leaf is None:
        return {}
    pg = db.page(leaf)
    for off in db.cell_offsets(leaf):
        size, pos = varint(pg, off)
        rid, pos = varint(pg, pos)
        if rid == rowid:
            break
    else:
        return {}
    local = db._local_size(size, table=True)
    if local >= size or size > db.page_count * db.usable:
        return {}  # no chain, or a garbled size no chain in this file could hold
    chunk = db.usable - 4
    known: list[tuple[int, bytes]] = [(0, bytes(pg[pos : pos + local]))]  # (offset, bytes)
    at = local
    n = struct.unpack(">I", pg[pos + local : pos + local + 4])[0]
    seen, into_foreign = set[int](), False
    while at < size and n and n not in seen and 1 <= n <= db.page_count:
        if n in foreign:
            into_foreign = True  # another row's page: this chain's own rest is elsewhere
            break
        seen.add(n)
        ov = db.page(n)
        nxt = struct.unpack(">I", ov[:4])[0]
        if not any(ov) or (nxt == 0 and at + chunk < size):
            break  # a zeroed page, or a chain that ends too early: the break
        known.append((at, bytes(ov[4 : 4 + min(chunk, size - at)])))
        at += chunk
        n = nxt
    if at < size:
        # A pointer lost (0, or no page of the file) is the break: the rest may begin there.
        lost_pointer = not 1 <= n <= db.page_count
        tail = _find_tail(db, roots, size, at, chunk, none_lost=into_foreign or lost_pointer)
        if tail is not None:
            start, pages = tail
            for p in pages:
                known.append((start, bytes(db.page(p)[4 : 4 + min(chunk, size - start)])))
                start += chunk
    payload, have = bytearray(size), bytearray(size)
    for o, b in known:
        payload[o : o + len(b)] = b
        have[o : o + len(b)] = b"\x01" * len(b)
    return _decode_known(db, bytes(payload), bytes(have))


def _find_tail(
    db: DatabaseFile, roots: list[int], size: int, at: int, chunk: int, *, none_lost: bool = False
) -> tuple[int, list[int]] | None:
    """(payload offset, pages) of the one unreached chain that ends the payload (with
    ``none_lost``, it may also start right at the break)."""
    reached = db.reachable(roots)
    free = set(range(1, db.page_count + 1)) - reached
    pointed = set()
    for p in free:
        nxt = struct.unpack(">I", db.page(p)[:4])[0]
        if nxt in free:
            pointed.add(nxt)
    fits = []
    for start in free - pointed:
        chain = _chain(db, start, (size // chunk) + 1)
        if not chain or not set(chain) <= free:
            continue
        for lost in range(0 if none_lost else 1, (size - at) // chunk + 1):
            begin = at + lost * chunk
            if begin + (len(chain) - 1) * chunk < size <= begin + len(chain) * chunk:
                fits.append((begin, chain))
    return fits[0] if len(fits) == 1 else None


def _decode_known(db: DatabaseFile, payload: bytes, have: bytes) -> dict[int, Any]:
    hsize, pos = varint(payload, 0)
    if not all(have[:hsize]):
        return {}
    types = []
    while pos < hsize:
        t, pos = varint(payload, pos)
        types.append(t)
    out: dict[int, Any] = {}
    body = hsize
    for i, t in enumerate(types):
        start = body
        try:
            value, body = db._value(payload, body, t)
        except (PageFormatError, UnicodeDecodeError):
            return out
        if all(have[start:body]):
            out[i] = value
    return out


# -- cells that run into zeroed sectors ---------------------------------------------

SECTOR = 512
# A record may end in a zero byte or two of its own (an integer, a real); this many of
# its bytes in a wholly zeroed sector are the sector's, not the record's. (A sector
# that holds the start of a cell is never zero: a cell starts with its payload size.)
MIN_ZEROED_RUN = 4
# The most zero bytes a record can end in by itself: an 8-byte real or integer whose
# low bytes are zero (2.0 ends in seven).
MAX_NUMBER_ZEROS = 7
# The shortest run of zero bytes taken for (part of) a zeroed sector.
MIN_ZERO_STRETCH = 16

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


_ZERO_RUN_RE = re.compile(rb"\x00{%d,}" % MIN_ZERO_STRETCH)
_ZERO_STRETCH = bytes(MIN_ZERO_STRETCH)
# How much of the file the zeroed-sector search reads at once.
ZERO_SCAN_CHUNK = 4 << 20


def zeroed_sectors(db: DatabaseFile) -> dict[int, list[tuple[int, int]]]:
    """Page number -> its stretches of zeroed sectors (offsets in the page): on each
    page that holds a wholly zeroed 512-byte sector, the runs of ``MIN_ZERO_STRETCH``
    or more zero bytes that reach a 512-byte boundary, the way a disk zeroes whole
    sectors (a later write may have covered part of one). Taken with the file's
    census (``DatabaseFile.census``)."""
    census = db.census()
    return dict(sorted({**census.zeroed, **zeroed_sectors_of(db, census.passed)}.items()))


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
    """Indexes (from 0) of the pages of ``data`` that hold a wholly zeroed sector."""
    zero = bytes(SECTOR)
    end = len(data)
    pages: list[int] = []
    pos = 0
    while pos < end:
        at = data.find(zero, pos, end)
        if at < 0:
            break
        sector = -(-at // SECTOR) * SECTOR
        if sector + SECTOR <= end and data[sector : sector + SECTOR] == zero:
            pages.append(sector // page_size)
            pos = (sector // page_size + 1) * page_size  # the page is a candidate
        else:
            pos = max(sector, at + 1)
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


def _tree_leaves(db: DatabaseFile, root: int) -> list[int]:
    """Table leaves a b-tree reaches (a page that does not parse is not descended);
    only its interior pages are read, the leaves known by their type byte."""
    return _walk_table_tree(db, root)[0]


# (payload offset, length, page, offset in the page) of one stretch of a payload
Segment = tuple[int, int, int, int]


def _payload_segments(db: DatabaseFile, n: int, off: int) -> tuple[int, list[Segment]]:
    """(rowid, stretches) of a table-leaf cell: where each stretch of its payload lies
    (in the cell, then on its overflow pages)."""
    pg = db.page(n)
    size, pos = varint(pg, off)
    rowid, pos = varint(pg, pos)
    local = db._local_size(size, table=True)
    if pos + local > db.usable:
        raise PageFormatError(f"page {n}: cell at {off} runs past the page")
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


def _columns_hit(db: DatabaseFile, segs: list[Segment], runs: list[ZeroRun]) -> list[int] | None:
    """Positions of the record's columns whose bytes overlap the runs of ``runs`` its
    bytes prove zeroed (``_zeros_proven``; a short run only text or a blob: see
    ``ZeroRun``); None when such a run reaches its header (or the header cannot be
    read). A run of zeros the record's own values explain (a real of 0.0, serial types
    of NULL) is no damage: a row whose costs are 0.0 is the row that was written."""
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
        if r.proven or _zeros_proven(db, segs, r, hsize=hsize, whole=whole, columns=columns)
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
) -> bool:
    """Do the bytes prove ``run``'s zeros a zeroed sector's, not the record's own? They
    do when they take a byte that is never zero where SQLite wrote it: the header's
    size (the first byte of the payload), a serial type of a header that no longer
    accounts for the payload, the first byte of a cell on the leaf (a payload size),
    a byte of text or a blob (Hermes writes no zero bytes in either), or the high bytes
    of an integer (SQLite writes each integer in the fewest bytes that hold it: zeroed
    high bytes leave one it would have written shorter). Zeros in reals (0.0 is eight
    of them), in the serial types of NULLs and in an integer's low bytes prove nothing."""
    if run.lo == 0 or (run.lo < hsize and not whole):
        return True
    if run.page == segs[0][2] and _holds_a_cell_start(db, run):
        return True
    for t, at, width in columns:
        if not width or not (run.lo < at + width and at < run.hi):
            continue
        if t >= 12:
            return True
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


def _may_hold_payload(db: DatabaseFile, n: int, stretches: list[tuple[int, int]]) -> bool:
    """Could a zero stretch of page ``n`` lie in some record's bytes? Not when it lies
    in a leaf's free space (before its cell content area), nor when it is the unused
    tail of the last page of an overflow chain (next page 0, the zeros run to the
    page's end), nor on an overflow page whose next-page number it zeroes (the chain
    is broken there, which SQLite itself reports)."""
    pg = db.page(n)
    try:
        kind, h, _ = _header_of(n, pg)
    except PageFormatError:
        kind = 0
    if kind == PAGE_TABLE_LEAF:
        (content,) = struct.unpack(">H", pg[h + 5 : h + 7])
        content = content or 65536
        return any(hi > content for _, hi in stretches)
    if kind:
        return False  # an interior or index page: no table record lives there
    if any(lo < 4 for lo, _ in stretches):
        return False
    last = struct.unpack(">I", pg[:4])[0] == 0
    return any(not (last and hi >= db.page_size) for _, hi in stretches)


def zeroed_cells(path: Path, schema: Schema) -> dict[str, ZeroedCells]:
    """Rows whose record runs into zeroed bytes, per rowid table of ``schema``.

    A zeroed sector (or 4 KiB block) inside a cell leaves a record SQLite still reads:
    its header gives every column's length, so the zeros are read as text, a real of
    0.0, an integer 0. Every wholly zeroed 512-byte sector of the file is found, and
    each cell of a table leaf whose payload (in the cell or on its overflow pages) has
    ``MIN_ZEROED_RUN`` or more bytes in one is listed with the columns those bytes
    belong to. Call with no SQLite connection open to ``path`` (docs/safety.md rule 2).
    """
    db = DatabaseFile(path)
    try:
        return zeroed_cells_in(db, schema)
    finally:
        db.close()


def zeroed_cells_in(db: DatabaseFile, schema: Schema) -> dict[str, ZeroedCells]:
    """:func:`zeroed_cells` of a file already open for raw reads. A caller that holds
    SQLite connections to the file meanwhile opens ``db`` before the first of them and
    closes it after the last (docs/safety.md rule 2: no descriptor of the file is
    closed while a connection holds locks on it)."""
    # (the census leaves out pages whose zeroed sectors lie in no record's bytes, by
    # the file's own bytes: those of newer images are looked at whole)
    sectors = zeroed_sectors(db) if db.overlay else db.census().zeroed
    zeroed = {n: z for n, z in sectors.items() if _may_hold_payload(db, n, z)}
    if not zeroed:
        return {}
    free = db.freelist_pages()
    leaves_of = {
        o.name: _tree_leaves(db, o.rootpage)
        for o in schema.tables()
        if o.rootpage and not o.without_rowid and not o.is_virtual
    }
    on_leaf = {n for leaves in leaves_of.values() for n in leaves}
    # A zeroed sector on a page that is no leaf of any table may be an overflow page.
    others = {n for n in zeroed if n not in on_leaf and n not in free}
    # Then a leaf with no zeroed sector of its own may lead into one by an overflow
    # chain: only a leaf that holds the number of a chain's page can.
    leading = _leaves_leading_into(db, on_leaf, set(zeroed)) if others else set()
    out: dict[str, ZeroedCells] = {}
    for name, leaves in leaves_of.items():
        found: ZeroedCells = {}
        for n in leaves:
            if n not in zeroed and n not in leading:
                continue
            try:
                offsets = db.cell_offsets(n)
            except (PageFormatError, struct.error):
                continue
            for off in offsets:
                try:
                    rowid, segs = _payload_segments(db, n, off)
                except (PageFormatError, struct.error, IndexError):
                    continue
                if not any(p in zeroed for _, _, p, _ in segs):
                    continue
                runs = _zeroed_runs(segs, zeroed)
                hit = _columns_hit(db, segs, runs) if runs else []
                if hit is None or hit:
                    found[rowid] = hit
        if found:
            out[name] = found
    return out


def _leaves_leading_into(db: DatabaseFile, leaves: set[int], targets: set[int]) -> set[int]:
    """The pages of ``leaves`` a cell's overflow chain may lead from into ``targets``:
    those with a cell whose first overflow page is one from which next-page numbers
    lead to a page of ``targets``, or the page itself (and those whose cells do not
    read plainly: they are left to the cell-by-cell reading)."""
    if db.overlay:
        return set(leaves)  # its pages' next-page numbers are not the census's
    back: dict[int, list[int]] = {}
    for q, word in enumerate(db.census().first_words, 1):
        if 1 <= word <= db.page_count:
            back.setdefault(word, []).append(q)
    lead = set(targets)
    todo = list(targets)
    while todo:
        for q in back.get(todo.pop(), ()):
            if q not in lead:
                lead.add(q)
                todo.append(q)
    out: set[int] = set()
    ps = db.page_size
    per_chunk = max(1, ZERO_SCAN_CHUNK // ps)
    ordered = sorted(leaves)
    at = 0
    for first in range(1, db.page_count + 1, per_chunk):
        data = db.raw_pages(first, min(per_chunk, db.page_count - first + 1))
        while at < len(ordered) and ordered[at] < first + per_chunk:
            n = ordered[at]
            at += 1
            heads = _first_overflow_pages(db, data, (n - first) * ps, 100 if n == 1 else 0)
            if heads is None or not heads.isdisjoint(lead):
                out.add(n)
    return out


def _first_overflow_pages(db: DatabaseFile, data: bytes, base: int, h: int) -> set[int] | None:
    """The first overflow page of each cell of the table leaf at ``base`` of ``data``
    (header at ``h``) that has one, as ``_payload_segments`` reads it (a cell it
    cannot read has none), or None when its cell pointers do not read plainly."""
    ps = db.page_size
    if base + ps > len(data):
        return None  # (a file cut short meanwhile)
    (count,) = struct.unpack_from(">H", data, base + h + 3)
    start = h + 8
    if start + 2 * count > db.usable:
        return None
    most = db._max_local(table=True)
    heads: set[int] = set()
    page = b""
    for off in struct.unpack_from(f">{count}H", data, base + start):
        if not start + 2 * count <= off < ps - 1:
            return None
        if _whole_by_size(data, base + off, most):
            continue
        page = page or data[base : base + ps]
        try:
            size, pos = varint(page, off)
            _, pos = varint(page, pos)
        except PageFormatError:
            continue
        local = db._local_size(size, table=True)
        if local < size and pos + local <= db.usable and pos + local + 4 <= ps:
            heads.add(struct.unpack_from(">I", page, pos + local)[0])
    return heads


# -- overflow chains that lead to the same pages ------------------------------------


def cross_linked_cells(path: Path, schema: Schema) -> tuple[dict[str, ZeroedCells], set[int]]:
    """Rows whose overflow chain leads into pages another row's chain owns, per
    table (rowid -> positions of the columns with bytes past the cell), and the pages
    claimed more than once.

    Every overflow page belongs to one chain. When two cells' chains reach the same
    page, the owner is the one whose chain is as long as its payload needs and ends
    there (its own length and position prove it); the other reads someone else's
    bytes past its cell. When neither or both fit, both are listed. Call with no
    SQLite connection open to ``path`` (docs/safety.md rule 2).
    """
    db = DatabaseFile(path)
    try:
        claims: dict[int, list[tuple[str, int, bool]]] = {}
        local_of: dict[tuple[str, int], tuple[int, list[Segment]]] = {}
        for o in schema.tables():
            if not o.rootpage or o.without_rowid or o.is_virtual:
                continue
            for n in _tree_leaves(db, o.rootpage):
                try:
                    offsets = db.cell_offsets(n)
                except (PageFormatError, struct.error):
                    continue
                for off in offsets:
                    try:
                        rowid, segs = _payload_segments(db, n, off)
                        size, _ = varint(db.page(n), off)
                    except (PageFormatError, struct.error, IndexError):
                        continue
                    if len(segs) < 2:
                        continue
                    pages = [p for _, _, p, _ in segs[1:]]
                    need = -(-(size - segs[0][1]) // (db.usable - 4))
                    last = struct.unpack(">I", db.page(pages[-1])[:4])[0]
                    fits = len(pages) == need and last == 0
                    local_of[(o.name, rowid)] = (size, segs)
                    for p in pages:
                        claims.setdefault(p, []).append((o.name, rowid, fits))
        shared = {p for p, c in claims.items() if len({(t, r) for t, r, _ in c}) > 1}
        losers: set[tuple[str, int]] = set()
        for p in shared:
            owners = [(t, r) for t, r, fits in claims[p] if fits]
            keep = owners[0] if len(owners) == 1 else None
            losers.update((t, r) for t, r, _ in claims[p] if (t, r) != keep)
        out: dict[str, ZeroedCells] = {}
        for t, r in losers:
            size, segs = local_of[(t, r)]
            past = [ZeroRun(segs[0][1], size, False, proven=True)]  # past the cell
            out.setdefault(t, {})[r] = _columns_hit(db, segs, past)
        owned = set(shared)
        for (t, r), (_, segs) in local_of.items():
            if (t, r) not in losers and any(p in shared for _, _, p, _ in segs[1:]):
                owned.update(p for _, _, p, _ in segs[1:])
        return out, owned
    finally:
        db.close()


def is_schema_record(values: list[Any]) -> bool:
    """Does this record look like a row of ``sqlite_schema``?"""
    return _schema_record(values)
