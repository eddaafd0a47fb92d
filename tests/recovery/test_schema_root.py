"""schema_root.rebuild_schema_root: page 1 rebuilt from the ``sqlite_schema`` leaves left.

The rebuilt schema is compared with what SQLite reads from the file before the damage;
the leaves decoded to find it are the schema's own, not every table leaf of the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest

from lab import corruption
from statewarden.demo.damage import PristineFile
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.schema_root import rebuild_schema_root


def schema_rows(path: Path) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(path))
    try:
        return conn.execute("SELECT rowid, * FROM sqlite_schema ORDER BY rowid").fetchall()
    finally:
        conn.close()


def zero_page1_past_header(path: Path) -> list[int]:
    """Zero page 1 of ``path`` but its 100-byte header; return the schema's leaves."""
    pf = PristineFile(path)
    leaves = pf.tree_pages(1)[1]
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(bytes(pf.page_size - 100))
    return leaves


class TestRebuildSchemaRoot:
    def test_only_schema_leaves_are_decoded(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Page 1 zeroed past its header on a file Hermes wrote: page 1 is rebuilt over
        the three schema leaves and SQLite reads the schema as before, while only those
        leaves are decoded row by row. Before, every table leaf of the file was decoded
        (more than 13 minutes on a 1 GB file)."""
        case = corruption.zeroed_page1(tmp_path / "db", keep_header=True)
        leaves = PristineFile(case.pristine).tree_pages(1)[1]
        assert len(leaves) > 1
        decoded: list[int] = []
        real = DatabaseFile.leaf_rows

        def leaf_rows(self: DatabaseFile, n: int) -> tuple[list[tuple[int, list[Any]]], int]:
            decoded.append(n)
            return real(self, n)

        monkeypatch.setattr(DatabaseFile, "leaf_rows", leaf_rows)
        assert rebuild_schema_root(case.db) == len(leaves)
        assert sorted(decoded) == sorted(leaves)
        monkeypatch.undo()
        assert schema_rows(case.db) == schema_rows(case.pristine)

    @pytest.mark.parametrize("encoding", ["UTF-8", "UTF-16le", "UTF-16be"])
    def test_every_text_encoding(self, tmp_path: Path, encoding: str) -> None:
        """A file in each text encoding whose schema spans several leaves (views and
        triggers among its rows): page 1 zeroed past its header is rebuilt and SQLite
        reads every schema row and every table row as before."""
        db = tmp_path / "enc.db"
        conn = apsw.Connection(str(db))
        conn.execute(f"PRAGMA encoding = '{encoding}'")
        for i in range(60):
            cols = ", ".join(f"c{j} TEXT" for j in range(12))
            conn.execute(f"CREATE TABLE t{i} (id INTEGER PRIMARY KEY, {cols})")
            conn.execute(f"CREATE INDEX t{i}_c0 ON t{i} (c0)")
            conn.execute(f"CREATE VIEW v{i} AS SELECT id FROM t{i}")
            conn.execute(f"CREATE TRIGGER g{i} AFTER INSERT ON t{i} BEGIN SELECT 1; END")
            conn.execute(f"INSERT INTO t{i} (c0) VALUES ('table'), ('view')")
        conn.close()
        before = schema_rows(db)
        leaves = zero_page1_past_header(db)
        assert len(leaves) > 2
        assert rebuild_schema_root(db) == len(leaves)
        assert schema_rows(db) == before
        conn = apsw.Connection(str(db))
        try:
            assert conn.execute("SELECT c0 FROM t59 ORDER BY id").fetchall() == [
                ("table",),
                ("view",),
            ]
        finally:
            conn.close()
