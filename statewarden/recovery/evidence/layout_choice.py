"""Which known Hermes layout a file whose schema is lost is (``_choose_layout``): the
one whose tables the trees found fit best, a core table no tree fits looked for among
the pages whose header is destroyed, and what the file's own ``schema_version`` rows
say of a newer Hermes. Part of the rebuild of a lost schema (``lost_schema.py``)."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from statewarden.errors import DatabaseUnreadable, PageFormatError
from statewarden.recovery.decoding.carving import carve_damaged_leaves
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.schema import Schema
from statewarden.recovery.evidence.found_trees import Tree, _FreedPages, created_roots
from statewarden.recovery.evidence.known_schemas import (
    KNOWN_SCHEMAS,
    NEWEST_KNOWN_VERSION,
    KnownRow,
    layout_schema,
)
from statewarden.recovery.evidence.layout_fit import _fit_layout, _null_key

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
