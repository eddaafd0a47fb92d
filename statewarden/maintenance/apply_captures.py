"""``maintenance --apply-captures``: the writes the live file lost, brought back from
Hermes' retired WAL captures and pre-update backups, and the captures then moved to
quarantine so their space can be reclaimed.

**What is read** is what ``statewardenctl captures`` reads (``recovery.read_captures``,
one code path): each capture or backup beside state.db on a private copy, as ``recover
--extra-source`` reads one, used only once it proves it is of this database
(docs/safety.md rule 15). A capture of another database is refused and named, a
``.partial`` one (Hermes was still writing it) or one that fails its check is named as
not used; neither is changed or moved.

**What is brought in** (:func:`build_applied`), into a ``VACUUM INTO`` copy of a
consistent private copy of the current file (its schema, header fields and journal
mode are Hermes' own), in one transaction with Hermes' own triggers on (the FTS tables
index the rows as Hermes would): per table with an AUTOINCREMENT ``sqlite_sequence``
in the current file, the rows a capture holds whose rowid the current file lacks and
lies above that sequence. AUTOINCREMENT never gave those rowids out in the current
file: it never held them, so they are writes it lost, never rows deleted since. A
lacking row at or below the sequence was given out and may have been deleted since:
it never comes back (rule 8). A message at a rowid the live file holds as another
message (another session, role or time) is a lost write whose id Hermes gave out
again: it is named, not brought in (it would need a new id). Tables with no sequence
(``sessions``, keyed by text) get nothing: nothing tells a lost row there from a
deleted one. A row whose parent (a declared foreign key, a message's session) the
current file lacks is not brought in either, and is named: the parent may have been
deleted since. A row that does not fit the current table (a constraint fails) is named
and left out. The current file's rows win; rowids two captures share come from the
newest capture.

Then the file is verified: ``integrity_check``, ``foreign_key_check``, each FTS
table's ``integrity-check`` against its content, every row of the current file in the
touched tables present with its own values, and every row brought in present with
the values its capture has. Every row brought in is listed with its capture in the
run report. Nothing to bring in ends the run before anything is stopped.

**After the swap** (the step ``captures``, after the restart), each capture proven of
this database is moved into the run's quarantine folder (``captures/<name>``; a backup
with its ``-wal`` / ``-shm`` copies): a rename on the same filesystem, else a copy
under a temporary name, renamed when whole, then the original removed. The names are
in the swap's ledger line, so ``--resume`` moves what a killed run did not; nothing
is moved twice and nothing is applied twice (a run killed before its swap is rolled
back whole; the swap is rolled forward; a capture's rows are in the file then, so a
later run finds nothing to bring in).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.errors import DatabaseError
from statewarden.maintenance.merge import tool_calls_len
from statewarden.maintenance.prebuild import file_sha256
from statewarden.progress import ProgressFn
from statewarden.recovery import read_captures
from statewarden.sidecars import SIDECAR_SUFFIXES
from statewarden.sqlite import quote_ident, uri_for

QUARANTINE_FOLDER = "captures"
# What a row of a table never changes once written: a capture's row at a rowid the
# live file holds with other values here is another row (``_given_out_again``).
IDENTITY = {"messages": ("session_id", "role", "timestamp")}
_TMP = ".tmp"
# A pre-update backup's own sidecar copies move with it.
_BACKUP_SIDECARS = SIDECAR_SUFFIXES


@dataclass
class Applied:
    """What the captures bring in, measured on the built file."""

    captures: list[dict[str, Any]] = field(default_factory=list)  # each as captures lists it
    rows: list[dict[str, Any]] = field(default_factory=list)  # {capture, table, rowid}
    left_out: list[dict[str, Any]] = field(default_factory=list)  # {... , why}
    verified: bool = False
    problems: list[str] = field(default_factory=list)
    # The SHA-256 of the consistent copy of the current file it was built from (the
    # run's verify-source compares it; not in the report).
    folded_sha256: str = ""

    @property
    def proven(self) -> list[str]:
        """The captures proven of this database: moved to quarantine after the swap."""
        return [c["name"] for c in self.captures if c.get("used")]

    @property
    def nothing(self) -> bool:
        return not self.rows

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("folded_sha256")
        return {**data, "proven": self.proven, "summary": self.summary()}

    def summary(self) -> str:
        per: dict[str, int] = {}
        for r in self.rows:
            per[r["table"]] = per.get(r["table"], 0) + 1
        tables = ", ".join(f"{n} {t}" for t, n in sorted(per.items())) or "no rows"
        if not self.captures:
            return "no retired WAL capture or pre-update backup beside the database"
        return (
            f"{len(self.proven)} of {len(self.captures)} capture(s) proven of this database;"
            f" rows the live file lost: {tables}; {len(self.left_out)} row(s) left out"
        )


def build_applied(
    db: Path,
    output: Path | None,
    work_parent: Path,
    *,
    live: Path | None = None,
    progress: ProgressFn | None = None,
) -> Applied:
    """Bring what ``db``'s captures hold above its sequences into a copy of the current
    file (``live``: a copy of it to read instead), written to ``output`` (which must not
    exist) when verified and not empty; None: only measured (a dry run). Errors are one
    line."""
    if output is not None and os.path.lexists(output):
        raise DatabaseError(f"{output}: already exists; refusing to overwrite it")
    applied = Applied()

    def then(current: Path, journal_mode: str, proven: dict[str, Path]) -> None:
        applied.folded_sha256 = file_sha256(current)
        built = current.parent / "applied.db"
        conn = apsw.Connection(str(current))
        try:
            conn.execute("VACUUM INTO ?", (str(built),))
        finally:
            conn.close()
        _apply(built, current, proven, journal_mode, applied)
        if output is not None and applied.verified and not applied.nothing:
            with open(built, "rb+") as f:
                os.fsync(f.fileno())
            os.link(built, output)

    try:
        readings = read_captures(db, work_parent, progress=progress, live=live, then=then)
    except (OSError, apsw.Error) as exc:
        raise DatabaseError(
            f"{db}: the file with the captures' rows could not be built: {exc}"
        ) from None
    applied.captures = [r.to_json() for r in readings]
    return applied


def _apply(
    built: Path, current: Path, proven: dict[str, Path], journal_mode: str, applied: Applied
) -> None:
    conn = apsw.Connection(uri_for(built), flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_URI)
    try:
        conn.execute("ATTACH ? AS cur", (uri_for(current, mode="ro", immutable="1"),))
        sequences = _sequences(conn)
        touched: set[str] = set()
        for name, copy in proven.items():  # newest first: a rowid two share is the newest's
            conn.execute("ATTACH ? AS cap", (uri_for(copy, mode="ro", immutable="1"),))
            try:
                with conn:  # the built file is ours: kept only once verified whole
                    touched |= _bring_in(conn, name, sequences, applied)
            finally:
                conn.execute("DETACH cap")
        _verify(conn, proven, touched, applied)
        conn.execute("DETACH cur")
        conn.execute(f"PRAGMA journal_mode={'WAL' if journal_mode == 'wal' else 'DELETE'}")
    finally:
        conn.close()


def _sequences(conn: apsw.Connection) -> dict[str, int]:
    """The current file's AUTOINCREMENT sequences, per table (before anything is added)."""
    with contextlib.suppress(apsw.SQLError):
        return {
            str(n): int(s)
            for n, s in conn.execute("SELECT name, seq FROM main.sqlite_sequence")
            if s is not None
        }
    return {}


def _columns(conn: apsw.Connection, schema: str, table: str) -> list[tuple[str, bool]]:
    """(name, is the rowid alias) of each column of ``schema.table``."""
    info = list(conn.execute(f"PRAGMA {schema}.table_info({quote_ident(table)})"))
    pks = [r for r in info if r[5]]
    alias = str(pks[0][1]) if len(pks) == 1 and str(pks[0][2]).upper() == "INTEGER" else None
    return [(str(r[1]), str(r[1]) == alias) for r in info]


def _bring_in(
    conn: apsw.Connection, capture: str, sequences: dict[str, int], applied: Applied
) -> set[str]:
    """The rows of the attached capture ``cap`` above the sequences, into ``main``."""
    touched: set[str] = set()
    theirs = {
        str(r[0]) for r in conn.execute("SELECT name FROM cap.sqlite_schema WHERE type = 'table'")
    }
    for table, seq in sorted(sequences.items()):
        if table not in theirs:
            continue
        mine = _columns(conn, "main", table)
        have = {c for c, _ in _columns(conn, "cap", table)}
        cols = [c for c, _ in mine if c in have]
        alias = any(a for _, a in mine)
        names = ", ".join(quote_ident(c) for c in cols)
        target = names if alias else f"rowid, {names}"
        source = names if alias else f"rowid, {names}"
        t = quote_ident(table)
        lacking = [
            int(r[0])
            for r in conn.execute(
                f"SELECT rowid FROM cap.{t} NOT INDEXED WHERE rowid > ? AND rowid NOT IN"
                f" (SELECT rowid FROM main.{t}) ORDER BY rowid",
                (seq,),
            )
        ]
        applied.left_out += _given_out_again(conn, capture, table, cols)
        added = []
        for rowid in lacking:
            why = _missing_parent(conn, table, rowid)
            if why is None:
                conn.execute(
                    f"INSERT OR IGNORE INTO main.{t} ({target}) SELECT {source} FROM cap.{t}"
                    " WHERE rowid = ?",
                    (rowid,),
                )
                if conn.changes():
                    added.append(rowid)
                    continue
                why = "it does not fit the live file's table (a constraint fails)"
            applied.left_out.append(
                {"capture": capture, "table": table, "rowid": rowid, "why": why}
            )
        if added:
            touched.add(table)
            applied.rows += [{"capture": capture, "table": table, "rowid": r} for r in added]
            if table == "messages":
                _counted_into_sessions(conn, added)
    return touched


def _given_out_again(
    conn: apsw.Connection, capture: str, table: str, cols: list[str]
) -> list[dict[str, Any]]:
    """The capture's rows of ``table`` at a rowid the live file holds as another row (by
    what a row never changes: ``IDENTITY``): AUTOINCREMENT gives a rowid out once in a
    file, so Hermes gave it out again after it lost this write. Not brought in (it
    would need a new rowid); each named, since the capture is moved to quarantine."""
    same = [c for c in IDENTITY.get(table, ()) if c in cols]
    if not same:
        return []
    t = quote_ident(table)
    differs = " OR ".join(f"m.{quote_ident(c)} IS NOT c.{quote_ident(c)}" for c in same)
    why = (
        "the live file gave its rowid to another row since (Hermes reused it after losing"
        " this write); not brought in"
    )
    return [
        {"capture": capture, "table": table, "rowid": int(r[0]), "why": why}
        for r in conn.execute(
            f"SELECT c.rowid FROM cap.{t} AS c JOIN main.{t} AS m ON m.rowid = c.rowid"
            f" WHERE {differs} ORDER BY c.rowid"
        )
    ]


def _counted_into_sessions(conn: apsw.Connection, rowids: list[int]) -> None:
    """Hermes counts each message it stores into its session in the same transaction
    (``message_count``; ``tool_call_count`` by its tool calls): that write was lost with
    the message, and is made again for the messages brought in."""
    scols = {c for c, _ in _columns(conn, "main", "sessions")}
    mcols = {c for c, _ in _columns(conn, "main", "messages")}
    if "message_count" not in scols or "session_id" not in mcols:
        return
    active = "coalesce(active, 1) = 1" if "active" in mcols else "1"
    calls = "tool_calls" if "tool_calls" in mcols else "NULL"
    per: dict[Any, tuple[int, int]] = {}
    ids = ", ".join(str(int(r)) for r in rowids)
    for sid, is_active, tool_calls in conn.execute(
        f"SELECT session_id, {active}, {calls} FROM main.messages WHERE rowid IN ({ids})"
    ).fetchall():
        if not is_active:
            continue
        n, c = per.get(sid, (0, 0))
        per[sid] = (n + 1, c + tool_calls_len(tool_calls))
    tools = "tool_call_count" in scols
    for sid, (n, c) in per.items():
        conn.execute(
            "UPDATE main.sessions SET message_count = coalesce(message_count, 0) + ?"
            + (", tool_call_count = coalesce(tool_call_count, 0) + ?" if tools else "")
            + " WHERE id = ?",
            (n, c, sid) if tools else (n, sid),
        )


def _missing_parent(conn: apsw.Connection, table: str, rowid: int) -> str | None:
    """Why the capture's row ``rowid`` of ``table`` cannot come in: a parent its
    declared foreign keys name that the output lacks (deleted since, or lost with it:
    nothing tells which). None when every parent is there."""
    t = quote_ident(table)
    keys: dict[int, list[tuple[str, str, str | None]]] = {}
    for r in conn.execute(f"PRAGMA main.foreign_key_list({t})"):
        keys.setdefault(int(r[0]), []).append((str(r[2]), str(r[3]), r[4]))
    for parts in keys.values():
        parent = parts[0][0]
        values = conn.execute(
            f"SELECT {', '.join(quote_ident(p[1]) for p in parts)} FROM cap.{t} WHERE rowid = ?",
            (rowid,),
        ).fetchone()
        if values is None or any(v is None for v in values):
            continue
        where = " AND ".join(f"{quote_ident(p[2]) if p[2] else 'rowid'} IS ?" for p in parts)
        if (
            conn.execute(
                f"SELECT 1 FROM main.{quote_ident(parent)} WHERE {where} LIMIT 1", tuple(values)
            ).fetchone()
            is None
        ):
            shown = ", ".join(str(v) for v in values)
            return (
                f"its {parent} row {shown} is not in the live file (deleted since, or lost"
                " with it: nothing tells which)"
            )
    return None


def _verify(
    conn: apsw.Connection, proven: dict[str, Path], touched: set[str], applied: Applied
) -> None:
    """The built file is sound, holds the current file's rows as they were and every
    row brought in as its capture has it."""
    problems = applied.problems
    rows = conn.execute("PRAGMA main.integrity_check").fetchall()
    if rows != [("ok",)]:
        problems.append(f"integrity_check: {rows[0][0]}")
    if conn.execute("PRAGMA main.foreign_key_check").fetchall():
        problems.append("foreign_key_check: a row refers to a parent that is not there")
    for (name,) in conn.execute(
        "SELECT name FROM main.sqlite_schema WHERE type = 'table' AND sql LIKE"
        " 'CREATE VIRTUAL TABLE%fts5%'"
    ).fetchall():
        q = quote_ident(str(name))
        try:
            conn.execute(f"INSERT INTO main.{q}({q}, rank) VALUES ('integrity-check', 1)")
        except apsw.Error as exc:
            problems.append(f"{name}: {exc}")
    for table in sorted(touched):
        _same_rows(conn, "cur", table, None, problems)
    for capture, copy in proven.items():
        mine = [r for r in applied.rows if r["capture"] == capture]
        if not mine:
            continue
        conn.execute("ATTACH ? AS cap", (uri_for(copy, mode="ro", immutable="1"),))
        try:
            for table in sorted({r["table"] for r in mine}):
                ids = [r["rowid"] for r in mine if r["table"] == table]
                _same_rows(conn, "cap", table, ids, problems)
        finally:
            conn.execute("DETACH cap")
    applied.verified = not problems


def _one(conn: apsw.Connection, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    return int(row[0]) if row is not None and isinstance(row[0], int) else 0


def _same_rows(
    conn: apsw.Connection, other: str, table: str, ids: list[int] | None, problems: list[str]
) -> None:
    """Each row of ``other.table`` (those of ``ids``; None: all) is in ``main`` at its
    rowid with the same values in every column both have."""
    t = quote_ident(table)
    have = {c for c, _ in _columns(conn, other, table)}
    same = " AND ".join(
        f"m.{quote_ident(c)} IS o.{quote_ident(c)}"
        for c, _ in _columns(conn, "main", table)
        if c in have
    )
    which = "" if ids is None else f" WHERE o.rowid IN ({', '.join(str(int(i)) for i in ids)})"
    want = _one(conn, f"SELECT count(*) FROM {other}.{t} AS o{which}")
    got = _one(
        conn,
        f"SELECT count(*) FROM {other}.{t} AS o JOIN main.{t} AS m ON m.rowid = o.rowid"
        f"{which}{' AND ' if which else ' WHERE '}{same}",
    )
    if got != want:
        whose = "the live file's" if ids is None else "brought in"
        problems.append(f"{table}: {want - got} row(s) {whose} are not as they were")


# -------------------------------------------------------------------- into quarantine


def quarantine_captures(db: Path, names: list[str], qdir: Path) -> list[str]:
    """Move each capture ``names`` lists from beside ``db`` into ``qdir/captures/`` (once:
    one already there is not moved again); the names moved now."""
    where = qdir / QUARANTINE_FOLDER
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    moved = []
    for name in names:
        if "/" in name or name in ("", ".", ".."):
            continue
        for part in (name, *(name + s for s in _BACKUP_SIDECARS)):
            if _move_one(db.parent, part, where):
                moved.append(part)
    return moved


def _move_one(folder: Path, name: str, where: Path) -> bool:
    """``folder/name`` (a capture folder or a file, never through a symlink) renamed into
    ``where``, or copied whole under a temporary name and renamed there, then removed."""
    src = folder / name
    if not os.path.lexists(src) or os.path.islink(src):
        return False
    dest = where / name
    try:
        os.rename(src, dest)
        return True
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    if not os.path.lexists(dest):
        _copy_whole(src, where, name)
    # Whole in quarantine (a run killed after the copy left it there): the original goes.
    if src.is_dir():
        shutil.rmtree(src)
    else:
        src.unlink()
    return True


def _copy_whole(src: Path, where: Path, name: str) -> None:
    dest = where / name
    tmp = where / (name + _TMP)
    if tmp.is_dir() and not tmp.is_symlink():
        shutil.rmtree(tmp)
    else:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    if src.is_dir():
        shutil.copytree(src, tmp, symlinks=True)
    else:
        shutil.copy2(src, tmp, follow_symlinks=False)
    os.rename(tmp, dest)
