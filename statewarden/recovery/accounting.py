"""What ``recover``'s report counts per table, measured on both files: the source's keys
of a file copied whole (``measure_only``), and the accounting of every table against
the output (``account``): rows recovered, keys lost, unreadable ranges the rows decoded
from pages or an intact index account for, and the table's status."""

from __future__ import annotations

import bisect
import contextlib
from array import array
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import apsw

from statewarden.recovery.building.build import TableCopy, count_source_keys, key_fn
from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.scan import MAX_ROWID, MIN_ROWID
from statewarden.recovery.decoding.schema import Schema
from statewarden.recovery.report import Report, TableReport
from statewarden.sqlite import quote_ident


def measure_only(db: Path, schema: Schema) -> dict[str, TableCopy]:
    """Source key sets of a healthy database (for the loss comparison)."""
    conn = apsw.Connection(str(db))
    try:
        out = {}
        for obj in schema.base_tables():
            out[obj.name] = tc = TableCopy(obj, TableReport())
            count_source_keys(conn, tc)
        return out
    finally:
        conn.close()


def account(built: Path, copies: dict[str, TableCopy], report: Report) -> None:
    """Fill the per-table report from key sets measured on the source copy and the output."""
    conn = apsw.Connection(str(built))
    try:
        for name, tc in copies.items():
            r = tc.report
            obj = tc.obj
            key_cols = obj.key_names
            sel = "".join(", " + quote_ident(c) for c in key_cols)
            out_keys = KeySet()
            keyf = key_fn(obj)
            n = 0
            # (a WITHOUT ROWID table has none; a rowid is read by the name its columns
            # leave it, as the scans read it)
            rowid = obj.rowid_name or "NULL"
            with contextlib.suppress(apsw.Error):
                for row in conn.execute(
                    f"SELECT {rowid}{sel} FROM {quote_ident(name)} NOT INDEXED"
                ):
                    n += 1
                    out_keys.add(keyf(tuple(row)))
            read_keys = tc.source_keys | tc.page_keys
            witnessed = tc.known_keys()
            if tc.sequence is not None:
                # AUTOINCREMENT never gave out a rowid above the table's sequence: a
                # copy that names one holds a garbled cell, not a row that existed.
                witnessed = KeySet(
                    k for k in witnessed if not isinstance(k, int) or k <= tc.sequence
                )
            known = read_keys | witnessed
            lost = known - out_keys
            if obj.rowid_name is not None:
                r.unnamed_lost += _garbled_lost(conn, name, obj.rowid_name, tc.garbled)
            r.recovered = n
            r.source_distinct = len(read_keys)
            r.lost = len(lost)
            r.lost_keys = _sorted_keys(lost)
            if r.unreadable_ranges:
                r.unreadable_ranges = _bounded(
                    _uncovered(r.unreadable_ranges, tc, known), tc.sequence
                )
            if r.unreadable_ranges and not lost and tc.indexed and tc.index_keys == out_keys:
                # An index whose own b-tree is intact lists every row of the table, and
                # it lists exactly the rows the output holds: the stretches that could
                # not be read held no other row (gaps left by deleted rows).
                shown = ", ".join(f"{lo}..{hi}" for lo, hi in r.unreadable_ranges[:5])
                others = (
                    f" ({r.recovered_from_other_copies} of them from other copies)"
                    if r.recovered_from_other_copies
                    else ""
                )
                report.notes.append(
                    f"{name}: rowids {shown} could not be read, but its intact indexes"
                    f" list exactly the {n} rows recovered{others}: nothing else was there"
                )
                r.unreadable_ranges = []
            if not (r.lost or r.unreadable_ranges or r.unnamed_lost or r.unread_stretch):
                r.status = "complete"
            elif n == 0 and known:
                r.status = "failed"
            else:
                r.status = "partial"
            report.tables[name] = r
    finally:
        conn.close()


def _garbled_lost(conn: apsw.Connection, table: str, word: str, garbled: list[int]) -> int:
    """The rows lost unnamed that garbled cells stand for: each cell the table's b-tree
    reached (in a cell pointer slot of a live leaf) that decodes to no row the table
    could store is a row it held, its key unknown; but not when the output holds a row
    under the cell's rowid (a table holds one row per rowid: that row is the one, the
    garbled cell a damaged second reading of it). Cells carved from free space are no
    such rows (they may be deleted ones), and a carved cell is taken only when a
    witness names its key, so its loss is counted by that key."""
    sql = f"SELECT 1 FROM main.{quote_ident(table)} WHERE {word} = ?"
    lost = 0
    for rowid in garbled:
        try:
            held = conn.execute(sql, (rowid,)).fetchone() is not None
        except apsw.Error:
            held = False
        lost += not held
    return lost


def _sorted_keys(keys: AbstractSet[Any]) -> list[Any]:
    try:
        return sorted(keys)
    except TypeError:  # keys of mixed types (NULL in a key column): any stable order
        return sorted(keys, key=repr)


def _bounded(ranges: list[list[int]], sequence: int | None) -> list[list[int]]:
    """Open-ended ranges cut at the table's ``sqlite_sequence``: AUTOINCREMENT never
    gave out a rowid above it, so no row can be missing there."""
    if sequence is None:
        return ranges
    out = []
    for lo, hi in ranges:
        if lo > sequence:
            continue
        out.append([lo, min(hi, sequence)])
    return out


def _uncovered(ranges: list[list[int]], tc: TableCopy, known: KeySet) -> list[list[int]]:
    """The parts of unreadable ranges that rows decoded from pages do not account for.

    Between two consecutive rowids decoded from pages nothing is missing only if they
    are consecutive integers; any gap stays unreadable (rowids, not keys: a table
    keyed by another column, like ``sessions.id``, is placed by its rows' rowids).
    When a range was (partly) filled from pages, its open ends (below the first or
    above the last row of the whole key space) are dropped unless a key known from an
    index lies there (or a known key that is not a rowid was not read, since it cannot
    be placed): every orphaned leaf of the table was decoded, so rows there would have
    been found.
    """
    rowids = sorted(tc.page_rowids)
    known_ints = array("q", known.ints())  # ascending
    # A known key that is not a rowid (``sessions.id``) cannot be placed in rowid
    # space: an open end may hold it unless every such key's row was read.
    unplaced = any(not isinstance(k, int) for k in known - tc.source_keys - tc.page_keys)
    out: list[list[int]] = []
    for lo, hi in ranges:
        inside = [r for r in rowids if lo <= r <= hi]
        pieces = []
        cur = lo
        for r in inside:
            if r > cur:
                pieces.append([cur, r - 1])
            cur = r + 1
        if cur <= hi:
            pieces.append([cur, hi])
        for a, b in pieces:
            open_end = a == MIN_ROWID or b == MAX_ROWID
            i = bisect.bisect_left(known_ints, a)
            known_inside = i < len(known_ints) and known_ints[i] <= b
            if inside and open_end and not unplaced and not known_inside:
                continue
            out.append([a, b])
    return out
