"""Lost writes: pages of a table back to older images, told by what the rest of the file
says.

A disk that acknowledged a write but kept the old sectors leaves every page well
formed, so no b-tree check sees it; what remains is disagreement between the copies a
transaction wrote together. Two kinds are found here (the others, a session's
message_count against its messages and FTS copies of rows the table lacks, are in
``diagnose.py``):

- *Rows older than their index entries.* A row whose indexed columns differ from the
  entries every intact index holding them has for its rowid: the table's page went
  back (the row is stale, base damage), or, with only one index holding the column,
  either the row or that one entry is older and nothing tells which (base damage: the
  row may be stale). An entry that differs while another index agrees with the row is
  older than the row: derived damage, the index is rebuilt. An entry whose record has
  not the index's shape (another index's page moved into its tree) is no witness.
- *Rowids given out but gone.* ``sqlite_sequence`` above the table's highest rowid is
  no damage on its own (Hermes deletes the newest rows with their session), so it
  counts only with a witness: an intact index that lists rowids in between while the
  table and its FTS copies lack them. Either the rows were lost with their FTS copies,
  or they were deleted and the index lost that write: nothing tells which, and the
  rows may be lost (base damage).
- *Rows referenced but gone.* Rows of another table whose foreign key names a row the
  parent table lacks while an intact index of the parent still lists its key: the
  parent row was written, indexed and referenced, and is gone (base damage). Hermes
  deletes a session's messages with it, so its own deletes leave no such reference.
"""

from __future__ import annotations

import re
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import apsw

from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.integrity import broken_trees
from statewarden.recovery.decoding.page_format import PAGE_INDEX_INTERIOR, PAGE_INDEX_LEAF, varint
from statewarden.recovery.decoding.pages import DatabaseFile, tree_walk
from statewarden.recovery.decoding.scan import scan_table
from statewarden.recovery.decoding.schema import Schema, SchemaObject
from statewarden.recovery.evidence.copies import agrees_with_copies, feeds, rowids_shown
from statewarden.recovery.evidence.foreign_cells import foreign_records, reads_as, referenced_twice
from statewarden.recovery.evidence.index_witnesses import indexed_values
from statewarden.sqlite import json_value, quote_ident, raise_if_interrupted

_MISSING_FROM_INDEX_RE = re.compile(r"^row \d+ missing from index (\S+)")


@dataclass
class StaleRow:
    """A row whose indexed columns differ from the entries its intact indexes hold."""

    table: str
    rowid: int
    # column -> {"row": what the row holds, "indexes": what they hold, "by": their names}
    columns: dict[str, dict[str, Any]]
    # For some column two or more indexes agree with each other against the row: the
    # row is older. Otherwise one index holds each column, and it or the row is older.
    certain: bool
    # The rowid whose record the row holds: that rowid's index entries hold the value
    # the row has, and its FTS copies the row's text (records swapped or moved).
    record_of: int | None = None

    @property
    def restorable(self) -> bool:
        """One column differs, and indexes that agree hold it: a value changed on disk
        as much as an older row, and recover puts the indexes' value back (as it does
        for rot); a row that differs in more columns is an older version of itself,
        kept as it was once written and named stale. A row holding another rowid's
        record (``record_of``) is not the row it was written as either: kept as it
        stands, named, never patched column by column into a mix."""
        return self.certain and len(self.columns) == 1 and self.record_of is None


@dataclass
class GivenOut:
    """Rowids ``sqlite_sequence`` gave out above the table's highest rowid that an
    intact index lists while the table and its FTS copies lack them."""

    table: str
    sequence: int
    highest_rowid: int
    rowids: list[int]


@dataclass
class Referenced:
    """Rows of ``table`` an intact index lists and rows of ``by`` reference by
    ``column``, which the table lacks."""

    table: str
    column: str
    by: str
    rowids: list[int]
    keys: list[Any]
    references: int  # rows of ``by`` that name them


@dataclass
class LostWrites:
    stale_rows: list[StaleRow] = field(default_factory=list)
    # index -> rowids whose entry is older than the row (another index agrees with it)
    older_entries: dict[str, list[int]] = field(default_factory=dict)
    given_out: list[GivenOut] = field(default_factory=list)
    referenced: list[Referenced] = field(default_factory=list)
    # index -> rowids of its entries of another index's shape (None: not all named)
    misshapen: dict[str, set[int] | None] = field(default_factory=dict)

    @property
    def damage(self) -> str:
        if self.stale_rows or self.given_out or self.referenced:
            return "base"
        return "derived" if self.older_entries else "none"

    def findings(self) -> list[str]:
        out = []
        for table in sorted({s.table for s in self.stale_rows}):
            rows = [s for s in self.stale_rows if s.table == table]
            moved = [s for s in rows if s.record_of is not None]
            sure = [s.rowid for s in rows if s.certain and not s.restorable and s not in moved]
            one = [s.rowid for s in rows if s.restorable]
            unsure = [s.rowid for s in rows if not s.certain]
            if sure:
                out.append(
                    f"{table}: {_rows(sure)} older than {_their(sure)} index entries, which"
                    f" agree with each other (a lost write: stale rows): {rowids_shown(sure)}"
                )
            if moved:
                shown = ", ".join(f"{m.rowid} (of {m.record_of})" for m in moved[:20])
                out.append(
                    f"{table}: {_rows([m.rowid for m in moved])} hold another row's record:"
                    " the indexes list the value they hold and the search-index copies their"
                    " text under that row's rowid (records swapped or moved on disk), not"
                    f" patched: rowids {shown}{', ...' if len(moved) > 20 else ''}"
                )
            if one:
                out.append(
                    f"{table}: {_rows(one)} {'differ' if len(one) != 1 else 'differs'} in one"
                    " column from index entries that agree with each other: changed on disk"
                    f" or older (a lost write): {rowids_shown(one)}"
                )
            if unsure:
                out.append(
                    f"{table}: {_rows(unsure)} {'differ' if len(unsure) != 1 else 'differs'}"
                    " from the one index holding the column: the row or its entry is older"
                    " (a lost write), nothing tells which:"
                    f" {rowids_shown(unsure)}"
                )
        for index, rowids in sorted(self.older_entries.items()):
            out.append(
                f"{index}: {len(rowids)} entr{'ies' if len(rowids) != 1 else 'y'} older than"
                f" the row, which another index agrees with (rebuilt): {rowids_shown(rowids)}"
            )
        for index, bad in sorted(self.misshapen.items()):
            what = f"{len(bad)} entries" if bad is not None else "entries"
            out.append(
                f"{index}: {what} of another index's shape (one of its pages holds another"
                " index's entries): no witnesses of the rows (rebuilt)"
            )
        for g in self.given_out:
            out.append(
                f"{g.table}: sqlite_sequence gave out rowids up to {g.sequence}, the highest"
                f" rowid is {g.highest_rowid}, and its indexes list {_rows(g.rowids)} in"
                " between that neither the table nor its FTS copies hold: rows lost with"
                " their FTS copies, or deleted with the index's write lost (nothing tells"
                f" which): {rowids_shown(g.rowids)}"
            )
        for r in self.referenced:
            out.append(
                f"{r.table}: {_rows(r.rowids)} gone that {_their(r.rowids)} indexes list and"
                f" {r.references} row{'s' if r.references != 1 else ''} of {r.by} reference"
                f" by {r.column}: the rows are lost (a lost write or a damaged page):"
                f" {rowids_shown(r.rowids)}"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "stale_rows": [
                {
                    "table": s.table,
                    "rowid": s.rowid,
                    "certain": s.certain,
                    "record_of": s.record_of,
                    "restorable": s.restorable,
                    "columns": {
                        c: {
                            "row": json_value(v["row"]),
                            "indexes": json_value(v["indexes"]),
                            "by": v["by"],
                        }
                        for c, v in s.columns.items()
                    },
                }
                for s in self.stale_rows
            ],
            "older_entries": self.older_entries,
            "given_out": [vars(g) for g in self.given_out],
            "misshapen_entries": {
                i: sorted(bad) if bad is not None else None for i, bad in self.misshapen.items()
            },
            "referenced": [
                {**vars(r), "keys": [json_value(k) for k in r.keys]} for r in self.referenced
            ],
        }


def _rows(rowids: list[int]) -> str:
    return f"{len(rowids)} row{'s' if len(rowids) != 1 else ''}"


def _their(rowids: list[int]) -> str:
    return "their" if len(rowids) != 1 else "its"


def find_lost_writes(
    conn: apsw.Connection,
    schema: Schema,
    error_lines: list[str],
    index_only: dict[str, list[int]],
    orphans: dict[str, int] | None = None,
    *,
    raw: DatabaseFile | None = None,
) -> LostWrites:
    """The lost writes ``conn``'s file shows. ``error_lines`` are the integrity check's:
    rows are held against their indexes only in tables one of whose indexes it found
    a row missing from (a healthy file costs nothing). ``index_only`` is, per table,
    the rowids only an index lists (no FTS copy, no row: ``diagnosis.TableFacts``);
    ``orphans`` the tables with rows whose parent is missing (``table_scans.orphan_rows``):
    only their references are followed. ``raw``, the same file opened for plain reads
    before ``conn`` (docs/safety.md rule 2), tells which index entries have their
    index's shape, and which rows a table's b-tree reads from another table's leaf;
    without it every entry is taken as its index's, every row read as the table's."""
    found = LostWrites()
    broken = broken_trees(error_lines)
    twice = referenced_twice(error_lines)
    tables: set[str] = set()
    for ln in error_lines:
        if (m := _MISSING_FROM_INDEX_RE.match(ln)) and (idx := schema.by_name(m.group(1))):
            tables.add(idx.tbl_name)
    for name in sorted(tables):
        obj = schema.by_name(name)
        if obj is not None and not obj.without_rowid:
            foreign = foreign_records(raw, obj, twice) if raw is not None else {}
            _hold_against_indexes(conn, schema, obj, broken, found, foreign=foreign, raw=raw)
    for name, rowids in index_only.items():
        gone = _given_out(conn, name, rowids)
        if gone is not None:
            found.given_out.append(gone)
    for child in sorted(orphans or {}):
        found.referenced.extend(_referenced_but_gone(conn, schema, child, broken))
    return found


def _referenced_but_gone(
    conn: apsw.Connection, schema: Schema, child: str, broken: set[int]
) -> list[Referenced]:
    """Rows other tables lack that an intact index of theirs lists and rows of
    ``child`` reference (single-column foreign keys to another table)."""
    out = []
    try:
        fks = conn.execute(f"PRAGMA foreign_key_list({quote_ident(child)})").fetchall()
        for fk in fks:
            parent, col, to = str(fk[2]), str(fk[3]), fk[4]
            obj = schema.by_name(parent)
            if obj is None or parent == child or obj.without_rowid or fk[1] != 0:
                continue
            if sum(1 for f in fks if f[0] == fk[0]) != 1:
                continue  # a key of several columns
            if to is None and len(obj.key_columns) != 1:
                continue
            to = str(to) if to is not None else obj.key_columns[0]
            gone = _gone(conn, schema, parent=parent, to=to, child=child, col=col, broken=broken)
            if gone is not None:
                out.append(gone)
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_interrupted(exc)
    return out


def _gone(
    conn: apsw.Connection,
    schema: Schema,
    *,
    parent: str,
    to: str,
    child: str,
    col: str,
    broken: set[int],
) -> Referenced | None:
    keys: set[Any] = set()
    scan_table(conn, parent, [to], lambda row: keys.add(row[1]))
    refs: Counter[Any] = Counter()

    def on_row(row: tuple[Any, ...]) -> None:
        if row[1] is not None and row[1] not in keys:
            refs[row[1]] += 1

    scan_table(conn, child, [col], on_row)
    if not refs:
        return None
    listed = {
        rowid: v
        for rowid, held in indexed_values(conn, schema, parent, broken_roots=broken).items()
        for v, _ in held.get(to, [])
        if v in refs
    }
    if not listed:
        return None
    rowids = sorted(listed)
    return Referenced(
        parent, to, child, rowids, [listed[r] for r in rowids], sum(refs[listed[r]] for r in rowids)
    )


def _hold_against_indexes(
    conn: apsw.Connection,
    schema: Schema,
    obj: SchemaObject,
    broken: set[int],
    found: LostWrites,
    *,
    foreign: dict[int, list[list[Any]]],
    raw: DatabaseFile | None,
) -> None:
    """Each row of ``obj`` against the entries its intact indexes hold for its rowid
    (those of the index's shape); a row read from another table's leaf (``foreign``:
    rowid -> records there) is no row of ``obj`` and is not held against them."""
    try:
        entries = indexed_values(conn, schema, obj.name, broken_roots=broken)
        if raw is not None:
            misshapen = _misshapen_indexes(conn, schema, obj, raw)
            found.misshapen.update(misshapen)
            drop_misshapen(entries, misshapen)
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_interrupted(exc)
        return
    cols = sorted({c for e in entries.values() for c in e})
    if not cols:
        return
    claimed = _unique_values(conn, obj, entries)
    older: dict[str, set[int]] = {}

    def on_row(row: tuple[Any, ...]) -> None:
        rowid = int(row[0])
        held = entries.get(rowid)
        if not held or any(reads_as(obj, cols, row, r) for r in foreign.get(rowid, [])):
            return
        differ: dict[str, dict[str, Any]] = {}
        certain = False
        for col, stored in zip(cols, row[1:], strict=True):
            witnesses = held.get(col, [])
            against = [(v, i) for v, i in witnesses if not _same(v, stored)]
            if not against or any(
                claimed.get((i, col), {}).get(_key(stored), rowid) != rowid for _, i in against
            ):
                # Equal or a value a UNIQUE index holds for another row: two rows claiming
                # one value, which the dedupe rule settles (``report.DEDUPE_RULE``).
                continue
            if len(against) < len(witnesses):  # another index agrees with the row
                for _, i in against:
                    older.setdefault(i, set()).add(rowid)
                continue
            values = {(type(v), v) for v, _ in against}
            certain = certain or (len(against) >= 2 and len(values) == 1)
            differ[col] = {
                "row": stored,
                "indexes": against[0][0] if len(values) == 1 else [v for v, _ in against],
                "by": [i for _, i in against],
            }
        if differ:
            found.stale_rows.append(StaleRow(obj.name, rowid, differ, certain))

    try:
        scan_table(conn, obj.name, cols, on_row)
        _name_moved_records(conn, schema, obj, entries, found)
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_interrupted(exc)
    for index, rowids in older.items():
        found.older_entries[index] = sorted(rowids)


def _name_moved_records(
    conn: apsw.Connection,
    schema: Schema,
    obj: SchemaObject,
    entries: dict[int, dict[str, list[tuple[Any, str]]]],
    found: LostWrites,
) -> None:
    """Rows of ``obj`` just found to differ in one column from indexes that agree:
    the one that holds another rowid's record gets it in ``record_of``. That rowid's
    entries hold the row's value for the column, and its FTS copies the row's text: a
    swapped or moved record, not a changed value (a zeroed or changed column matches
    no other row's entries and copies)."""
    rows = [
        s
        for s in found.stale_rows
        if s.table == obj.name and s.certain and len(s.columns) == 1 and s.record_of is None
    ]
    fs = [f for f in feeds(schema) if f.table == obj.name]
    if not rows or not fs:
        return
    wanted = {_number_key(v["row"]) for s in rows for v in s.columns.values()}
    holders: dict[tuple[str, Any], list[int]] = {}
    for rowid, held in entries.items():
        for col, witnesses in held.items():
            for v, _ in witnesses:
                if (k := _number_key(v)) in wanted:
                    got = holders.setdefault((col, k), [])
                    if rowid not in got:
                        got.append(rowid)
    for s in rows:
        ((col, v),) = s.columns.items()
        for other in holders.get((col, _number_key(v["row"])), []):
            if other != s.rowid and agrees_with_copies(conn, schema, obj.name, s.rowid, other):
                s.record_of = other
                break


def _number_key(v: Any) -> Any:
    return ("number", float(v)) if isinstance(v, int | float) else _key(v)


def _misshapen_indexes(
    conn: apsw.Connection, schema: Schema, obj: SchemaObject, raw: DatabaseFile
) -> dict[str, set[int] | None]:
    """Per index of ``obj`` holding entries of another shape than its own (its column
    count, then the rowid: another index's entries, on a page moved into its tree),
    the rowids of those entries; None when one's rowid cannot be read."""
    out: dict[str, set[int] | None] = {}
    for idx in schema.objects:
        if idx.type != "index" or idx.tbl_name != obj.name or not idx.rootpage:
            continue
        n = len(conn.execute(f"PRAGMA index_info({quote_ident(idx.name)})").fetchall())
        bad = misshapen_entries(raw, idx.rootpage, n + 1)
        if bad != set():
            out[idx.name] = bad
    return out


def drop_misshapen(
    entries: dict[int, dict[str, list[tuple[Any, str]]]], misshapen: dict[str, set[int] | None]
) -> None:
    """Take out of ``entries`` (``index_witnesses.indexed_values``) what the indexes of
    ``misshapen`` hold in records of another shape: read in the index's columns, another
    index's entries say nothing of the rows (an index whose misshapen entries cannot
    all be named is no witness at all)."""
    if not misshapen:
        return
    for rowid, held in entries.items():
        for col in list(held):
            held[col] = [
                (v, i)
                for v, i in held[col]
                if i not in misshapen or ((bad := misshapen[i]) is not None and rowid not in bad)
            ]
            if not held[col]:
                del held[col]


def misshapen_entries(raw: DatabaseFile, root: int, fields: int) -> set[int] | None:
    """Rowids (the last field) of the entries of the index b-tree at ``root`` whose
    record has not ``fields`` fields; None when such an entry's rowid cannot be read."""
    out: set[int] = set()
    most = (raw.usable - 12) * 64 // 255 - 23  # the largest payload an index cell holds whole
    for n, kind, kids in tree_walk(raw, [root], interior=PAGE_INDEX_INTERIOR):
        if kind != PAGE_INDEX_LEAF and kids is None:
            continue  # no index page, or one whose children do not read
        try:
            pg = raw.page(n)
            offsets = raw.cell_offsets(n)
        except (PageFormatError, struct.error):
            continue
        for off in offsets:
            try:
                size, pos = varint(pg, off + (4 if kind == PAGE_INDEX_INTERIOR else 0))
                local = bytes(pg[pos : pos + min(size, most)])
                hsize, at = varint(local, 0)
                count = 0
                while at < min(hsize, len(local)):
                    _, at = varint(local, at)
                    count += 1
                if count == fields:
                    continue
                if size > most:
                    return None
                last = raw.record(local)[-1]
            except (PageFormatError, struct.error, IndexError, UnicodeDecodeError):
                continue
            if isinstance(last, int):
                out.add(last)
    return out


def _key(v: Any) -> Any:
    return (type(v).__name__, v)


def _unique_values(
    conn: apsw.Connection, obj: SchemaObject, entries: dict[int, dict[str, list[tuple[Any, str]]]]
) -> dict[tuple[str, str], dict[Any, int]]:
    """(UNIQUE index, column) -> value -> the rowid whose entry holds it."""
    try:
        unique = {
            str(r[1]) for r in conn.execute(f"PRAGMA index_list({quote_ident(obj.name)})") if r[2]
        }
    except apsw.Error:
        return {}
    out: dict[tuple[str, str], dict[Any, int]] = {}
    for rowid, held in entries.items():
        for col, witnesses in held.items():
            for v, index in witnesses:
                if index in unique:
                    out.setdefault((index, col), {})[_key(v)] = rowid
    return out


def _same(a: Any, b: Any) -> bool:
    return bool(a == b and (type(a) is type(b) or {type(a), type(b)} <= {int, float}))


def sequence_of(conn: apsw.Connection, table: str) -> int | None:
    """The table's ``sqlite_sequence`` value, if it has one that reads."""
    try:
        row = conn.execute(
            "SELECT seq FROM sqlite_sequence NOT INDEXED WHERE name = ?", (table,)
        ).fetchone()
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_interrupted(exc)
        return None
    return row[0] if row is not None and isinstance(row[0], int) else None


def _given_out(conn: apsw.Connection, table: str, index_only: list[int]) -> GivenOut | None:
    """The rowids of ``index_only`` above ``table``'s highest rowid and at most its
    ``sqlite_sequence``, if any."""
    seq = sequence_of(conn, table)
    if seq is None:
        return None
    try:
        top = conn.execute(f"SELECT max(rowid) FROM {quote_ident(table)} NOT INDEXED").fetchone()
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_interrupted(exc)
        return None
    highest = top[0] if top is not None and top[0] is not None else 0
    if not isinstance(seq, int) or not isinstance(highest, int) or seq <= highest:
        return None
    above = [r for r in index_only if highest < r <= seq]
    return GivenOut(table, seq, highest, above) if above else None
