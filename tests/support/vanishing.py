"""Real vanishings: Hermes 0.22's own SessionDB finds state.db damaged, moves it aside
and writes new sessions into a fresh, empty file, logging what it did into the home's
``logs/agent.log`` in Hermes' own format. Shared by the daemon's and maintenance's tests."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from lab.hermes_fixtures import NEWEST_HERMES, WRITER, hermes_python, writer_env
from statewarden.moved_aside import moved_aside_in

# Hermes' writer (lab/hermes_writer.py build) with Python logging sent where Hermes' own
# file handler writes, in its format: the log line Hermes logs when it moves a file aside.
_LOGGED_BUILD = """
import logging, runpy, sys
home, writer = sys.argv[1], sys.argv[2]
logging.basicConfig(filename=home + "/logs/agent.log", level=logging.INFO,
                    format="%(asctime)s %(levelname)s %(name)s: %(message)s")
sys.argv = ["hermes_writer.py", "build", "--home", home, *sys.argv[3:]]
runpy.run_path(writer, run_name="__main__")
"""

DAMAGES = ("zeroed", "garbage", "empty")


def damage(db: Path, how: str) -> None:
    """What makes Hermes 0.22 move ``db`` aside: its first page zeroed, garbage over its
    header (not a database), or the file emptied (0 bytes)."""
    if how == "empty":
        os.truncate(db, 0)
        return
    with open(db, "r+b") as f:
        f.write(b"\0" * 4096 if how == "zeroed" else b"this is not a sqlite file, " * 4)


def hermes_starts_fresh(home: Path, *, sessions: int, messages: int, seed: int) -> Path:
    """Hermes 0.22 opens the home's damaged state.db: it moves it aside, starts a fresh
    file and writes ``sessions`` new sessions and ``messages`` messages into it (their
    ids differ from the old ones by ``seed``). The moved-aside file."""
    before = set(moved_aside_in(home, "state.db"))
    (home / "logs").mkdir(exist_ok=True)
    out = subprocess.run(
        [
            hermes_python(NEWEST_HERMES),
            "-c",
            _LOGGED_BUILD,
            str(home),
            str(WRITER),
            "--sessions",
            str(sessions),
            "--messages",
            str(messages),
            "--seed",
            str(seed),
        ],
        env=writer_env(home),
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout.splitlines()[-1]) == {"sessions": sessions, "messages": messages}
    (moved,) = set(moved_aside_in(home, "state.db")) - before
    return home / moved
