"""``maintenance --merge-from``: the sessions Hermes 0.22 left behind when it moved a
damaged state.db aside come back, merged with those it wrote since. Real files written
and moved aside by Hermes 0.22's own SessionDB, a real daemon raising the incident, a
real Hermes 0.22 process writing during the run, kill -9 and --resume, and Hermes 0.22
reading the merged file back."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab.hermes_fixtures import (
    NEWEST,
    NEWEST_HERMES,
    NEWEST_WAL,
    Spec,
    built_db,
    hermes_python,
    make_home,
    writer_env,
)
from lab.hot_journal import kill_mid_transaction
from statewarden.maintenance.ledger import read_ledger, run_dir
from statewarden.maintenance.swap import list_quarantine
from tests.support.cli import run_ctl
from tests.support.daemon import DaemonProc, daemon_env
from tests.support.maintenance import maintenance_config, rows, run_maintenance
from tests.support.merging import Vanished, Writer, quarantined, report_of
from tests.support.vanishing import damage, hermes_starts_fresh
from tests.support.waiting import wait_for

# Every column that makes a message what it is (its id aside).
MESSAGE = "session_id, role, content, timestamp, tool_call_id, tool_calls, tool_name, active"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return maintenance_config(tmp_path, monkeypatch)


def messages(db: Path) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter(rows(db, f"SELECT {MESSAGE} FROM messages NOT INDEXED"))


def sessions(db: Path) -> list[str]:
    return [str(r[0]) for r in rows(db, "SELECT id FROM sessions NOT INDEXED")]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_merged_once(db: Path, current: Path) -> None:
    """``db`` holds every session and message of the old file (NEWEST as it was written)
    and of ``current`` (the fresh file as the run found it at the swap), each exactly
    once; old messages keep their ids, and every new one comes after them."""
    old = built_db(NEWEST)
    assert sorted(sessions(db)) == sorted(set(sessions(old)) | set(sessions(current)))
    assert len(sessions(db)) == len(set(sessions(db)))
    assert messages(db) == messages(old) + messages(current)
    assert rows(db, f"SELECT id, {MESSAGE} FROM messages WHERE id <= 60 ORDER BY id") == rows(
        old, f"SELECT id, {MESSAGE} FROM messages ORDER BY id"
    )
    new_ids = [r[0] for r in rows(db, "SELECT id FROM messages WHERE id > 60 ORDER BY id")]
    assert len(new_ids) == sum(messages(current).values())
    by_time = rows(db, "SELECT id FROM messages WHERE id > 60 ORDER BY timestamp, id")
    assert [r[0] for r in by_time] == new_ids  # renumbered in time order


def hermes_reads_back(db: Path) -> None:
    """Hermes 0.22's own SessionDB opens the merged file, finds every session with
    every message, finds an old message by full-text search, and leaves the schema
    byte for byte as it was."""
    want = collections.Counter(str(r[0]) for r in rows(db, "SELECT session_id FROM messages"))
    for sid in sessions(db):
        want.setdefault(sid, 0)
    term, mid = _unique_old_word(db)
    schema = rows(db, "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name")
    script = (
        "import json, sys; from hermes_state import SessionDB; db = SessionDB();"
        " ids = json.loads(sys.argv[1]);"
        " out = {i: (db.get_session(i) is not None) and len(db.get_messages(i)) for i in ids};"
        " hits = db.search_messages(sys.argv[2], limit=5);"
        " print(json.dumps({'messages': out, 'hits': [h['id'] for h in hits],"
        " 'count': db.session_count(include_archived=True, include_subagents=True)}));"
        " db.close()"
    )
    out = subprocess.run(
        [hermes_python(NEWEST_HERMES), "-c", script, json.dumps(sorted(want)), term],
        env=writer_env(db.parent),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["messages"] == dict(want)
    assert mid in got["hits"]
    assert got["count"] == len(want)
    assert rows(db, "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name") == schema


def _unique_old_word(db: Path) -> tuple[str, int]:
    """A word of an old message (a number in it: Hermes' writer makes a few) that no
    other message holds, and that message's id."""
    for mid, content in rows(db, "SELECT id, content FROM messages WHERE id <= 60 ORDER BY id"):
        for word in re.findall(r"\b[a-z]+\d+\b", content or ""):
            if len(rows(db, "SELECT id FROM messages WHERE instr(content, ?) > 0", (word,))) == 1:
                return word, int(mid)
    raise AssertionError("no old message holds a word of its own")


# ------------------------------------------------------------------ the whole story


def test_the_daemon_tells_the_vanishing_and_the_merge_brings_every_session_back(
    tmp_path: Path, config: Path
) -> None:
    """A real daemon counts the file, Hermes 0.22 moves it aside and starts empty: one
    incident names the old file. A Hermes 0.22 process keeps writing while
    ``maintenance --merge-from <that file>`` runs: the run stops it, merges, swaps and
    restarts. Every old and new session and message is there exactly once (its own
    committed rows too), check is clean, Hermes reads it all back, the old file is
    untouched, and the daemon raises no second incident for the merged file."""
    cfg = json.loads(config.read_text())
    config.write_text(json.dumps({**cfg, "watch": {"verify_interval": "1h"}}))
    home = make_home(tmp_path / "hermes", NEWEST)
    db = home / "state.db"
    env = {**daemon_env(tmp_path, home), "STATEWARDEN_CONFIG": str(config)}
    d = DaemonProc(env)
    try:
        d.wait_for_line("database verified healthy")
        damage(db, "zeroed")
        hermes_starts_fresh(home, sessions=5, messages=20, seed=2)
        d.wait_for_line("sessions vanished")
        (incident,) = d.incidents_of("sessions_vanished")
        old = Path(incident["fields"]["moved_aside"])
        before = sha(old)
        w = Writer(tmp_path, home)
        try:
            args = ("--db", str(db), "--merge-from", str(old), "--yes", "--json")
            proc = run_maintenance(*args, env=env)
        finally:
            code = w.stop()
        d.wait_for_line("maintenance_repaired")
        assert len(d.incidents_of("sessions_vanished")) == 1
    finally:
        d.stop()
    assert proc.returncode == 0, proc.stderr
    rep = report_of(proc)
    assert rep["outcome"] == "merged"
    assert code == 0  # stopped by the run's SIGTERM, cleanly
    assert rep["merge"]["sessions_added"] == 12
    assert rep["merge"]["messages_added"] == 60
    assert "moved aside" in rep["merge"]["proof"]
    current = quarantined(tmp_path)
    assert_merged_once(db, current)
    texts = {r[0] for r in rows(db, "SELECT content FROM messages")}
    assert set(w.committed()) <= texts
    assert run_ctl("check", "--db", str(db)).exit_code == 0
    hermes_reads_back(db)
    assert sha(old) == before


@pytest.mark.parametrize("how", ["zeroed", "garbage"])
def test_a_second_merge_adds_nothing_and_stops_nothing(
    tmp_path: Path, config: Path, vanished: Vanished, how: str
) -> None:
    """Merged once (the old file's first page zeroed, or garbage over its header), the
    same merge again finds every row there already: nothing stopped, nothing swapped,
    the file as it was."""
    db, old = vanished(tmp_path, how)
    first = run_maintenance("--db", str(db), "--merge-from", str(old), "--yes", "--json")
    assert first.returncode == 0, first.stderr
    assert_merged_once(db, quarantined(tmp_path))
    inode, content = db.stat().st_ino, sha(db)
    again = run_maintenance("--db", str(db), "--merge-from", str(old), "--yes", "--json")
    assert again.returncode == 0, again.stderr
    rep = report_of(again)
    assert rep["outcome"] == "nothing to merge"
    assert (rep["merge"]["sessions_added"], rep["merge"]["messages_added"]) == (0, 0)
    assert rep["merge"]["messages_already_there"] == 60
    assert (db.stat().st_ino, sha(db)) == (inode, content)
    assert len(list_quarantine(tmp_path / "xdg-state" / "statewarden")) == 1


MERGE_CRASH_STEPS = ["prebuild", "fence", "settle", "catch-up", "swap", "original-kept", "swapped"]


@pytest.mark.parametrize("step", MERGE_CRASH_STEPS)
def test_a_killed_merge_is_resumed_and_nothing_is_merged_twice(
    tmp_path: Path, config: Path, vanished: Vanished, step: str
) -> None:
    """kill -9 right after a step of a merge while Hermes 0.22 writes: --resume rolls it
    back (before the swap: state.db as it was) or forward (from the swap on: merged
    once); the merge run after that finds either everything to merge or nothing, and
    every row is there exactly once."""
    db, old = vanished(tmp_path)
    # Writing often: the file changes between the pre-build and the stop (the snapshot
    # and the stop take longer than a write), so the catch-up merge runs.
    w = Writer(tmp_path, db.parent, every=0.02)
    try:
        env = {**os.environ, "STATEWARDEN_CRASH_AT": step}
        crashed = run_maintenance("--db", str(db), "--merge-from", str(old), "--yes", env=env)
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr
        resumed = run_maintenance("--db", str(db), "--resume", "--json")
    finally:
        w.stop()
    rep = report_of(resumed)
    forward = MERGE_CRASH_STEPS.index(step) >= MERGE_CRASH_STEPS.index("swap")
    if forward:
        assert resumed.returncode == 0, resumed.stderr
        assert rep["outcome"] == "merged"
        assert_merged_once(db, quarantined(tmp_path))
    else:
        assert resumed.returncode == 1, resumed.stderr
        assert rep["outcome"] == "rolled back: the database is unchanged"
        assert set(sessions(db)).isdisjoint(sessions(built_db(NEWEST)))
    assert not list(db.parent.glob(".statewarden-*"))
    state = tmp_path / "xdg-state" / "statewarden"
    assert not (run_dir(state, db) / "merge-source").exists()
    final = run_maintenance("--db", str(db), "--merge-from", str(old), "--yes", "--json")
    assert final.returncode == 0, final.stderr
    assert report_of(final)["outcome"] == ("nothing to merge" if forward else "merged")
    assert_merged_once(db, quarantined(tmp_path))
    assert run_ctl("check", "--db", str(db)).exit_code == 0


def test_a_hot_journal_beside_the_current_file_is_read_as_sqlite_presents_it(
    tmp_path: Path, config: Path, vanished: Vanished
) -> None:
    """Hermes 0.22 killed in the middle of a transaction (rollback mode) leaves a hot
    ``-journal`` beside the current file, which no read-only reader may roll back: the
    merge proved the old file by reading the live one read-only and ended in
    "unexpected ReadOnlyError". Invariant: a hot journal is read as SQLite presents the
    file (rolled back in a private copy), never written in the live one; the merge
    brings every session back, the uncommitted rows do not, and Hermes reads it back."""
    db, old = vanished(tmp_path)
    kill_mid_transaction(db, NEWEST_HERMES, committed=2, uncommitted=400, words=4)
    journal = db.with_name(db.name + "-journal")
    assert journal.exists()
    before = sha(db), sha(journal)
    dry = run_maintenance("--db", str(db), "--merge-from", str(old), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert (sha(db), sha(journal)) == before  # the live file and its journal untouched
    done = run_maintenance("--db", str(db), "--merge-from", str(old), "--yes", "--json")
    assert done.returncode == 0, done.stderr
    assert report_of(done)["outcome"] == "merged"
    assert set(sessions(built_db(NEWEST))) <= set(sessions(db))
    assert not journal.exists()
    assert run_ctl("check", "--db", str(db)).exit_code == 0
    hermes_reads_back(db)


def test_rows_only_in_the_moved_aside_wal_come_back(tmp_path: Path, config: Path) -> None:
    """A WAL database whose Hermes 0.22 writer was killed (its last commits only in
    -wal), then its first page zeroed: Hermes moves it aside with its -wal, and the merge
    brings back every row that writer committed, once, with the old and the new ones."""
    home = make_home(tmp_path / "hermes", NEWEST_WAL)
    db = home / "state.db"
    w = Writer(tmp_path, home)
    wait_for(lambda: len(w.committed()) >= 10, "ten committed messages")
    w.proc.send_signal(signal.SIGKILL)
    w.stop()
    committed = w.committed()
    assert (home / "state.db-wal").stat().st_size > 0
    damage(db, "zeroed")
    old = hermes_starts_fresh(home, sessions=5, messages=20, seed=2)
    assert Path(f"{old}-wal").exists()
    proc = run_maintenance("--db", str(db), "--merge-from", str(old), "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    current = quarantined(tmp_path)
    texts = collections.Counter(str(r[0]) for r in rows(db, "SELECT content FROM messages"))
    assert all(texts[t] == 1 for t in committed)
    writer_sid = f"fake_{w.proc.pid}"
    assert sorted(sessions(db)) == sorted(
        {*sessions(built_db(NEWEST_WAL)), writer_sid, *sessions(current)}
    )
    total = sum(messages(db).values())
    assert total == 60 + 1 + len(committed) + sum(messages(current).values())
    assert messages(built_db(NEWEST_WAL)) + messages(current) <= messages(db)
    assert run_ctl("check", "--db", str(db)).exit_code == 0


# ------------------------------------------------------------------ proof and bad input


@pytest.mark.parametrize("snapshot", [True, False])
def test_a_file_away_from_its_folder_needs_a_snapshot_to_prove_it(
    tmp_path: Path, config: Path, vanished: Vanished, *, snapshot: bool
) -> None:
    """The moved-aside file copied elsewhere is no longer known by its name and place:
    a verified snapshot statewarden took of the database before (the same
    store_instance_id) proves it, and it merges; without one it is refused (exit 5),
    named, and nothing is done."""
    if snapshot:
        home = make_home(tmp_path / "hermes", NEWEST)
        taken = run_ctl("snapshots", "take", "--db", str(home / "state.db"))
        assert taken.exit_code == 0, taken.stderr
        damage(home / "state.db", "zeroed")
        db, moved = home / "state.db", hermes_starts_fresh(home, sessions=5, messages=20, seed=2)
    else:
        db, moved = vanished(tmp_path)
    away = tmp_path / "elsewhere" / "old.db"
    away.parent.mkdir()
    shutil.copyfile(moved, away)
    inode, content = db.stat().st_ino, sha(db)
    proc = run_maintenance("--db", str(db), "--merge-from", str(away), "--yes", "--json")
    if snapshot:
        assert proc.returncode == 0, proc.stderr
        assert "store_instance_id" in report_of(proc)["merge"]["proof"]
        assert_merged_once(db, quarantined(tmp_path))
        return
    assert proc.returncode == 5, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if not x.startswith("{")]  # --json progress
    assert f"{away}: refused: nothing proves it is an earlier file of {db}" in line
    assert (db.stat().st_ino, sha(db)) == (inode, content)


def test_sessions_both_files_hold_prove_it_and_their_counters_add_up(
    tmp_path: Path, config: Path, vanished: Vanished
) -> None:
    """Hermes carries on five of the old sessions in the fresh file (the same ids, the
    same sources): copied elsewhere, the old file is proven by them. Each of those
    sessions is there once, with the old and the new messages, and a message_count that
    is their sum (check finds no session whose count disagrees)."""
    db, moved = vanished(tmp_path, seed=1)
    shared = set(sessions(db)) & set(sessions(built_db(NEWEST)))
    assert len(shared) == 5
    away = tmp_path / "elsewhere.db"
    shutil.copyfile(moved, away)
    proc = run_maintenance("--db", str(db), "--merge-from", str(away), "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    rep = report_of(proc)["merge"]
    assert "session(s) both files hold agree" in rep["proof"]
    assert (rep["sessions_added"], rep["sessions_shared"]) == (7, 5)
    current = quarantined(tmp_path)
    assert_merged_once(db, current)
    counts = dict(rows(db, "SELECT id, message_count FROM sessions"))
    stored = collections.Counter(str(r[0]) for r in rows(db, "SELECT session_id FROM messages"))
    assert all(counts[sid] == stored[sid] for sid in shared)
    assert run_ctl("check", "--db", str(db)).exit_code == 0


def test_an_old_title_the_new_file_uses_is_kept_apart(
    tmp_path: Path, config: Path, vanished: Vanished
) -> None:
    """Hermes gave a new session the title of an old one (titles are unique in Hermes'
    schema): the old session comes back as "<title> (restored)", named in the report;
    the new one keeps its title, check is clean and Hermes reads both."""
    db, old = vanished(tmp_path)
    old_sid, title = rows(
        built_db(NEWEST), "SELECT id, title FROM sessions WHERE title IS NOT NULL"
    )[0]
    new_sid = sessions(db)[0]
    script = (
        "import sys; from hermes_state import SessionDB; db = SessionDB();"
        " assert db.set_session_title(sys.argv[1], sys.argv[2]); db.close()"
    )
    subprocess.run(
        [hermes_python(NEWEST_HERMES), "-c", script, new_sid, str(title)],
        env=writer_env(db.parent),
        capture_output=True,
        check=True,
        timeout=120,
    )
    proc = run_maintenance("--db", str(db), "--merge-from", str(old), "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    assert report_of(proc)["merge"]["titles_renamed"] == {old_sid: f"{title} (restored)"}
    titles = dict(rows(db, "SELECT id, title FROM sessions"))
    assert (titles[new_sid], titles[old_sid]) == (title, f"{title} (restored)")
    assert run_ctl("check", "--db", str(db)).exit_code == 0
    hermes_reads_back(db)


def _foreign(tmp_path: Path, db: Path) -> Path:
    """Another Hermes home's database (other sessions, another store_instance_id)."""
    return make_home(tmp_path / "other", Spec(hermes=NEWEST_HERMES, seed=5)) / "state.db"


def _not_hermes(tmp_path: Path, db: Path) -> Path:
    path = tmp_path / "notes.db"
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT)")
    conn.execute("INSERT INTO notes VALUES (1, 'x')")
    conn.close()
    return path


def _copy_of_current(tmp_path: Path, db: Path) -> Path:
    path = tmp_path / "copy.db"
    shutil.copyfile(db, path)
    return path


def _garbage(tmp_path: Path, db: Path) -> Path:
    path = tmp_path / "garbage.bin"
    path.write_bytes(bytes(range(256)) * 64)
    return path


def _empty(tmp_path: Path, db: Path) -> Path:
    path = tmp_path / "empty.db"
    path.touch()
    return path


def _folder(tmp_path: Path, db: Path) -> Path:
    path = tmp_path / "a-folder"
    path.mkdir()
    return path


def _missing(tmp_path: Path, db: Path) -> Path:
    return tmp_path / "no-such.db"


def _itself(tmp_path: Path, db: Path) -> Path:
    return db


@pytest.mark.parametrize(
    ("make", "code", "says"),
    [
        (_missing, 2, "no such file"),
        (_folder, 2, "is a directory"),
        (_empty, 2, "is empty (0 bytes)"),
        (_itself, 2, "itself; --merge-from names an earlier file"),
        (_foreign, 5, "refused: nothing proves it is an earlier file"),
        (_not_hermes, 5, "refused: not a Hermes state.db"),
        (_copy_of_current, 5, "refused: it is a copy of"),
        (_garbage, 4, ""),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_bad_input_is_one_line_and_changes_nothing(
    tmp_path: Path, config: Path, vanished: Vanished, *, make: Any, code: int, says: str
) -> None:
    """A path that cannot be used (exit 2), a file that is not this database's earlier
    file (exit 5) or no database at all (exit 4): one line naming it, no traceback,
    state.db and the file given exactly as they were, no run recorded."""
    db, _old = vanished(tmp_path)
    path = make(tmp_path, db)
    given = sha(path) if path.is_file() else None
    inode, content = db.stat().st_ino, sha(db)
    proc = run_maintenance("--db", str(db), "--merge-from", str(path), "--yes")
    assert proc.returncode == code, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert str(path) in line
    assert says in line
    assert "Traceback" not in proc.stderr
    assert (db.stat().st_ino, sha(db)) == (inode, content)
    if given is not None:
        assert sha(path) == given
    state = tmp_path / "xdg-state" / "statewarden"
    assert read_ledger(run_dir(state, db) / "run.jsonl") is None
    assert not (run_dir(state, db) / "merge-source").exists()
