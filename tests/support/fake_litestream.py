"""A stand-in for the ``litestream`` executable (Litestream is not packaged for Debian 12),
so a real process shows ``litestream replicate DB URL`` in its command line and holds the
database as Litestream does.

``install_fake_litestream(dir)`` writes ``dir/litestream``: an executable whose shebang is
the test interpreter. ``litestream replicate DB REPLICA_URL`` opens DB in WAL mode,
creates Litestream's own bookkeeping tables (``_litestream_seq``, ``_litestream_lock``)
as the real one does, and keeps a read transaction open (Litestream's long-lived read
lock that stops a checkpoint from resetting the WAL under it). Every
``$FAKE_LITESTREAM_SYNC_EVERY`` seconds (default 0.5) it ends that transaction, copies
the WAL's size to ``REPLICA_URL``'s folder (``file://`` only) as a "sync", runs a
passive checkpoint and opens a new read transaction. SIGTERM ends it cleanly.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from pathlib import Path

SYNC_EVERY_ENV = "FAKE_LITESTREAM_SYNC_EVERY"


def install_fake_litestream(bin_dir: Path, python: str | None = None) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "litestream"
    exe.write_text(f"#!{python or sys.executable}\n" + Path(__file__).read_text())
    exe.chmod(0o755)
    return exe


def main() -> int:
    args = sys.argv[1:]
    if len(args) != 3 or args[0] != "replicate":
        print("usage: litestream replicate DB REPLICA_URL", file=sys.stderr)
        return 2
    db, url = args[1], args[2]
    replica = Path(url.removeprefix("file://")) if url.startswith("file://") else None
    # SIGTERM is taken only by the wait inside each read transaction (sigtimedwait), never
    # by a handler that could run while an Event.wait held the event's lock.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    conn.execute("PRAGMA busy_timeout = 30000")
    conn.execute("CREATE TABLE IF NOT EXISTS _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER)")
    conn.execute("CREATE TABLE IF NOT EXISTS _litestream_lock (id INTEGER)")
    every = float(os.environ.get(SYNC_EVERY_ENV) or 0.5)
    syncs = 0
    print("ready", flush=True)
    while True:
        conn.execute("BEGIN")
        conn.execute("SELECT COUNT(1) FROM _litestream_seq").fetchone()  # the read lock
        stopped = signal.sigtimedwait({signal.SIGTERM}, every) is not None
        conn.execute("COMMIT")
        if stopped:
            break
        syncs += 1
        if replica is not None:
            replica.mkdir(parents=True, exist_ok=True)
            wal = Path(f"{db}-wal")
            size = wal.stat().st_size if wal.exists() else 0
            (replica / "syncs").write_text(f"{syncs} {size} {os.stat(db).st_ino}\n")
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
