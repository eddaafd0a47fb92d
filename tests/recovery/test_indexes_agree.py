"""Work ``check`` no longer does twice gives what doing it twice gave.

A table's facts read without its indexes when SQLite's integrity check of the
b-trees finds nothing (``table_facts(indexes_agree=True)``, what ``check`` does then)
are the facts read with them, on every file whose b-trees check clean: healthy ones
and ones whose damage lies in what the b-tree check does not read (rows rotted in
place, invalid text, lost writes, FTS copies, random bytes of the fuzz lab)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from lab import corruption, fuzz
from lab.hermes_fixtures import SMALL
from statewarden.recovery.decoding.integrity import IntegrityCheck
from statewarden.recovery.decoding.schema import read_schema
from statewarden.recovery.evidence.copies import _differing, feeds
from statewarden.recovery.table_scans import table_facts


def clean_btrees_agree(db: Path) -> bool:
    """Whether ``db``'s b-trees check clean; if they do, assert that every base table's
    facts are the same read with its indexes and without them."""
    conn = apsw.Connection(str(db))
    try:
        schema = read_schema(conn)
        check = IntegrityCheck(conn, None, [o.name for o in schema.tables() if o.rootpage])
        clean = check.btree_result() == ([], None)
        check.stop()
        if clean:
            for obj in schema.base_tables():
                read = table_facts(conn, obj, schema)
                assert table_facts(conn, obj, schema, indexes_agree=True) == read, obj.name
        return clean
    finally:
        conn.close()


# Damage the b-tree check does not read: each of these files' b-trees check clean.
LAB: dict[str, Callable[[Path], corruption.Case]] = {
    "invalid utf8": corruption.invalid_utf8,
    "bit rot in a row": lambda d: corruption.bit_rot(d, "row"),
    "bit rot in an FTS copy": lambda d: corruption.bit_rot(d, "fts"),
}


def test_healthy_file(tmp_path: Path) -> None:
    """A healthy Hermes file's b-trees check clean, and its facts agree."""
    assert clean_btrees_agree(corruption.fresh_copy(tmp_path, SMALL).db)


@pytest.mark.parametrize("kind", sorted(LAB))
def test_lab_damage(tmp_path: Path, kind: str) -> None:
    """Rows rotted in place, in the table or in its FTS copy, and text that is not
    UTF-8: the b-trees check clean, and the facts agree."""
    assert clean_btrees_agree(LAB[kind](tmp_path / "case").db)


def test_fuzz_seeds(tmp_path: Path) -> None:
    """Thirty seeds of the fuzz lab (page 1 destroyed on every third): on each whose
    b-trees check clean, the facts agree; some seeds are such."""
    clean = 0
    for seed in range(30):
        case = fuzz.fuzz_case(tmp_path / str(seed), seed, page1=seed % 3 == 0)
        try:
            clean += clean_btrees_agree(case.db)
        except apsw.Error:
            continue  # a file SQLite cannot open: no b-tree check, nothing skipped
    assert clean > 0


def per_copy_differing(db: Path) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
    """(each FTS copy's differing rows as ``compare`` reads them, in one pass over the
    base table; the same read the plain way, one inner join per copy)."""
    conn = apsw.Connection(str(db))
    try:
        schema = read_schema(conn)
        fs = [f for f in feeds(schema) if f.table == "messages"]
        one_pass = _differing(conn, fs, None)
        plain = {}
        for f in fs:
            sql = (
                f"SELECT b.rowid FROM messages AS b NOT INDEXED"
                f" JOIN {f.fts}_content AS c ON c.id = ({f.rowid_expr})"
                f" WHERE NOT {f.copy_matches()}"
            )
            plain[f.fts] = {int(r[0]) for r in conn.execute(sql)}
        return one_pass, plain
    finally:
        conn.close()


@pytest.mark.parametrize("where", ["row", "fts"])
def test_copies_compared_in_one_pass(tmp_path: Path, where: str) -> None:
    """Both FTS copies of ``messages`` compared in one pass over the table name the rows
    one join per copy names: the rotted row for both copies when the row rotted, for
    the rotted copy alone when a copy did, and none on a healthy file."""
    healthy, plain = per_copy_differing(corruption.fresh_copy(tmp_path / "ok", SMALL).db)
    assert healthy == plain
    assert len(healthy) == 2
    assert not any(healthy.values())
    got, plain = per_copy_differing(corruption.bit_rot(tmp_path / "case", where).db)
    assert got == plain
    assert sorted(len(v) for v in got.values()) == ([1, 1] if where == "row" else [0, 1])
