"""A Hermes writer killed in the middle of a transaction in rollback (DELETE) mode.

``killed_mid_transaction`` has Hermes itself (0.22 writes DELETE mode on Debian 12's
SQLite; 0.19 is switched to it) commit a few messages, then rewrite a session's
transcript with thousands of messages in one transaction (``replace_messages``, as
/compress does) with a cache of a few pages, so that the new pages spill into the file
past the size its header gives, and be killed with SIGKILL before the commit: the
``-journal`` stays hot. ``pristine`` is what SQLite presents: a copy of the file and
its journal, rolled back by SQLite on open.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import apsw

from lab.corruption import Case, fresh_copy, table_rows
from lab.hermes_fixtures import NEWEST, Spec, hermes_python
from statewarden.sidecars import JOURNAL_SUFFIX, sidecar

KILLED_WRITER = """
import os, signal, sys
os.environ["HERMES_HOME"] = sys.argv[1]
from hermes_state import SessionDB
db = SessionDB()
db._conn.execute("PRAGMA journal_mode=DELETE")
ids = [r[0] for r in db._conn.execute("SELECT id FROM sessions ORDER BY started_at")]
for i in range(int(sys.argv[2])):
    db.append_message(ids[0], "user", f"committed before the crash {i}")
db._conn.execute("PRAGMA cache_size=8")  # a small cache: the new pages spill into the file
write = db._execute_write
def killed_before_commit(fn, *args, **kwargs):
    def then_killed(conn):
        fn(conn)
        os.kill(os.getpid(), signal.SIGKILL)  # mid-transaction: the -journal stays hot
    return write(then_killed, *args, **kwargs)
db._execute_write = killed_before_commit
text = "never committed " * int(sys.argv[4])
db.replace_messages(ids[1], [
    {"role": "user" if i % 2 == 0 else "assistant", "content": f"uncommitted {i}: {text}"}
    for i in range(int(sys.argv[3]))
])
"""

UNCOMMITTED = "uncommitted %"


def killed_mid_transaction(
    dest_dir: Path,
    *,
    spec: Spec = NEWEST,
    committed: int = 10,
    uncommitted: int = 3000,
    words: int = 40,
) -> Case:
    """A copy of ``spec``'s database after Hermes committed ``committed`` messages and
    was killed (SIGKILL) in the middle of replacing a session's transcript with
    ``uncommitted`` messages of about ``words`` * 16 bytes each: a hot ``-journal``
    beside a half-written file. ``pristine`` is the file as SQLite presents it."""
    case = fresh_copy(dest_dir, spec)
    kill_mid_transaction(case.db, spec.hermes, committed, uncommitted, words)
    case.pristine = dest_dir / "pristine" / "state.db"
    roll_back_copy(case.db, case.pristine)
    case.note = (
        f"Hermes killed mid-transaction in rollback mode ({committed} messages committed,"
        f" {uncommitted} not); hot -journal"
    )
    return case


def kill_mid_transaction(
    db: Path, hermes: str, committed: int = 10, uncommitted: int = 3000, words: int = 40
) -> None:
    """Run the killed writer (Hermes ``hermes``) on the closed database ``db`` (see
    ``killed_mid_transaction``); it leaves ``db`` half-written and its journal hot."""
    done = subprocess.run(
        [
            hermes_python(hermes),
            "-c",
            KILLED_WRITER,
            str(db.parent),
            str(committed),
            str(uncommitted),
            str(words),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != -9 or not sidecar(db, JOURNAL_SUFFIX).exists():
        raise RuntimeError(f"the Hermes writer was not killed mid-transaction: {done.stderr}")


def roll_back_copy(db: Path, dest: Path) -> None:
    """A copy of ``db`` and its ``-journal`` at ``dest``, opened once by SQLite (which
    rolls a hot journal back): the file SQLite presents."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(db, dest)
    if sidecar(db, JOURNAL_SUFFIX).exists():
        shutil.copyfile(sidecar(db, JOURNAL_SUFFIX), sidecar(dest, JOURNAL_SUFFIX))
    conn = apsw.Connection(str(dest))
    try:
        conn.execute("PRAGMA schema_version").fetchall()
    finally:
        conn.close()


def header_pages(db: Path) -> int:
    """The database size in ``db``'s header, in pages."""
    with open(db, "rb") as f:
        return int(struct.unpack(">I", f.read(32)[28:32])[0])


def spilled_past_header(db: Path) -> bool:
    """Is the file longer than its header's database size (pages spilled past it)?"""
    with open(db, "rb") as f:
        head = f.read(100)
    (size,) = struct.unpack(">H", head[16:18])
    page_size = 65536 if size == 1 else size
    return db.stat().st_size // page_size > header_pages(db)


def uncommitted_rows(db: Path) -> int:
    """Messages of the killed transaction in a file read by SQLite (0 when rolled back)."""
    sql = f"SELECT count(*) FROM messages WHERE content LIKE '{UNCOMMITTED}'"
    return int(str(table_rows(db, sql)[0][0]))


LATER_WRITER = """
import os, sys
os.environ["HERMES_HOME"] = sys.argv[1]
from hermes_state import SessionDB
db = SessionDB()
ids = [r[0] for r in db._conn.execute("SELECT id FROM sessions ORDER BY started_at")]
for i in range(int(sys.argv[2])):
    db.append_message(ids[1], "user", f"committed after the rollback {i}")
db.close()
"""


def committed_later(db: Path, messages: int, spec: Spec = NEWEST) -> None:
    """Hermes appends ``messages`` messages (each its own commit) to the second session
    of the closed database ``db`` and closes it cleanly: no journal is left."""
    subprocess.run(
        [hermes_python(spec.hermes), "-c", LATER_WRITER, str(db.parent), str(messages)],
        check=True,
        capture_output=True,
    )
