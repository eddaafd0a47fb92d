"""Where a file's wholly zeroed 512-byte sectors lie: the census of every page taken in
one sequential read (each page's first four bytes, and its stretches of zeroed
sectors where those may lie in a record's bytes), and the search of single pages.

Call only with no SQLite connection open to the file in this process (docs/safety.md
rule 2)."""

from __future__ import annotations

import itertools
import re
import sys
from array import array
from dataclasses import dataclass

from statewarden.recovery.decoding.page_format import (
    PAGE_INDEX_INTERIOR,
    PAGE_INDEX_LEAF,
    PAGE_TABLE_INTERIOR,
    PAGE_TABLE_LEAF,
    PageReads,
)

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


def _take_census(db: PageReads) -> PageCensus:
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


def zeroed_sectors_of(db: PageReads, pages: set[int]) -> dict[int, list[tuple[int, int]]]:
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
