"""Lost writes with exact ground truth: Hermes changes a copy of a fixture, then some
of the pages that change touched are written back as they were before it.

A disk that acknowledges a write and keeps the old sectors leaves every page well
formed: SQLite reads the older image as the page. Each case here runs a piece of
Hermes' own history (``HISTORIES``) on a copy of a cached fixture, keeps the file as
Hermes left it (``pristine``) and reverts, in a copy of that, the pages of one b-tree
(a table or an index) that the history changed to their images from before it. The
ground truth is measured on the two files: which rows differ from what Hermes wrote
(stale), which are missing, which came back though Hermes deleted them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from lab.corruption import Case, PristineFile, schema_roots, table_rows
from lab.hermes_fixtures import SMALL, Spec, built_db, hermes_python
from statewarden.demo.damage import write_at

_PRELUDE = """
import os, sys
os.environ["HERMES_HOME"] = sys.argv[1]
from hermes_state import SessionDB
db = SessionDB()
conn = db._conn
"""

# Pieces of Hermes' own history, each through its public SessionDB methods.
HISTORIES = {
    # A rewind: the messages after a user message of the busiest session marked
    # inactive (active = 0), its rewind_count bumped.
    "rewind": """
sid = conn.execute(
    "SELECT session_id FROM messages GROUP BY session_id ORDER BY count(*) DESC LIMIT 1"
).fetchone()[0]
ids = [r[0] for r in conn.execute(
    "SELECT id FROM messages WHERE session_id = ? AND role = 'user' ORDER BY id", (sid,))]
db.rewind_to_message(sid, ids[len(ids) // 2])
""",
    # The newest session deleted (its messages with it), then a new one opened: it takes
    # the deleted session's rowid (the table's highest).
    "reuse": """
sid = conn.execute("SELECT id FROM sessions ORDER BY rowid DESC LIMIT 1").fetchone()[0]
db.delete_session(sid)
db.create_session("opened_after_the_delete", "telegram", model="hermes-4-70b")
db.set_session_title("opened_after_the_delete", "took the deleted session's rowid")
for i in range(3):
    db.append_message("opened_after_the_delete", "user", f"message {i} of the new session")
""",
    # A session opened and three messages stored in it.
    "open": """
db.create_session("opened_later", "telegram", model="hermes-4-70b")
for i in range(3):
    db.append_message("opened_later", "user", f"message {i} of the session opened later")
""",
    # Messages appended to the busiest session (new rowids above the highest).
    "append": """
sid = conn.execute(
    "SELECT session_id FROM messages GROUP BY session_id ORDER BY count(*) DESC LIMIT 1"
).fetchone()[0]
for i in range(6):
    db.append_message(sid, "user" if i % 2 == 0 else "assistant", f"appended message {i}")
""",
    # Hermes' own deletes and soft deletes: a session's messages cleared, a rewind, a
    # compaction, the newest session deleted, a short-lived one deleted with its message
    # (the highest rowid: the messages' sequence now stands above the highest rowid),
    # empty ended sessions deleted and old ones pruned.
    "deletes": """
busiest = [r[0] for r in conn.execute(
    "SELECT session_id FROM messages GROUP BY session_id ORDER BY count(*) DESC LIMIT 3")]
db.clear_messages(busiest[0])
ids = [r[0] for r in conn.execute(
    "SELECT id FROM messages WHERE session_id = ? AND role = 'user' ORDER BY id", (busiest[1],))]
db.rewind_to_message(busiest[1], ids[len(ids) // 2])
db.archive_and_compact(busiest[2], [{"role": "user", "content": "summary of the start"}])
newest = conn.execute("SELECT id FROM sessions ORDER BY rowid DESC LIMIT 1").fetchone()[0]
db.delete_session(newest)
db.create_session("short_lived", "cli")
db.append_message("short_lived", "user", "soon deleted")
db.delete_session("short_lived")
for sid in ("empty_one", "empty_two"):
    db.create_session(sid, "cli")
    db.end_session(sid, "user_exit")
db.delete_empty_sessions()
oldest = conn.execute("SELECT id, started_at FROM sessions ORDER BY started_at LIMIT 4").fetchall()
for sid, _ in oldest:
    db.end_session(sid, "user_exit")
assert db.prune_sessions(older_than_days=None, started_before=oldest[-1][1] + 1e-3) == 4
""",
}


def after_history(dest_dir: Path, history: str, spec: Spec = SMALL) -> Path:
    """A copy of ``built_db(spec)`` in ``dest_dir`` after ``HISTORIES[history]`` ran
    through Hermes on it (closed, no ``-wal`` left)."""
    home = dest_dir / f"after-{history}"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(built_db(spec), home / "state.db")
    subprocess.run(
        [hermes_python(spec.hermes), "-c", _PRELUDE + HISTORIES[history] + "db.close()\n", home],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    for side in ("-wal", "-shm"):
        if (home / f"state.db{side}").exists():
            raise RuntimeError(f"Hermes left state.db{side} behind after close")
    return home / "state.db"


def reverted(dest_dir: Path, history: str, trees: tuple[str, ...], spec: Spec = SMALL) -> Case:
    """The file after ``history`` with the leaves of the b-trees ``trees`` (tables or
    indexes) that it changed back to their images from before it; every other page as
    Hermes left it. ``pristine`` is the file as Hermes left it; ``lost_rowids`` the
    rowids each reverted table lacks, ``phantom`` how many of its rows differ from
    what Hermes wrote, ``unreached`` those rows' rowids."""
    before = built_db(spec)
    after = after_history(dest_dir, history, spec)
    db = dest_dir / "state.db"
    shutil.copyfile(after, db)
    roots = schema_roots(after)
    case = Case(db=db, pristine=after, roots=roots)
    new, old = PristineFile(after), PristineFile(before)
    for tree in trees:
        _, leaves = new.tree_pages(roots[tree])
        for leaf in leaves:
            if leaf * new.page_size > len(old.data) or old.page(leaf) == new.page(leaf):
                continue
            if old.page_type(leaf) != new.page_type(leaf):
                continue  # the page was something else before: not this tree's older image
            write_at(db, (leaf - 1) * new.page_size, old.page(leaf))
            case.damaged_pages.append(leaf)
    for table in trees:
        if table not in ("sessions", "messages"):
            continue
        sql = f"SELECT rowid, * FROM {table}"
        now = {r[0]: r for r in table_rows(db, sql)}
        want = {r[0]: r for r in table_rows(after, sql)}
        differ = sorted(int(str(r)) for r, v in now.items() if want.get(r, v) != v)
        case.unreached[table] = differ
        case.phantom[table] = len(differ)
        case.lost_rowids[table] = sorted(int(str(r)) for r in set(want) - set(now))
    case.note = f"after {history}: pages {case.damaged_pages} of {', '.join(trees)} reverted"
    return case


def fts_shadows(path: Path, table: str = "messages") -> tuple[str, ...]:
    """The FTS shadow tables (those with a b-tree) of the FTS tables ``table`` feeds,
    by Hermes' naming (``<table>_fts...``)."""
    return tuple(n for n in schema_roots(path) if n.startswith(f"{table}_fts"))
