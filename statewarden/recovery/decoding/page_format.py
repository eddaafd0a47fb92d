"""The fixed parts of SQLite's file format that every page read decodes
(sqlite.org/fileformat2.html): the b-tree page types, a b-tree page's header, varints
and the sizes of a record's serial types."""

from __future__ import annotations

from typing import Any

from statewarden.errors import PageFormatError

PAGE_TABLE_INTERIOR = 0x05
PAGE_TABLE_LEAF = 0x0D
PAGE_INDEX_INTERIOR = 0x02
PAGE_INDEX_LEAF = 0x0A
_INTERIOR = (PAGE_TABLE_INTERIOR, PAGE_INDEX_INTERIOR)
BTREE_TYPES = (PAGE_TABLE_INTERIOR, PAGE_TABLE_LEAF, PAGE_INDEX_INTERIOR, PAGE_INDEX_LEAF)
MAX_OVERFLOW_PAGES_PER_CELL = 1 << 20

Row = tuple[int, list[Any]]


def place_cells(page: bytearray, cells: list[bytes], usable: int) -> tuple[int, list[int]]:
    """Write ``cells`` into ``page``'s cell content area, from the end of its ``usable``
    bytes down, the first cell highest: (the area's start, each cell's offset)."""
    content = usable
    pointers = []
    for cell in cells:
        content -= len(cell)
        page[content : content + len(cell)] = cell
        pointers.append(content)
    return content, pointers


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
    if kind not in BTREE_TYPES:
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


def _serial_size(t: int) -> int:
    if t < 12:
        if t in (10, 11):
            raise PageFormatError(f"reserved serial type {t}")
        return (0, 1, 2, 3, 4, 6, 8, 8, 0, 0)[t]
    return (t - 12) // 2 if t % 2 == 0 else (t - 13) // 2
