"""A Hermes look-alike for ``statewardenctl demo``: copied into the sandbox as ``bin/hermes``.

Standard library only (it runs where Hermes is not installed), and started as
``hermes gateway run``, ``hermes dashboard``, ``hermes chat`` or ``hermes serve
--isolated``, so holder scans classify it exactly as they classify Hermes. Like Hermes
it opens ``$HERMES_HOME/state.db`` with the stdlib ``sqlite3`` in WAL mode, adds a
session and a message with the columns Hermes fills, prints ``ready`` and then appends
a message every ``$DEMO_WRITE_EVERY`` seconds until SIGTERM. ``serve --isolated``
first daemonises with a double fork, as the desktop app's backend does, and writes its
pid to ``$DEMO_PIDFILE``. A file it cannot open (the maintenance fence) ends it with
exit 1; a write that fails is retried at the next tick, as Hermes retries.

SIGTERM is blocked from the start and taken only by the wait between two writes
(``sigtimedwait``): no handler runs in the middle of the loop. (A handler that set a
``threading.Event`` could run while the loop's own ``Event.wait`` held the event's
lock, and wait for that lock for ever: the process then never ended, and the demo's
clean-up had to kill it.)
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time

PIDFILE_ENV = "DEMO_PIDFILE"
WRITE_EVERY_ENV = "DEMO_WRITE_EVERY"
BUSY_TIMEOUT_S = 1.0


def daemonise() -> None:
    """Detach as the desktop app's backend does: a double fork (the parent is PID 1 or
    the subreaper then), a new session, stdio on /dev/null. Also what
    ``tests/support/fake_hermes.py`` does for ``hermes serve --isolated``."""
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)


def _db_path() -> str:
    home = os.environ.get("HERMES_HOME") or os.path.expanduser("~/.hermes")
    return os.path.join(home, "state.db")


def _append(conn: sqlite3.Connection, session: str, role: str, text: str) -> None:
    """One message and its session's count in one transaction, as Hermes writes them.
    (The connection is in autocommit mode: ``with conn`` would begin nothing, and a
    copy taken between the two statements would hold a message its count lacks.)"""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            (session, role, text, time.time()),
        )
        conn.execute(
            "UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", (session,)
        )
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def main() -> None:
    # Pending until the wait between writes takes it (a fork keeps the mask).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    args = sys.argv[1:]
    if args[:1] == ["serve"] and "--isolated" in args:
        daemonise()
    try:
        conn = sqlite3.connect(_db_path(), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        source = "cli" if args[:1] in (["chat"], []) else (args[0] if args else "cli")
        session = f"{source}_{os.getpid()}"
        with conn:
            conn.execute(
                "INSERT INTO sessions (id, source, model, cwd, started_at) VALUES (?, ?, ?, ?, ?)",
                (session, source, "hermes-4-70b", os.getcwd(), time.time()),
            )
        _append(conn, session, "user", " ".join(["hermes", *args]))
    except sqlite3.Error as exc:
        print(f"hermes: state.db: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    pidfile = os.environ.get(PIDFILE_ENV)
    if pidfile:
        tmp = f"{pidfile}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(str(os.getpid()))
        os.replace(tmp, pidfile)
    print("ready", flush=True)
    every = float(os.environ.get(WRITE_EVERY_ENV) or 0)
    n = 0
    while signal.sigtimedwait({signal.SIGTERM}, every or 3600) is None:
        n += 1
        try:
            _append(conn, session, "assistant", f"tick {n}")
        except sqlite3.Error as exc:
            print(f"hermes: state.db: {exc}", file=sys.stderr, flush=True)
    conn.close()


if __name__ == "__main__":
    main()
