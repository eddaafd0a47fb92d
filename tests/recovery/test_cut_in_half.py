"""A file cut to exactly half its pages: its header's page count then fills the file at
half the page size, yet the header and page 1 are intact. It is read with the header's
page size and called truncated, not misread at half the size as a destroyed schema.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import apsw

from lab.corruption import table_rows as read_rows
from lab.hermes_fixtures import later_db
from tests.support.cli import run_ctl
from tests.support.recovery import but_the_count


def table_rows(path: Path, table: str) -> dict[int, tuple[object, ...]]:
    conn = apsw.Connection(
        f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        return {int(str(r[0])): r for r in conn.execute(f"SELECT rowid, * FROM {table}")}
    finally:
        conn.close()


def half_of(tmp_path: Path) -> tuple[Path, Path]:
    """(the fuzz lab's file cut to half its pages, the whole file)."""
    whole = later_db()
    db = tmp_path / "state.db"
    shutil.copyfile(whole, db)
    size = db.stat().st_size
    assert size % 8192 == 0
    with open(db, "r+b") as f:
        f.truncate(size // 2)
    return db, whole


class TestCutInHalf:
    def test_check_calls_it_truncated(self, tmp_path: Path) -> None:
        """check reads the half file with the header's 4096-byte pages: base damage
        (exit 3) and "the file is truncated", no word of a page size that does not fit
        or of a destroyed page 1. Before, it was read at 2048 bytes and called
        unreadable, page 1 and the schema destroyed (exit 4)."""
        db, whole = half_of(tmp_path)
        pages = whole.stat().st_size // 4096
        code, stdout, stderr = run_ctl("check", "--db", str(db), "--json", "--progress", "none")
        (d,) = json.loads(stdout)["databases"]
        assert (code, stderr, d["damage"]) == (3, "", "base")
        want = f"the file is truncated: the header says {pages} pages, {pages // 2} are present"
        assert any(n.startswith(want) for n in d["notes"]), d["notes"]
        assert not any("does not fit" in n or "destroyed" in n for n in d["notes"]), d["notes"]

    def test_recover_keeps_every_row_left(self, tmp_path: Path) -> None:
        """recover gets back every session (all on the first half) exactly as Hermes
        wrote it but for the count of messages of those that lost some (written as the
        messages recovered, the count it held in the report), and each message it gets
        back is the pristine one. Before, the file was read at half the page size: no
        session and 6 messages came back."""
        db, whole = half_of(tmp_path)
        out = tmp_path / "out" / "recovered.db"
        out.parent.mkdir()
        code, stdout, stderr = run_ctl(
            "recover", "--source", str(db), "--output", str(out), "--json"
        )
        rep = json.loads(stdout)
        assert (code, stderr) == (3, "")
        assert not any("does not fit" in n for n in rep["notes"])
        sql = "SELECT rowid, * FROM sessions ORDER BY rowid"
        assert but_the_count(out, sql) == but_the_count(whole, sql)
        held = {m["rowid"]: m["message_count"] for m in rep["count_mismatches"]}
        counts = "SELECT rowid, message_count FROM sessions"
        assert {r: n for r, n in read_rows(whole, counts) if r in held} == held
        pristine = table_rows(whole, "messages")
        got = table_rows(out, "messages")
        assert len(got) > len(pristine) // 3
        assert all(pristine[k] == row for k, row in got.items())
