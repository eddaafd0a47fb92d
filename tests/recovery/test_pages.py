"""pages.py: our own reader of SQLite's file format, checked against SQLite itself.

Every decoded row is compared with what SQLite returns for the same rowid from the
same closed file; the b-tree shapes are compared with the corruption lab's separate
walker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab import corruption
from lab.hermes_fixtures import SMALL, built_db
from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.carving import orphan_table_leaves, salvage_rows
from statewarden.recovery.decoding.page_format import varint
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.schema import read_schema


def encode_varint(v: int) -> bytes:
    """SQLite's varint encoding (sqlite.org/fileformat2.html#varint), written separately."""
    v &= (1 << 64) - 1
    if v > 0x00FFFFFFFFFFFFFF:
        out = [v & 0xFF]
        v >>= 8
        for _ in range(8):
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        return bytes(reversed(out))
    out = [v & 0x7F]
    v >>= 7
    while v:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(reversed(out))


def sqlite_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    return corruption.table_rows(path, sql)


class TestVarint:
    @given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
    @settings(max_examples=300)
    def test_round_trip(self, v: int) -> None:
        """Every 64-bit value decodes to itself from 1 to 9 bytes."""
        data = encode_varint(v) + b"\xff"
        assert varint(data, 0) == (v, len(data) - 1)

    def test_known_encodings(self) -> None:
        """SQLite varints decode to their value and length: one byte, two bytes, and nine 0xff bytes
        as -1."""
        assert varint(b"\x7f", 0) == (127, 1)
        assert varint(b"\x81\x00", 0) == (128, 2)
        assert varint(b"\xff" * 9, 0) == (-1, 9)

    def test_truncated_varint_is_a_format_error(self) -> None:
        """A varint that runs past the end of the page is a PageFormatError saying so."""
        with pytest.raises(PageFormatError, match="varint runs past the end of the page"):
            varint(b"\x81\x81", 0)


class TestAgainstSqlite:
    def test_every_messages_leaf_decodes_like_sqlite(self) -> None:
        """Each table leaf of messages, decoded by pages.py, holds exactly the rows SQLite
        returns for those rowids (the INTEGER PRIMARY KEY is stored as NULL)."""
        path = built_db(SMALL)
        db = DatabaseFile(path)
        roots = corruption.schema_roots(path)
        _, leaves = corruption.PristineFile(path).tree_pages(roots["messages"])
        decoded: list[tuple[Any, ...]] = []
        for leaf in leaves:
            rows, bad = db.leaf_rows(leaf)
            assert bad == 0
            decoded.extend((rowid, rowid, *values[1:]) for rowid, values in rows)
        assert decoded == sqlite_rows(path, "SELECT rowid, * FROM messages ORDER BY rowid")

    def test_sessions_leaves_decode_like_sqlite(self) -> None:
        """sessions has 46 columns, text ids and REAL timestamps."""
        path = built_db(SMALL)
        db = DatabaseFile(path)
        _, leaves = corruption.PristineFile(path).tree_pages(
            corruption.schema_roots(path)["sessions"]
        )
        decoded = [(r, *v) for leaf in leaves for r, v in db.leaf_rows(leaf)[0]]
        assert decoded == sqlite_rows(path, "SELECT rowid, * FROM sessions ORDER BY rowid")

    def test_every_serial_type_and_overflow(self, tmp_path: Path) -> None:
        """Integers of every width, reals, 0/1 constants, NULL, blobs, text and payloads
        that spill onto chains of overflow pages decode to SQLite's values."""
        path = tmp_path / "types.db"
        conn = apsw.Connection(str(path))
        conn.execute("PRAGMA page_size=1024")
        conn.execute("CREATE TABLE t(a, b, c)")
        values: list[tuple[Any, ...]] = [
            (0, 1, None),
            (-1, 127, -128),
            (32767, -32768, 8388607),
            (2**31 - 1, -(2**31), 2**47 - 1),
            (2**63 - 1, -(2**63), 1.5),
            (b"", "", b"\x00\x01\x02"),
            ("é" * 700, b"x" * 5000, "tail"),
            ("y" * 100_000, None, 3.25),
        ]
        conn.executemany("INSERT INTO t VALUES (?, ?, ?)", values)
        root = int(conn.execute("SELECT rootpage FROM sqlite_schema WHERE name='t'").get)
        conn.close()
        db = DatabaseFile(path)
        _interior, leaves = corruption.PristineFile(path).tree_pages(root)
        rows = [(r, *v) for leaf in leaves for r, v in db.leaf_rows(leaf)[0]]
        assert rows == sqlite_rows(path, "SELECT rowid, * FROM t ORDER BY rowid")


class TestOrphans:
    def test_pristine_file_has_no_orphan_leaves(self) -> None:
        """Every table leaf of a healthy file is reached from some root."""
        path = built_db(SMALL)
        roots = [*list(corruption.schema_roots(path).values()), 1]
        assert orphan_table_leaves(DatabaseFile(path), roots) == []

    def test_zeroed_interior_page_orphans_exactly_its_leaves(self, tmp_path: Path) -> None:
        """Zeroing the interior page of messages orphans exactly the leaves the lab's
        walker found below it in the pristine file."""
        case = corruption.zeroed_interior(tmp_path / "db")
        _, leaves = corruption.PristineFile(case.pristine).tree_pages(case.roots["messages"])
        roots = [*list(case.roots.values()), 1]
        assert orphan_table_leaves(DatabaseFile(case.db), roots) == sorted(leaves)

    def test_salvage_assigns_leaves_by_record_width(self, tmp_path: Path) -> None:
        """salvage_rows gives every orphaned messages row, equal to SQLite's pristine
        rows, and nothing to a table whose width does not match."""
        case = corruption.zeroed_interior(tmp_path / "db")
        conn = apsw.Connection(str(case.pristine), flags=apsw.SQLITE_OPEN_READONLY)
        schema = read_schema(conn)
        conn.close()
        got = salvage_rows(case.db, schema, ["messages", "sessions"])
        assert got["sessions"] == []
        decoded = [(r, r, *v[1:]) for r, v in got["messages"]]
        assert decoded == sqlite_rows(case.pristine, "SELECT rowid, * FROM messages ORDER BY rowid")

    def test_not_a_table_leaf(self) -> None:
        """Asking for rows of an index page is refused with a format error."""
        path = built_db(SMALL)
        db = DatabaseFile(path)
        idx_root = corruption.schema_roots(path)["idx_messages_session"]
        _, leaves = corruption.PristineFile(path).tree_pages(idx_root)
        with pytest.raises(PageFormatError, match=f"page {leaves[0]} is not a table leaf"):
            db.leaf_rows(leaves[0])


def test_pages_are_read_not_mapped(tmp_path: Path) -> None:
    """The salvage reader reads each page when asked (pread), never mapping the file:
    a mapping's touched pages count as the process's memory, which then grows with the
    file (1 GB of RSS for a 1 GB database); read pages are the same bytes."""
    case = corruption.fresh_copy(tmp_path / "db")
    raw = case.db.read_bytes()
    db = DatabaseFile(case.db)
    try:
        for n in range(1, db.page_count + 1):
            assert db.page(n) == raw[(n - 1) * db.page_size : n * db.page_size]
        assert str(case.db) not in Path("/proc/self/maps").read_text()
    finally:
        db.close()
