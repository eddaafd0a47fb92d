"""The index entries a damaged table's rows are held against, read one rowid at a time
(``index_witnesses.indexed_values_in_order``), are exactly what reading them all at once gives
(``index_witnesses.indexed_values``, then ``lost_writes.drop_misshapen``), on a file Hermes wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab import corruption
from lab.hermes_fixtures import SMALL, TALL, built_db
from lab.many_rows import many_messages
from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.schema import read_schema
from statewarden.recovery.evidence.index_witnesses import (
    index_readings,
    indexed_values,
    indexed_values_in_order,
)
from statewarden.recovery.evidence.lost_writes import drop_misshapen
from statewarden.sqlite import uri_for
from tests.support.cli import run_ctl
from tests.support.full_disk import mount_full_tmpfs


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
        everything = indexed_values(conn, schema, table, broken_roots=set())
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


@pytest.fixture
def full_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """SQLite's folder for temporary files (``SQLITE_TMPDIR``) on a full tmpfs."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    for spec in (SMALL, TALL):
        built_db(spec)  # Hermes' writer needs room for temporary files: built first
    mnt = tmp_path / "tmp"
    mnt.mkdir()
    mount_full_tmpfs(mnt)
    monkeypatch.setenv("SQLITE_TMPDIR", str(mnt))
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def _read_sorted(temp_store: str) -> list[tuple[int, Any]]:
    """Every entry of messages' indexes in rowid order, on a connection whose sorts spill
    past a few pages (``cache_size``), so they need temporary files unless in memory."""
    conn = _open(built_db(TALL))
    try:
        conn.execute("PRAGMA cache_size=10")
        conn.execute(f"PRAGMA temp_store={temp_store}")
        readings = index_readings(conn, read_schema(conn), "messages", broken_roots=set())
        return list(indexed_values_in_order(conn, readings))
    finally:
        conn.close()


def _recover_json(db: Path, out: Path) -> dict[str, Any]:
    out.mkdir()
    code, stdout, stderr = run_ctl(
        "recover",
        "--source",
        str(db),
        "--output",
        str(out / "new.db"),
        "--json",
        "--progress",
        "none",
    )
    assert code == 3, stderr
    got: dict[str, Any] = json.loads(stdout)
    return got


def test_a_full_tmp_is_an_error_never_fewer_witnesses(full_tmpdir: Path) -> None:
    """A sort with no room for its temporary files ends the reading with SQLite's error:
    an index is never taken to have said less than it holds. The recovery's own reading
    sorts in memory (``PRAGMA temp_store=MEMORY`` on its source) and holds every entry."""
    with pytest.raises(apsw.FullError):
        _read_sorted("FILE")
    conn = _open(built_db(TALL))
    try:
        everything = indexed_values(conn, read_schema(conn), "messages", broken_roots=set())
    finally:
        conn.close()
    assert dict(_read_sorted("MEMORY")) == everything


def test_recover_needs_no_room_in_tmp(full_tmpdir: Path, tmp_path: Path) -> None:
    """A zeroed messages leaf is recovered with SQLite's temporary folder full: verified,
    exit 3 for the rows only that page held. (Its sorts are small enough to stay in
    memory anyway; the test above makes one spill.)"""
    case = corruption.zeroed_leaf(tmp_path / "case")
    assert _recover_json(case.db, tmp_path / "out")["verified"] is True


def test_windows_hold_what_one_sort_holds() -> None:
    """Read in stretches of rowids (each sorted alone), the entries are those of one
    sort of the whole index: windows between rows, on rows, past the end, many small."""
    conn = _open(built_db(SMALL))
    try:
        schema = read_schema(conn)
        for table in ("messages", "sessions"):
            readings = index_readings(conn, schema, table, broken_roots=set())
            whole = list(indexed_values_in_order(conn, readings))
            rowids = [r for r, _ in whole]
            for windows in (
                rowids[::7],
                rowids[1::300],
                [rowids[-1] + 1, 10**15],
                [-5, 0, 1, 2],
                KeySet(rowids).windows(100),
            ):
                got = list(indexed_values_in_order(conn, readings, windows=windows))
                assert got == whole, (table, windows[:5])
    finally:
        conn.close()


def test_windows_keep_a_partial_index_to_its_own_rows(tmp_path: Path) -> None:
    """A partial index whose condition has an OR is read under its condition whole
    (parenthesised), not the window's bound joined to one side of the OR."""
    db = tmp_path / "p.db"
    conn = apsw.Connection(str(db))
    conn.execute(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, a, b);"
        "CREATE INDEX t_ab ON t(a, b) WHERE a IS NULL OR b > 5;"
        "CREATE INDEX t_b ON t(b);"
    )
    with conn:
        conn.executemany(
            "INSERT INTO t VALUES (?, ?, ?)",
            [(i, None if i % 3 == 0 else i, i % 11) for i in range(1, 2000)],
        )
    try:
        schema = read_schema(conn)
        everything = indexed_values(conn, schema, "t", broken_roots=set())
        readings = index_readings(conn, schema, "t", broken_roots=set())
        for windows in ([], [500, 1000, 1500], list(range(0, 2100, 37))):
            got = dict(indexed_values_in_order(conn, readings, windows=windows))
            assert got == {r: w for r, w in everything.items() if w}
        listed = {r for r, w in got.items() if any(i == "t_ab" for ws in w.values() for _, i in ws)}
        assert listed == {i for i in range(1, 2000) if i % 3 == 0 or i % 11 > 5}
    finally:
        conn.close()


def test_indexes_built_after_the_rows_or_first_when_tmp_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """messages' plain indexes are built once its rows are in (one sort each). With
    SQLite's temporary folder full, that sort has nowhere to spill: the build starts
    over with the indexes in place first, says so, and the output is the same."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    db = many_messages(tmp_path / "src" / "state.db", 60_000)
    gone = corruption.zero_middle_leaf(db)
    roomy = _recover_json(db, tmp_path / "roomy")
    assert roomy["verified"] is True
    assert roomy["tables"]["messages"]["lost_keys"] == gone
    assert not [n for n in roomy["notes"] if "built after the rows" in n]
    mnt = tmp_path / "tmp"
    mnt.mkdir()
    mount_full_tmpfs(mnt)
    monkeypatch.setenv("SQLITE_TMPDIR", str(mnt))
    try:
        full = _recover_json(db, tmp_path / "full")
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
    assert full["verified"] is True
    assert full["tables"]["messages"]["lost_keys"] == gone
    assert [n for n in full["notes"] if "could not be built after the rows" in n]
    assert full["tables"]["messages"]["recovered"] == roomy["tables"]["messages"]["recovered"]
