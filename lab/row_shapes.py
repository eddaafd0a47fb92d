"""Damage to the shape of rows, on a copy of the fuzz lab's Hermes-written file.

A child pointer of the ``messages`` root flipped onto another table's leaf, two
records swapped on their leaf, the leaves of two indexes swapped, and a CREATE TABLE
text that lost a column while every record still carries it. Each case records what
is true of the damaged copy: the rowids on the leaf no longer reached, the rowids
whose records were swapped, the column taken out of the schema text.
"""

from __future__ import annotations

import re
import shutil
import struct
from pathlib import Path

import apsw

from lab.corruption import Case, PristineFile, schema_roots
from lab.hermes_fixtures import later_db
from statewarden.demo.damage import varint, write_at


def _fresh(dest_dir: Path, source: Path | None = None) -> Case:
    dest_dir.mkdir(parents=True, exist_ok=True)
    pristine = source or later_db()
    db = dest_dir / "state.db"
    shutil.copyfile(pristine, db)
    return Case(db=db, pristine=pristine, roots=schema_roots(pristine))


def child_pointer_to_foreign_leaf(
    dest_dir: Path, target: str, *, one_bit: bool = True, source: Path | None = None
) -> Case:
    """A child pointer of a ``messages`` interior page (the root's first) changed to
    name a leaf of ``target`` (page 1 for ``"sqlite_schema"``), one bit away (with
    ``one_bit``, unless page 1): that leaf's cells are another table's rows, under
    rowids ``messages`` uses too. On a copy of ``source`` (the fuzz lab's file).

    ``unreached`` lists the messages on the leaf no longer reached (intact on disk).
    """
    case = _fresh(dest_dir, source)
    pf = PristineFile(case.pristine)
    targets = [1] if target == "sqlite_schema" else pf.tree_pages(case.roots[target])[1]
    interiors = [case.roots["messages"]]
    for n in interiors:  # breadth first: the root's pointers come first
        interiors.extend(k for k in pf.children(n) if pf.children(k))
    pairs = [
        (n, i, child, other)
        for n in interiors
        for i, child in enumerate(pf.children(n)[:-1])
        for other in targets
        if (x := child ^ other) and (x & (x - 1) == 0 or not one_bit or target == "sqlite_schema")
    ]
    if not pairs:  # pragma: no cover - the fuzz file always has such a pair
        raise RuntimeError(f"no messages child pointer one bit away from a {target} leaf")
    n, i, child, other = pairs[0]
    at = (n - 1) * pf.page_size + pf.cell_offsets(n)[i]
    write_at(case.db, at, struct.pack(">I", other))
    case.unreached = {"messages": pf.leaf_rowids(child)}
    case.damaged_pages.append(n)
    case.note = f"messages page {n}: child {i} moved from leaf {child} to {target} page {other}"
    return case


def _cells(page: bytes, offsets: list[int]) -> list[list[bytes]]:
    """Each cell of a table leaf whose records all fit on it: [size, rowid, record]."""
    cells = []
    for off in offsets:
        size, pos = varint(page, off)
        _, pos2 = varint(page, pos)
        cells.append([page[off:pos], page[pos:pos2], page[pos2 : pos2 + size]])
    return cells


def swapped_records(dest_dir: Path, leaf_index: int = 12, a: int = 1, b: int = 4) -> Case:
    """The records of two messages of one session traded on their leaf (cells ``a``
    and ``b`` of the ``leaf_index``-th ``messages`` leaf): each rowid now carries the
    other's role, content and timestamp. ``collision["messages"]`` is the two rowids."""
    case = _fresh(dest_dir)
    pf = PristineFile(case.pristine)
    ps = pf.page_size
    leaf = pf.tree_pages(case.roots["messages"])[1][leaf_index]
    cells = _cells(pf.page(leaf), pf.cell_offsets(leaf))
    cells[a][0], cells[b][0] = cells[b][0], cells[a][0]
    cells[a][2], cells[b][2] = cells[b][2], cells[a][2]
    page = bytearray(ps)
    end = ps
    pointers = []
    for cell in cells:
        blob = b"".join(cell)
        end -= len(blob)
        page[end : end + len(blob)] = blob
        pointers.append(end)
    page[0] = 0x0D
    page[3:7] = struct.pack(">HH", len(cells), end)
    for k, p in enumerate(pointers):
        page[8 + 2 * k : 10 + 2 * k] = struct.pack(">H", p)
    write_at(case.db, (leaf - 1) * ps, bytes(page))
    swapped = [varint(cells[k][1], 0)[0] for k in (a, b)]
    case.collision = {"messages": swapped}
    case.damaged_pages.append(leaf)
    case.note = f"messages leaf {leaf}: the records of rowids {swapped} swapped"
    return case


def swapped_index_leaves(
    dest_dir: Path, first: str = "idx_messages_session", second: str = "idx_messages_session_active"
) -> Case:
    """A leaf of index ``first`` and a leaf of index ``second`` traded places (index
    pages only: every table row is intact)."""
    case = _fresh(dest_dir)
    pf = PristineFile(case.pristine)
    ps = pf.page_size
    a = pf.tree_pages(case.roots[first])[1][1]
    b = pf.tree_pages(case.roots[second])[1][1]
    write_at(case.db, (a - 1) * ps, pf.page(b))
    write_at(case.db, (b - 1) * ps, pf.page(a))
    case.damaged_pages.extend([a, b])
    case.note = f"index leaves {a} ({first}) and {b} ({second}) swapped"
    return case


def schema_short_of_column(dest_dir: Path, table: str, column: str) -> Case:
    """``column``'s line taken out of ``table``'s CREATE TABLE text (which still
    parses); every record on disk still carries the column's field."""
    case = _fresh(dest_dir)
    conn = apsw.Connection(str(case.db))
    try:
        conn.execute("PRAGMA writable_schema=ON")
        row = conn.execute("SELECT sql FROM sqlite_schema WHERE name = ?", (table,)).fetchone()
        assert row is not None
        sql = str(row[0])
        new = re.sub(rf"\n\s*{column} [^\n]*,", "", sql, count=1)
        if new == sql:
            raise ValueError(f"{table} has no line for {column}")
        conn.execute("UPDATE sqlite_schema SET sql = ? WHERE name = ?", (new, table))
    finally:
        conn.close()
    for side in ("-wal", "-shm"):
        Path(f"{case.db}{side}").unlink(missing_ok=True)
    case.note = f"{table}: {column} taken out of its CREATE TABLE text"
    return case
