"""A row's columns read past damage to its own cell: a payload-size varint a flipped
bit made wrong (the record read by its own header, ``record_by_its_header``), and an
overflow chain broken part way (the columns whose bytes lie in the cell, in the chain
up to the break and in the one unreached chain that ends the payload,
``partial_columns``).

Call only with no SQLite connection open to the file in this process (docs/safety.md
rule 2)."""

from __future__ import annotations

import struct
from typing import Any

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.page_format import _serial_size, varint
from statewarden.recovery.decoding.pages import DatabaseFile, find_leaf


def record_by_its_header(db: DatabaseFile, root: int, rowid: int) -> list[Any] | None:
    """The record of row ``rowid``, read by its own header when its cell's payload-size
    varint is wrong (a flipped bit): the header lists every column's serial type, so
    it gives the record's length itself. Taken only when that record lies wholly in
    the cell's page (no overflow), overlaps no other cell and decodes to the end
    exactly (``record``); None otherwise. ``db``: opened with no SQLite connection open
    to the file in this process (docs/safety.md rule 2)."""
    try:
        return _record_by_its_header(db, root, rowid)
    except (PageFormatError, struct.error, IndexError, UnicodeDecodeError):
        return None


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
    db: DatabaseFile,
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
    its own rest may then start right there. ``db``: opened with no SQLite connection
    open to the file in this process (docs/safety.md rule 2).
    """
    try:
        return _partial_columns(db, root, rowid, roots, foreign)
    except (PageFormatError, struct.error, IndexError):
        return {}


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
