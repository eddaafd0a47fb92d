"""What committed WAL transactions SQLite does not replay did to the tables: each
table's b-tree walked with the frames' newest page images in place of the file's
pages, the rows on its new leaf images taken and the rowids they deleted told.

Call only with no SQLite connection open to the file in this process (docs/safety.md
rule 2)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.carving import _assign
from statewarden.recovery.decoding.page_format import Row, varint
from statewarden.recovery.decoding.pages import DatabaseFile, table_tree
from statewarden.recovery.decoding.schema import Schema


@dataclass
class WalRows:
    """What committed WAL transactions SQLite does not replay did to the tables
    (``rows_from_images``), by table."""

    rows: dict[str, list[Row]] = field(default_factory=dict)  # on their new leaf images
    gone: dict[str, set[int]] = field(default_factory=dict)  # rowids they deleted
    # rowids they may have deleted: a page their tree reaches was written by a damaged
    # frame, so what those commits left there is not known
    unsure: dict[str, set[int]] = field(default_factory=dict)

    def changed(self) -> tuple[dict[str, Any], ...]:
        return (self.rows, self.gone, self.unsure)


def rows_from_images(
    path: Path,
    schema: Schema,
    tables: list[str],
    images: dict[int, bytes],
    unknown: set[int] | frozenset[int] = frozenset(),
) -> WalRows:
    """The tables as the page ``images`` (page number -> newest image of WAL commits
    SQLite does not replay) leave them over the file at ``path``, whole transactions:
    each table's b-tree is walked with the images in place of the file's pages. Rows
    on its new leaf images are taken; rowids on its leaves the images rewrote or the
    tree no longer reaches, and on none of its new leaves, were deleted (``gone``).
    ``unknown``: pages whose newest image is a damaged frame's (0: any page); when the
    new tree reaches one, its deletions are only ``unsure`` and the images' table leaves
    it does not reach are assigned by record shape (they may be its own)."""
    with DatabaseFile(path) as base, DatabaseFile(path) as final:
        final.overlay = {n: img for n, img in images.items() if len(img) == final.page_size}
        final.page_count = max([final.page_count, *final.overlay])
        out = WalRows()
        reached: set[int] = set()
        shaky = False
        for name in tables:
            obj = schema.by_name(name)
            if obj is None or not obj.rootpage or obj.without_rowid or obj.is_virtual:
                continue
            new_leaves, gone, seen = _table_changes(base, final, obj.rootpage, unknown)
            reached |= seen
            out.rows[name] = [r for n in new_leaves for r in _rows_of(final, n)]
            gone -= {rowid for n in new_leaves for rowid in _leaf_rowids(final, n)}
            if unknown & seen or 0 in unknown:
                shaky = True
                out.unsure[name] = gone
            else:
                out.gone[name] = gone
        if shaky:
            stray = sorted(n for n in final.overlay if n not in reached)
            for name, rows in _assign(final, schema, tables, stray).items():
                out.rows.setdefault(name, []).extend(rows)
        for rows in out.rows.values():
            rows.sort(key=lambda r: r[0])
        return out


def _table_changes(
    base: DatabaseFile, final: DatabaseFile, root: int, unknown: set[int] | frozenset[int]
) -> tuple[list[int], set[int], set[int]]:
    """(the leaves of the tree at ``root`` that are new images in ``final``, the
    rowids on the leaves of ``base``'s tree that ``final`` rewrote, no longer reaches
    or holds as an ``unknown`` page, every page ``final``'s tree reaches)."""
    base_leaves = table_tree(base, root).leaves
    tree = table_tree(final, root)
    leaves, seen = tree.leaves, tree.pages
    changed = [n for n in base_leaves if n in final.overlay or n not in seen or n in unknown]
    gone: set[int] = set()
    for n in changed:
        gone.update(_leaf_rowids(base, n))
    return [n for n in leaves if n in final.overlay], gone, seen


def _rows_of(db: DatabaseFile, n: int) -> list[Row]:
    try:
        return db.leaf_rows(n)[0]
    except (PageFormatError, struct.error, IndexError):
        return []


def _leaf_rowids(db: DatabaseFile, n: int) -> list[int]:
    """The rowids of the cells of table leaf ``n`` (their records not decoded)."""
    try:
        pg = db.page(n)
        out = []
        for off in db.cell_offsets(n):
            _, pos = varint(pg, off)
            out.append(varint(pg, pos)[0])
        return out
    except (PageFormatError, struct.error, IndexError):
        return []
