"""Invariant: the report says one thing of each row. A message whose record header ran
into a zeroed sector is lost (not copied); its two FTS copies, which agree, then differ
from a row the output does not hold, and the row was also named "kept as stored" and
counted unverified: two verdicts for one row. A row the output does not hold is no row
kept as stored. Real files: Hermes' own (0.19.0 code), a sector of a messages leaf
zeroed over a cell's start."""

from __future__ import annotations

import json
import re
from pathlib import Path

import apsw

from lab.hermes_fixtures import SMALL, built_db
from tests.support.cli import run_ctl

PAGE, SECTOR = 4096, 512


def _messages_leaf(db: Path, page: int) -> bool:
    conn = apsw.Connection(f"file:{db}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_URI | 1)
    try:
        found = conn.execute("SELECT name, pagetype FROM dbstat WHERE pageno = ?", (page,))
        return found.fetchall() == [("messages", "leaf")]
    finally:
        conn.close()


def _rowids(note: str) -> set[int]:
    return {int(n) for n in re.findall(r"\d+", note.split("rowids", 1)[-1])}


def test_a_lost_row_is_not_also_kept_as_stored(tmp_path: Path) -> None:
    """A sector of a messages leaf zeroed: every row recover names lost is absent from
    the notes' "kept as stored" and from the unverified count, and recover says a loss
    (exit 3)."""
    source = tmp_path / "state.db"
    data = bytearray(built_db(SMALL).read_bytes())
    page, sector = 1809, 6  # a messages leaf; the sector holds a record's header
    assert _messages_leaf(built_db(SMALL), page)
    at = (page - 1) * PAGE + sector * SECTOR
    data[at : at + SECTOR] = bytes(SECTOR)
    source.write_bytes(bytes(data))
    out, report = tmp_path / "out.db", tmp_path / "report.json"
    r = run_ctl("recover", "--source", str(source), "--output", str(out), "--report", str(report))
    assert r.exit_code == 3, r.stdout + r.stderr
    doc = json.loads(report.read_text())
    lost = {k if isinstance(k, int) else k[0] for k in doc["tables"]["messages"]["lost_keys"]}
    not_copied = [n for n in doc["notes"] if "were not copied" in n]
    kept = [n for n in doc["notes"] if "kept as stored" in n]
    assert lost or not_copied
    assert not lost & {r for n in kept for r in _rowids(n)}, kept
    assert not {r for n in not_copied for r in _rowids(n)} & {r for n in kept for r in _rowids(n)}
    held = {i for (i,) in apsw.Connection(str(out)).execute("SELECT id FROM messages")}
    assert not lost & held
