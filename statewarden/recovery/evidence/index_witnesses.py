"""The second copies a table's intact indexes hold of its indexed columns, read from the
indexes alone (covering reads: the table is not touched): for some rowids or all of
them at once (``indexed_values``, ``indexed_values_of``), or one rowid at a time in
rowid order without holding the whole table's entries (``indexed_values_in_order``)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from statewarden.recovery.decoding.scan import MAX_ROWID, MIN_ROWID
from statewarden.recovery.decoding.schema import Schema
from statewarden.sqlite import quote_ident, raise_if_interrupted, raise_if_machine


def indexed_values(
    conn: apsw.Connection,
    schema: Schema,
    table: str,
    *,
    broken_roots: set[int],
) -> dict[int, dict[str, list[tuple[Any, str]]]]:
    """For each rowid, the column values the intact indexes of ``table`` hold for it
    (column -> [(value, index name), ...], one per index that holds the column), read
    from the indexes alone (covering reads: the table is not touched). A partial index
    vouches for the rows it lists; indexes on expressions are left out, and so is an
    index whose own b-tree is damaged."""
    out: dict[int, dict[str, list[tuple[Any, str]]]] = {}
    for reading in index_readings(conn, schema, table, broken_roots=broken_roots):
        try:
            for row in conn.execute(reading.sql):
                got = out.setdefault(int(row[0]), {})
                for c, v in zip(reading.columns, row[1:], strict=True):
                    got.setdefault(c, []).append((v, reading.name))
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_interrupted(exc)
            continue
    return out


Witnesses = dict[str, list[tuple[Any, str]]]


@dataclass(frozen=True)
class IndexReading:
    """How one index of a table is read for its entries: covering, in the index's
    order (``sql``); ``condition``: a partial index's own, without which the planner
    does not use it."""

    name: str
    columns: list[str]
    select: str  # the covering SELECT, without the condition
    condition: str | None = None

    @property
    def sql(self) -> str:
        return f"{self.select} WHERE {self.condition}" if self.condition else self.select

    def where(self, term: str) -> str:
        """Its covering SELECT of the entries that meet ``term`` too (its own condition,
        parenthesised: one with an OR must not take ``term`` into one of its sides)."""
        own = f"({self.condition}) AND " if self.condition else ""
        return f"{self.select} WHERE {own}{term}"

    def between(self) -> str:
        """Its entries with a rowid from ``?`` to ``?`` (inclusive), sorted by rowid."""
        return self.where("rowid BETWEEN ? AND ?") + " ORDER BY rowid"


def index_readings(
    conn: apsw.Connection, schema: Schema, table: str, *, broken_roots: set[int]
) -> list[IndexReading]:
    """The indexes of ``table`` that can witness its rows (as ``indexed_values`` picks
    them: plain columns, an intact b-tree), each with the query that reads its entries
    (in the index's order; ``indexed_values_in_order`` sorts it by rowid)."""
    out = []
    for idx in schema.objects:
        if idx.type != "index" or idx.tbl_name != table or idx.rootpage in broken_roots:
            continue
        try:
            cols = [r[2] for r in conn.execute(f"PRAGMA index_info({quote_ident(idx.name)})")]
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_interrupted(exc)
            continue
        if not cols or any(c is None for c in cols):
            continue
        sel = ", ".join(quote_ident(str(c)) for c in cols)
        sql = f"SELECT rowid, {sel} FROM {quote_ident(table)} INDEXED BY {quote_ident(idx.name)}"
        condition = idx.partial_condition
        out.append(IndexReading(idx.name, [str(c) for c in cols], sql, condition or None))
    return out


def indexed_values_in_order(
    conn: apsw.Connection,
    readings: list[IndexReading],
    *,
    misshapen: Mapping[str, set[int] | None] | None = None,
    windows: Sequence[int] = (),
) -> Iterator[tuple[int, Witnesses]]:
    """What ``indexed_values`` holds for every rowid, one rowid at a time in ascending
    order, without holding the whole table's entries: each index of ``readings`` is
    read sorted by rowid, and the readers are merged (entries of one rowid in the order
    of ``readings``). The entries of the indexes in ``misshapen`` for the rows named
    there (every row, when None) are left out, as ``lost_writes.drop_misshapen`` leaves
    them out. An index that fails part way has said what it read before, and says
    nothing more.

    ``windows``: rowids (ascending) at which a new stretch of rowids starts. SQLite
    sorts each stretch's entries alone, in memory, so a sort holds one stretch's
    entries, not a million rows' (about 57 MiB an index); each stretch reads the whole
    index again, which costs far less than its sort."""
    misshapen = misshapen or {}
    starts = [MIN_ROWID, *(w for w in windows if w > MIN_ROWID)]
    failed: set[str] = set()
    current: int | None = None
    got: Witnesses = {}
    for lo, after in itertools.zip_longest(starts, starts[1:]):
        hi = MAX_ROWID if after is None else after - 1
        readers = [_index_reader(conn, r, lo, hi, failed) for r in readings if r.name not in failed]
        for rowid, name, values in heapq.merge(*readers, key=lambda e: e[0]):
            if name in misshapen and ((bad := misshapen[name]) is None or rowid in bad):
                continue
            if rowid != current:
                if current is not None and got:
                    yield current, got
                current, got = rowid, {}
            for c, v in values:
                got.setdefault(c, []).append((v, name))
    if current is not None and got:
        yield current, got


def _index_reader(
    conn: apsw.Connection, reading: IndexReading, lo: int, hi: int, failed: set[str]
) -> Iterator[tuple[int, str, list[tuple[str, Any]]]]:
    """One index's entries with a rowid from ``lo`` to ``hi``, (rowid, index name,
    [(column, value), ...]), until the end or the first error (damage met part way:
    what was read stands, and the index's name goes in ``failed``)."""
    name, cols = reading.name, reading.columns
    try:
        for row in conn.execute(reading.between(), (lo, hi)):
            yield int(row[0]), name, list(zip(cols, row[1:], strict=True))
    except (apsw.Error, UnicodeDecodeError) as exc:
        # The sort by rowid may spill to a temporary file: no room for it is no
        # verdict on the index, and must not quietly take a witness away.
        raise_if_machine(exc)
        failed.add(name)
        return


# Rowids bound into one ``rowid IN (...)``.
_IN_CHUNK = 500


def indexed_values_of(
    conn: apsw.Connection, readings: list[IndexReading], rowids: Sequence[int]
) -> dict[int, Witnesses]:
    """What ``indexed_values_in_order`` holds for just ``rowids``, read with SQLite
    picking them out of each index (``rowid IN (...)``). An index that fails part way
    says nothing, as a sorted reading that fails says nothing."""
    out: dict[int, Witnesses] = {}
    for reading in readings:
        got: list[tuple[Any, ...]] = []
        try:
            for at in range(0, len(rowids), _IN_CHUNK):
                chunk = rowids[at : at + _IN_CHUNK]
                sql = reading.where(f"rowid IN ({', '.join('?' for _ in chunk)})")
                got.extend(tuple(row) for row in conn.execute(sql, tuple(chunk)))
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_machine(exc)
            continue
        for row in got:
            held = out.setdefault(int(row[0]), {})
            for c, v in zip(reading.columns, row[1:], strict=True):
                held.setdefault(c, []).append((v, reading.name))
    return out
