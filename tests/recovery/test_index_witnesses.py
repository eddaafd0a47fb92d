"""The index entries a damaged table's rows are held against, read one rowid at a time
(``copies.indexed_values_in_order``), are exactly what reading them all at once gives
(``copies.indexed_values``, then ``lost_writes.drop_misshapen``), on a file Hermes wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw

from lab.hermes_fixtures import SMALL, built_db
from statewarden.recovery.copies import index_readings, indexed_values, indexed_values_in_order
from statewarden.recovery.lost_writes import drop_misshapen
from statewarden.recovery.schema import read_schema
from statewarden.sqlite import uri_for


def _open(db: Path) -> apsw.Connection:
    return apsw.Connection(
        uri_for(db, mode="ro"), flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )


def _both(
    table: str, misshapen: dict[str, set[int] | None]
) -> tuple[dict[int, Any], list[tuple[int, Any]]]:
    conn = _open(built_db(SMALL))
    try:
        schema = read_schema(conn)
        everything = indexed_values(conn, schema, table, None, broken_roots=set())
        drop_misshapen(everything, misshapen)
        readings = index_readings(conn, schema, table, broken_roots=set())
        in_order = list(indexed_values_in_order(conn, readings, misshapen=misshapen))
    finally:
        conn.close()
    return {r: w for r, w in everything.items() if w}, in_order


def test_in_order_holds_what_all_at_once_holds() -> None:
    """Every rowid of messages and sessions, every entry, in the same order per column."""
    for table in ("messages", "sessions"):
        everything, in_order = _both(table, {})
        assert len(everything) > 50, table
        assert [r for r, _ in in_order] == sorted(everything), table
        assert dict(in_order) == everything, table


def test_in_order_leaves_out_what_misshapen_names() -> None:
    """An index named misshapen for some rows says nothing of them; one named for every
    row (None) says nothing at all, as ``drop_misshapen`` leaves them out."""
    everything, _ = _both("messages", {})
    some = set(sorted(everything)[:50])
    cases: list[dict[str, set[int] | None]] = [
        {"idx_messages_session": some},
        {"idx_messages_session": None},
    ]
    for misshapen in cases:
        expect, in_order = _both("messages", misshapen)
        assert dict(in_order) == expect
        named = some if misshapen["idx_messages_session"] is not None else set(everything)
        for rowid, held in in_order:
            if rowid in named:
                assert all(i != "idx_messages_session" for ws in held.values() for _, i in ws)
