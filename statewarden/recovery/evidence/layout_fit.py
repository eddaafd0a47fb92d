"""Which tree found is which table of one known layout (``_fit_layout``): a tree goes to
the one table its records fit, ties broken by the tables found (foreign keys), then by
where its root lies among the roots; a table whose root the creation order proves gets
the tree there; a newer Hermes' wider records are matched by their known columns
(``_take_wider``). Part of the rebuild of a lost schema (``lost_schema.py``)."""

from __future__ import annotations

from typing import Any

from statewarden.recovery.decoding.carving import record_fits, rowid_tables
from statewarden.recovery.decoding.page_format import (
    Row,
)
from statewarden.recovery.decoding.schema import Schema, SchemaObject
from statewarden.recovery.evidence.found_trees import Tree, _FreedPages
from statewarden.recovery.evidence.known_schemas import (
    ForeignKey,
    KnownRow,
    layout_schema,
)

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
