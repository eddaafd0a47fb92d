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
2. the tables' trees (``find_trees``): every table b-tree page no interior page points
   to is a root; its leaves hold records of one table's shape;
3. the layout (``rebuild_from_known_schema``): each of Hermes' known schemas
   (``known_schemas.py``) is matched against the trees' records (the number of fields and
   their types, ``orphan_leaves.record_fits``); the one whose tables the most leaves fit is
   taken, one with both ``sessions`` and ``messages`` found before one with either
   (and another of its tables). A core table no tree fits is looked for among the pages
   whose header is destroyed, by the cells carved from them (``_headless_roots``); one
   still not found that the tables found prove held rows is lost whole
   (``LostSchema.lost_tables``). A file no layout fits is not Hermes' and gets no
   guessed schema. A file whose ``schema_version`` table holds a version newer than
   every layout's (``schema_version_in_rows``) is named so; a wide table whose records
   carry more fields than the layout gives it is taken by the names of its known
   columns, the fields past them kept in ``unnamed_column_<n>`` columns
   (``_take_wider``), and a tree that fits no table is left out: cannot verify;
4. page 1 is written as the root of a new ``sqlite_schema`` holding that layout's rows,
   each table's root the largest tree of its shape, or the tree at the root the
   creation order proves (``created_roots``: SQLite gives each object created the
   next page, before any row, so a page ``DELETE`` freed is never one of them; of a
   file an upgrade made, only the older layout's objects, ``UPGRADED_FROM``); a tree
   that fits only proven tables is no root, and a tie placed by creation order does
   not count the pages the freelist's trunk pages list (``freed_pages``); an
   index, an FTS shadow table and a table with no tree get a new empty root page
   appended to the copy. The rest is
   the usual recovery: leaves no tree reaches are salvaged by shape, indexes are
   rebuilt, and the FTS tables are rebuilt from ``messages``; the old indexes' pages,
   left in the file, vouch for the rows read (``old_indexes.py``).

Only the private copy is written. Call with no SQLite connection open to it
(docs/safety.md rule 2).
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.errors import DatabaseUnreadable, PageFormatError
from statewarden.recovery.decoding.carving import carve_damaged_leaves
from statewarden.recovery.decoding.orphan_leaves import record_fits
from statewarden.recovery.decoding.page_format import (
    PAGE_INDEX_INTERIOR,
    PAGE_INDEX_LEAF,
    PAGE_TABLE_INTERIOR,
    PAGE_TABLE_LEAF,
    Row,
    encode_varint,
    place_cells,
)
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.schema import Schema, SchemaObject, read_schema
from statewarden.recovery.decoding.schema_root import is_schema_record
from statewarden.recovery.evidence.known_schemas import (
    KNOWN_SCHEMAS,
    NEWEST_KNOWN_VERSION,
    UPGRADED_FROM,
    KnownRow,
)
from statewarden.sidecars import WAL_SUFFIX, sidecar
from statewarden.sqlite import HEADER_SIZE, SQLITE_MAGIC, quote_ident

PAGE_SIZES = tuple(512 << i for i in range(8))
# Pages read per candidate page size: enough to tell the sizes apart on any file.
PAGES_READ_FOR_SIZE = 50_000
# Leaves of a tree whose records are decoded to match its shape (spread over the tree).
LEAVES_SAMPLED = 8
# Roots read in page order to match a layout's objects (Hermes' have fewer than 100).
ROOTS_READ = 256
# The tables every Hermes layout has: a file whose rows fit neither is not Hermes'.
HERMES_CORE = ("sessions", "messages")
# The fewest known columns a table of a newer Hermes' file is matched by when its records
# carry more fields (``_wider_fit``): a few first fields tell no table apart (a new
# table's rows could fit the two columns of ``state_meta``), a long typed prefix does.
WIDER_MIN_COLUMNS = 8
SEQUENCE = "sqlite_sequence"


@dataclass
class Tree:
    """A table b-tree found by walking the pages: its root and its leaves."""

    root: int
    leaves: list[int]
    rows: list[Row] = field(default_factory=list)  # records of a sample of its leaves
    columns: dict[str, int] = field(default_factory=dict)  # once attributed: name -> field
    headless: bool = False  # a root leaf whose header is destroyed, its cells carved


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


def newer_schema_text(version: int | None) -> str:
    """How a schema newer than every known layout is named."""
    return (
        f"schema {version}, newer than the layouts this statewarden knows"
        f" (up to {NEWEST_KNOWN_VERSION})"
    )


# -- the page size ------------------------------------------------------------------


def infer_page_size(path: Path) -> tuple[int, str] | None:
    """(page size, why) for a file whose header is destroyed, or None when no size
    is clearly the file's (no b-tree page at any size, or two sizes tie)."""
    size = path.stat().st_size
    scores: dict[int, int] = {}
    for ps in PAGE_SIZES:
        if size % ps or size < 2 * ps:
            continue
        db = DatabaseFile(path, page_size=ps)
        try:
            last = min(db.page_count, PAGES_READ_FOR_SIZE)
            scores[ps] = sum(1 for n in range(2, last + 1) if _plausible(db, n))
        finally:
            db.close()
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


# -- the trees ----------------------------------------------------------------------


def find_trees(db: DatabaseFile) -> list[Tree]:
    """Every table b-tree among pages 2.. that no interior page points to, with its
    leaves and the records of a sample of them."""
    leaves: set[int] = set()
    interior: dict[int, list[int]] = {}
    pointed: set[int] = set()
    for n in range(2, db.page_count + 1):
        try:
            kind, _, _ = db.btree_header(n)
            if kind == PAGE_TABLE_LEAF:
                db.cell_offsets(n)
                leaves.add(n)
            elif kind == PAGE_TABLE_INTERIOR:
                children = db.children(n)
                if all(2 <= c <= db.page_count for c in children):
                    interior[n] = children
                    pointed.update(children)
        except (PageFormatError, struct.error):
            continue
    trees = []
    for root in sorted((leaves | set(interior)) - pointed):
        reached: list[int] = []
        seen: set[int] = set()
        stack = [root]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n in leaves:
                reached.append(n)
            else:
                stack.extend(reversed(interior.get(n, [])))
        if reached:
            tree = Tree(root, reached)
            step = max(1, len(reached) // LEAVES_SAMPLED)
            for leaf in dict.fromkeys([*reached[::step][:LEAVES_SAMPLED], reached[-1]]):
                try:
                    rows, _bad = db.leaf_rows(leaf)
                except PageFormatError:
                    continue
                tree.rows.extend(rows)
            if tree.rows and all(is_schema_record(v) for _, v in tree.rows):
                continue  # a leaf of sqlite_schema left over: no table's
            trees.append(tree)
    return trees


def btree_roots(db: DatabaseFile) -> list[tuple[int, bool]]:
    """The first ``ROOTS_READ`` b-tree pages among pages 2.. that no interior page
    points to, ascending, each with whether it is an index page (for
    ``created_roots``); a ``sqlite_schema`` leaf left over (page 1, which pointed to
    it, destroyed or rewritten) is none."""
    kinds: dict[int, bool] = {}
    pointed: set[int] = set()
    for n in range(2, db.page_count + 1):
        try:
            kind, _, _ = db.btree_header(n)
            if kind in (PAGE_TABLE_INTERIOR, PAGE_INDEX_INTERIOR):
                pointed.update(db.children(n))
            kinds[n] = kind in (PAGE_INDEX_LEAF, PAGE_INDEX_INTERIOR)
        except (PageFormatError, struct.error):
            continue
    out: list[tuple[int, bool]] = []
    for n, is_index in sorted(kinds.items()):
        if len(out) == ROOTS_READ:
            break
        if n not in pointed and not (not is_index and _schema_leaf(db, n)):
            out.append((n, is_index))
    return out


def _schema_leaf(db: DatabaseFile, n: int) -> bool:
    try:
        rows, _bad = db.leaf_rows(n)
    except PageFormatError:
        return False
    return bool(rows) and all(is_schema_record(v) for _, v in rows)


def freed_pages(db: DatabaseFile) -> set[int]:
    """The pages of the freelist, found by its trunk pages when page 1, which named the
    first of them, is destroyed: a page that is no b-tree page and reads as a trunk
    (the next trunk's number, 0 or another such page; a count of leaf pages the page
    holds; that many distinct pages of the file, none of them a child of an interior
    page), with the leaves it lists. A page ``DELETE`` freed is among them while no
    write took it back: no table's root, its rows deleted ones."""
    per_trunk = db.usable // 4 - 2
    trunks: dict[int, tuple[int, tuple[int, ...]]] = {}
    pointed: set[int] = set()
    for n in range(2, db.page_count + 1):
        try:
            kind, _, _ = db.btree_header(n)
            if kind in (PAGE_TABLE_INTERIOR, PAGE_INDEX_INTERIOR):
                pointed.update(db.children(n))
            continue
        except (PageFormatError, struct.error):
            pass
        nxt, count = struct.unpack(">II", db.page(n)[:8])
        if not (nxt or count) or nxt > db.page_count or nxt == 1 or count > per_trunk:
            continue
        listed = struct.unpack(f">{count}I", db.page(n)[8 : 8 + 4 * count])
        if len(set(listed)) == count and all(2 <= p <= db.page_count for p in listed):
            trunks[n] = (nxt, listed)
    while True:  # a trunk whose next one is not a trunk is none
        broken = [n for n, (nxt, listed) in trunks.items() if nxt and nxt not in trunks]
        broken += [n for n, (_, listed) in trunks.items() if pointed.intersection(listed)]
        if not broken:
            break
        for n in broken:
            trunks.pop(n, None)
    return {*trunks, *(p for _, listed in trunks.values() for p in listed)}


def created_roots(roots: list[tuple[int, bool]], schema: Schema) -> dict[str, int]:
    """The root page of each b-tree object of ``schema`` (a known layout, its objects in
    creation order) that the file proves (``roots``: ``btree_roots``): SQLite gives each
    object created the next page, before any row is written, so the lowest pages no
    interior page points to are the roots of the objects created with the file, in that
    order. They are taken only when there are at least as many such pages as those
    objects and the first ones are table and index pages in exactly their order (a
    file of another history, or whose root was destroyed, proves nothing: empty). A
    page freed by ``DELETE`` comes after them all, whatever it still holds. A layout
    that an upgrade made of an older one's file (``UPGRADED_FROM``) proves only the
    roots of the older layout's objects: the upgrade created the others after rows
    existed, at the end of the file or on freed pages."""
    objects = btree_objects(schema)
    objects = objects[: _created_with_file([name for name, _ in objects])]
    first = roots[: len(objects)]
    if (
        not objects
        or len(first) < len(objects)
        or any(is_index != want for (_, is_index), (_, want) in zip(first, objects, strict=True))
    ):
        return {}
    return {name: n for (n, _), (name, _) in zip(first, objects, strict=True)}


def btree_objects(schema: Schema) -> list[tuple[str, bool]]:
    """The objects of ``schema`` stored as b-trees, in creation order, each with whether
    its pages are index pages."""
    return [
        (o.name, o.type == "index" or o.without_rowid)
        for o in schema.objects
        if o.type in ("table", "index") and not o.is_virtual and o.rootpage
    ]


def _created_with_file(names: list[str]) -> int:
    """How many of the b-tree objects ``names`` (a layout's, in creation order) were
    created with the file: all, unless they are those of a known layout made by an
    upgrade (``UPGRADED_FROM``), whose first objects are the older layout's (none when
    they are not)."""
    for layout, first in UPGRADED_FROM.items():
        if tuple(names) == _layout_objects(layout):
            older = _layout_objects(first)
            return len(older) if tuple(names[: len(older)]) == older else 0
    return len(names)


@functools.cache
def _layout_objects(layout: str) -> tuple[str, ...]:
    """The b-tree objects of a known layout, in creation order."""
    schema, _fks = layout_schema(KNOWN_SCHEMAS[layout][1])
    return tuple(name for name, _ in btree_objects(schema))


ForeignKey = tuple[str, str, str, str]  # (table, column, referenced table, its column)


def layout_schema(rows: tuple[KnownRow, ...]) -> tuple[Schema, list[ForeignKey]]:
    """The schema a layout's rows make, and its foreign keys, read from an in-memory
    database (its root pages mean nothing here; its columns are exact)."""
    conn = apsw.Connection(":memory:")
    try:
        for _type, _name, _tbl, sql in rows:
            if sql is None:
                continue
            try:
                conn.execute(sql)
            except apsw.SQLError:
                continue  # an FTS shadow table its FTS5 table created already
        schema = read_schema(conn)
        fks = [
            (o.name, str(r[3]), str(r[2]), str(r[4]))
            for o in schema.base_tables()
            for r in conn.execute(f"PRAGMA foreign_key_list({quote_ident(o.name)})")
            if r[4] is not None
        ]
        return schema, fks
    finally:
        conn.close()


def _candidates(schema: Schema) -> list[SchemaObject]:
    return [
        o
        for o in schema.tables()
        if o.rootpage and not o.without_rowid and not o.is_virtual and o.stored_columns
    ]


def _fit(candidates: list[SchemaObject], rows: list[Row]) -> list[SchemaObject]:
    """The one table whose shape every record fits (at least one with all its
    columns), as ``pages`` gives orphan leaves to tables; among several, the one whose
    declared column types agree with the most values (text in TEXT columns, numbers in
    REAL and INTEGER ones), if only one does."""
    if not rows:
        return []
    names = {o.name for o in candidates}
    if all(len(v) == 2 and v[0] in names and isinstance(v[1], int) for _, v in rows):
        return [o for o in candidates if o.name == SEQUENCE]  # table name, highest rowid
    candidates = [o for o in candidates if o.name != SEQUENCE]
    most = max(len(v) for _, v in rows)
    fits = [
        o
        for o in candidates
        if most == len(o.stored_columns)
        and all(record_fits(o, v) and not _null_key(o, v) for _, v in rows)
    ]
    if len(fits) > 1:
        agree = {o.name: _agreement(o, rows) for o in fits}
        top = max(agree.values())
        fits = [o for o in fits if agree[o.name] == top]
    return fits


def _referenced(
    fits: list[SchemaObject], tree: Tree, fks: list[ForeignKey], found: dict[str, Tree]
) -> str | None:
    """Of the tables a tree fits equally well, the one whose key the rows of a table
    already found refer to (``sessions.system_prompt_hash`` names the rows of
    ``system_prompts``, not of ``state_meta``), if exactly one."""
    proven = []
    for obj in fits:
        names = [c.name for c in obj.stored_columns]
        # (the rows found, their column, this table's column): declared keys both ways.
        links = [(found[t], c, tc) for t, c, to, tc in fks if to == obj.name and t in found]
        links += [(found[to], tc, c) for t, c, to, tc in fks if t == obj.name and to in found]
        for other, column, own in links:
            if own not in names:
                continue
            values = _column_values(other, column)
            i = names.index(own)
            if any(len(v) > i and v[i] in values for _, v in tree.rows):
                proven.append(obj.name)
                break
    return proven[0] if len(proven) == 1 else None


def _by_creation_order(
    fits: list[SchemaObject],
    tree: Tree,
    roots: list[int],
    tables: list[str],
    found: dict[str, Tree],
) -> SchemaObject | None:
    """Of the tables a tree fits equally well, the one at the tree's place: SQLite gives
    each new table the next page, so the table trees (``roots``, ascending, the empty
    ones too) follow the order Hermes creates its rowid ``tables`` in. Between the two
    nearest trees already attributed, when there are as many trees as tables created
    between those two, the tree's place names its table."""
    where = {name: roots.index(t.root) for name, t in found.items() if t.root in roots}
    anchors = sorted((tables.index(n), pos) for n, pos in where.items() if n in tables)
    here = roots.index(tree.root)
    before = [(k, p) for k, p in anchors if p < here]
    after = [(k, p) for k, p in anchors if p > here]
    k0, p0 = before[-1] if before else (-1, -1)
    k1, p1 = after[0] if after else (len(tables), len(roots))
    if k1 - k0 != p1 - p0:
        return None
    name = tables[k0 + here - p0]
    return next((o for o in fits if o.name == name), None)


def _table_trees(schema: Schema, rows: tuple[KnownRow, ...]) -> list[SchemaObject]:
    """The objects stored as table b-trees, in the order Hermes creates them."""
    out = []
    for _type, name, _tbl, _sql in rows:
        obj = schema.by_name(name)
        if obj is not None and obj.type == "table" and not (obj.is_virtual or obj.without_rowid):
            out.append(obj)
    return out


def _column_values(tree: Tree, column: str) -> set[Any]:
    index = tree.columns.get(column)
    if index is None:
        return set()
    return {v[index] for _, v in tree.rows if len(v) > index and v[index] is not None}


def _null_key(obj: SchemaObject, values: list[Any]) -> bool:
    """A NULL in a declared primary key column other than the rowid: SQLite allows it,
    Hermes never writes it (an FTS shadow row's NULL rowid alias looks like one)."""
    alias = obj.rowid_alias
    return any(
        v is None and col.pk and col.name != alias
        for col, v in zip(obj.stored_columns, values, strict=False)
    )


def _agreement(obj: SchemaObject, rows: list[Row]) -> int:
    """How many values are of the storage class their column's declared type asks for."""
    kinds: list[tuple[type, ...]] = []
    for col in obj.stored_columns:
        t = col.decl_type.upper()
        if "INT" in t or any(k in t for k in ("REAL", "FLOA", "DOUB", "NUM", "DEC", "BOOL")):
            kinds.append((int, float))
        elif any(k in t for k in ("CHAR", "CLOB", "TEXT")):
            kinds.append((str,))
        elif t in ("", "BLOB"):
            kinds.append((int, float, str, bytes))  # no affinity: any value agrees
        else:
            kinds.append((int, float))
    return sum(
        1
        for _, values in rows
        for v, want in zip(values, kinds, strict=False)
        if v is not None and isinstance(v, want)
    )


# -- page 1 -------------------------------------------------------------------------


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
    db = DatabaseFile(path)
    try:
        trees = find_trees(db)
        roots = btree_roots(db)
        page_size, usable, page_count = db.page_size, db.usable, db.page_count
        header = db.page(1)[:HEADER_SIZE]
    finally:
        db.close()
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


@dataclass
class _Choice:
    """The known layout taken (``_choose_layout``)."""

    layout: str
    fitted: dict[str, int]  # leaves fitted per layout
    found: dict[str, Tree]  # the tree taken for each of its tables
    left_out: list[tuple[Tree, list[str]]]  # trees that fit two tables alike, or none
    version: int | None  # what the file's schema_version table holds, if read


def _choose_layout(
    path: Path,
    source: Path,
    present: dict[str, int],
    trees: list[Tree],
    roots: list[tuple[int, bool]],
    *,
    views: Collection[str] = (),
) -> _Choice:
    """The known layout the trees fit best. A layout is taken only when one of
    ``sessions`` and ``messages`` and another of its tables are found; one with both
    beats one with either, then the one that fits more leaves, then the one that leaves
    fewer fields unnamed. A core table no tree fits is looked for among the pages whose
    header is destroyed (``_headless_roots``). A table whose root the creation order
    proves (``created_roots``) gets the tree there (``_proven_trees``). A file whose
    ``schema_version`` table holds a version newer than every layout's
    (``schema_version_in_rows``) is a newer Hermes': a table whose records carry more
    fields is matched by its known columns (``_take_wider``). ``views``: views the
    schema still names; one a layout does not name (the user's own) does not rule that
    layout out. Raises :class:`DatabaseUnreadable` when no layout is taken."""
    version = schema_version_in_rows(trees)
    newer = version is not None and version > NEWEST_KNOWN_VERSION
    best: tuple[int, int, int, str] | None = None
    fitted: dict[str, int] = {}
    chosen: dict[str, dict[str, Tree]] = {}
    left_out: dict[str, list[tuple[Tree, list[str]]]] = {}
    claimed = set(present.values())
    freed = _FreedPages(path)
    for layout, (_what, rows) in KNOWN_SCHEMAS.items():
        names = {name for _t, name, _tb, _s in rows}
        # A view the layout does not name (the user's own) holds no rows: it neither
        # picks nor rules out a layout.
        if not set(present) - (set(views) - names) <= names:
            fitted[layout] = 0
            continue
        schema = layout_schema(rows)[0]
        created = created_roots(roots, schema)
        score, per_table, unplaced = _fit_layout(
            rows, present, trees, claimed, created=created, freed=freed, wider=newer
        )
        core = [t for t in HERMES_CORE if t in per_table or t in present]
        if core and len(core) < len(HERMES_CORE):
            score += _headless_roots(path, rows, per_table, trees, present)
            core = [t for t in HERMES_CORE if t in per_table or t in present]
        if unplaced:
            left_out[layout] = unplaced
        fitted[layout] = score
        chosen[layout] = per_table
        unnamed = -sum(len(c) for c in unnamed_columns(schema, per_table).values())
        if (
            core
            and len(per_table) >= 2
            and (best is None or (len(core), score, unnamed) > best[:3])
        ):
            best = (len(core), score, unnamed, layout)
    if best is None:
        raise DatabaseUnreadable(_no_layout(source, version if newer else None))
    layout = best[3]
    return _Choice(layout, fitted, chosen[layout], left_out.get(layout, []), version)


def _no_layout(source: Path, newer: int | None) -> str:
    """Why no schema is guessed: the file's rows fit no known layout."""
    if newer is not None:
        return (
            f"{source}: page 1 and the schema are destroyed; its schema_version table holds"
            f" {newer}: {newer_schema_text(newer)}, and the rows on its pages fit none of"
            " them; no schema is guessed for it"
        )
    return (
        f"{source}: page 1 and the schema are destroyed and the rows on its pages fit"
        " no known Hermes schema (not Hermes' state.db?); no schema is guessed for it"
    )


def _proven_trees(
    schema: Schema, trees: list[Tree], created: dict[str, int], present: dict[str, int]
) -> dict[str, Tree]:
    """The tree of each table whose root the creation order proves (``created_roots``),
    when its records fit the table or it has none: all its rows deleted, a table's root
    is an empty leaf, and the largest tree of its shape is then a page ``DELETE``
    freed, whose rows must not come back as live. A table the schema still names
    (``present``) keeps its root."""
    by_root = {t.root: t for t in trees}
    out = {}
    for name, root in created.items():
        obj = schema.by_name(name)
        tree = by_root.get(root)
        if obj is None or tree is None or name in present or obj.type != "table":
            continue
        if obj.is_virtual or obj.without_rowid:
            continue
        if all(record_fits(obj, v) and not _null_key(obj, v) for _, v in tree.rows):
            tree.columns = {c.name: i for i, c in enumerate(obj.stored_columns)}
            out[name] = tree
    return out


def _headless_roots(
    path: Path,
    rows: tuple[KnownRow, ...],
    per_table: dict[str, Tree],
    trees: list[Tree],
    present: dict[str, int],
) -> int:
    """For each core table no tree fits, the one page no tree holds whose b-tree header
    is destroyed (a root leaf with its header zeroed) and whose cells, carved
    (``carving.carve_damaged_leaves``), hold the most records of that table's shape, if
    one holds more than any other: taken as the table's root, so the recovery carves
    it as a damaged leaf of the table (its rows then taken only where witnesses vouch
    for them); the pages the trees found reach (overflow pages too) are not looked at.
    Returns the pages taken."""
    schema, _fks = layout_schema(rows)
    db = DatabaseFile(path)
    try:
        # the pages of the trees found, their overflow pages among them, are no root
        taken = db.reachable([*(t.root for t in trees), *present.values()])
        pages = [n for n in range(2, db.page_count + 1) if n not in taken and _headless(db, n)]
    finally:
        db.close()
    found = 0
    for name in HERMES_CORE:
        obj = schema.by_name(name)
        if name in per_table or name in present or obj is None or not pages:
            continue
        probes = Schema([dataclasses.replace(obj, name=str(n), rootpage=n) for n in pages])
        carved = carve_damaged_leaves(path, probes, [str(n) for n in pages])
        counts = {int(k): [r for r in rs if not _null_key(obj, r[1])] for k, rs in carved.items()}
        top = max((len(rs) for rs in counts.values()), default=0)
        best = [n for n, rs in counts.items() if len(rs) == top]
        if top and len(best) == 1:
            tree = Tree(best[0], [best[0]], counts[best[0]], headless=True)
            tree.columns = {c.name: i for i, c in enumerate(obj.stored_columns)}
            per_table[name] = tree
            found += 1
    return found


def _headless(db: DatabaseFile, n: int) -> bool:
    """Is page ``n`` no b-tree page (its header destroyed, or a page of another kind)?"""
    try:
        db.btree_header(n)
    except (PageFormatError, struct.error):
        return True
    return False


def _fit_layout(
    rows: tuple[tuple[str, str, str, str | None], ...],
    present: dict[str, int],
    trees: list[Tree],
    claimed: set[int],
    *,
    created: dict[str, int],
    freed: _FreedPages,
    wider: bool = False,
) -> tuple[int, dict[str, Tree], list[tuple[Tree, list[str]]]]:
    """How well one known layout fits the trees found: (leaves fitted, the tree taken
    for each table, the trees that fit two tables alike and went to neither). A table
    whose root the creation order proves (``created``) has the tree there
    (``_proven_trees``), and a tree that fits only such tables is none's root (a page
    freed, or cut off from its tree by damage: its rows are salvaged as any unreached
    leaf's are), nor counted among the roots. Any other tree goes to the one table its
    records fit; ties are broken by the evidence of the tables found (foreign keys),
    then by where its root lies among the roots, never for a proven table; there the
    pages the freelist lists (``freed_pages``, read only for a tie) are no roots, and
    a tree on one of them is left to the salvage of unreached leaves. ``wider``: the
    file is a newer Hermes' (``_take_wider``)."""
    schema, fks = layout_schema(rows)
    cands = [o for o in _candidates(schema) if o.name not in present]
    base = {o.name for o in schema.base_tables()} | {SEQUENCE}
    per_table = _present_trees(schema, present, trees)
    proven = _proven_trees(schema, trees, created, present)
    per_table.update(proven)
    score = sum(len(t.leaves) for t in proven.values() if t.rows)
    held = claimed | {t.root for t in proven.values()}
    no_root: set[int] = set()
    tied: list[tuple[Tree, list[SchemaObject]]] = []
    unfit: list[Tree] = []
    for tree in (t for t in trees if t.root not in held):
        fits = _fit(cands, tree.rows)
        if not fits:
            unfit.append(tree)
        elif all(o.name in proven for o in fits):
            no_root.add(tree.root)
            score += len(tree.leaves)
        elif len(fits) > 1:
            tied.append((tree, fits))
        elif fits and fits[0].name in base:
            score += _take(per_table, fits[0], tree)
    unresolved = []
    for tree, fits in tied:  # second: the evidence of the tables found
        name = _referenced(fits, tree, fks, per_table)
        obj = schema.by_name(name) if name and name not in proven else None
        if obj is not None and obj.name in base:
            score += _take(per_table, obj, tree)
        else:
            unresolved.append((tree, fits))
    tables = [o.name for o in _table_trees(schema, rows)]
    no_root |= freed.pages() if unresolved else set()
    roots = sorted(t.root for t in trees if t.root not in no_root)
    left_out: list[tuple[Tree, list[str]]] = []
    for tree, fits in unresolved:  # last: where its root lies among the roots found
        if tree.root in no_root:
            continue
        by_order = _by_creation_order(fits, tree, roots, tables, per_table)
        if by_order is not None and by_order.name in base and by_order.name not in proven:
            score += _take(per_table, by_order, tree)
        elif any(o.name in base for o in fits):
            left_out.append((tree, [o.name for o in fits]))
    if wider:
        score += _take_wider(schema, present, per_table, unfit, left_out)
    return score, per_table, left_out


def _take_wider(
    schema: Schema,
    present: dict[str, int],
    per_table: dict[str, Tree],
    unfit: list[Tree],
    left_out: list[tuple[Tree, list[str]]],
) -> int:
    """For a file of a newer Hermes: each tree holding rows that fit no table of the
    layout goes to the one table no tree was taken for whose columns the first fields
    of its records fit while they carry more fields (``_wider_fit``: the newer Hermes
    added columns; ``ALTER TABLE ADD COLUMN`` puts them last); one that fits two is
    left out, as is one that fits none (an object this statewarden does not know:
    cannot verify). Returns the leaves taken."""
    wanting = [
        o
        for o in _candidates(schema)
        if o.name not in per_table
        and o.name not in present
        and o.name != SEQUENCE
        and o.shadow_of is None
        and len(o.stored_columns) >= WIDER_MIN_COLUMNS
    ]
    score = 0
    for tree in (t for t in unfit if t.rows):
        fits = _wider_fit(wanting, tree.rows)
        if len(fits) == 1:
            score += _take(per_table, fits[0], tree)
        else:
            left_out.append((tree, [o.name for o in fits]))
    return score


def _wider_fit(candidates: list[SchemaObject], rows: list[Row]) -> list[SchemaObject]:
    """The tables whose columns the first fields of every record fit, when some record
    carries more fields than the table has columns."""
    most = max((len(v) for _, v in rows), default=0)
    return [
        o
        for o in candidates
        if len(o.stored_columns) < most
        and all(record_fits(o, v[: len(o.stored_columns)]) and not _null_key(o, v) for _, v in rows)
    ]


def unnamed_columns(schema: Schema, found: dict[str, Tree]) -> dict[str, list[str]]:
    """For each table of ``found`` whose records carry more fields than ``schema``
    gives it columns, the names of the columns added for them: ``unnamed_column_<n>``,
    ``n`` the field's place in the record (its own name was lost with the schema)."""
    out: dict[str, list[str]] = {}
    for name, tree in found.items():
        obj = schema.by_name(name)
        if obj is None or obj.type != "table" or not tree.rows:
            continue
        width = len(obj.stored_columns)
        most = max(len(v) for _, v in tree.rows)
        if most > width:
            out[name] = [f"unnamed_column_{n}" for n in range(width + 1, most + 1)]
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


def schema_version_in_rows(trees: list[Tree]) -> int | None:
    """What Hermes' ``schema_version`` table holds, read from the trees found: the one
    tree holding exactly one record, a single integer above 0 (Hermes keeps one row of
    one ``INTEGER NOT NULL`` column there); None when no tree or two are of that shape."""
    one = [
        t.rows[0][1][0]
        for t in trees
        if len(t.rows) == 1 and len(t.rows[0][1]) == 1 and isinstance(t.rows[0][1][0], int)
    ]
    return one[0] if len(one) == 1 and one[0] > 0 else None


class _FreedPages:
    """The pages of a file's freelist (``freed_pages``), read the first time they are
    wanted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.found: set[int] | None = None

    def pages(self) -> set[int]:
        if self.found is None:
            db = DatabaseFile(self.path)
            try:
                self.found = freed_pages(db)
            finally:
                db.close()
        return self.found


def _present_trees(schema: Schema, present: dict[str, int], trees: list[Tree]) -> dict[str, Tree]:
    """The trees of the tables the schema still names, as found (for the evidence of
    their rows)."""
    by_root = {t.root: t for t in trees}
    out = {}
    for name, root in present.items():
        obj = schema.by_name(name)
        if obj is None or obj.type != "table" or obj.is_virtual:
            continue
        tree = by_root.get(root) or Tree(root, [])
        tree.columns = {c.name: i for i, c in enumerate(obj.stored_columns)}
        out[name] = tree
    return out


def _take(per_table: dict[str, Tree], obj: SchemaObject, tree: Tree) -> int:
    """Give ``tree`` to ``obj`` when it is the largest of its shape; its leaves."""
    tree.columns = {c.name: i for i, c in enumerate(obj.stored_columns)}
    held = per_table.get(obj.name)
    if held is None or len(tree.leaves) > len(held.leaves):
        per_table[obj.name] = tree
    return len(tree.leaves)


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
    content = usable
    pointers = []
    rowid = 0
    for i, leaf in enumerate(leaves[:-1]):
        rowid += struct.unpack(">H", leaf[3:5])[0]
        cell = struct.pack(">I", first_leaf + i) + encode_varint(rowid)
        content -= len(cell)
        page[content : content + len(cell)] = cell
        pointers.append(content)
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
