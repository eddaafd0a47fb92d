"""Which columns of one table-leaf cell lie in zeroed bytes: where each stretch of its
payload lies (in the cell, on its overflow pages), the runs of it in zeroed sectors,
and whether its own bytes prove those zeros a sector's and not the record's (a real
of 0.0 is eight zero bytes SQLite wrote)."""

from __future__ import annotations

import struct
from typing import NamedTuple

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.page_format import (
    PageReads,
    _serial_size,
    table_cell_start,
    varint,
)

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


def _payload_segments(db: PageReads, n: int, off: int) -> tuple[int, list[Segment]]:
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


def _columns_hit(db: PageReads, segs: list[Segment], runs: list[ZeroRun]) -> list[int] | None:
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
    db: PageReads,
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


def _holds_a_cell_start(db: PageReads, run: ZeroRun) -> bool:
    """Does the run of zeros ``run`` lies in take the first byte of a cell of its page
    (a payload size, never zero: a record has at least its header's size)?"""
    lo, hi = run.stretch
    try:
        return any(lo <= off < hi for off in db.cell_offsets(run.page))
    except (PageFormatError, struct.error):
        return False


def _payload_bytes(db: PageReads, segs: list[Segment], at: int, width: int) -> bytes:
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
