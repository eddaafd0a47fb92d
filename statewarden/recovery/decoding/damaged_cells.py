"""Rows whose record runs into bytes that are not its own, per table: a zeroed sector
(or 4 KiB block) inside a cell or on its overflow pages (``zeroed_cells``), and an
overflow chain that leads into pages another row's chain owns (``cross_linked_cells``).
SQLite still reads both records; their values are the zeros or the other row's bytes.

Call only with no SQLite connection open to the file in this process (docs/safety.md
rule 2)."""

from __future__ import annotations

import struct
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.page_format import (
    PAGE_TABLE_LEAF,
    _header_of,
    _whole_by_size,
    varint,
)
from statewarden.recovery.decoding.pages import (
    ZERO_SCAN_CHUNK,
    DatabaseFile,
    Segment,
    ZeroedCells,
    ZeroRun,
    _columns_hit,
    _payload_segments,
    _zeroed_runs,
    table_tree,
    zeroed_sectors_of,
)
from statewarden.recovery.decoding.schema import Schema


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
    with DatabaseFile(path) as db:
        return zeroed_cells_in(db, schema)


def zeroed_cells_in(
    db: DatabaseFile,
    schema: Schema,
    text_proves: Collection[str] | None = None,
    destroyed: dict[str, int] | None = None,
) -> dict[str, ZeroedCells]:
    """:func:`zeroed_cells` of a file already open for raw reads. A caller that holds
    SQLite connections to the file meanwhile opens ``db`` before the first of them and
    closes it after the last (docs/safety.md rule 2: no descriptor of the file is
    closed while a connection holds locks on it). ``text_proves``: the tables whose
    writer puts no NUL character in text (zeros there prove a zeroed sector); None:
    every table. ``destroyed`` gets, per table, the cells of its leaves that begin in
    a zeroed stretch (:func:`_destroyed_on`)."""
    # (the census leaves out pages whose zeroed sectors lie in no record's bytes, by
    # the file's own bytes: those of newer images are looked at whole)
    sectors = zeroed_sectors(db) if db.overlay else db.census().zeroed
    zeroed = {n: z for n, z in sectors.items() if _may_hold_payload(db, n, z)}
    if not zeroed:
        return {}
    free = db.freelist_pages()
    leaves_of = {
        o.name: table_tree(db, o.rootpage).leaves
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
        lost = sum(_destroyed_on(db, n, zeroed[n]) for n in leaves if n in zeroed)
        if lost and destroyed is not None:
            destroyed[name] = lost
        found: ZeroedCells = {}
        wanted = (n for n in leaves if n in zeroed or n in leading)
        for _n, _off, rowid, segs in _cells_of(db, wanted):
            if not any(p in zeroed for _, _, p, _ in segs):
                continue
            runs = _zeroed_runs(segs, zeroed)
            proves = text_proves is None or name in text_proves
            hit = _columns_hit(db, segs, runs, text_proves=proves) if runs else []
            if hit is None or hit:
                found[rowid] = hit
        if found:
            out[name] = found
    return out


def _destroyed_on(db: DatabaseFile, page: int, stretches: list[tuple[int, int]]) -> int:
    """The cells of table leaf ``page`` that begin in one of its zeroed ``stretches``:
    their payload size and rowid read as 0, so SQLite reads each as a row of rowid 0
    with no column stored. None of that is the row the cell held: it was destroyed,
    its key unknown (a cell of a row never starts with a zero byte: a payload size
    of 0 is no record)."""
    try:
        offsets = db.cell_offsets(page)
    except (PageFormatError, struct.error):
        return 0
    return sum(any(lo <= off < hi for lo, hi in stretches) for off in offsets)


def _cells_of(
    db: DatabaseFile, leaves: Iterable[int]
) -> Iterator[tuple[int, int, int, list[Segment]]]:
    """(page, cell offset, rowid, where its payload lies: ``_payload_segments``) of
    each cell of the table ``leaves`` that reads; a leaf whose cell pointers do not
    read, and a cell whose payload does not, are passed over."""
    for n in leaves:
        try:
            offsets = db.cell_offsets(n)
        except (PageFormatError, struct.error):
            continue
        for off in offsets:
            try:
                rowid, segs = _payload_segments(db, n, off)
            except (PageFormatError, struct.error, IndexError):
                continue
            yield n, off, rowid, segs


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
    with DatabaseFile(path) as db:
        claims: dict[int, list[tuple[str, int, bool]]] = {}
        local_of: dict[tuple[str, int], tuple[int, list[Segment]]] = {}
        for o in schema.tables():
            if not o.rootpage or o.without_rowid or o.is_virtual:
                continue
            for n, off, rowid, segs in _cells_of(db, table_tree(db, o.rootpage).leaves):
                # (the size varint read as _payload_segments has just read it)
                size, _ = varint(db.page(n), off)
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


def zeroed_sectors(db: DatabaseFile) -> dict[int, list[tuple[int, int]]]:
    """Page number -> its stretches of zeroed sectors (offsets in the page): on each
    page that holds a wholly zeroed 512-byte sector, the runs of ``MIN_ZERO_STRETCH``
    or more zero bytes that reach a 512-byte boundary, the way a disk zeroes whole
    sectors (a later write may have covered part of one). Taken with the file's
    census (``DatabaseFile.census``)."""
    census = db.census()
    return dict(sorted({**census.zeroed, **zeroed_sectors_of(db, census.passed)}.items()))
