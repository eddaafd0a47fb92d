"""The rows of a table no name reaches by rowid (a WITHOUT ROWID table, or one whose
columns take ``rowid``, ``_rowid_`` and ``oid``), and of a table the output could not
create: what ``TableFill.row_copy`` does for a rowid table, without a rowid to read
past damage by or a table to write into."""

from __future__ import annotations

from typing import Any

from statewarden.recovery.building.build import TableCopy, count_source_keys, key_fn, stored_names
from statewarden.recovery.building.table_fill import TableFill
from statewarden.recovery.decoding.scan import keyed_scan
from statewarden.sqlite import json_value


def keyed_copy(fill: TableFill, tc: TableCopy) -> None:
    """A damaged table no name reaches by rowid, row by row as ``keyed_scan`` reads it:
    from the start, then from the end past the stretch it could not read, each row
    through the dedupe rule by its key. The rows of that stretch cannot be counted: the
    report says so (``TableReport.unread_stretch``), and loss is detected."""
    obj = tc.obj
    cols = stored_names(obj)
    at = [cols.index(c) + 1 for c in obj.key_names]
    keyf = key_fn(obj)  # (a table with no key: each row numbered by its place)

    def on_row(row: tuple[Any, ...]) -> None:
        key = keyf((None, *(row[i] for i in at)))
        tc.report.source_rows += 1
        tc.source_keys.add(key)
        fill.insert_row(tc, None, list(row[1:]), cols, reached=True)

    result = keyed_scan(fill.src, obj.name, cols, on_row, key=obj.key_names)
    if result.unreadable_keys:
        # Rows whose key reads and whose other columns do not: lost, named by their key.
        tc.source_keys.update(result.unreadable_keys)
        tc.report.unreadable_rows += len(result.unreadable_keys)
        shown = ", ".join(str(list(k)) for k in result.unreadable_keys[:10])
        fill.report.notes.append(
            f"{obj.name}: {len(result.unreadable_keys)} rows whose key reads but whose"
            f" other columns do not were not copied (keys {shown})"
        )
    if result.stretch_unread:
        before, after = (
            None if r is None else [json_value(r[i]) for i in at] or None
            for r in result.around_stretch
        )
        tc.report.unread_stretch = [before, after]
        fill.report.notes.append(
            f"{obj.name}: a stretch of its rows could not be read (no rowid tells where"
            f" reading could resume past it): between the rows keyed {before} and"
            f" {after} (None: the table's start or end), their number unknown"
        )


def count_only(fill: TableFill, tc: TableCopy) -> None:
    """A table the output could not create (a collation or module this SQLite lacks,
    the note says which): its rows read and keyed, none written; the accounting finds
    every one lost."""
    count_source_keys(fill.src, tc)
