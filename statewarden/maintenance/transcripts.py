"""Transcripts Hermes diverted while state.db was unusable, imported into the repaired file.

When a write fails because state.db was replaced or is corrupt, Hermes since 0.20 appends
the messages it could not store to ``<home>/sessions/<session id>.jsonl`` (one message
object per line, no header, the session id only in the file name) and, from the gateway,
also to ``<home>/pending_messages/pending-<hex>.json`` (one object per file, reason
``transcript_cap_drop``, the message under ``data.message``). Hermes itself cannot read
them back (its importer is a draft, docs/hermes.md). After a repair has swapped a new
file in and Hermes runs again, maintenance imports them as one more writer:

- in Hermes' own row shape: content as Hermes encodes it (a list or object as
  ``"\\x00json:" + JSON``), ``tool_calls`` and the reasoning columns as JSON text, the
  session's ``message_count`` / ``tool_call_count`` raised as Hermes' ``append_message``
  does, only into columns the file's own ``messages`` table has, so the schema's own
  triggers (full-text copies, display order) keep the file consistent;
- each message has an id that depends only on what it is: its session, the row Hermes
  would store (role, content, tools, time) and which occurrence of that row in its
  source it is (a message said twice is imported twice). The id goes into
  ``display_metadata`` (``diverted_message_id``), so an import stopped half-way, run
  twice, run after ``~/.hermes`` moved, or given the spool's copy of a JSONL line adds
  nothing twice. A row the file holds without such an id (Hermes' own, or one an older
  statewarden imported) is matched by its content, each row used once;
- a session the file does not have is created (``source`` ``cli``, ``started_at`` its
  first message), as Hermes' draft importer does;
- read line by line and written in small transactions (:data:`BATCH_LINES` lines), so
  memory stays flat and Hermes waits for the import at most one batch; it stops after
  ``maintenance.import_time_limit`` (what is in stays in; the next run goes on). The
  JSONL files and the spool are never changed or deleted.

What is read is opened as the database's owner would see it: the ``sessions`` and
``pending_messages`` folders and every file in them without following a symlink
(relative to the folder's descriptor, ``O_NOFOLLOW``), regular files only, each owned by
the database's owner; anything else is named in the report and left alone.

A bad line never cancels the others. Skipped and counted per reason: lines that are not
JSON objects (or not UTF-8), lines without a role, ``session_meta`` header lines (a model
and tool list, no message), lines with neither content nor a tool call, text SQLite
cannot store (a lone surrogate such as ``"\\ud83d"``), integers outside SQLite's 64
bits, a line the file itself refuses (a constraint or trigger). A line without a usable
timestamp (none, or one no calendar holds, such as year 1) gets the previous line's
plus a microsecond (else the session's newest row's, else the file's mtime), so the
order of a transcript is kept; an unusable one is counted too.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import stat
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.config import DEFAULT_IMPORT_MAX_FILE_BYTES, DEFAULT_IMPORT_TIME_LIMIT_S
from statewarden.sqlite import quote_ident

__all__ = ["ImportLimits", "ImportResult", "import_diverted", "pending_sources"]

CONTENT_JSON_PREFIX = "\x00json:"
RECOVERY_KEY = "diverted_message_id"
SPOOL_REASON = "transcript_cap_drop"
SESSIONS = "sessions"
SPOOL = "pending_messages"
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_SPOOL_ENTRY_BYTES = 16 * 1024 * 1024
# Lists and objects nested deeper than this in one line make it no message: far beyond
# anything Hermes writes, and far below the depth Python's JSON encoder gives up at.
MAX_NESTING = 200
BATCH_LINES = 500
BUSY_TIMEOUT_MS = 10_000
LAST_TIMESTAMP = 253402300799.0  # 9999-12-31T23:59:59Z
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
ODD_TIME = "timestamp unusable (placed after the line before)"
_TEXT_COLUMNS = (
    "tool_name",
    "tool_call_id",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "api_content",
    "display_kind",
)
_JSON_COLUMNS = ("reasoning_details", "codex_reasoning_items", "codex_message_items")
_FLAG_COLUMNS = ("observed", "_compressed_summary")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# What a line the file refuses raises (the statement alone is undone by SQLite).
_LINE_REFUSED = (
    apsw.ConstraintError,
    apsw.MismatchError,
    apsw.TooBigError,
    apsw.RangeError,
    OverflowError,
    UnicodeEncodeError,
    TypeError,
    ValueError,
)


@dataclass(frozen=True)
class ImportLimits:
    """What one import may spend (``maintenance.import_*``)."""

    time_limit_s: float = DEFAULT_IMPORT_TIME_LIMIT_S
    max_file_bytes: int = DEFAULT_IMPORT_MAX_FILE_BYTES


@dataclass
class FileResult:
    """What one source (a JSONL file, or the spool for one session) gave."""

    path: str
    session_id: str
    lines: int = 0
    imported: int = 0
    already_present: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    new_session: bool = False
    odd_timestamps: int = 0

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "session_id": self.session_id,
            "lines": self.lines,
            "imported": self.imported,
            "already_present": self.already_present,
            "skipped": dict(self.skipped),
            "new_session": self.new_session,
            "odd_timestamps": self.odd_timestamps,
        }


@dataclass
class ImportResult:
    """The import's outcome, for the run report. ``imported`` counts committed rows."""

    files: list[FileResult] = field(default_factory=list)
    error: str | None = None  # why the import stopped before the end (what was in stays)
    stopped: str | None = None  # the time limit ended it (what was in stays)
    not_imported: list[str] = field(default_factory=list)  # sources left alone, and why

    @property
    def imported(self) -> int:
        return sum(f.imported for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "imported": self.imported,
            "error": self.error,
            "stopped": self.stopped,
            "files": [f.to_json() for f in self.files],
            "not_imported": list(self.not_imported),
        }

    def summary(self) -> str:
        sessions = sum(1 for f in self.files if f.imported)
        new = sum(1 for f in self.files if f.new_session and f.imported)
        present = sum(f.already_present for f in self.files)
        skipped = sum(sum(f.skipped.values()) for f in self.files)
        text = (
            f"imported {self.imported} diverted message(s) into {sessions} session(s)"
            f" ({new} new); {present} already in the file; {skipped} line(s) skipped"
        )
        if self.error:
            text += f"; the import stopped: {self.error}"
        if self.stopped:
            text += f"; {self.stopped}"
        return text


@dataclass
class _Record:
    values: dict[str, Any]  # column -> value, Hermes' encoding
    identity: tuple[Any, ...]  # what "already present" compares: (shape key, time)
    message_id: str
    timestamp: float | None
    tool_calls: int


@dataclass
class _Source:
    result: FileResult
    mtime: float
    records: Iterator[_Record]


# -- the folders ----------------------------------------------------------------------


def _open_folder(home: Path, name: str) -> int:
    """``home/name`` as a folder descriptor, the last part never followed as a symlink."""
    hfd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=hfd)
    finally:
        os.close(hfd)


def _listing(home: Path, name: str) -> tuple[int, list[str]] | None:
    """The folder's descriptor and its sorted names; None when it is not there."""
    try:
        fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(fd)
    fd = _open_folder(home, name)
    return fd, sorted(os.listdir(fd))


def _wanted(folder: str, name: str) -> bool:
    if folder == SESSIONS:
        return name.endswith(".jsonl")
    return name.startswith("pending-") and name.endswith(".json")


def pending_sources(home: Path) -> list[Path]:
    """The diverted transcripts and spool entries under a Hermes home, sorted; a folder
    that is there but cannot be opened as one (a symlink, no permission) is listed
    itself, for the import to name."""
    found: list[Path] = []
    for folder in (SESSIONS, SPOOL):
        try:
            listed = _listing(home, folder)
        except OSError:
            found.append(home / folder)
            continue
        if listed is None:
            continue
        fd, names = listed
        os.close(fd)
        found += [home / folder / n for n in names if _wanted(folder, n)]
    return found


# -- reading ------------------------------------------------------------------------


def _open_source(dfd: int, name: str, where: Path, owner: int, limit: int) -> tuple[int, float]:
    """A file of a folder, opened without following a symlink and proven by ``fstat``:
    a regular file of the database's owner, under ``limit`` bytes. Raises ValueError
    with the reason otherwise."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
    except OSError as exc:
        raise ValueError(f"{where}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    why = None
    if not stat.S_ISREG(st.st_mode):
        why = "not a regular file"
    elif st.st_uid != owner:
        why = f"owned by uid {st.st_uid}, not by the database's owner (uid {owner})"
    elif st.st_size > limit:
        why = f"{st.st_size} bytes, over the {limit}-byte limit"
    if why is not None:
        os.close(fd)
        raise ValueError(f"{where}: {why}")
    return fd, st.st_mtime


def _lines(fd: int) -> Iterator[bytes | None]:
    """The file's lines one by one (None: a line over :data:`MAX_LINE_BYTES`)."""
    with os.fdopen(fd, "rb", buffering=1 << 16) as f:
        while line := f.readline(MAX_LINE_BYTES + 1):
            if len(line) > MAX_LINE_BYTES:
                while (rest := f.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass
                yield None
            elif line.strip():
                yield line


def _parse(data: bytes | str | None) -> Any:
    """One line's JSON; None for a line that is none, or whose JSON nests deeper than
    :data:`MAX_NESTING` (Python's encoder, which writes the message into SQLite, would
    fail on it: such a line once failed the whole import, every other line with it)."""
    if data is None:
        return None
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(text) if text.strip() else None
    except (ValueError, RecursionError):
        return None
    return None if _nests_deeper(value, MAX_NESTING) else value


def _nests_deeper(value: Any, limit: int) -> bool:
    """Whether lists and objects in ``value`` nest more than ``limit`` deep (walked
    without recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _jsonl_source(dfd: int, name: str, home: Path, owner: int, limits: ImportLimits) -> _Source:
    where = home / SESSIONS / name
    sid = name[: -len(".jsonl")]
    if not sid or not _storable(sid):
        raise ValueError(f"{where}: its name is no session id SQLite can store")
    fd, mtime = _open_source(dfd, name, where, owner, limits.max_file_bytes)
    fr = FileResult(str(where), sid)
    return _Source(fr, mtime, _records(fr, map(_parse, _lines(fd))))


def _spool_entry(dfd: int, name: str, where: Path, owner: int) -> tuple[str, dict[str, Any]]:
    """(session id, message) of one spool entry; ValueError says why it is none."""
    fd, _ = _open_source(dfd, name, where, owner, MAX_SPOOL_ENTRY_BYTES)
    with os.fdopen(fd, "rb") as f:
        entry = _parse(f.read())
    if not isinstance(entry, dict) or entry.get("reason") != SPOOL_REASON:
        reason = entry.get("reason") if isinstance(entry, dict) else None
        raise ValueError(f"{where}: not a transcript entry (reason {reason!r})")
    raw = entry.get("data")
    inner: dict[str, Any] = raw if isinstance(raw, dict) else {}
    sid = inner.get("session_id") or entry.get("session_key")
    msg = inner.get("message")
    if not isinstance(sid, str) or not sid or not _storable(sid) or not isinstance(msg, dict):
        raise ValueError(f"{where}: a transcript entry without a session or message")
    msg = dict(msg)
    if msg.get("timestamp") is None and isinstance(entry.get("ts"), int | float):
        msg["timestamp"] = entry["ts"]
    return sid, msg


def _spool_sources(
    dfd: int, names: list[str], home: Path, owner: int, result: ImportResult
) -> Iterator[_Source]:
    """One source per session of the spool. Entries are read once to be grouped (only
    their session and time kept) and again as their session is imported."""
    folder = home / SPOOL
    groups: dict[str, list[tuple[float, str]]] = {}
    for name in names:
        try:
            sid, msg = _spool_entry(dfd, name, folder / name, owner)
        except ValueError as exc:
            result.not_imported.append(str(exc))
            continue
        ts = _timestamp(msg.get("timestamp"))
        groups.setdefault(sid, []).append((ts if isinstance(ts, float) else 0.0, name))
    for sid in sorted(groups):
        names_of = [n for _, n in sorted(groups[sid])]
        fr = FileResult(str(folder), sid)
        yield _Source(fr, time.time(), _records(fr, _reread(dfd, names_of, folder, owner, sid)))


def _reread(dfd: int, names: list[str], folder: Path, owner: int, sid: str) -> Iterator[Any]:
    for name in names:
        try:
            got, msg = _spool_entry(dfd, name, folder / name, owner)
        except ValueError:
            continue  # changed since it was grouped: named by the next run
        if got == sid:
            yield msg


def _records(fr: FileResult, objects: Iterable[Any]) -> Iterator[_Record]:
    seen: Counter[tuple[Any, ...]] = Counter()  # occurrences of each row in this source
    for obj in objects:
        fr.lines += 1
        rec = _record(obj, fr, seen)
        if rec is not None:
            yield rec


def _message_values(obj: dict[str, Any], calls: list[Any]) -> dict[str, Any]:
    values: dict[str, Any] = {"role": obj["role"], "content": _encode_content(obj.get("content"))}
    values["tool_calls"] = json.dumps(calls) if calls else None
    for col in _TEXT_COLUMNS:
        v = obj.get(col)
        values[col] = v if isinstance(v, str) else None
    for col in _JSON_COLUMNS:
        v = obj.get(col)
        values[col] = v if isinstance(v, str) or v is None else json.dumps(v, default=str)
    for col in _FLAG_COLUMNS:
        values[col] = 1 if obj.get(col) else 0
    pmid = obj.get("platform_message_id") or obj.get("message_id")
    values["platform_message_id"] = str(pmid) if pmid is not None else None
    return values


def _record(obj: Any, fr: FileResult, seen: Counter[tuple[Any, ...]]) -> _Record | None:
    if not isinstance(obj, dict):
        fr.skip("not a JSON object")
        return None
    role = obj.get("role")
    if not isinstance(role, str) or not role.strip():
        fr.skip("no role")
        return None
    if role == "session_meta":
        fr.skip("session header (no message)")
        return None
    content = obj.get("content")
    calls = _tool_calls(obj.get("tool_calls"))
    if (content is None or content == "") and not (
        calls or obj.get("tool_call_id") or obj.get("tool_name")
    ):
        fr.skip("no content and no tool call")
        return None
    values = _message_values(obj, calls)
    bad = _unstorable(values)
    if bad is not None:
        fr.skip(bad)
        return None
    ts = _timestamp(obj.get("timestamp"))
    if ts is False:
        fr.odd_timestamps += 1
    stamp = ts if isinstance(ts, float) else None
    identity = (_shape(values), stamp)
    seen[identity] += 1
    mid = hashlib.sha256(json.dumps([fr.session_id, identity, seen[identity]]).encode()).hexdigest()
    meta = obj.get("display_metadata")
    if isinstance(meta, str):
        meta = _parse(meta)
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta[RECOVERY_KEY] = mid
    values["display_metadata"] = json.dumps(meta, default=str)
    return _Record(values, identity, mid, stamp, len(calls))


def _shape(values: dict[str, Any]) -> str:
    """A digest of what a stored row is compared by (role, content, tools)."""
    return _shape_of(
        values["role"],
        values["content"],
        values["tool_call_id"],
        values["tool_name"],
        values["tool_calls"],
    )


def _shape_of(*columns: Any) -> str:
    text = json.dumps(list(columns), default=repr)
    return hashlib.blake2b(text.encode("utf-8", "backslashreplace"), digest_size=16).hexdigest()


def _storable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unstorable(values: dict[str, Any]) -> str | None:
    """Why SQLite could not store these values as they are; None when it can."""
    for v in values.values():
        if isinstance(v, str) and not _storable(v):
            return "text that is not valid UTF-8 (a lone surrogate)"
        if isinstance(v, int) and not INT64_MIN <= v <= INT64_MAX:
            return "an integer outside SQLite's 64 bits"
    return None


def _tool_calls(value: Any) -> list[Any]:
    if isinstance(value, str):
        value = _parse(value)
    return value if isinstance(value, list) else []


def _encode_content(content: Any) -> Any:
    if isinstance(content, list | dict):
        return CONTENT_JSON_PREFIX + json.dumps(content, default=str)
    if content is None or isinstance(content, str | int | float):
        return content
    return str(content)


def _timestamp(value: Any) -> float | bool | None:
    """Seconds since the epoch; None when the line has none; False when it has one no
    calendar holds (year 1, 10**30, NaN, a string that is no date)."""
    if value is None:
        return None
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            f = float(value)
        elif isinstance(value, str):  # the old gateway fallback wrote ISO 8601
            f = dt.datetime.fromisoformat(value).timestamp()
        else:
            return False
    except (ValueError, OverflowError, OSError):
        return False
    return f if math.isfinite(f) and 0 < f <= LAST_TIMESTAMP else False


# -- writing ------------------------------------------------------------------------


def import_diverted(db: Path, home: Path, limits: ImportLimits | None = None) -> ImportResult:
    """Import ``home``'s diverted transcripts into ``db`` (after a repair, Hermes running)."""
    limits = limits or ImportLimits()
    result = ImportResult()
    try:
        owner = os.stat(db).st_uid
        conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READWRITE)
    except (OSError, apsw.Error) as exc:
        result.error = f"{db}: {exc}"
        return result
    deadline = time.monotonic() + limits.time_limit_s
    try:
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        writer = _Writer(conn, result)
        for source in _sources(home, owner, limits, result):
            if writer.out_of_time(deadline):
                result.stopped = _out_of_time(limits)
                break
            result.files.append(source.result)
            if not writer.source(source, deadline):
                result.stopped = _out_of_time(limits)
                break
    except (apsw.Error, OSError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return result


def _out_of_time(limits: ImportLimits) -> str:
    return (
        f"the import's time limit ({limits.time_limit_s:g}s, maintenance.import_time_limit)"
        " was reached: the next repair imports the rest"
    )


def _sources(
    home: Path, owner: int, limits: ImportLimits, result: ImportResult
) -> Iterator[_Source]:
    for folder in (SESSIONS, SPOOL):
        try:
            listed = _listing(home, folder)
        except OSError as exc:
            result.not_imported.append(f"{home / folder}: {exc.strerror or exc} (not followed)")
            continue
        if listed is None:
            continue
        dfd, names = listed
        try:
            if os.fstat(dfd).st_uid != owner:
                result.not_imported.append(
                    f"{home / folder}: not owned by the database's owner (uid {owner})"
                )
                continue
            wanted = [n for n in names if _wanted(folder, n)]
            if folder == SPOOL:
                yield from _spool_sources(dfd, wanted, home, owner, result)
                continue
            for name in wanted:
                try:
                    yield _jsonl_source(dfd, name, home, owner, limits)
                except ValueError as exc:
                    result.not_imported.append(str(exc))
        finally:
            os.close(dfd)


class _Session:
    """What the file holds of one session, for "already present"."""

    def __init__(self, conn: apsw.Connection, sid: str, msg_cols: set[str]) -> None:
        self.exists = bool(conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchall())
        self.ids: set[str] = set()  # message ids an import wrote
        self.exact: Counter[tuple[Any, ...]] = Counter()  # (shape, time) of the other rows
        self.times: dict[str, list[float | None]] = {}  # shape -> times
        self.newest: float | None = None
        want = ["role", "content", "tool_call_id", "tool_name", "tool_calls", "timestamp"]
        select = ", ".join(quote_ident(c) if c in msg_cols else "NULL" for c in want)
        meta = quote_ident("display_metadata") if "display_metadata" in msg_cols else "NULL"
        rows = conn.execute(f"SELECT {select}, {meta} FROM messages WHERE session_id = ?", (sid,))
        for role, content, tcid, tname, calls, ts, meta_text in rows:
            stamp = float(ts) if isinstance(ts, int | float) else None
            if stamp is not None:
                self.newest = stamp if self.newest is None else max(self.newest, stamp)
            mid = _message_id(meta_text)
            if mid is not None:
                self.ids.add(mid)
                continue
            shape = _shape_of(role, content, tcid, tname, calls)
            self.exact[(shape, stamp)] += 1
            self.times.setdefault(shape, []).append(stamp)

    def holds(self, r: _Record) -> bool:
        """Is ``r`` in the file: its id, or a row without one of the same content (used
        up, so a message said twice and stored once is imported once)?"""
        if r.message_id in self.ids:
            return True
        shape, stamp = r.identity
        stamps = self.times.get(shape)
        if not stamps:
            return False
        if stamp is None:
            used = stamps.pop()
        elif self.exact[(shape, stamp)] > 0:
            used = stamp
            stamps.remove(stamp)
        else:
            return False
        self.exact[(shape, used)] -= 1
        return True


@dataclass
class _Going:
    """One source's import so far: the session as read in its first batch, the time of
    the last row written (a line without a time comes after it)."""

    session: _Session | None = None
    last: float = 0.0


class _Writer:
    """Writes the sources' records in small transactions, as Hermes would."""

    def __init__(self, conn: apsw.Connection, result: ImportResult) -> None:
        self.conn = conn
        self.result = result
        self.msg_cols = _columns(conn, "messages")
        self.ses_cols = _columns(conn, "sessions")
        self.wrote = 0  # rows this import wrote
        if not {"session_id", "role", "content", "timestamp"} <= self.msg_cols or not (
            self.ses_cols
        ):
            raise ValueError("the file has no Hermes messages and sessions tables")

    def out_of_time(self, deadline: float) -> bool:
        """Past the deadline, once something went in (lines already in cost no time, so
        every import goes on from where the last one stopped)."""
        return self.wrote > 0 and time.monotonic() > deadline

    def source(self, source: _Source, deadline: float) -> bool:
        """Import one source; False when the time ran out before its end."""
        state = _Going()
        batch: list[_Record] = []
        for rec in source.records:
            if not batch and self.out_of_time(deadline):
                return False
            batch.append(rec)
            if len(batch) >= BATCH_LINES:
                self._batch(source, batch, state)
                batch = []
        if batch:
            self._batch(source, batch, state)
        return True

    def _batch(self, source: _Source, batch: list[_Record], state: _Going) -> int:
        """Write one batch in one transaction; the number of rows it wrote."""
        fr = source.result
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            if state.session is None:
                state.session = _Session(self.conn, fr.session_id, self.msg_cols)
                state.last = state.session.newest or source.mtime
            done = self._write(fr, batch, state)
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        imported, present, created, skipped = done
        fr.imported += imported
        fr.already_present += present
        fr.new_session = fr.new_session or created
        for reason, n in skipped.items():
            fr.skipped[reason] = fr.skipped.get(reason, 0) + n
        self.wrote += imported
        return imported

    def _write(
        self, fr: FileResult, batch: list[_Record], state: _Going
    ) -> tuple[int, int, bool, Counter[str]]:
        session = state.session
        assert session is not None
        imported = present = calls = 0
        created = False
        skipped: Counter[str] = Counter()
        for r in batch:
            if session.holds(r):
                present += 1
                continue
            if not session.exists:
                _create_session(self.conn, fr.session_id, r.timestamp or state.last, self.ses_cols)
                session.exists = created = True
            ts = r.timestamp if r.timestamp is not None else state.last + 1e-6
            if self._insert({**r.values, "session_id": fr.session_id, "timestamp": ts}):
                state.last = max(state.last, ts)
                session.ids.add(r.message_id)
                imported += 1
                calls += r.tool_calls
            else:
                skipped["refused by the file (a constraint or trigger)"] += 1
        self._count(fr.session_id, imported, calls)
        return imported, present, created, skipped

    def _insert(self, values: dict[str, Any]) -> bool:
        """One row; False when the file refuses it (SQLite undoes that statement alone)."""
        if "active" in self.msg_cols:
            values["active"] = 1
        names = [c for c in values if c in self.msg_cols]
        cols = ", ".join(quote_ident(c) for c in names)
        marks = ", ".join("?" for _ in names)
        try:
            self.conn.execute(
                f"INSERT INTO messages ({cols}) VALUES ({marks})", tuple(values[c] for c in names)
            )
        except _LINE_REFUSED:
            if not self.conn.in_transaction:
                raise  # a trigger rolled the whole transaction back: stop
            return False
        return True

    def _count(self, sid: str, imported: int, calls: int) -> None:
        pairs = [
            (c, n)
            for c, n in (("message_count", imported), ("tool_call_count", calls))
            if c in self.ses_cols
        ]
        if imported and pairs:
            sets = ", ".join(f"{c} = coalesce({c}, 0) + ?" for c, _ in pairs)
            self.conn.execute(
                f"UPDATE sessions SET {sets} WHERE id = ?", (*(n for _, n in pairs), sid)
            )


def _columns(conn: apsw.Connection, table: str) -> set[str]:
    return {str(r[1]) for r in conn.execute(f"PRAGMA table_info({quote_ident(table)})")}


def _message_id(meta: Any) -> str | None:
    if not isinstance(meta, str) or RECOVERY_KEY not in meta:
        return None
    parsed = _parse(meta)
    if isinstance(parsed, dict) and isinstance(parsed.get(RECOVERY_KEY), str):
        return str(parsed[RECOVERY_KEY])
    return None


def _create_session(conn: apsw.Connection, sid: str, started: float, cols: set[str]) -> None:
    values: dict[str, Any] = {"id": sid, "source": "cli", "started_at": started}
    names = [c for c in values if c in cols]
    conn.execute(
        f"INSERT INTO sessions ({', '.join(quote_ident(c) for c in names)})"
        f" VALUES ({', '.join('?' for _ in names)})",
        tuple(values[c] for c in names),
    )
