"""The pages of a rebuilt ``sqlite_schema``: its rows in SQLite's record format, packed
into table leaves, page 1 as their root (or the one leaf that holds them all), and
the empty root pages of the objects no tree was found for. Part of the rebuild of a
lost schema (``lost_schema.py``)."""

from __future__ import annotations

import struct
from typing import Any

from statewarden.errors import DatabaseUnreadable
from statewarden.recovery.decoding.page_format import (
    PAGE_INDEX_LEAF,
    PAGE_TABLE_INTERIOR,
    PAGE_TABLE_LEAF,
    encode_varint,
    place_cells,
)
from statewarden.recovery.evidence.lost_header import fresh_header
from statewarden.sqlite import HEADER_SIZE, SQLITE_MAGIC


def encode_record(values: list[Any]) -> bytes:
    """SQLite's record format for NULL, integers and text (the schema's values)."""
    types: list[int] = []
    body = bytearray()
    for v in values:
        if v is None:
            types.append(0)
        elif isinstance(v, int) and v in (0, 1):
            types.append(8 + v)
        elif isinstance(v, int):
            for t, width in ((1, 1), (2, 2), (3, 3), (4, 4), (5, 6), (6, 8)):
                if -(1 << (8 * width - 1)) <= v < 1 << (8 * width - 1):
                    types.append(t)
                    body += v.to_bytes(width, "big", signed=True)
                    break
        else:
            raw = str(v).encode()
            types.append(2 * len(raw) + 13)
            body += raw
    head = b"".join(encode_varint(t) for t in types)
    size = len(head) + 1
    while len(head) + len(encode_varint(size)) != size:
        size = len(head) + len(encode_varint(size))
    return encode_varint(size) + head + bytes(body)


def _empty_leaf(page_size: int, usable: int, table: bool) -> bytes:
    page = bytearray(page_size)
    page[0] = PAGE_TABLE_LEAF if table else PAGE_INDEX_LEAF
    struct.pack_into(">H", page, 5, usable % 65536)
    return bytes(page)


def _cells(records: list[list[Any]], usable: int) -> list[bytes]:
    out = []
    for rowid, values in enumerate(records, start=1):
        payload = encode_record(values)
        if len(payload) > usable - 35:
            raise DatabaseUnreadable(
                f"the known schema's row for {values[1]} does not fit a page of {usable} bytes"
            )
        out.append(encode_varint(len(payload)) + encode_varint(rowid) + payload)
    return out


def _leaf(cells: list[bytes], page_size: int, usable: int, h: int, prefix: bytes) -> bytes:
    page = bytearray(page_size)
    page[:h] = prefix
    content, pointers = place_cells(page, cells, usable)
    struct.pack_into(">BHHHB", page, h, PAGE_TABLE_LEAF, 0, len(cells), content % 65536, 0)
    for i, p in enumerate(pointers):
        struct.pack_into(">H", page, h + 8 + 2 * i, p)
    return bytes(page)


def _schema_leaves(records: list[list[Any]], page_size: int, usable: int) -> list[bytes]:
    """The schema rows packed into table leaves, in rowid order (one leaf when they
    fit page 1 after its header: none, page 1 itself holds them)."""
    cells = _cells(records, usable)
    if 8 + sum(len(c) + 2 for c in cells) <= usable - HEADER_SIZE:
        return []  # page 1 alone holds them (see _page1)
    groups: list[list[bytes]] = [[]]
    used = 8
    for cell in cells:
        if used + len(cell) + 2 > usable:
            groups.append([])
            used = 8
        groups[-1].append(cell)
        used += len(cell) + 2
    return [_leaf(g, page_size, usable, 0, b"") for g in groups]


def _page1(  # noqa: PLR0917 - one page from its parts
    header: bytes,
    leaves: list[bytes],
    first_leaf: int,
    page_size: int,
    usable: int,
    total: int,
    records: list[list[Any]],
    *,
    wal: bool,
) -> bytes:
    """Page 1: the header (kept when it was intact, with the new page count) and the
    root of ``sqlite_schema``: a leaf holding every row, or an interior page over
    ``leaves`` (numbered from ``first_leaf``)."""
    if header.startswith(SQLITE_MAGIC):
        head = bytearray(header)
        change = struct.unpack(">I", head[24:28])[0]
        struct.pack_into(">I", head, 28, total)
        struct.pack_into(">I", head, 92, change)
    else:
        head = bytearray(fresh_header(page_size, total, wal=wal))
    if not leaves:
        return _leaf(_cells(records, usable), page_size, usable, HEADER_SIZE, bytes(head))
    page = bytearray(page_size)
    page[:HEADER_SIZE] = head
    cells = []
    rowid = 0
    for i, leaf in enumerate(leaves[:-1]):
        rowid += struct.unpack(">H", leaf[3:5])[0]
        cells.append(struct.pack(">I", first_leaf + i) + encode_varint(rowid))
    content, pointers = place_cells(page, cells, usable)
    h = HEADER_SIZE
    struct.pack_into(
        ">BHHHBI",
        page,
        h,
        PAGE_TABLE_INTERIOR,
        0,
        len(pointers),
        content,
        0,
        first_leaf + len(leaves) - 1,
    )
    for i, p in enumerate(pointers):
        struct.pack_into(">H", page, h + 12 + 2 * i, p)
    return bytes(page)
