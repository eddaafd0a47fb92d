"""The demo's Hermes look-alike writes a message and its session's count in one
transaction, as Hermes does. It wrote them as two autocommit statements, so a copy taken
between them (the maintenance pre-build's) held a message its count lacked: recover
reported a count mismatch, the demo's maintenance stopped with "the repair would lose
rows" (exit 3), now and then, in CI. Here a real look-alike process writes every
millisecond while this test reads snapshot after snapshot.

And it ends on SIGTERM whenever that comes: the signal is blocked and taken only by
the wait between two writes. Its handler used to set a ``threading.Event`` the loop was
waiting on, and a handler run while that wait held the event's lock waited for the lock
for ever."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from statewarden.demo import hermes_lookalike
from statewarden.demo.database import write_database

SNAPSHOTS = 400  # at least; and on until the look-alike was seen at this many counts:
COUNTS_SEEN = 21
MOMENTS = 25  # look-alikes stopped, each after a different number of its writes


def started(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    """A look-alike ``hermes chat`` writing every millisecond, past its ``ready``."""
    home = tmp_path / "hermes"
    home.mkdir(parents=True)
    write_database(home / "state.db")
    env = {**os.environ, "HERMES_HOME": str(home), hermes_lookalike.WRITE_EVERY_ENV: "0.001"}
    proc = subprocess.Popen(
        [sys.executable, hermes_lookalike.__file__, "chat"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc, home / "state.db"


def count_and_messages(conn: sqlite3.Connection, session: str) -> tuple[int, int]:
    """The session's message_count and its messages, read in one transaction."""
    conn.execute("BEGIN")
    (count,) = conn.execute(
        "SELECT message_count FROM sessions WHERE id = ?", (session,)
    ).fetchone()
    (messages,) = conn.execute(
        "SELECT count(*) FROM messages WHERE session_id = ?", (session,)
    ).fetchone()
    conn.execute("COMMIT")
    return int(count), int(messages)


def stopped(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGTERM, then its exit code and stderr once it has ended (no deadline of its own:
    a look-alike that never ends is the failure, and the suite's timeout names it)."""
    proc.terminate()
    _out, err = proc.communicate()
    return proc.returncode, err


def test_every_snapshot_sees_messages_and_count_agree(tmp_path: Path) -> None:
    """Each read transaction sees the look-alike's session count equal to its messages;
    and the look-alike did write many messages meanwhile (the test is not of a still
    file: it reads on until it has seen the look-alike at COUNTS_SEEN counts, however
    slowly a loaded machine lets it write); SIGTERM then ends it with exit 0."""
    proc, db = started(tmp_path)
    session = f"cli_{proc.pid}"
    disagree = []
    seen: set[int] = set()
    snapshots = 0
    try:
        conn = sqlite3.connect(db, timeout=5, isolation_level=None)
        while snapshots < SNAPSHOTS or len(seen) < COUNTS_SEEN:
            assert proc.poll() is None, proc.communicate()
            count, messages = count_and_messages(conn, session)
            snapshots += 1
            seen.add(messages)
            if count != messages:
                disagree.append((count, messages))
            time.sleep(0.0005)
        conn.close()
    finally:
        code, err = stopped(proc)
    assert disagree == []
    assert len(seen) >= COUNTS_SEEN, seen
    assert code == 0, err


def test_sigterm_at_any_moment_ends_the_lookalike(tmp_path: Path) -> None:
    """SIGTERM is never handled in the middle of the write loop: the running look-alike
    has no handler for it (``/proc/<pid>/status``, SigCgt), and yet ends with exit 0,
    not killed by it: the signal was taken by its wait between two writes. Stopped
    after each of MOMENTS different numbers of writes, every look-alike ends so and
    leaves its session's count equal to its messages (no write cut in two)."""
    bit = 1 << (signal.SIGTERM - 1)
    for moment in range(MOMENTS):
        proc, db = started(tmp_path / str(moment))
        session = f"cli_{proc.pid}"
        try:
            (caught,) = (
                int(line.split()[1], 16)
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                if line.startswith("SigCgt:")
            )
            conn = sqlite3.connect(db, timeout=5, isolation_level=None)
            while count_and_messages(conn, session)[1] < 2 + moment:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.0005)
            conn.close()
        finally:
            code, err = stopped(proc)
        assert caught & bit == 0, "a SIGTERM handler runs wherever the loop is"
        assert code == 0, err
        conn = sqlite3.connect(db, isolation_level=None)
        count, messages = count_and_messages(conn, session)
        conn.close()
        assert count == messages
