"""The child process that runs FTS5's own checks (``IntegrityCheck(apart=True)``) ends
with the process that started it: a ``kill -9`` of a recover or of a maintenance run
leaves no checker behind holding a file next to state.db."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw

from statewarden.recovery.decoding.checks_child import EarlyChecker, apart_checks_argv
from statewarden.recovery.decoding.integrity import IntegrityCheck
from statewarden.sqlite import uri_for
from tests.support.repo import REPO

# The parent: starts the checker as IntegrityCheck does, says its pid, then waits to be killed.
PARENT = """
import subprocess, sys, time
from statewarden.recovery.decoding.checks_child import apart_checks_argv
child = subprocess.Popen(apart_checks_argv(sys.argv[1], ["docs_fts"], busy_ms=120_000),
                         stdout=subprocess.DEVNULL)
print(child.pid, flush=True)
time.sleep(300)
"""


# The parent: starts a checker ahead of its file, as recover does, says its pid, waits.
EARLY_PARENT = """
import time
from statewarden.recovery.decoding.checks_child import EarlyChecker
early = EarlyChecker()
print(early._child.pid, flush=True)
time.sleep(300)
"""


def _fts_db(path: Path) -> apsw.Connection:
    """A WAL database with an FTS5 table and frames in its WAL, locked by the returned
    connection so that any reader waits (the checker's busy timeout, 120 s here)."""
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE VIRTUAL TABLE docs_fts USING fts5(body)")
    conn.execute("INSERT INTO docs_fts VALUES ('one'), ('two')")
    conn.execute("PRAGMA locking_mode=EXCLUSIVE")
    conn.execute("INSERT INTO docs_fts VALUES ('three')")  # takes the lock and keeps it
    return conn


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"  # ended, not yet reaped by its new parent


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def _wait_open(pid: int, path: Path, seconds: float) -> bool:
    """Wait until ``pid`` holds ``path`` open: past its parent check, waiting on the lock."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            names = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            names = []  # a descriptor closed while listed
        if str(path) in names:
            return True
        time.sleep(0.05)
    return False


def test_the_checker_ends_when_its_parent_is_killed(tmp_path: Path) -> None:
    """A kill -9 of recover or maintenance takes the FTS checker with it, not left waiting."""
    db = tmp_path / "state.db"
    lock = _fts_db(db)
    try:
        parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, uri_for(db, mode="ro")],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _wait_open(child, db, 30), "the checker never opened the database"
        assert not _gone(child), "the checker should be waiting on the lock"
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        parent.stdout.close()
        # It would wait 120 s on the lock if it outlived its parent.
        assert _wait_gone(child, 30), f"checker {child} outlived its parent's kill -9"
    finally:
        lock.close()


def test_the_checker_still_answers_for_a_live_parent(tmp_path: Path) -> None:
    """The death signal changes nothing while the parent lives: its verdicts come back."""
    db = tmp_path / "state.db"
    _fts_db(db).close()
    out = subprocess.run(
        apart_checks_argv(uri_for(db, mode="ro"), ["docs_fts"]),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    doc = json.loads(out.stdout)
    assert doc["rows"] == {"docs_fts": [["ok"], None]}


def test_a_checker_whose_parent_is_already_gone_checks_nothing(tmp_path: Path) -> None:
    """A checker started after its parent died exits 3 at once and prints no verdict."""
    db = tmp_path / "state.db"
    _fts_db(db).close()
    argv = apart_checks_argv(uri_for(db, mode="ro"), ["docs_fts"])
    argv[4] = str(os.getpid() + 1_000_000)  # a parent pid that is not its parent
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 3
    assert out.stdout == ""


def _scrambled_fts_db(path: Path) -> None:
    """An FTS5 table whose inverted index no longer matches its content: one row's
    text changed in the content table behind FTS5's back (its own check fails)."""
    conn = apsw.Connection(str(path))
    conn.execute("CREATE VIRTUAL TABLE docs_fts USING fts5(body)")
    conn.execute("INSERT INTO docs_fts VALUES ('one apple'), ('two pears')")
    conn.execute("UPDATE docs_fts_content SET c0 = 'three plums' WHERE id = 1")
    conn.close()


def test_a_checker_started_ahead_gives_the_verdicts_when_told_the_file(tmp_path: Path) -> None:
    """Started before the file exists, then told it: the same verdicts as a checker
    started with the file, a damaged index found, and the child is the one started
    ahead (it is taken, no second one is started)."""
    early = EarlyChecker()
    child = early._child
    assert child is not None
    db = tmp_path / "state.db"
    _scrambled_fts_db(db)
    conn = apsw.Connection(str(db))
    try:
        check = IntegrityCheck(conn, apart=True, background=True, early=early)
        assert early._child is None  # taken
        assert check._child is child
        lines, finished, abort = check.result()
        verdicts = check.own_verdicts()
    finally:
        conn.close()
        early.close()
    assert finished
    assert abort is None
    assert verdicts is not None
    assert verdicts["docs_fts"] != "ok"
    assert any("docs_fts" in ln for ln in lines)
    assert child.returncode == 0


def test_a_checker_started_ahead_and_not_wanted_exits_at_once(tmp_path: Path) -> None:
    """Closed without being told a file (the copy failed, the checks ran in threads):
    it reads the end of its stdin and exits 0 having checked nothing."""
    early = EarlyChecker()
    child = early._child
    assert child is not None
    early.close()
    assert child.returncode == 0
    assert _gone(child.pid)
    early.close()  # twice is harmless


def test_a_checker_started_ahead_ends_when_its_parent_is_killed(tmp_path: Path) -> None:
    """A kill -9 of recover while it makes the work copy leaves no checker waiting on
    its stdin."""
    parent = subprocess.Popen(
        [sys.executable, "-c", EARLY_PARENT], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert not _gone(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    parent.stdout.close()
    assert _wait_gone(child, 30), f"checker {child} outlived its parent's kill -9"
