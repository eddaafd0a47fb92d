"""Which known Hermes layout a file whose schema is lost is (``_choose_layout``): the
one whose tables the trees found fit best, a core table no tree fits looked for among
the pages whose header is destroyed, and what the file's own ``schema_version`` rows
say of a newer Hermes. Which tree found is which table of one known layout
(``_fit_layout``): a tree goes to the one table its records fit, ties broken by the
tables found (foreign keys), then by where its root lies among the roots; a table whose
root the creation order proves gets the tree there; a newer Hermes' wider records are
matched by their known columns (``_take_wider``). Part of the rebuild of a lost schema
(``lost_schema.py``)."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statewarden.errors import DatabaseUnreadable, PageFormatError
from statewarden.recovery.decoding.carving import carve_damaged_leaves, record_fits, rowid_tables
from statewarden.recovery.decoding.page_format import Row
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.schema import Schema, SchemaObject
from statewarden.recovery.evidence.found_trees import Tree, _FreedPages, created_roots
from statewarden.recovery.evidence.known_schemas import (
    KNOWN_SCHEMAS,
    NEWEST_KNOWN_VERSION,
    ForeignKey,
    KnownRow,
    layout_schema,
)

# The tables every Hermes layout has: a file whose rows fit neither is not Hermes'.
HERMES_CORE = ("sessions", "messages")


def newer_schema_text(version: int | None) -> str:
    """How a schema newer than every known layout is named."""
    return (
        f"schema {version}, newer than the layouts this statewarden knows"
        f" (up to {NEWEST_KNOWN_VERSION})"
    )


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
    with DatabaseFile(path) as db:
        # the pages of the trees found, their overflow pages among them, are no root
        taken = db.reachable([*(t.root for t in trees), *present.values()])
        pages = [n for n in range(2, db.page_count + 1) if n not in taken and _headless(db, n)]
    found = 0
    for name in HERMES_CORE:
        obj = schema.by_name(name)
        if name in per_table or name in present or obj is None or not pages:
            continue
        probes = Schema([dataclasses.replace(obj, name=str(n), rootpage=n) for n in pages])
        carved = carve_damaged_leaves(path, probes, [str(n) for n in pages], unreached=[])
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


# -- which tree found is which table of one known layout ----------------------------

# The fewest known columns a table of a newer Hermes' file is matched by when its records
# carry more fields (``_wider_fit``): a few first fields tell no table apart (a new
# table's rows could fit the two columns of ``state_meta``), a long typed prefix does.
WIDER_MIN_COLUMNS = 8


SEQUENCE = "sqlite_sequence"


def _fit(candidates: list[SchemaObject], rows: list[Row]) -> list[SchemaObject]:
    """The one table whose shape every record fits (at least one with all its
    columns), as ``salvage_rows`` gives orphan leaves to tables; among several, the one whose
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
    cands = [o for o in rowid_tables(schema) if o.name not in present]
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
        for o in rowid_tables(schema)
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
