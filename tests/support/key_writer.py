"""A WAL writer in a process of its own that commits the keys it is told, as Hermes
commits its rows (a process that reads the -shm raw would drop its own connections'
locks on it: docs/safety.md rule 2), and the keys a copy holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import apsw

# Each line of its stdin is a key to insert into ``state_meta`` (and, with " fold", a
# passive checkpoint after it); it answers "ok". No automatic checkpoint.
WRITER = """
import sys, apsw
conn = apsw.Connection(sys.argv[1])
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("PRAGMA wal_autocheckpoint=0")
print("ok", flush=True)
for line in sys.stdin:
    key, _, fold = line.strip().partition(" ")
    conn.execute("INSERT INTO state_meta(key, value) VALUES (?, 'x')", (key,))
    if fold:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    print("ok", flush=True)
"""

# The same in SQLite's exclusive locking mode: it keeps the wal-index in its own memory
# and never writes the -shm, so a -shm another writer left behind stays as it was.
EXCLUSIVE_WRITER = WRITER.replace(
    'conn.execute("PRAGMA journal_mode=WAL")',
    'conn.execute("PRAGMA locking_mode=EXCLUSIVE")\nconn.execute("PRAGMA journal_mode=WAL")',
)


class KeyWriter:
    """``WRITER`` (or ``EXCLUSIVE_WRITER``) on ``db``, started and ready."""

    def __init__(self, db: Path, script: str = WRITER, *, fold: bool = False) -> None:
        self.fold = fold
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, str(db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        assert self.stdout.readline().strip() == "ok"

    def commit(self, key: str, *, fold: bool | None = None) -> None:
        """``key`` inserted and committed (and checkpointed, with ``fold``: this
        writer's own, unless given)."""
        fold = self.fold if fold is None else fold
        self.stdin.write(f"{key}{' fold' if fold else ''}\n")
        self.stdin.flush()
        assert self.stdout.readline().strip() == "ok"

    def kill(self) -> None:
        """Killed with SIGKILL: its -wal and -shm stay behind."""
        self.proc.kill()
        self.close()

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait(timeout=30)
        self.stdout.close()


def keys_in(db: Path) -> set[str]:
    """The ``state_meta`` keys of a copy, read through SQLite (its integrity ok)."""
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        return {str(r[0]) for r in conn.execute("SELECT key FROM state_meta")}
    finally:
        conn.close()
