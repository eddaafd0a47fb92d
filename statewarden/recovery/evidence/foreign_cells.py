"""Cells of another table's leaf that a table's b-tree reaches through a wrong pointer.

One changed child pointer of an interior page can name a leaf of another table (page
1, an FTS shadow table's leaf). SQLite then reads that leaf's cells as rows of the
table, under their own rowids, which the table uses too: a full scan meets those
rowids twice, the rows read differ from their FTS copies and their indexes, their
"parents" are missing. The integrity check names the page ("2nd reference to page N");
a cell there whose record does not have the table's shape is no row of the table, and
the scans, the FTS-copy comparison and the lost-write search leave it out.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.carving import record_fits
from statewarden.recovery.decoding.page_format import PAGE_TABLE_LEAF
from statewarden.recovery.decoding.pages import DatabaseFile, tree_walk
from statewarden.recovery.decoding.schema import Schema, SchemaObject

SECOND_REFERENCE_RE = re.compile(r"2nd reference to page (\d+)$")

Row = tuple[Any, ...]
# rowid -> the records of other tables' cells read under it
Records = dict[int, list[list[Any]]]


def referenced_twice(error_lines: Sequence[str]) -> set[int]:
    """The pages the integrity check found referenced twice."""
    return {int(m.group(1)) for ln in error_lines if (m := SECOND_REFERENCE_RE.search(ln))}


def foreign_records(raw: DatabaseFile, obj: SchemaObject, pages: set[int]) -> Records:
    """The records that do not fit ``obj`` (``fits``) on the table leaves among
    ``pages`` (those the integrity check found referenced twice), or under them:
    another table's leaf that a wrong child pointer of ``obj``'s b-tree names, whose
    cells SQLite reads as rows of ``obj`` under their own rowids. Rowid -> records."""
    out: Records = {}
    for n, kind, _kids in tree_walk(raw, sorted(pages)):
        if kind != PAGE_TABLE_LEAF:
            continue
        try:
            rows, _bad = raw.leaf_rows(n)
        except (PageFormatError, struct.error):
            continue
        for rowid, values in rows:
            if not fits(obj, values):
                out.setdefault(rowid, []).append(values)
    return out


def foreign_by_table(
    raw: DatabaseFile | None, schema: Schema, error_lines: Sequence[str]
) -> dict[str, Records]:
    """``foreign_records`` of every rowid table with such records, from the pages
    ``error_lines`` (the integrity check's) name as referenced twice that the table's
    own b-tree names; empty without ``raw`` or such pages (a healthy file costs
    nothing)."""
    pages = referenced_twice(error_lines)
    if raw is None or not pages:
        return {}
    out = {}
    for obj in schema.tables():
        if obj.rootpage and not obj.without_rowid and obj.module is None:
            named = _named_by_tree(raw, obj.rootpage, pages)
            found = foreign_records(raw, obj, named) if named else {}
            if found:
                out[obj.name] = found
    return out


def _named_by_tree(raw: DatabaseFile, root: int, pages: set[int]) -> set[int]:
    """Those of ``pages`` a child pointer of the table b-tree rooted at ``root`` names,
    however deep (each interior page it reaches is read once)."""
    return {k for _, _, kids in tree_walk(raw, [root]) for k in kids or () if k in pages}


def fits(obj: SchemaObject, values: list[Any]) -> bool:
    """``carving.record_fits``, and no NOT NULL column without a DEFAULT past the
    record's last field (``ALTER TABLE ADD COLUMN`` cannot add one: every record of
    the table has a field for it)."""
    cols = obj.stored_columns
    if len(values) > len(cols) or not record_fits(obj, values):
        return False
    return not any(c.notnull and c.default is None for c in cols[len(values) :])


def reads_as(obj: SchemaObject, cols: Sequence[str], row: Row, record: list[Any]) -> bool:
    """Is ``row`` (rowid, then ``cols``) what SQLite reads of ``record`` as a row of
    ``obj``: each column the record has a field for holds that field's value?"""
    at = {c.name: i for i, c in enumerate(obj.stored_columns)}
    for col, value in zip(cols, row[1:], strict=True):
        i = at.get(col)
        if i is None or i >= len(record) or col == obj.rowid_alias:
            continue
        field_value = record[i]
        kinds = {type(field_value), type(value)}
        if field_value != value or (len(kinds) > 1 and not kinds <= {int, float}):
            return False
    return True


@dataclass
class OwnRows:
    """A scan of ``obj`` that leaves out the rows read from ``records`` (other tables'
    cells): it reads ``columns(wanted)`` and hands ``keep(on_row)`` each row, which
    passes on (rowid, *wanted) for the table's own rows only, counting the others."""

    obj: SchemaObject
    records: Mapping[int, list[list[Any]]]
    left_out: list[int] = field(default_factory=list)  # rowids of rows left out

    def columns(self, wanted: Sequence[str]) -> list[str]:
        """``wanted``, then (when there are other tables' cells) every stored column
        not among them: a row is told from such a cell by all of its values."""
        if not self.records:
            return list(wanted)
        return list(wanted) + [c.name for c in self.obj.stored_columns if c.name not in wanted]

    def keep(self, wanted: Sequence[str], on_row: Callable[[Row], None]) -> Callable[[Row], None]:
        """``on_row`` for the table's own rows, each cut to (rowid, *wanted)."""
        if not self.records:
            return on_row
        cols = self.columns(wanted)
        n = len(wanted) + 1

        def own(row: Row) -> None:
            rowid = int(row[0])
            if any(reads_as(self.obj, cols, row, r) for r in self.records.get(rowid, ())):
                self.left_out.append(rowid)
                return
            on_row(row[:n])

        return own
