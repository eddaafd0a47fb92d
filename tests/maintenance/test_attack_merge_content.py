"""``maintenance --merge-from`` of an old file with hostile content: a 10 MB message, a
session id with a NUL byte in it, and text that is not valid UTF-8 (a title and a
message), written into a Hermes 0.22 state.db before Hermes 0.22 itself found it
damaged, moved it aside and started fresh."""

from __future__ import annotations

import hashlib
from pathlib import Path

import apsw
import pytest

from lab.hermes_fixtures import NEWEST, make_home
from tests.support.cli import run_ctl
from tests.support.maintenance import maintenance_config, rows, run_maintenance
from tests.support.merging import report_of
from tests.support.vanishing import damage, hermes_starts_fresh

BIG = "A" * (10 * 1024 * 1024)
NUL_ID = "nul\0session"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return maintenance_config(tmp_path, monkeypatch)


def hostile(db: Path) -> str:
    """Hostile rows in ``db`` (each session's message_count kept as Hermes keeps it);
    the id of the session that holds the big message."""
    conn = apsw.Connection(str(db))
    with conn:
        [(sid,)] = conn.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchall()
        conn.execute(
            "INSERT INTO sessions (id, source, started_at, title)"
            " VALUES (?, 'cli', 1.0, CAST(X'C3A9FF80' AS TEXT))",
            (NUL_ID,),
        )
        for sess, content, at in ((sid, BIG, 2.0), (NUL_ID, "hello", 3.0)):
            conn.execute(
                "INSERT INTO messages (session_id, role, content, timestamp)"
                " VALUES (?, 'user', ?, ?)",
                (sess, content, at),
            )
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES (?, 'user', CAST(X'41FF0042C3' AS TEXT), 4.0)",
            (sid,),
        )
        conn.execute(
            "UPDATE sessions SET message_count ="
            " (SELECT count(*) FROM messages AS m WHERE m.session_id = sessions.id)"
        )
    conn.close()
    return str(sid)


def test_hostile_content_merges_whole_and_what_recover_could_not_read_is_said(
    tmp_path: Path, config: Path
) -> None:
    """Invariants: nothing readable is lost, every output passes check, and what could
    not be read is said. The 10 MB message and the session whose id holds a NUL byte
    come back byte for byte; the two values that are not valid UTF-8 are what recover
    cannot read (kept partial): the merge's report says so (it said nothing), the
    merged file passes check, and the old file is left as it was."""
    home = make_home(tmp_path / "hermes", NEWEST)
    db = home / "state.db"
    sid = hostile(db)
    damage(db, "zeroed")
    old = hermes_starts_fresh(home, sessions=5, messages=20, seed=2)
    before = hashlib.sha256(old.read_bytes()).hexdigest()
    proc = run_maintenance("--db", str(db), "--merge-from", str(old), "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    merge = report_of(proc)["merge"]
    assert merge["sessions_added"] == 13
    assert merge["old_file_loss"] == "verified, loss detected: 2 partial rows"
    assert "of the old file, recover said: verified, loss detected: 2 partial" in (merge["summary"])
    assert rows(
        db, "SELECT content FROM messages WHERE session_id = ? AND timestamp = 2.0", (sid,)
    ) == [(BIG,)]
    assert rows(db, "SELECT content FROM messages WHERE session_id = ?", (NUL_ID,)) == [("hello",)]
    assert run_ctl("check", "--db", str(db)).exit_code == 0
    assert hashlib.sha256(old.read_bytes()).hexdigest() == before
