"""FTS5's structure record (``<fts>_data`` rowid 10), read far enough to tell whether
its zero bytes are its own.

The record lists the index's levels and their segments. Each empty level is two zero
bytes, and FTS5 keeps hundreds of levels on a large Hermes file (323 on a file of a
gigabyte: 637 zero bytes in a 669-byte record), so the record can hold a whole zeroed
512-byte sector that no disk wrote. ``zeros_are_its_own`` says when every run of zero
bytes in it is empty levels of a record that reads whole, so the zeroed-sector search
does not take them for damage.

Layout (SQLite's ``fts5_index.c``): a 4-byte cookie, the 4 bytes ``ff 00 00 01`` in
the second version, then varints: the number of levels, of segments, the write counter;
per level the segments being merged and the number of segments; per segment its id,
first and last leaf (and, in the second version, two origins and three counts).
"""

from __future__ import annotations

import apsw

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.page_format import varint
from statewarden.recovery.decoding.pages import ZeroedCells
from statewarden.recovery.decoding.schema import Schema
from statewarden.sqlite import quote_ident

STRUCTURE_ROWID = 10
_V2 = b"\xff\x00\x00\x01"
# A run of zero bytes this long could be (part of) a zeroed sector
# (pages.MIN_ZERO_STRETCH).
_SHORTEST_RUN = 16


def zeros_are_its_own(block: bytes) -> bool:
    """True when ``block`` reads as a whole structure record (every level, every
    segment, the segment count agreeing, nothing left over) and each of its runs of
    zero bytes long enough to be a zeroed sector lies in its empty levels."""
    empty = _empty_level_spans(block)
    if empty is None:
        return False
    pos = 0
    while (at := block.find(bytes(_SHORTEST_RUN), pos)) >= 0:
        end = at
        while end < len(block) and block[end] == 0:
            end += 1
        # A value next to the empty levels may have zero bytes of its own (a count of
        # 0, a varint ending in 0x00): fewer than a zeroed sector's shortest stretch.
        inside = sum(max(0, min(end, hi) - max(at, lo)) for lo, hi in empty)
        if end - at - inside >= _SHORTEST_RUN:
            return False
        pos = end
    return True


def _empty_level_spans(block: bytes) -> list[tuple[int, int]] | None:
    """Byte spans of the empty levels (two zero varints each, merged when adjacent),
    or None when the record does not read whole."""
    try:
        pos = 4
        v2 = block[4:8] == _V2
        if v2:
            pos = 8
        levels, pos = varint(block, pos)
        segments, pos = varint(block, pos)
        _, pos = varint(block, pos)  # the write counter
        per_segment = 8 if v2 else 3
        seen = 0
        spans: list[tuple[int, int]] = []
        for _ in range(levels):
            start = pos
            merging, pos = varint(block, pos)
            count, pos = varint(block, pos)
            if merging > count or seen + count > segments:
                return None
            for _ in range(count * per_segment):
                _, pos = varint(block, pos)
            seen += count
            if not merging and not count:
                if spans and spans[-1][1] == start:
                    spans[-1] = (spans[-1][0], pos)
                else:
                    spans.append((start, pos))
        if seen != segments or pos != len(block):
            return None
    except (IndexError, PageFormatError):
        return None
    return spans


def own_zeros_left_out(
    conn: apsw.Connection, schema: Schema, found: dict[str, ZeroedCells] | str
) -> dict[str, ZeroedCells] | str:
    """``found`` without the FTS5 structure records whose zero bytes are their own
    (empty levels: ``zeros_are_its_own``), which a large Hermes file holds by the hundred."""
    if isinstance(found, str):
        return found
    out = dict(found)
    for name, cells in found.items():
        obj = schema.by_name(name)
        if obj is None or obj.shadow_of is None or name != f"{obj.shadow_of}_data":
            continue
        if STRUCTURE_ROWID not in cells:
            continue
        try:
            row = conn.execute(
                f"SELECT block FROM {quote_ident(name)} WHERE id = ?", (STRUCTURE_ROWID,)
            ).fetchone()
        except apsw.Error:
            continue
        if row is not None and isinstance(row[0], bytes) and zeros_are_its_own(row[0]):
            rest = {rowid: cols for rowid, cols in cells.items() if rowid != STRUCTURE_ROWID}
            if rest:
                out[name] = rest
            else:
                del out[name]
    return out
