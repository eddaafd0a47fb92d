"""Page 1 and the schema pages destroyed: the page size and Hermes' schema inferred.

When the 100-byte header is gone, or page 1 and every ``sqlite_schema`` leaf with it,
SQLite cannot read anything, though the tables' pages are intact. This module rebuilds
page 1 of the private copy from what the other pages prove (sqlite.org/fileformat2.html):

1. the page size (``infer_page_size``): at each candidate size from 512 to 65536 that
   divides the file's length, count the pages whose b-tree header is consistent (a
   page type, a cell-pointer array and cells inside the page, an interior page's
   children inside the file); the true size has the most, and no other size as many.
   The new header claims WAL only when a ``-wal`` lies beside the file
   (``fresh_header``);
2. the tables' trees (``found_trees.py``): every table b-tree page no interior page
   points to is a root; its leaves hold records of one table's shape;
3. the layout (``layout_choice.py``): each of Hermes' known schemas
   (``known_schemas.py``) is matched against the trees' records (the number of fields
   and their types, ``carving.record_fits``); the one whose tables the most
   leaves fit is taken, one with both ``sessions`` and ``messages`` found before one with either
   (and another of its tables). A core table no tree fits is looked for among the pages
   whose header is destroyed, by the cells carved from them (``_headless_roots``); one
   still not found that the tables found prove held rows is lost whole
   (``LostSchema.lost_tables``). A file no layout fits is not Hermes' and gets no
   guessed schema. A file whose ``schema_version`` table holds a version newer than
   every layout's (``schema_version_in_rows``) is named so; a wide table whose records
   carry more fields than the layout gives it is taken by the names of its known
   columns, the fields past them kept in ``unnamed_column_<n>`` columns
   (``_take_wider``), and a tree that fits no table is left out: cannot verify;
4. page 1 is written (``rebuild_from_known_schema``, ``_page1``) as the root of
   a new ``sqlite_schema`` holding that layout's rows, each table's root the largest
   tree of its shape, or the tree at the root the creation order proves
   (``created_roots``: SQLite gives each object created the next page, before any row,
   so a page ``DELETE`` freed is never one of them; of a file an upgrade made, only the
   older layout's objects, ``UPGRADED_FROM``); a tree that fits only proven tables is no
   root, and a tie placed by creation order does not count the pages the freelist's
   trunk pages list (``freed_pages``); an index, an FTS shadow table and a table with no
   tree get a new empty root page appended to the copy. The rest is the usual recovery:
   leaves no tree reaches are salvaged by shape, indexes are rebuilt, and the FTS tables
   are rebuilt from ``messages``; the old indexes' pages, left in the file, vouch for
   the rows read (``old_indexes.py``).

Only the private copy is written. Call with no SQLite connection open to it
(docs/safety.md rule 2).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.errors import DatabaseUnreadable, PageFormatError
from statewarden.recovery.decoding.page_format import (
    PAGE_INDEX_LEAF,
    PAGE_TABLE_INTERIOR,
    PAGE_TABLE_LEAF,
    encode_varint,
    place_cells,
)
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.evidence.found_trees import Tree, btree_roots, find_trees
from statewarden.recovery.evidence.known_schemas import (
    KNOWN_SCHEMAS,
    NEWEST_KNOWN_VERSION,
    KnownRow,
    layout_schema,
)
from statewarden.recovery.evidence.layout_choice import (
    _choose_layout,
    newer_schema_text,
    unnamed_columns,
)
from statewarden.sidecars import WAL_SUFFIX, sidecar
from statewarden.sqlite import HEADER_SIZE, SQLITE_MAGIC, quote_ident


@dataclass
class LostSchema:
    """What was inferred, for the notes."""

    layout: str
    description: str
    roots: dict[str, int]  # table -> root page of the tree taken for it
    leaves: dict[str, int]  # table -> leaves of that tree
    missing: list[str]  # base tables no tree fits
    fitted_leaves: dict[str, int]  # layout -> leaves its tables fit
    # trees whose records fit more than one table equally: (leaves, records read, tables)
    left_out: list[tuple[int, int, list[str]]] = field(default_factory=list)
    completed: list[str] = field(default_factory=list)  # objects the schema still named
    reindex: list[str] = field(default_factory=list)  # tables given new, empty indexes
    # the indexes of those tables: filled from the tables in the copy (``reindex``),
    # so they repeat the tables' rows and vouch for none
    rebuilt_indexes: list[str] = field(default_factory=list)
    first_new_page: int = 0  # the pages from here on were appended to the copy
    # core tables no page of which was found that held rows (``_proven_lost``): all
    # their rows are lost
    lost_tables: list[str] = field(default_factory=list)
    headless: dict[str, int] = field(default_factory=dict)  # table -> root whose header is gone
    # what the file's schema_version table holds (``schema_version_in_rows``), if read
    schema_version: int | None = None
    # tables whose records carry fields past the layout's columns (a newer Hermes added
    # them): the columns added for those fields, which had no name left to read
    unnamed: dict[str, list[str]] = field(default_factory=dict)

    @property
    def newer(self) -> bool:
        """Was the file written by a Hermes newer than every known layout?"""
        return self.schema_version is not None and self.schema_version > NEWEST_KNOWN_VERSION

    def left_out_json(self) -> list[dict[str, Any]]:
        """The trees left out, as the report lists them."""
        return [
            {"leaves": leaves, "records_read": records, "fit": tables}
            for leaves, records, tables in self.left_out
        ]

    def note(self, source: Path, cause: str | None = None) -> str:
        """What was rebuilt and from what; ``cause``: why SQLite could not read a
        schema whose pages still read (then they are not said to be destroyed)."""
        found = ", ".join(
            f"{t} (root page {self.roots[t]}, {self.leaves[t]} leaves)" for t in sorted(self.roots)
        )
        others = ", ".join(
            f"{name}: {n}" for name, n in sorted(self.fitted_leaves.items()) if name != self.layout
        )
        lead = (
            f"{source}: sqlite_schema rows were lost with a destroyed page; the"
            f" {len(self.completed)} objects it still names kept, the others added"
            if self.completed
            else f"{cause}; the schema was rebuilt"
            if cause
            else f"{source}: page 1 and the sqlite_schema pages are destroyed; the schema was"
            " rebuilt"
        )
        text = (
            f"{lead} in the private copy from the known schema of {self.description}"
            f" (layout {self.layout}): the records of {self.fitted_leaves[self.layout]}"
            f" table leaves fit its tables (other layouts: {others}); tables found: {found}"
        )
        for table, root in sorted(self.headless.items()):
            text += (
                f"; the header of page {root}, the root of {table}, is destroyed:"
                " its cells are carved"
            )
        text += self._newer_note()
        if self.missing:
            text += f"; no pages of {', '.join(sorted(self.missing))} were found"
        if self.lost_tables:
            text += "".join(f"; all rows of {t} are lost" for t in self.lost_tables)
        for leaves, records, tables in self.left_out:
            text += (
                f"; {leaves} leaves ({records} records read) fit {' and '.join(tables)} alike"
                " and nothing tells which: their rows are not recovered"
                if tables
                else f"; {leaves} leaves ({records} records read) fit no table of the layout"
                f" (an object of schema {self.schema_version} this statewarden does not"
                " know): cannot verify, their rows are not recovered"
            )
        return (
            text + "; indexes and FTS tables are rebuilt from the tables; recover can rebuild"
            " the database from this schema"
        )

    def _newer_note(self) -> str:
        """What a file of a newer Hermes got: the names its rows were taken by."""
        if not self.newer:
            return ""
        text = (
            f"; its schema_version table holds {self.schema_version}:"
            f" {newer_schema_text(self.schema_version)}; its rows are taken by the names"
            " of the columns this layout has"
        )
        for table, names in sorted(self.unnamed.items()):
            text += (
                f"; the rows of {table} carry {len(names)} more field"
                f"{'s' if len(names) != 1 else ''} than the layout names (columns schema"
                f" {self.schema_version} added, their names lost with the schema): kept in"
                f" {', '.join(names)}"
            )
        return text


def rebuild_from_known_schema(
    path: Path,
    source: Path,
    present: dict[str, int] | None = None,
    kept: list[list[Any]] | None = None,
) -> LostSchema:
    """Rewrite page 1 of the private copy ``path`` as the root of the known schema its
    rows fit, appending an empty root page for every object no tree was found for.
    ``present``: the objects (name -> root page) the schema still names, when only
    some of its rows were lost; they keep their roots, and only layouts holding them
    all are considered. ``kept``: schema rows (type, name, tbl_name, rootpage, sql)
    still read; the views among them that the layout does not name (the user's own:
    no rows, nothing that fails without its table) neither rule a layout out nor are
    dropped: they stay in the schema as they were. Raises :class:`DatabaseUnreadable`
    (one line) when no Hermes layout fits."""
    present = present or {}
    views = [list(r) for r in kept or [] if str(r[0]) == "view"]
    with DatabaseFile(path) as db:
        trees = find_trees(db)
        roots = btree_roots(db)
        page_size, usable, page_count = db.page_size, db.usable, db.page_count
        header = db.page(1)[:HEADER_SIZE]
    choice = _choose_layout(path, source, present, trees, roots, views={str(v[1]) for v in views})
    layout, found = choice.layout, choice.found
    description, known = KNOWN_SCHEMAS[layout]
    known, unnamed = _with_unnamed_columns(known, found, choice.version)
    schema, _fks = layout_schema(known)
    records: list[list[Any]] = []
    reindex_tables: set[str] = set()
    next_page = page_count + 1
    empty_pages: list[bytes] = []
    for kind, name, tbl, sql in known:
        obj = schema.by_name(name)
        root = 0
        if name in present:
            root = present[name]
        elif kind in ("table", "index") and not (obj is not None and obj.is_virtual):
            if kind == "index":
                reindex_tables.add(tbl)
            if name in found and obj is not None and obj.shadow_of is None:
                root = found[name].root
            else:
                root = next_page
                next_page += 1
                table_tree = kind == "table" and obj is not None and not obj.without_rowid
                empty_pages.append(_empty_leaf(page_size, usable, table_tree))
        records.append([kind, name, tbl, root, sql])
    known_names = {name for _kind, name, _tbl, _sql in known}
    records.extend(v for v in views if str(v[1]) not in known_names)
    leaves = _schema_leaves(records, page_size, usable)
    first_leaf = next_page
    total = first_leaf - 1 + len(leaves)
    wal = sidecar(path, WAL_SUFFIX).exists()
    page1 = _page1(header, leaves, first_leaf, page_size, usable, total, records, wal=wal)
    with open(path, "r+b") as f:
        f.seek(page_count * page_size)
        for page in empty_pages:
            f.write(page)
        for leaf in leaves:
            f.write(leaf)
        f.seek(0)
        f.write(page1)
    base_names = {o.name for o in schema.base_tables()}
    return LostSchema(
        layout=layout,
        description=description,
        roots={t: tree.root for t, tree in found.items() if t not in present},
        leaves={t: len(tree.leaves) for t, tree in found.items() if t not in present},
        completed=sorted(present),
        reindex=sorted(reindex_tables & base_names),
        rebuilt_indexes=[
            name for kind, name, tbl, _ in known if kind == "index" and tbl in reindex_tables
        ],
        first_new_page=page_count + 1,
        missing=sorted(base_names - set(found)),
        lost_tables=_proven_lost(found, present),
        headless={t: tree.root for t, tree in found.items() if tree.headless},
        fitted_leaves=choice.fitted,
        left_out=[(len(t.leaves), len(t.rows), names) for t, names in choice.left_out],
        schema_version=choice.version,
        unnamed=unnamed,
    )


def _with_unnamed_columns(
    known: tuple[KnownRow, ...], found: dict[str, Tree], version: int | None
) -> tuple[tuple[KnownRow, ...], dict[str, list[str]]]:
    """A newer Hermes' file (``version`` above every layout's): the layout's rows with
    a column added to each table for each field its records carry past its columns
    (``unnamed_columns``), so no value is dropped; and those columns by table."""
    if version is None or version <= NEWEST_KNOWN_VERSION:
        return known, {}
    unnamed = unnamed_columns(layout_schema(known)[0], found)
    rows = tuple(
        (
            kind,
            name,
            tbl,
            widened_text(sql, name, unnamed[name]) if name in unnamed and sql else sql,
        )
        for kind, name, tbl, sql in known
    )
    return rows, unnamed


def _proven_lost(found: dict[str, Tree], present: dict[str, int]) -> list[str]:
    """The core tables no page of which was found that held rows: ``sessions`` when
    messages were found (Hermes writes a message's session first), ``messages`` when a
    session found counts messages (``message_count`` above 0)."""
    out = []
    if "sessions" not in found and "sessions" not in present and "messages" in found:
        out.append("sessions")
    if "messages" not in found and "messages" not in present and "sessions" in found:
        tree = found["sessions"]
        i = tree.columns.get("message_count")
        counts = [v[i] for _, v in tree.rows if i is not None and len(v) > i]
        if any(isinstance(c, int) and c > 0 for c in counts):
            out.append("messages")
    return out


def widened_text(sql: str, table: str, columns: list[str]) -> str:
    """``sql`` (a CREATE TABLE) with ``columns`` added as ``ALTER TABLE ADD COLUMN``
    adds them (last, no type: a value is kept as it is stored), as SQLite writes it."""
    conn = apsw.Connection(":memory:")
    try:
        conn.execute(sql)
        for column in columns:
            conn.execute(f"ALTER TABLE {quote_ident(table)} ADD COLUMN {quote_ident(column)}")
        got = conn.execute("SELECT sql FROM sqlite_schema WHERE name = ?", (table,)).fetchall()
        return str(got[0][0])
    finally:
        conn.close()


def reindex(path: Path, lost: LostSchema) -> list[str]:
    """Fill the empty indexes of the tables found from the tables themselves (SQLite's
    ``REINDEX``), so that the recovery holds the rows against indexes that list them,
    not against empty ones; returns the tables whose indexes could not be built (they
    stay empty and read as index damage). Call after the copy is folded."""
    failed = []
    unbuilt: list[int] = []
    conn = apsw.Connection(str(path))
    try:
        page_size = int(str(conn.execute("PRAGMA page_size").fetchall()[0][0]))
        for table in lost.reindex:
            try:
                conn.execute(f"REINDEX {quote_ident(table)}")
            except apsw.Error:
                failed.append(table)
                unbuilt += [
                    int(r[0])
                    for r in conn.execute(
                        "SELECT rootpage FROM sqlite_schema WHERE type = 'index'"
                        " AND tbl_name = ? AND rootpage > ?",
                        (table, lost.first_new_page - 1),
                    )
                ]
    finally:
        conn.close()
    # An index left empty would vouch that its table has no rows: its new root page is
    # zeroed instead, so it reads as the damaged index it is and is rebuilt.
    with open(path, "r+b") as f:
        for n in unbuilt:
            f.seek((n - 1) * page_size)
            f.write(bytes(page_size))
    return failed


# -- a destroyed header: the page size the pages prove, a fresh header --------------

PAGE_SIZES = tuple(512 << i for i in range(8))


# Pages read per candidate page size: enough to tell the sizes apart on any file.
PAGES_READ_FOR_SIZE = 50_000


def infer_page_size(path: Path) -> tuple[int, str] | None:
    """(page size, why) for a file whose header is destroyed, or None when no size
    is clearly the file's (no b-tree page at any size, or two sizes tie)."""
    size = path.stat().st_size
    scores: dict[int, int] = {}
    for ps in PAGE_SIZES:
        if size % ps or size < 2 * ps:
            continue
        with DatabaseFile(path, page_size=ps) as db:
            last = min(db.page_count, PAGES_READ_FOR_SIZE)
            scores[ps] = sum(1 for n in range(2, last + 1) if _plausible(db, n))
    ranked = sorted(scores.items(), key=lambda kv: -kv[1])
    if not ranked or ranked[0][1] == 0 or (len(ranked) > 1 and ranked[1][1] == ranked[0][1]):
        return None
    best, count = ranked[0]
    runner = f"; at {ranked[1][0]} bytes {ranked[1][1]}" if len(ranked) > 1 else ""
    return best, f"{count} pages have a consistent b-tree header at {best} bytes{runner}"


def _plausible(db: DatabaseFile, n: int) -> bool:
    """Does page ``n`` read as a b-tree page at ``db``'s page size?"""
    try:
        _kind, h, _count = db.btree_header(n)
        offs = db.cell_offsets(n)
        pg = db.page(n)
        (first_free,) = struct.unpack(">H", pg[h + 1 : h + 3])
        (content,) = struct.unpack(">H", pg[h + 5 : h + 7])
        content = content or 65536
        if content > db.page_size or (offs and content > min(offs)):
            return False
        if first_free and not h + 8 <= first_free < db.page_size:
            return False
        return all(2 <= c <= db.page_count for c in db.children(n))
    except (PageFormatError, struct.error):
        return False


def fresh_header(page_size: int, page_count: int, *, wal: bool) -> bytes:
    """A 100-byte header, UTF-8, no reserved bytes, no freelist known; in WAL mode only
    when ``wal`` (the file has a ``-wal``): a file closed cleanly leaves none in either
    mode, and Hermes 0.22 keeps a file in rollback mode where it will not create WAL
    (a SQLite with the WAL-reset bug) but switches a rollback file it may run in WAL
    back to WAL itself, so rollback is the mode that takes no choice from it."""
    h = bytearray(HEADER_SIZE)
    h[0:16] = SQLITE_MAGIC
    struct.pack_into(">H", h, 16, 1 if page_size == 65536 else page_size)
    version = 2 if wal else 1
    h[18:24] = bytes([version, version, 0, 64, 32, 32])
    struct.pack_into(">II", h, 24, 1, page_count)  # change counter, page count
    struct.pack_into(">II", h, 40, 1, 4)  # schema cookie, schema format
    struct.pack_into(">I", h, 56, 1)  # UTF-8
    struct.pack_into(">II", h, 92, 1, apsw.SQLITE_VERSION_NUMBER)
    return bytes(h)


def rewrite_header(path: Path, page_size: int) -> None:
    """Give a private copy whose header is destroyed a fresh one (page 1's b-tree is
    left as it is)."""
    pages = path.stat().st_size // page_size
    with open(path, "r+b") as f:
        f.write(fresh_header(page_size, pages, wal=sidecar(path, WAL_SUFFIX).exists()))


# -- the pages of a rebuilt sqlite_schema -------------------------------------------


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
