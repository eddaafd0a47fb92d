"""The decoding modules' walks over a file (``DatabaseFile`` and what reads through it)
against plain reference walks written here.

Those walks read each page once, take a census of the file (every page's
type byte and zeroed sectors from large sequential reads), walk a table's b-tree
through its interior pages alone and read cell by cell only the leaves that can lead
into a zeroed sector. The references below do it the straightforward way: every page
and every cell read through the per-page primitives, every leaf read. Both must give
the same answers on healthy files and on files damaged by the fuzz lab (zeroed
sectors and blocks, random bytes, torn and reverted pages, page 1 destroyed).
"""

from __future__ import annotations

import contextlib
import random
import shutil
import struct
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab import corruption, fuzz
from lab.hermes_fixtures import SMALL, built_db
from statewarden.demo.damage import write_at
from statewarden.errors import DatabaseUnreadable, PageFormatError
from statewarden.recovery.decoding import carving
from statewarden.recovery.decoding.carving import orphan_table_leaves
from statewarden.recovery.decoding.damaged_cells import (
    _leaves_leading_into,
    _may_hold_payload,
    zeroed_cells,
    zeroed_cells_in,
    zeroed_sectors,
)
from statewarden.recovery.decoding.page_format import (
    PAGE_INDEX_INTERIOR,
    PAGE_TABLE_INTERIOR,
    PAGE_TABLE_LEAF,
    Row,
    varint,
)
from statewarden.recovery.decoding.pages import (
    SECTOR,
    DatabaseFile,
    ZeroedCells,
    _columns_hit,
    _payload_segments,
    _zeroed_runs,
    _zeroed_sector_pages,
    find_leaf,
    table_tree,
    zeroed_sectors_of,
)
from statewarden.recovery.decoding.schema import Schema, read_schema

# -- the reference walks ------------------------------------------------------------


def plain_overflow_pages(db: DatabaseFile, n: int, kind: int, off: int) -> list[int]:
    """The overflow pages of the cell at ``off`` of page ``n``, each page read whole."""
    pg = db.page(n)
    pos = off + (4 if kind == PAGE_INDEX_INTERIOR else 0)
    size, pos = varint(pg, pos)
    if kind == PAGE_TABLE_LEAF:
        _, pos = varint(pg, pos)
    local = db._local_size(size, table=kind == PAGE_TABLE_LEAF)
    if local == size:
        return []
    (first,) = struct.unpack(">I", pg[pos + local : pos + local + 4])
    out: list[int] = []
    while first and first not in out and 1 <= first <= db.page_count:
        out.append(first)
        (first,) = struct.unpack(">I", db.page(first)[:4])
    return out


def plain_reachable(db: DatabaseFile, roots: list[int]) -> set[int]:
    """Pages reached from ``roots`` and the freelist: every page read through
    ``btree_header``, ``children`` and ``cell_offsets``, every cell's chain followed."""
    seen: set[int] = set()
    stack = [r for r in roots if r]
    while stack:
        n = stack.pop()
        if n in seen or not 1 <= n <= db.page_count:
            continue
        seen.add(n)
        try:
            kind, _, _ = db.btree_header(n)
            stack.extend(db.children(n))
            if kind != PAGE_TABLE_INTERIOR:
                for off in db.cell_offsets(n):
                    try:
                        seen.update(plain_overflow_pages(db, n, kind, off))
                    except (struct.error, IndexError):
                        continue
        except (PageFormatError, struct.error):
            continue
    return seen | db.freelist_pages()


def plain_orphans(db: DatabaseFile, roots: list[int]) -> list[int]:
    """Table leaves no root reaches, every page's header read."""
    reached = plain_reachable(db, roots)
    out = []
    for n in range(1, db.page_count + 1):
        try:
            if n not in reached and db.btree_header(n)[0] == PAGE_TABLE_LEAF:
                out.append(n)
        except PageFormatError:
            continue
    return out


def plain_table_tree(db: DatabaseFile, root: int) -> tuple[list[int], list[int], list[int]]:
    """(table leaves, pages that do not parse as table pages, interior pages whose
    children parse) of the tree at ``root``, every page read whole."""
    leaves: list[int] = []
    damaged: list[int] = []
    interiors: list[int] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if n in seen or not 1 <= n <= db.page_count:
            continue
        seen.add(n)
        try:
            kind, _, _ = db.btree_header(n)
            if kind == PAGE_TABLE_INTERIOR:
                stack.extend(db.children(n))
                interiors.append(n)
                continue
            if kind != PAGE_TABLE_LEAF:
                raise PageFormatError("not a table page")
        except (PageFormatError, struct.error, IndexError):
            damaged.append(n)
            continue
        leaves.append(n)
    return leaves, damaged, interiors


def plain_carved(db: DatabaseFile, schema: Schema) -> dict[str, list[Row]]:
    """``carve_damaged_leaves`` of every table, the plain way: the leaves whose cell
    pointers do not read and the pages that do not parse carved, the leaves with a
    garbled cell (rowids not increasing, a cell past the page, cells and free space
    that do not fill the page) read by their pointers and then carved for the rowids
    those lack; every leaf read whole, twice."""
    out: dict[str, list[Row]] = {}
    for obj in schema.tables():
        if not obj.rootpage or obj.without_rowid or obj.is_virtual:
            continue
        leaves, damaged, _ = plain_table_tree(db, obj.rootpage)
        readable = []
        for n in leaves:
            try:
                db.cell_offsets(n)
                readable.append(n)
            except (PageFormatError, struct.error, IndexError):
                damaged.append(n)
        rows: list[Row] = []
        counts = {len(obj.stored_columns)}
        for n in readable:
            if not plain_garbled(db, n):
                counts.update(plain_field_counts(db, n))
        for n in sorted(damaged):
            rows.extend(r for r in carving._carve(db, n) if carving._fits_whole(obj, r[1], counts))
        for n in readable:
            if plain_garbled(db, n):
                pointed = [r for r in db.leaf_rows(n)[0] if carving._fits_whole(obj, r[1], counts)]
                rows.extend(pointed)
                have = {r for r, _ in pointed}
                for r in carving._carve(db, n):
                    if r[0] not in have and carving._fits_whole(obj, r[1], counts):
                        rows.append(r)
        if rows:
            out[obj.name] = carving._one_version(rows)
    return out


def plain_field_counts(db: DatabaseFile, n: int) -> set[int]:
    """The number of serial types in the record header of each cell of leaf ``n``
    whose header lies in the cell's own bytes."""
    pg = db.page(n)
    out = set()
    for off in db.cell_offsets(n):
        try:
            size, pos = varint(pg, off)
            _, pos = varint(pg, pos)
            here = pg[pos : pos + min(size, db._local_size(size, table=True))]
            hsize, at = varint(here, 0)
            types = []
            while 0 < hsize <= len(here) and at < hsize:
                t, at = varint(here, at)
                types.append(t)
        except (PageFormatError, struct.error, IndexError):
            continue
        if 0 < hsize <= len(here):
            out.add(len(types))
    return out


def plain_garbled(db: DatabaseFile, n: int) -> bool:
    """Do the cells of leaf ``n`` hold rowids out of order, or run past the page, or do
    they, the free blocks and the fragments not fill its content area?"""
    pg = db.page(n)
    prev = None
    used = 0
    try:
        for off in db.cell_offsets(n):
            size, pos = varint(pg, off)
            rowid, pos = varint(pg, pos)
            local = db._local_size(size, table=True)
            if pos + local + (4 if local < size else 0) > db.usable:
                return True
            if prev is not None and rowid <= prev:
                return True
            prev = rowid
            used += pos + local + (4 if local < size else 0) - off
    except (PageFormatError, struct.error, IndexError):
        return True
    h = 100 if n == 1 else 0
    free, block = pg[h + 7], int.from_bytes(pg[h + 1 : h + 3], "big")
    for _ in range(db.usable):  # the free blocks, each once (a chain that loops is damage)
        if not block:
            break
        free += int.from_bytes(pg[block + 2 : block + 4], "big")
        block = int.from_bytes(pg[block : block + 2], "big")
    return used + free != db.usable - (int.from_bytes(pg[h + 5 : h + 7], "big") or 65536)


def plain_zeroed_cells(db: DatabaseFile, schema: Schema) -> dict[str, ZeroedCells]:
    """``zeroed_cells`` read the plain way: the zeroed sectors page by page, every leaf
    of every table cell by cell (only the leaves with a zeroed sector when no zeroed
    page lies outside the tables' leaves and the freelist)."""
    every = set(range(1, db.page_count + 1))
    zeroed = {n: z for n, z in zeroed_sectors_of(db, every).items() if _may_hold_payload(db, n, z)}
    if not zeroed:
        return {}
    tables = [o for o in schema.tables() if o.rootpage and not o.without_rowid and not o.is_virtual]
    leaves_of = {o.name: plain_table_tree(db, o.rootpage)[0] for o in tables}
    on_leaf = {n for leaves in leaves_of.values() for n in leaves}
    others = set(zeroed) - on_leaf - db.freelist_pages()
    out: dict[str, ZeroedCells] = {}
    for name, leaves in leaves_of.items():
        found: ZeroedCells = {}
        for n in leaves:
            if n not in zeroed and not others:
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
                if any(p in zeroed for _, _, p, _ in segs):
                    runs = _zeroed_runs(segs, zeroed)
                    hit = _columns_hit(db, segs, runs) if runs else []
                    if hit is None or hit:
                        found[rowid] = hit
        if found:
            out[name] = found
    return out


# -- the comparison -----------------------------------------------------------------


def schema_of(path: Path) -> Schema:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return read_schema(conn)
    finally:
        conn.close()


def open_file(path: Path, page_size: int) -> DatabaseFile:
    """``path`` read by its header, or with ``page_size`` when page 1 lost it."""
    try:
        return DatabaseFile(path)
    except DatabaseUnreadable:
        return DatabaseFile(path, page_size=page_size)


def answers(path: Path, schema: Schema, page_size: int, *, plain: bool) -> dict[str, Any]:
    """Every walk's answer on ``path``, by the module or by the references."""
    roots = [o.rootpage for o in schema.objects if o.rootpage] + [1]
    db = open_file(path, page_size)
    try:
        if plain:
            trees = {o.rootpage: plain_table_tree(db, o.rootpage) for o in schema.objects}
            return {
                "reachable": plain_reachable(db, roots),
                "orphans": plain_orphans(db, roots),
                "trees": trees,
                "zeroed": plain_zeroed_cells(db, schema),
                "sectors": zeroed_sectors_of(db, set(range(1, db.page_count + 1))),
            }
        out: dict[str, Any] = {
            "reachable": db.reachable(roots),
            "orphans": orphan_table_leaves(db, roots),
            "trees": {o.rootpage: table_tree(db, o.rootpage) for o in schema.objects},
            "zeroed": zeroed_cells_in(db, schema),
            "sectors": zeroed_sectors(db),
        }
        # The same walks once the census is taken (types from it, not from the pages).
        again = {o.rootpage: table_tree(db, o.rootpage) for o in schema.objects}
        assert again == out["trees"]
        return out
    finally:
        db.close()


def assert_same_answers(path: Path, schema: Schema, page_size: int = 4096) -> dict[str, Any]:
    fast = answers(path, schema, page_size, plain=False)
    assert fast == answers(path, schema, page_size, plain=True)
    # (page 1 may have lost the header: then only a given page size reads the file)
    with contextlib.suppress(DatabaseUnreadable):
        assert zeroed_cells(path, schema) == fast["zeroed"]  # (opens its own file)
        tables = [o.name for o in schema.tables()]
        fast["carved"] = carving.carve_damaged_leaves(path, schema, tables)
        db = DatabaseFile(path)
        try:
            assert fast["carved"] == plain_carved(db, schema)
        finally:
            db.close()
    return fast


def page_count(path: Path) -> int:
    db = DatabaseFile(path)
    try:
        return db.page_count
    finally:
        db.close()


def page_size(path: Path) -> int:
    db = DatabaseFile(path)
    try:
        return db.page_size
    finally:
        db.close()


# -- the tests ----------------------------------------------------------------------


def test_healthy_file() -> None:
    """On a healthy Hermes file every page is reached, no leaf is an orphan, no row
    is zeroed, and every walk gives the reference's answer."""
    path = built_db(SMALL)
    fast = assert_same_answers(path, schema_of(path))
    assert len(fast["reachable"]) == page_count(path)
    assert fast["orphans"] == []
    assert fast["zeroed"] == {}


@pytest.mark.parametrize("block", range(4))
def test_fuzz_seeds(tmp_path: Path, block: int) -> None:
    """On 30 seeds of the fuzz lab's damage per block (page 1 destroyed too on every
    third), every walk gives the reference's answer; over the blocks the damage
    orphans leaves and zeroes rows, so the answers are not all empty."""
    touched = 0
    for seed in range(block * 30, (block + 1) * 30):
        case = fuzz.fuzz_case(tmp_path / str(seed), seed, page1=seed % 3 == 0)
        fast = assert_same_answers(case.db, schema_of(case.pristine))
        touched += bool(fast["orphans"] or fast["zeroed"])
    assert touched > 0


def overflow_row(path: Path) -> tuple[int, int, list[int]]:
    """(rowid, leaf, overflow pages) of the long-prompt session row."""
    root = corruption.schema_roots(path)["sessions"]
    [(rowid,)] = corruption.table_rows(path, "SELECT rowid FROM sessions WHERE id = 'long_prompt'")
    db = DatabaseFile(path)
    try:
        leaf = find_leaf(db, root, int(rowid))  # type: ignore[call-overload]
        assert leaf is not None
        for off in db.cell_offsets(leaf):
            got, segs = _payload_segments(db, leaf, off)
            if got == rowid:
                return got, leaf, [p for _, _, p, _ in segs[1:]]
    finally:
        db.close()
    raise AssertionError("no cell holds the long-prompt row")


def test_zeroed_sector_on_an_overflow_page(tmp_path: Path) -> None:
    """A sector zeroed in the middle of a row's overflow page (its leaf untouched) is
    found through the chain: the row is listed with its columns, as the reference
    says, and its leaf is among the few the fast walk reads cell by cell."""
    case = corruption.broken_overflow(tmp_path / "db")
    shutil.copyfile(case.pristine, case.db)  # undo the lab's whole-page damage
    rowid, leaf, chain = overflow_row(case.db)
    ps = page_size(case.db)
    write_at(case.db, (chain[1] - 1) * ps + 1024, bytes(SECTOR))
    schema = schema_of(case.pristine)
    fast = assert_same_answers(case.db, schema)
    assert list(fast["zeroed"]["sessions"]) == [rowid]
    assert fast["zeroed"]["sessions"][rowid]  # some columns, the header intact
    db = DatabaseFile(case.db)
    try:
        leaves = {n for o in schema.tables() for n in table_tree(db, o.rootpage).leaves}
        leading = _leaves_leading_into(db, leaves, {chain[1]})
    finally:
        db.close()
    assert leaf in leading
    assert len(leading) < len(leaves) // 4


def test_child_pointer_cut_off_by_the_page_end(tmp_path: Path) -> None:
    """An interior page whose cell pointer points at the page's last two bytes (a child
    number cut off by the page's end) is not descended: its leaves are orphans to
    salvage. It used to escape the walk as a struct.error."""
    case = corruption.fresh_copy(tmp_path / "db")
    root = case.roots["messages"]
    db = DatabaseFile(case.db)
    try:
        kind, h, _ = db.btree_header(root)
        ps = db.page_size
    finally:
        db.close()
    assert kind == PAGE_TABLE_INTERIOR
    write_at(case.db, (root - 1) * ps + h + 12, struct.pack(">H", ps - 2))
    _, leaves = corruption.PristineFile(case.pristine).tree_pages(root)
    roots = [*case.roots.values(), 1]
    db = DatabaseFile(case.db)
    try:
        assert orphan_table_leaves(db, roots) == sorted(leaves)
    finally:
        db.close()
    assert_same_answers(case.db, schema_of(case.pristine))


class CountingFile(DatabaseFile):
    """A DatabaseFile that counts its page reads."""

    reads = 0

    def page(self, n: int) -> bytes:
        self.reads += 1
        return super().page(n)


def test_an_overflow_chain_that_loops_is_read_once_round(tmp_path: Path) -> None:
    """A row's overflow chain whose last page points back to its first: the walk
    reaches the same pages and reads each of the chain's pages once, instead of going
    round the loop up to a million times."""
    case = corruption.broken_overflow(tmp_path / "db")
    shutil.copyfile(case.pristine, case.db)
    _, _, chain = overflow_row(case.db)
    ps = page_size(case.db)
    write_at(case.db, (chain[-1] - 1) * ps, struct.pack(">I", chain[0]))
    schema = schema_of(case.pristine)
    roots = [o.rootpage for o in schema.objects if o.rootpage] + [1]
    db = CountingFile(case.db)
    try:
        assert set(chain) <= db.reachable(roots)
        assert db.reads < 2 * db.page_count
    finally:
        db.close()
    assert_same_answers(case.db, schema)


def plain_zeroed_sector_pages(data: bytes, page_size: int) -> list[int]:
    """The pages of ``data`` holding a wholly zeroed sector, every whole sector compared."""
    zero = bytes(SECTOR)
    whole = len(data) // SECTOR
    return sorted(
        {
            s * SECTOR // page_size
            for s in range(whole)
            if data[s * SECTOR : (s + 1) * SECTOR] == zero
        }
    )


@pytest.mark.parametrize("page_size", [512, 1024, 4096, 65536])
def test_zeroed_sector_search_misses_no_sector_and_invents_none(page_size: int) -> None:
    """The search for wholly zeroed sectors (first and last bytes of every sector taken
    at once, then the candidates compared whole) finds the pages a sector-by-sector
    comparison finds, on bytes that hold the near misses: a sector zero but for one
    byte (its first, its last, one in the middle), runs of zeros longer than a sector
    that straddle two, two zeroed sectors on one page, a sector cut short at the end."""
    rnd = random.Random(page_size)
    found = 0
    for _ in range(300):
        data = bytearray(rnd.randbytes(rnd.randrange(0, 6 * page_size + SECTOR)))
        for _ in range(rnd.randrange(0, 10)):
            at = rnd.randrange(0, len(data) + 1)
            length = rnd.choice([16, 511, SECTOR, SECTOR + 1, 2 * SECTOR, 3 * SECTOR - 7])
            data[at : at + length] = bytes(len(data[at : at + length]))
        for _ in range(rnd.randrange(0, 4)):
            if data:
                sector = rnd.randrange(0, -(-len(data) // SECTOR)) * SECTOR
                nearly = sector + rnd.choice([0, SECTOR - 1, rnd.randrange(1, SECTOR - 1)])
                data[sector : sector + SECTOR] = bytes(len(data[sector : sector + SECTOR]))
                if nearly < len(data):
                    data[nearly] = rnd.randrange(1, 256)
        want = plain_zeroed_sector_pages(bytes(data), page_size)
        assert _zeroed_sector_pages(bytes(data), page_size) == want
        found += len(want)
    assert found > 0
