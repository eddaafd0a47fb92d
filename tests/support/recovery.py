"""What the recovery tests share: damage they make, runs of `statewardenctl recover` and
`check` with their JSON, and comparisons of an output's rows with the pristine file's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw

from lab import corruption
from lab.corruption import table_rows as rows
from lab.hermes_fixtures import SMALL, built_db
from statewarden.demo import damage
from statewarden.recovery.decoding.schema import read_schema
from statewarden.recovery.table_scans import _scan_facts
from tests.support.cli import run_ctl


def scrambled_fts_index(dest_dir: Path) -> corruption.Case:
    """Sixteen bytes inside one segment of messages_fts's index inverted, well inside
    its cell: every b-tree, row and FTS copy reads as before, only FTS5's own check of
    that table fails (what the b-tree check cannot see)."""
    case = corruption.fresh_copy(dest_dir)
    case.note = scramble_fts_index(case)
    return case


def scramble_fts_index(case: corruption.Case) -> str:
    """Invert sixteen bytes inside one segment of messages_fts's index in ``case.db``
    (see ``scrambled_fts_index``); return what was done."""
    pf = corruption.PristineFile(case.db)
    _, leaves = pf.tree_pages(case.roots["messages_fts_data"])
    leaf = leaves[len(leaves) // 2]
    off = pf.cell_offsets(leaf)[0]
    at = (leaf - 1) * pf.page_size + off + 64
    old = pf.page(leaf)[off + 64 : off + 80]
    damage.write_at(case.db, at, bytes(b ^ 0xFF for b in old))
    return f"messages_fts_data leaf {leaf}: 16 bytes of a segment inverted"


def fts_version_changed(dest_dir: Path) -> corruption.Case:
    """The format version messages_fts_config stores changed from 4 to 99 in place
    (one byte of the record's value): every b-tree reads as before, but FTS5 refuses to
    open the table, so its own check stops with an error instead of a verdict."""
    case = corruption.fresh_copy(dest_dir)
    pf = corruption.PristineFile(case.db)
    root = case.roots["messages_fts_config"]
    at = pf.page(root).find(b"version\x04")
    assert at > 0, "the config page holds the version row"
    damage.write_at(case.db, (root - 1) * pf.page_size + at + len(b"version"), b"\x63")
    case.note = f"messages_fts_config page {root}: the stored version 4 made 99"
    return case


def recover_with_stderr(db: Path, tmp_path: Path) -> tuple[int, dict[str, Any], str, Path]:
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir(exist_ok=True)
    code, stdout, stderr = run_ctl("recover", "--source", str(db), "--output", str(out), "--json")
    return code, json.loads(stdout) if stdout else {}, stderr, out


def recover_quietly(db: Path, tmp_path: Path) -> tuple[int, dict[str, Any], Path]:
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir(exist_ok=True)
    code, stdout, _ = run_ctl(
        "recover", "--source", str(db), "--output", str(out), "--json", "--progress", "none"
    )
    return code, json.loads(stdout) if stdout else {}, out


def recover_reported(case: corruption.Case, tmp_path: Path) -> tuple[int, dict[str, Any], Path]:
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    report = tmp_path / "report.json"
    code, stdout, stderr = run_ctl(
        "recover", "--source", str(case.db), "--output", str(out), "--report", str(report), "--json"
    )
    assert stderr == ""
    doc = json.loads(stdout)
    assert json.loads(report.read_text()) == doc
    assert doc.pop("schema_version") == 1
    return code, doc, out


def recover_json(case: corruption.Case, tmp_path: Path) -> tuple[int, dict[str, Any], Path]:
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    code, stdout, stderr = run_ctl(
        "recover", "--source", str(case.db), "--output", str(out), "--json"
    )
    assert stderr == ""
    return code, json.loads(stdout), out


def check_json(case: corruption.Case) -> tuple[int, dict[str, Any]]:
    code, stdout, stderr = run_ctl("check", "--db", str(case.db), "--json", "--progress", "none")
    assert stderr == ""
    return code, json.loads(stdout)


def but_the_count(db: Path, sql: str) -> list[tuple[object, ...]]:
    """The rows ``sql`` reads from ``db`` with ``message_count`` left out (``recover``
    writes a count that disagrees with its session's messages: ``stale_counts.py``)."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        cursor = conn.execute(sql)
        names = [d[0] for d in cursor.getdescription()]
        keep = [i for i, n in enumerate(names) if n != "message_count"]
        return [tuple(r[i] for i in keep) for r in cursor]
    finally:
        conn.close()


def ordered_rows(path: Path, name: str) -> list[tuple[object, ...]]:
    return corruption.table_rows(path, f"SELECT rowid, * FROM {name} ORDER BY rowid")


def base_tables(path: Path) -> list[str]:
    conn = apsw.Connection(
        f"file:{path}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        return [o.name for o in read_schema(conn).base_tables()]
    finally:
        conn.close()


def pristine(sql: str) -> list[tuple[object, ...]]:
    return rows(built_db(SMALL), sql)


def assert_every_table_pristine(out: Path, pristine: Path) -> None:
    """Every base table of the pristine file is in the output with exactly its rows, and
    the FTS tables find what the pristine ones find."""
    for table in base_tables(pristine):
        sql = f"SELECT rowid, * FROM {table} ORDER BY rowid"
        assert rows(out, sql) == rows(pristine, sql), table
    for fts in ("messages_fts", "messages_fts_trigram"):
        q = f"SELECT rowid FROM {fts} WHERE {fts} MATCH 'the' ORDER BY rowid"
        assert rows(out, q) == rows(pristine, q), fts


def assert_same_rows(out: Path, table: str, missing: set[int] = frozenset()) -> None:  # type: ignore[assignment]
    """Every pristine row of ``table`` except ``missing`` rowids is in the output, equal."""
    want = [
        r for r in pristine(f"SELECT rowid, * FROM {table} ORDER BY rowid") if r[0] not in missing
    ]
    assert rows(out, f"SELECT rowid, * FROM {table} ORDER BY rowid") == want


def scan_facts(db: Path, *, proved: bool) -> tuple[Any, ...]:
    """``check``'s full-scan facts of ``db`` (``table_scans._scan_facts``), with what a
    clean check of the b-trees proves taken as proved or not."""
    conn = apsw.Connection(str(db))
    try:
        return _scan_facts(conn, read_schema(conn), None, {}, indexes_agree=proved)
    finally:
        conn.close()
