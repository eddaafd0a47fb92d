"""``maintenance --merge-from PATH``: an earlier file's sessions brought back into state.db.

Hermes 0.22 moves a damaged state.db aside and starts an empty one (``moved_aside.py``);
the old sessions are only in the moved-aside file, and Hermes keeps writing new ones
into the fresh file. A merge makes one verified file holding both, swapped in by the
run like any repair (stop, fence, swap, restart; ``run.py``).

**The old file** is checked and recovered first, before anything is planned or stopped
(``recovery.recover``: a private copy, the old file only read; a file whose first page
is destroyed is read as recover reads it), into the run's own folder in the state
directory. A path that cannot be used (none, a directory, not a regular file, the
database itself, an empty file) is a usage error (exit 2); a file recover cannot read
at all is unreadable (exit 4).

**It must be this database's earlier file**, or the merge is refused and the file named
(exit 5, nothing done). It must be a Hermes state.db (``sessions`` and ``messages``
tables), not a copy of the current file itself (the same ``store_instance_id``:
merging it back would bring deleted rows back), and one of these must hold:

- it is a file Hermes moved aside from this database: a ``state.db.zeroed-*.bak`` or
  ``state.db.notadb-*.bak`` in the database's own folder (Hermes gives that name only
  to the file it renames away from this path), the file itself with that one name (a
  symlink under such a name, or a second name of another file, proves nothing);
- its ``state_meta`` ``store_instance_id`` or ``db_file_generation`` (which Hermes
  writes into each file it makes, and a repair keeps) is that of a verified snapshot
  statewarden took of this database, of an original a run of this profile quarantined,
  or of a Hermes snapshot in this home (``state-snapshots/*/state.db``): a copy of this
  database from before;
- sessions both files hold (by id) exist and agree on their ``source``: Hermes' session
  ids carry the time and random bits, and a gateway that carries on a conversation
  after Hermes started empty writes the same id again.

A fresh file gets a new ``store_instance_id`` and ``db_file_generation`` and records
nothing of the file before it, so the two files' ids are never compared with each
other except to refuse a copy of the current file.

**The merge** (:func:`build_merged`) starts from a ``VACUUM INTO`` copy of a consistent
copy of the current file, so its schema, header fields and journal mode are Hermes'
own, byte for byte. Then, in one transaction, with the ``messages`` triggers set aside
and put back with their exact text:

- **sessions** of the old file the current one lacks are added as they are; a title the
  current file already uses (titles are unique) gets `` (restored)`` (then a number).
  A session both hold keeps the current row, with the earlier ``started_at``, its
  ``message_count`` and ``tool_call_count`` raised by the old messages added to it (as
  Hermes counts them: active rows, and each tool call), and the old row's token, call
  and cost counters added when all of its old messages were added (they were counted
  apart);
- **messages** of the old file are added unless the current file holds the same one
  (same session, role, time, content and tool calls): a second merge adds nothing. Old
  messages keep their ids; the current file's are renumbered only when an added old
  message's id is taken in it, and then each moves up by the old file's highest id
  (its ``sqlite_sequence``), in the same order, ``display_order`` with it, so ids still
  follow time: every old message before every new one;
- **other tables** get the old rows whose key the current file lacks (the current
  file's row wins); a table with no key to merge by, and ``schema_version``,
  ``state_meta``, ``gateway_heartbeats``, ``compression_locks`` and
  ``session_turn_leases`` (what describes this file, and the leases and heartbeats of
  processes long gone) keep the current file's rows only; a table the current file
  lacks is left out (named);
- every message without a ``message_uid`` gets one (as Hermes' own trigger would), and
  ``sqlite_sequence`` covers the highest id.

What recover could not read of the old file (rows it lost, or kept with unreadable
columns) is merged as recover made it and said in the merge's report
(``old_file_loss``); the old file itself is left as it is.

Then every FTS5 table is rebuilt (``'rebuild'``) and the file is verified: integrity
check, each FTS table's ``integrity-check`` against its content, every session id of
both files present exactly once, every message of the current file at its (renumbered)
id with its own content, every added old message at its id with its own content, and
the row counts adding up. Nothing is merged twice: a merge that would add nothing ends
before anything is stopped, and a run killed before its swap is rolled back whole.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import apsw

from statewarden.errors import DatabaseError, MergeRefused, StatewardenError, UsageError
from statewarden.json_text import parse_json
from statewarden.maintenance.prebuild import file_sha256
from statewarden.maintenance.snapshots import list_snapshots
from statewarden.maintenance.swap import list_quarantine
from statewarden.moved_aside import not_moved_aside_from
from statewarden.progress import ProgressFn
from statewarden.recovery import make_work_copy
from statewarden.sidecars import SIDECAR_SUFFIXES
from statewarden.sqlite import (
    classify_error,
    is_hot_journal_error,
    no_sidecars,
    open_readonly,
    quote_ident,
    read_live,
    readonly,
    uri_for,
)

T = TypeVar("T")

MERGE_FOLDER = "merge-source"
OLD_NAME = "old.db"
# Recover's report of the old file, beside the file it made: what of it could not be
# read comes into the merge's report (the merge itself never sees the old file again).
OLD_REPORT = "old.recover.json"
# Tables that describe the current file, or hold leases and heartbeats of processes
# long gone: the current file's rows only.
CURRENT_ONLY = frozenset(
    {
        "schema_version",
        "state_meta",
        "gateway_heartbeats",
        "compression_locks",
        "session_turn_leases",
    }
)
# A session's counters the old row adds when all of its old messages were added.
ADDED_COUNTERS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "api_call_count",
    "estimated_cost_usd",
    "actual_cost_usd",
)
# What makes two messages one: the same session, role, time, content and tool calls (of
# these, the columns both files have).
SAME_MESSAGE = ("session_id", "timestamp", "role", "content", "tool_call_id", "tool_calls")
RESTORED = " (restored)"
_IDS = ("store_instance_id", "db_file_generation")


# -------------------------------------------------------------------------- the old file


def check_source(path: Path, db: Path) -> Path:
    """The file ``--merge-from`` names, as an absolute path; a path that cannot be used is
    a :class:`UsageError` (one line, exit 2) and nothing is done."""
    path = Path(os.path.abspath(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(
            f"{path}: no such file (--merge-from names the old state.db, as the "
            "sessions_vanished incident does)"
        ) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be used: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path}: is a directory, not a database file")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path}: is not a regular file")
    same = [f for f in (str(db), *(f"{db}{s}" for s in SIDECAR_SUFFIXES)) if _same(path, f)]
    if same:
        raise UsageError(f"{path}: is {same[0]} itself; --merge-from names an earlier file")
    if st.st_size == 0:
        raise UsageError(f"{path}: is empty (0 bytes): it holds no sessions, nothing to merge")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{path}: cannot be read: permission denied")
    return path


@dataclass
class Source:
    """The old file, recovered into the run's folder, and why it is this database's."""

    path: Path  # as given
    recovered: Path  # the verified file recover made of it
    proof: str
    recover: dict[str, Any]  # recover's report of it
    # The file itself, resolved once: what is recovered is what is proven (a symlink
    # changed meanwhile cannot make one file recovered and another proven).
    real: Path | None = None

    def cleanup(self) -> None:
        shutil.rmtree(self.recovered.parent, ignore_errors=True)


def remove_sources(folder: Path) -> list[Path]:
    """Remove what a run killed meanwhile left in its folder (under the run lock)."""
    where = folder / MERGE_FOLDER
    if not where.is_dir():
        return []
    shutil.rmtree(where, ignore_errors=True)
    return [where]


def prepare_source(
    path: Path,
    db: Path,
    *,
    home: Path,
    state: Path,
    folder: Path,
    progress: ProgressFn | None = None,
) -> Source:
    """Recover the old file into ``folder`` and prove it is ``db``'s earlier file; a file
    that is not is refused (:class:`MergeRefused`), named."""
    path = check_source(path, db)
    real = Path(os.path.realpath(path))
    remove_sources(folder)
    where = folder / MERGE_FOLDER
    where.mkdir(mode=0o700)
    out = where / OLD_NAME
    try:
        from statewarden.recovery import recover  # noqa: PLC0415 - the engine, only when a merge runs

        report = recover.recover(real, out, progress=progress)
        if not report.verified:
            raise DatabaseError(
                f"{path}: could not be recovered into a verified file; nothing was merged"
            )
        source = Source(path, out, "", report.to_json(), real)
        loss = next((x for x in report.render() if x.startswith("result: ")), "")
        (where / OLD_REPORT).write_text(
            json.dumps({"loss_detected": report.loss_detected, "verdict": loss[8:]})
        )
        source.proof = prove_earlier(source, db, home=home, state=state, work_parent=where)
    except BaseException:
        shutil.rmtree(where, ignore_errors=True)
        raise
    return source


def _meta_ids(path: Path, work_parent: Path) -> set[str]:
    """The ``store_instance_id`` and ``db_file_generation`` a copy of the database (a
    snapshot, a quarantined original) records, as SQLite presents it (none when it
    cannot be read). The copy is only read: with no sidecar, in place and
    ``immutable``; with a ``-wal``, ``-shm`` or ``-journal`` beside it, through a private
    copy of it and them, since a read-only connection there would rebuild its ``-shm``
    (a quarantined original must stay as its manifest records it)."""

    def ids(conn: apsw.Connection) -> set[str]:
        rows = conn.execute("SELECT value FROM state_meta WHERE key IN (?, ?)", _IDS).fetchall()
        return {str(r[0]) for r in rows if r[0]}

    try:
        if no_sidecars(path):
            with readonly(path, immutable=True) as conn:
                return ids(conn)
        work = make_work_copy(path, work_parent)
        try:
            with readonly(work.db, immutable=True) as conn:
                return ids(conn)
        finally:
            work.cleanup()
    except (StatewardenError, OSError, apsw.Error):
        return set()


def _earlier_copies(db: Path, home: Path, state: Path) -> list[Path]:
    """This database's copies from before: statewarden's verified snapshots of it, the
    originals its runs quarantined, Hermes' own snapshots in its home."""
    real = os.path.realpath(db)
    out = [
        Path(s.path)
        for s in list_snapshots(state)
        if s.verified and os.path.realpath(s.source) == real
    ]
    out += [
        e.path / db.name for e in list_quarantine(state) if e.db and os.path.realpath(e.db) == real
    ]
    snaps = home / "state-snapshots"
    if snaps.is_dir():
        out += sorted(p / db.name for p in snaps.iterdir() if (p / db.name).is_file())
    return [p for p in out if p.is_file()]


def prove_earlier(source: Source, db: Path, *, home: Path, state: Path, work_parent: Path) -> str:
    """Why ``source`` is ``db``'s earlier file, in words; :class:`MergeRefused` when it is
    not (not a Hermes state.db, a copy of the current file, nothing that proves it)."""
    old = open_readonly(source.recovered, immutable=True)
    try:
        tables = _tables(old)
        if not {"sessions", "messages"} <= tables:
            raise MergeRefused(
                f"{source.path}: refused: not a Hermes state.db (it has no sessions and "
                "messages tables); nothing was merged"
            )
        old_ids = _meta(old)
        old_sessions = {str(i): src for i, src in old.execute("SELECT id, source FROM sessions")}
    finally:
        old.close()
    cur_ids, shared = _current_facts(db, old_sessions, work_parent)
    store = old_ids.get("store_instance_id")
    if store and store == cur_ids.get("store_instance_id"):
        raise MergeRefused(
            f"{source.path}: refused: it is a copy of {db} itself (the same store_instance_id "
            f"{store}): merging it would bring deleted rows back; statewardenctl quarantine "
            "restore puts a quarantined original back"
        )
    real = source.real or Path(os.path.realpath(source.path))
    not_aside = not_moved_aside_from(real, db)
    if not_aside is None:
        return f"a file Hermes moved aside from {db} ({real})"
    mine = set(old_ids.values())
    for copy in _earlier_copies(db, home, state):
        if mine & _meta_ids(copy, work_parent):
            return f"its store_instance_id / db_file_generation is that of {copy}, a copy of {db}"
    agree = [sid for sid, src in shared.items() if old_sessions[sid] == src]
    if agree and len(agree) == len(shared):
        return f"{len(agree)} session(s) both files hold agree (e.g. {agree[0]})"
    found = ", ".join(f"{k} {v}" for k, v in sorted(old_ids.items())) or "no store_instance_id"
    raise MergeRefused(
        f"{source.path}: refused: nothing proves it is an earlier file of {db}: it is not a "
        f"file Hermes moved aside from it ({not_aside}), its ids ({found}) are those of no"
        " snapshot or quarantined original of it, and "
        + ("sessions both hold disagree" if shared else "it holds none of its sessions")
        + "; nothing was merged"
    )


def _same(path: Path, other: str) -> bool:
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False


def _tables(conn: apsw.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}


def _current_facts(
    db: Path, old_sessions: dict[str, Any], work_parent: Path
) -> tuple[dict[str, str], dict[str, Any]]:
    """The current file's ids, and the source of each session it shares with the old
    one, as SQLite presents the file."""

    def facts(cur: apsw.Connection) -> tuple[dict[str, str], dict[str, Any]]:
        shared = {
            str(sid): src
            for sid, src in cur.execute("SELECT id, source FROM sessions").fetchall()
            if str(sid) in old_sessions
        }
        return _meta(cur), shared

    return _read_presented(db, work_parent, facts)


def _read_presented(path: Path, work_parent: Path, read: Callable[[apsw.Connection], T]) -> T:
    """``read`` over ``path`` as SQLite presents it, the file never written. Beside a hot
    ``-journal`` (a writer died in the middle of a transaction in rollback mode: the live
    file, or an original quarantined with its journal) no read-only reader may roll it
    back, and an immutable one would see the half-written pages: the file is then read
    through a private copy of it and its journal, rolled back there (``make_work_copy``)."""
    try:
        return read_live(path, read)
    except apsw.Error as exc:
        if not is_hot_journal_error(exc):
            raise classify_error(path, exc) from None
    work = make_work_copy(path, work_parent)
    try:
        with readonly(work.db, immutable=True) as conn:
            return read(conn)
    finally:
        work.cleanup()


def _meta(conn: apsw.Connection) -> dict[str, str]:
    if "state_meta" not in _tables(conn):
        return {}
    rows = conn.execute("SELECT key, value FROM state_meta WHERE key IN (?, ?)", _IDS)
    return {str(k): str(v) for k, v in rows.fetchall() if v}


# -------------------------------------------------------------------------- the merge


@dataclass
class Merged:
    """What a merge did, measured on the output file."""

    old: str
    sessions_added: int = 0
    sessions_shared: int = 0
    messages_added: int = 0
    messages_already_there: int = 0
    messages_renumbered: int = 0  # the current file's, moved up by ``renumbered_by``
    renumbered_by: int = 0
    titles_renamed: dict[str, str] = field(default_factory=dict)  # session id -> new title
    rows_added: dict[str, int] = field(default_factory=dict)  # other tables
    tables_left_out: list[str] = field(default_factory=list)
    sessions: int = 0  # in the output
    messages: int = 0
    fts_rebuilt: list[str] = field(default_factory=list)
    verified: bool = False
    problems: list[str] = field(default_factory=list)
    # What recover could not read of the old file ("" when it read every row whole):
    # rows it lost or kept partial are merged as recover made them.
    old_file_loss: str = ""

    @property
    def nothing(self) -> bool:
        return not (self.sessions_added or self.messages_added or any(self.rows_added.values()))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        renumbered = (
            f"; the current file's {self.messages_renumbered} messages renumbered up by "
            f"{self.renumbered_by}"
            if self.messages_renumbered
            else ""
        )
        return (
            f"merged from {self.old}: {self.sessions_added} sessions and {self.messages_added}"
            f" messages added ({self.sessions_shared} sessions both held,"
            f" {self.messages_already_there} messages already there){renumbered};"
            f" the file holds {self.sessions} sessions and {self.messages} messages"
            + (
                f"; of the old file, recover said: {self.old_file_loss} (merged as"
                " recovered; the old file is left as it is)"
                if self.old_file_loss
                else ""
            )
        )


def build_merged(
    old: Path, current: Path, output: Path, progress: ProgressFn | None = None
) -> tuple[Merged, str]:
    """Merge the recovered old file ``old`` with a consistent copy of ``current`` (made
    here, folded) into ``output`` (which must not exist); (what it did, the SHA-256 of
    the folded copy of ``current``). Errors are one line."""
    if os.path.lexists(output):
        raise DatabaseError(f"{output}: already exists; refusing to overwrite it")
    work = make_work_copy(current, output.parent, space_factor=3, progress=progress)
    try:
        folded = file_sha256(work.db)
        built = work.work_dir / "merged.db"
        conn = apsw.Connection(str(work.db))
        try:
            conn.execute("VACUUM INTO ?", (str(built),))
        finally:
            conn.close()
        merged = _merge_into(built, old, work.db, work.source_header.journal_mode)
        merged.old_file_loss = _old_file_loss(old)
        if merged.verified and not merged.nothing:
            with open(built, "rb+") as f:
                os.fsync(f.fileno())
            os.link(built, output)
        return merged, folded
    except (OSError, apsw.Error) as exc:
        raise DatabaseError(f"{current}: the merged file could not be built: {exc}") from None
    finally:
        work.cleanup()


def _old_file_loss(old: Path) -> str:
    """Recover's verdict on the old file when it detected loss (``OLD_REPORT`` beside
    the file it made), else ""."""
    try:
        data = json.loads((old.parent / OLD_REPORT).read_text())
    except (OSError, ValueError):
        return ""
    if not isinstance(data, dict) or not data.get("loss_detected"):
        return ""
    return str(data.get("verdict") or "loss detected")


def _merge_into(built: Path, old: Path, current: Path, journal_mode: str) -> Merged:
    conn = apsw.Connection(uri_for(built), flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_URI)
    try:
        conn.execute("ATTACH ? AS old", (uri_for(old, mode="ro", immutable="1"),))
        conn.execute("ATTACH ? AS cur", (uri_for(current, mode="ro", immutable="1"),))
        merged = Merged(old=str(old))
        with conn:
            _MergeTx(conn, merged).run()
        merged.fts_rebuilt = _rebuild_fts(conn)
        _verify(conn, merged)
        mode = "WAL" if journal_mode == "wal" else "DELETE"
        conn.execute("DETACH old")
        conn.execute("DETACH cur")
        conn.execute(f"PRAGMA journal_mode={mode}")
    finally:
        conn.close()
    return merged


class _MergeTx:
    """The merge's one transaction on the output (the current file's copy)."""

    def __init__(self, conn: apsw.Connection, merged: Merged) -> None:
        self.conn = conn
        self.merged = merged
        self.same = same_message(conn)

    def q(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(sql, args))

    def run(self) -> None:
        triggers = self.q(
            "SELECT name, sql FROM main.sqlite_schema WHERE type = 'trigger' AND tbl_name IN"
            " ('messages', 'sessions') ORDER BY rowid"
        )
        for name, _sql in triggers:
            self.conn.execute(f"DROP TRIGGER main.{quote_ident(name)}")
        self._plan_messages()
        self._renumber()
        self._sessions()
        self._messages()
        self._other_tables()
        for _name, sql in triggers:
            self.conn.execute(sql)
        self._sequence()

    def columns(self, schema: str, table: str) -> list[str]:
        return [r[1] for r in self.q(f"PRAGMA {schema}.table_info({quote_ident(table)})")]

    def common(self, table: str) -> str:
        cur = self.columns("main", table)
        old = set(self.columns("old", table))
        return ", ".join(quote_ident(c) for c in cur if c in old)

    def _plan_messages(self) -> None:
        """Which old messages are added (the current file lacks them)."""
        self.conn.execute(
            "CREATE TEMP TABLE added AS SELECT o.id AS id FROM old.messages AS o WHERE NOT"
            f" EXISTS (SELECT 1 FROM main.messages AS m WHERE {self.same})"
        )
        total = self.q("SELECT count(*) FROM old.messages")[0][0]
        self.merged.messages_added = self.q("SELECT count(*) FROM temp.added")[0][0]
        self.merged.messages_already_there = total - self.merged.messages_added

    def _renumber(self) -> None:
        """When an added old message's id is taken in the current file, every message of
        the current file moves up by the old file's highest id, in order."""
        taken = self.q("SELECT 1 FROM temp.added AS a JOIN main.messages AS m USING (id) LIMIT 1")
        if not taken:
            return
        top = self.q("SELECT max(id) FROM old.messages")[0][0] or 0
        if "sqlite_sequence" in {r[0] for r in self.q("SELECT name FROM old.sqlite_schema")}:
            seq = self.q("SELECT max(seq) FROM old.sqlite_sequence WHERE name = 'messages'")
            top = max(top, int(seq[0][0] or 0))
        self.merged.renumbered_by = top
        self.merged.messages_renumbered = self.q("SELECT count(*) FROM main.messages")[0][0]
        self.conn.execute("UPDATE main.messages SET id = -id")
        self.conn.execute("UPDATE main.messages SET id = ? - id", (top,))
        if "display_order" in self.columns("main", "messages"):
            # Hermes' display order is the id of a message of the session: it moves too.
            self.conn.execute("UPDATE main.messages SET display_order = display_order + ?", (top,))

    def _sessions(self) -> None:
        cols = self.common("sessions")
        self.conn.execute(
            f"CREATE TEMP TABLE new_sessions AS SELECT {cols} FROM old.sessions WHERE id NOT IN"
            " (SELECT id FROM main.sessions)"
        )
        titled = "title" in self.columns("temp", "new_sessions")  # not in the oldest files
        for sid, title in (
            self.q("SELECT id, title FROM temp.new_sessions WHERE title IS NOT NULL")
            if titled
            else []
        ):
            free = self._free_title(sid, title)
            if free != title:
                self.conn.execute(
                    "UPDATE temp.new_sessions SET title = ? WHERE id = ?", (free, sid)
                )
                self.merged.titles_renamed[str(sid)] = free
        self.conn.execute(
            f"INSERT INTO main.sessions ({cols}) SELECT {cols} FROM temp.new_sessions"
        )
        self.merged.sessions_added = self.q("SELECT count(*) FROM temp.new_sessions")[0][0]
        shared = self.q(
            "SELECT o.id FROM old.sessions AS o JOIN main.sessions AS m USING (id)"
            " WHERE o.id NOT IN (SELECT id FROM temp.new_sessions)"
        )
        self.merged.sessions_shared = len(shared)
        for (sid,) in shared:
            self._shared_session(sid)

    def _free_title(self, sid: str, title: str) -> str:
        """``title``, or ``title (restored)`` (then a number) when another session of
        the output already has it (titles are unique)."""
        candidate, n = title, 1
        while self.q(
            "SELECT 1 FROM main.sessions WHERE title = ?1 UNION ALL SELECT 1 FROM"
            " temp.new_sessions WHERE title = ?1 AND id <> ?2",
            (candidate, sid),
        ):
            n += 1
            candidate = f"{title}{RESTORED}" if n == 2 else f"{title} (restored {n - 1})"
        return candidate

    def _shared_session(self, sid: str) -> None:
        """The current row of a session both files hold, with what the old one adds."""
        have = self.columns("old", "messages")
        is_active = "o.active" if "active" in have else "1"
        tool_calls = "o.tool_calls" if "tool_calls" in have else "NULL"
        rows = self.q(
            f"SELECT {tool_calls}, {is_active} FROM old.messages AS o JOIN temp.added"
            " USING (id) WHERE o.session_id = ?",
            (sid,),
        )
        active = [r for r in rows if r[1] == 1]
        calls = sum(tool_calls_len(r[0]) for r in active)
        self.conn.execute(
            "UPDATE main.sessions SET started_at = min(started_at, (SELECT started_at FROM"
            " old.sessions WHERE id = ?)), message_count = coalesce(message_count, 0) + ?,"
            " tool_call_count = coalesce(tool_call_count, 0) + ? WHERE id = ?",
            (sid, len(active), calls, sid),
        )
        old_total = self.q("SELECT count(*) FROM old.messages WHERE session_id = ?", (sid,))[0][0]
        cols = set(self.columns("main", "sessions")) & set(self.columns("old", "sessions"))
        if rows and len(rows) == old_total:
            for c in (c for c in ADDED_COUNTERS if c in cols):
                q = quote_ident(c)
                self.conn.execute(
                    f"UPDATE main.sessions SET {q} = coalesce({q}, 0) + coalesce((SELECT {q}"
                    " FROM old.sessions WHERE id = ?), 0) WHERE id = ?",
                    (sid, sid),
                )

    def _messages(self) -> None:
        cols = self.common("messages")
        self.conn.execute(
            f"INSERT INTO main.messages ({cols}) SELECT {cols} FROM old.messages WHERE id IN"
            " (SELECT id FROM temp.added) ORDER BY id"
        )
        if "message_uid" in self.columns("main", "messages"):
            self.conn.execute(
                "UPDATE main.messages SET message_uid = lower(hex(randomblob(16)))"
                " WHERE message_uid IS NULL"
            )

    def _other_tables(self) -> None:
        shadow = _fts_tables(self.conn, "main")
        mine = _plain_tables(self.conn, "main")
        for table in sorted(_plain_tables(self.conn, "old")):
            if table in ("sessions", "messages") or table in CURRENT_ONLY:
                continue
            if any(table.startswith(f"{v}_") for v in shadow):
                continue
            if table not in mine:
                self.merged.tables_left_out.append(table)
                continue
            if not _has_key(self.conn, table):
                self.merged.tables_left_out.append(table)
                continue
            cols = self.common(table)
            self.conn.execute(
                f"INSERT OR IGNORE INTO main.{quote_ident(table)} ({cols})"
                f" SELECT {cols} FROM old.{quote_ident(table)}"
            )
            self.merged.rows_added[table] = self.conn.changes()

    def _sequence(self) -> None:
        top = self.q("SELECT max(id) FROM main.messages")[0][0]
        if top is None or not self.q(
            "SELECT 1 FROM main.sqlite_schema WHERE name = 'sqlite_sequence'"
        ):
            return
        self.conn.execute(
            "UPDATE main.sqlite_sequence SET seq = max(seq, ?) WHERE name = 'messages'", (top,)
        )
        if not self.q("SELECT 1 FROM main.sqlite_sequence WHERE name = 'messages'"):
            self.conn.execute(
                "INSERT INTO main.sqlite_sequence (name, seq) VALUES ('messages', ?)", (top,)
            )


def same_message(conn: apsw.Connection, other: str = "old") -> str:
    """SQL that holds when message ``o`` (of ``other``) and ``m`` (of the output) are the
    same message: equal in each of SAME_MESSAGE that both files have."""
    mine = {r[1] for r in conn.execute("PRAGMA main.table_info(messages)")}
    theirs = {r[1] for r in conn.execute(f"PRAGMA {other}.table_info(messages)")}
    both = [c for c in SAME_MESSAGE if c in mine and c in theirs]
    return " AND ".join(f"m.{quote_ident(c)} IS o.{quote_ident(c)}" for c in both)


def tool_calls_len(value: Any) -> int:
    """Tool calls in one message's ``tool_calls``, as Hermes counts them (a list: its
    length; anything else that is set, text that is not JSON or is nested deeper than
    the parser goes among it: one)."""
    if value is None or value == "":
        return 0
    try:
        parsed = parse_json(value) if isinstance(value, str) else value
    except ValueError:
        return 1
    return len(parsed) if isinstance(parsed, list) else 1


def _fts_tables(conn: apsw.Connection, schema: str) -> list[str]:
    rows = conn.execute(
        f"SELECT name, sql FROM {schema}.sqlite_schema WHERE type = 'table'"
        " AND sql LIKE 'CREATE VIRTUAL TABLE%'"
    )
    return [name for name, sql in rows if "fts5" in (sql or "").lower()]


def _plain_tables(conn: apsw.Connection, schema: str) -> set[str]:
    rows = conn.execute(
        f"SELECT name, sql FROM {schema}.sqlite_schema WHERE type = 'table'"
        " AND name NOT LIKE 'sqlite_%'"
    )
    return {name for name, sql in rows if not (sql or "").startswith("CREATE VIRTUAL TABLE")}


def _has_key(conn: apsw.Connection, table: str) -> bool:
    """A declared primary key or a unique index: something to merge rows by."""
    if any(r[5] for r in conn.execute(f"PRAGMA main.table_info({quote_ident(table)})")):
        return True
    return any(r[2] for r in conn.execute(f"PRAGMA main.index_list({quote_ident(table)})"))


def _rebuild_fts(conn: apsw.Connection) -> list[str]:
    """Every FTS5 table of the output rebuilt from its content."""
    done = []
    for name in _fts_tables(conn, "main"):
        q = quote_ident(name)
        conn.execute(f"INSERT INTO main.{q}({q}) VALUES ('rebuild')")
        done.append(name)
    return done


def _verify(conn: apsw.Connection, merged: Merged) -> None:
    """The output holds each file's sessions once and their messages as they were."""
    problems = merged.problems
    rows = conn.execute("PRAGMA main.integrity_check").fetchall()
    if rows != [("ok",)]:
        problems.append(f"integrity_check: {rows[0][0]}")
    for name in merged.fts_rebuilt:
        q = quote_ident(name)
        try:
            conn.execute(f"INSERT INTO main.{q}({q}, rank) VALUES ('integrity-check', 1)")
        except apsw.Error as exc:
            problems.append(f"{name}: {exc}")

    def one(sql: str, args: tuple[Any, ...] = ()) -> int:
        row = conn.execute(sql, args).fetchone()
        return int(row[0]) if row is not None else 0

    ids = "SELECT id FROM old.sessions UNION SELECT id FROM cur.sessions"
    merged.sessions = one("SELECT count(*) FROM main.sessions NOT INDEXED")
    if merged.sessions != one(f"SELECT count(*) FROM ({ids})"):
        problems.append("the sessions are not those of the two files, each once")
    if one(f"SELECT count(*) FROM ({ids}) WHERE id NOT IN (SELECT id FROM main.sessions)"):
        problems.append("a session of one of the files is missing")
    merged.messages = one("SELECT count(*) FROM main.messages NOT INDEXED")
    current = one("SELECT count(*) FROM cur.messages")
    if merged.messages != current + merged.messages_added:
        problems.append(
            f"{merged.messages} messages, not the current file's {current} and the"
            f" {merged.messages_added} added"
        )
    kept = one(
        "SELECT count(*) FROM cur.messages AS o JOIN main.messages AS m ON m.id = o.id + ?"
        f" WHERE {same_message(conn, 'cur')}",
        (merged.renumbered_by if merged.messages_renumbered else 0,),
    )
    if kept != current:
        problems.append(f"{current - kept} messages of the current file changed")
    added = one(
        "SELECT count(*) FROM old.messages AS o JOIN main.messages AS m USING (id)"
        f" WHERE o.id IN (SELECT id FROM temp.added) AND {same_message(conn)}"
    )
    if added != merged.messages_added:
        problems.append(f"{merged.messages_added - added} added messages are not as they were")
    merged.verified = not problems
