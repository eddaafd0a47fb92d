"""The b-trees of a file whose page 1 is destroyed, found by walking its pages: every
table tree no interior page points to, with a sample of its records; the b-tree
roots, of which the lowest are those of the objects created with the file
(``created_roots``); and the freelist, found by its trunk pages (``freed_pages``).
Part of the rebuild of a lost schema (``lost_schema.py``).

Call with no SQLite connection open to the file (docs/safety.md rule 2)."""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.page_format import (
    PAGE_INDEX_INTERIOR,
    PAGE_INDEX_LEAF,
    PAGE_TABLE_INTERIOR,
    PAGE_TABLE_LEAF,
    Row,
)
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.schema import Schema
from statewarden.recovery.decoding.schema_root import is_schema_record
from statewarden.recovery.evidence.known_schemas import (
    KNOWN_SCHEMAS,
    UPGRADED_FROM,
    layout_schema,
)

# Leaves of a tree whose records are decoded to match its shape (spread over the tree).
LEAVES_SAMPLED = 8


# Roots read in page order to match a layout's objects (Hermes' have fewer than 100).
ROOTS_READ = 256


@dataclass
class Tree:
    """A table b-tree found by walking the pages: its root and its leaves."""

    root: int
    leaves: list[int]
    rows: list[Row] = field(default_factory=list)  # records of a sample of its leaves
    columns: dict[str, int] = field(default_factory=dict)  # once attributed: name -> field
    headless: bool = False  # a root leaf whose header is destroyed, its cells carved


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
    for n, kind in _page_kinds(db, pointed):
        if kind is not None:
            kinds[n] = kind in (PAGE_INDEX_LEAF, PAGE_INDEX_INTERIOR)
    out: list[tuple[int, bool]] = []
    for n, is_index in sorted(kinds.items()):
        if len(out) == ROOTS_READ:
            break
        if n not in pointed and not (not is_index and _schema_leaf(db, n)):
            out.append((n, is_index))
    return out


def _page_kinds(db: DatabaseFile, pointed: set[int]) -> Iterator[tuple[int, int | None]]:
    """Each page 2.. with its b-tree page type (None: it reads as no b-tree page, or an
    interior page whose children do not read), the children of each interior page
    added to ``pointed`` on the way."""
    for n in range(2, db.page_count + 1):
        try:
            kind, _, _ = db.btree_header(n)
            if kind in (PAGE_TABLE_INTERIOR, PAGE_INDEX_INTERIOR):
                pointed.update(db.children(n))
        except (PageFormatError, struct.error):
            yield n, None
            continue
        yield n, kind


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
    for n, kind in _page_kinds(db, pointed):
        if kind is not None:
            continue
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


class _FreedPages:
    """The pages of a file's freelist (``freed_pages``), read the first time they are
    wanted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.found: set[int] | None = None

    def pages(self) -> set[int]:
        if self.found is None:
            with DatabaseFile(self.path) as db:
                self.found = freed_pages(db)
        return self.found
