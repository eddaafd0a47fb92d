"""The demo's Hermes look-alike writes a message and its session's count in one
transaction, as Hermes does. It wrote them as two autocommit statements, so a copy taken
between them (the maintenance pre-build's) held a message its count lacked: recover
reported a count mismatch, the demo's maintenance stopped with "the repair would lose
rows" (exit 3), now and then, in CI. Here a real look-alike process writes every
millisecond while this test reads snapshot after snapshot."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from statewarden.demo import hermes_lookalike
from statewarden.demo.database import write_database

SNAPSHOTS = 400


def test_every_snapshot_sees_messages_and_count_agree(tmp_path: Path) -> None:
    """Each read transaction sees the look-alike's session count equal to its messages;
    and the look-alike did write many messages meanwhile (the test is not of a still
    file)."""
    home = tmp_path / "hermes"
    home.mkdir()
    write_database(home / "state.db")
    env = {**os.environ, "HERMES_HOME": str(home), hermes_lookalike.WRITE_EVERY_ENV: "0.001"}
    proc = subprocess.Popen(
        [sys.executable, hermes_lookalike.__file__, "chat"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        session = f"cli_{proc.pid}"
        conn = sqlite3.connect(home / "state.db", timeout=5, isolation_level=None)
        disagree = []
        seen = set()
        for _ in range(SNAPSHOTS):
            conn.execute("BEGIN")
            (count,) = conn.execute(
                "SELECT message_count FROM sessions WHERE id = ?", (session,)
            ).fetchone()
            (messages,) = conn.execute(
                "SELECT count(*) FROM messages WHERE session_id = ?", (session,)
            ).fetchone()
            conn.execute("COMMIT")
            seen.add(messages)
            if count != messages:
                disagree.append((count, messages))
            time.sleep(0.0005)
        conn.close()
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    assert disagree == []
    assert len(seen) > 20, seen
