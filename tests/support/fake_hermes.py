"""A stand-in for the ``hermes`` console script, so a real process shows
``hermes serve --isolated`` (or ``hermes dashboard``, ...) in its command line.

``install_fake_hermes(dir)`` writes ``dir/hermes``: an executable whose shebang is the
test interpreter, the way pip installs Hermes' own console script. Whatever the
subcommand, it opens ``$HERMES_HOME/state.db`` with Hermes' real ``SessionDB`` and
holds it until SIGTERM. ``serve --isolated`` first daemonises with a double fork
(PPID 1), as the desktop app's backend does. When ``$FAKE_HERMES_PIDFILE`` is set,
the holding process writes its pid there (atomically) once the database is open.
With ``$FAKE_HERMES_WRITE_EVERY`` (seconds) it appends a message that often; with
``$FAKE_HERMES_LOG`` as well, each message says ``tick <pid> <n>`` and, once SessionDB
has committed it, its id and text are appended to that file (one line each), so a test
knows every row that was committed; with ``$FAKE_HERMES_CHECKPOINT`` set as well, each
commit is folded into state.db at once (a passive checkpoint: the file itself changes
with every commit, not only its -wal). With
``$FAKE_HERMES_OFD_GUARD`` (the lab folder) it adds the open file description locks of
Hermes since 0.20 (``lab/lockguard.py``) and lifts them before it closes, as Hermes does.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

PIDFILE_ENV = "FAKE_HERMES_PIDFILE"
WRITE_EVERY_ENV = "FAKE_HERMES_WRITE_EVERY"
LOG_ENV = "FAKE_HERMES_LOG"
CHECKPOINT_ENV = "FAKE_HERMES_CHECKPOINT"
OFD_GUARD_ENV = "FAKE_HERMES_OFD_GUARD"


def install_fake_hermes(bin_dir: Path, python: str | None = None) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "hermes"
    exe.write_text(f"#!{python or sys.executable}\n" + Path(__file__).read_text())
    exe.chmod(0o755)
    return exe


def main() -> None:
    # SIGTERM is taken only by the wait between two writes (sigtimedwait), blocked in
    # every thread from the start: a handler setting an Event could run while the loop's
    # own Event.wait held the event's lock and wait for it for ever (the process then
    # never ended).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    args = sys.argv[1:]
    if args[:1] == ["serve"] and "--isolated" in args:
        # Detached as the demo's look-alike is (this runs with the test interpreter,
        # where statewarden is installed).
        from statewarden.demo.hermes_lookalike import daemonise

        daemonise()
    from hermes_state import SessionDB

    db = SessionDB()
    sid = f"fake_{os.getpid()}"
    db.create_session(sid, "cli")
    db.append_message(sid, "user", " ".join(["hermes", *args]))
    guard: Any = None
    db_path = os.path.join(
        os.environ.get("HERMES_HOME") or os.path.expanduser("~/.hermes"), "state.db"
    )
    if os.environ.get(OFD_GUARD_ENV):
        sys.path.insert(0, os.environ[OFD_GUARD_ENV])
        guard = importlib.import_module("lockguard")
        guard.arm(db_path)
    pidfile = os.environ.get(PIDFILE_ENV)
    if pidfile:
        tmp = f"{pidfile}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(str(os.getpid()))
        os.replace(tmp, pidfile)
    print("ready", flush=True)
    every = float(os.environ.get(WRITE_EVERY_ENV) or 0)
    log = os.environ.get(LOG_ENV)
    fold = bool(os.environ.get(CHECKPOINT_ENV))
    n = 0
    while signal.sigtimedwait({signal.SIGTERM}, every or 3600) is None:
        if every:
            n += 1
            text = f"tick {os.getpid()} {n}" if log else f"tick {n}"
            msg_id = db.append_message(sid, "assistant", text)
            if fold:
                db._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            if log:
                with open(log, "a") as f:  # after the commit: only committed rows
                    f.write(f"{msg_id}\t{text}\n")
    if guard is not None:
        guard.release(db_path)
    db.close()


if __name__ == "__main__":
    main()
