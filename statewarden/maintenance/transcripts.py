"""Transcripts Hermes diverted while state.db was unusable, imported into the repaired file.

When a write fails because state.db was replaced or is corrupt, Hermes since 0.20 appends
the messages it could not store to ``<home>/sessions/<session id>.jsonl`` (one message
object per line, no header, the session id only in the file name) and, from the gateway,
also to ``<home>/pending_messages/pending-<hex>.json`` (one object per file, reason
``transcript_cap_drop``, the message under ``data.message``). Hermes itself cannot read
them back (its importer is a draft, docs/hermes.md). After a repair has swapped a new
file in, and before anything is started again, maintenance imports them:

- in Hermes' own row shape: content as Hermes encodes it (a list or object as
  ``"\\x00json:" + JSON``), ``tool_calls`` and the reasoning columns as JSON text, the
  session's ``message_count`` / ``tool_call_count`` raised as Hermes' ``append_message``
  does, only into columns the file's own ``messages`` table has, so the schema's own
  triggers (full-text copies, display order) keep the file consistent;
- deduplicated against what the file already holds: a line is already there when its
  session has a row with the same role, content, tool call id, tool name and tool
  calls, and the same timestamp when the line has one (counted, so a message said twice
  is imported twice); a line an earlier import wrote carries its ``diverted_recovery_id``
  in ``display_metadata`` (a hash of the file's path and every line up to it), so an
  import killed half-way and run again, or run twice, adds nothing twice; the spool's
  copy of a message the JSONL also has counts once;
- a session the file does not have is created (``source`` ``cli``, ``started_at`` its
  first message), as Hermes' draft importer does;
- in one transaction: a failure imports nothing and leaves the repaired file as it was
  (the run's report says why). The JSONL files and the spool are never changed or
  deleted.

Skipped and counted per reason: lines that are not JSON objects, lines without a role,
``session_meta`` header lines (a model and tool list, no message), lines with neither
content nor a tool call. A line without a timestamp gets the previous line's plus a
microsecond (else the session's newest row's, else the file's mtime), so the order of a
transcript is kept.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import stat
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.sqlite import quote_ident

__all__ = ["ImportResult", "import_diverted", "pending_sources"]

CONTENT_JSON_PREFIX = "\x00json:"
RECOVERY_KEY = "diverted_recovery_id"
SPOOL_REASON = "transcript_cap_drop"
# Bound what is read: a diverted file or spool entry larger than this is reported, not read.
MAX_FILE_BYTES = 256 * 1024 * 1024
MAX_SPOOL_ENTRY_BYTES = 16 * 1024 * 1024
BUSY_TIMEOUT_MS = 10_000
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
        }


@dataclass
class ImportResult:
    """The import's outcome, for the run report."""

    files: list[FileResult] = field(default_factory=list)
    error: str | None = None  # why nothing was imported
    not_imported: list[str] = field(default_factory=list)  # sources left alone, and why

    @property
    def imported(self) -> int:
        return sum(f.imported for f in self.files) if self.error is None else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "imported": self.imported,
            "error": self.error,
            "files": [f.to_json() for f in self.files],
            "not_imported": list(self.not_imported),
        }

    def summary(self) -> str:
        if self.error:
            return f"diverted transcripts not imported: {self.error}"
        sessions = sum(1 for f in self.files if f.imported)
        new = sum(1 for f in self.files if f.new_session and f.imported)
        present = sum(f.already_present for f in self.files)
        return (
            f"imported {self.imported} diverted message(s) into {sessions} session(s)"
            f" ({new} new); {present} already in the file"
        )


@dataclass
class _Record:
    values: dict[str, Any]  # column -> value, Hermes' encoding
    identity: tuple[Any, ...]  # what "already present" compares
    recovery_id: str
    timestamp: float | None
    tool_calls: int


def pending_sources(home: Path) -> list[Path]:
    """The diverted transcripts and spool entries under a Hermes home, sorted."""
    found = sorted((home / "sessions").glob("*.jsonl")) if (home / "sessions").is_dir() else []
    spool = home / "pending_messages"
    if spool.is_dir():
        found += sorted(spool.glob("pending-*.json"))
    return found


def import_diverted(db: Path, home: Path) -> ImportResult:
    """Import ``home``'s diverted transcripts into ``db`` (a repaired file nobody holds)."""
    result = ImportResult()
    sources = _read_sources(home, result)
    if not sources:
        return result
    try:
        conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READWRITE)
    except apsw.Error as exc:
        result.error = f"{db}: {exc}"
        return result
    try:
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        _import(conn, sources, result)
    except (apsw.Error, OverflowError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        for f in result.files:
            f.imported = 0
    finally:
        conn.close()
    return result


# -- reading ------------------------------------------------------------------------


def _read_sources(home: Path, result: ImportResult) -> list[tuple[FileResult, list[_Record]]]:
    out: list[tuple[FileResult, list[_Record]]] = []
    spool: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for path in pending_sources(home):
        data = _read_bounded(path, result)
        if data is None:
            continue
        if path.suffix == ".jsonl":
            fr = FileResult(str(path), path.stem)
            lines = [ln for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
            out.append((fr, _records(fr, (_parse(line) for line in lines), path, fr.session_id)))
            continue
        entry = _parse(data.decode("utf-8", "replace"))
        if not isinstance(entry, dict) or entry.get("reason") != SPOOL_REASON:
            reason = entry.get("reason") if isinstance(entry, dict) else None
            result.not_imported.append(f"{path}: not a transcript entry (reason {reason!r})")
            continue
        raw = entry.get("data")
        inner: dict[str, Any] = raw if isinstance(raw, dict) else {}
        sid = inner.get("session_id") or entry.get("session_key")
        msg = inner.get("message")
        if not isinstance(sid, str) or not sid or not isinstance(msg, dict):
            result.not_imported.append(f"{path}: a transcript entry without a session or message")
            continue
        msg = dict(msg)
        if msg.get("timestamp") is None and isinstance(entry.get("ts"), int | float):
            msg["timestamp"] = entry["ts"]
        spool.setdefault(sid, []).append((str(path), msg))
    by_session = {fr.session_id: (fr, recs) for fr, recs in out}
    for sid, entries in sorted(spool.items()):
        fr = FileResult(str(home / "pending_messages"), sid)
        recs = _records(fr, (m for _, m in entries), home / "pending_messages" / sid, sid)
        if sid in by_session:  # the gateway writes one message to both: count it once
            have = Counter(r.identity for r in by_session[sid][1])
            kept = []
            for r in recs:
                if have[r.identity] > 0:
                    have[r.identity] -= 1
                    fr.already_present += 1
                else:
                    kept.append(r)
            recs = kept
        out.append((fr, recs))
    return out


def _read_bounded(path: Path, result: ImportResult) -> bytes | None:
    limit = MAX_FILE_BYTES if path.suffix == ".jsonl" else MAX_SPOOL_ENTRY_BYTES
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        result.not_imported.append(f"{path}: {exc.strerror or exc}")
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            result.not_imported.append(f"{path}: not a regular file")
            return None
        if st.st_size > limit:
            result.not_imported.append(f"{path}: {st.st_size} bytes, over the {limit}-byte limit")
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _parse(text: str) -> Any:
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _records(fr: FileResult, objects: Iterable[Any], path: Path, sid: str) -> list[_Record]:
    digest = hashlib.sha256(str(path.resolve()).encode())
    out: list[_Record] = []
    for obj in objects:
        fr.lines += 1
        rec = _record(obj, fr, digest)
        if rec is not None:
            out.append(rec)
    return out


def _record(obj: Any, fr: FileResult, digest: Any) -> _Record | None:
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
    values: dict[str, Any] = {"role": role, "content": _encode_content(content)}
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
    ts = _timestamp(obj.get("timestamp"))
    identity = (
        role,
        values["content"],
        values["tool_call_id"],
        values["tool_name"],
        values["tool_calls"],
        ts,
    )
    digest.update(b"\0")
    digest.update(json.dumps(list(identity), sort_keys=True, default=str).encode())
    rid = digest.hexdigest()
    meta = obj.get("display_metadata")
    if isinstance(meta, str):
        meta = _parse(meta)
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta[RECOVERY_KEY] = rid
    values["display_metadata"] = json.dumps(meta, default=str)
    return _Record(values, identity, rid, ts, len(calls))


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


def _timestamp(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        f = float(value)
        return f if math.isfinite(f) and f > 0 else None
    if isinstance(value, str):  # the old gateway fallback wrote ISO 8601
        try:
            when = dt.datetime.fromisoformat(value)
        except ValueError:
            return None
        return when.timestamp()
    return None


# -- writing ------------------------------------------------------------------------


def _import(
    conn: apsw.Connection, sources: list[tuple[FileResult, list[_Record]]], result: ImportResult
) -> None:
    msg_cols = _columns(conn, "messages")
    ses_cols = _columns(conn, "sessions")
    if not {"session_id", "role", "content", "timestamp"} <= msg_cols or not ses_cols:
        raise ValueError("the file has no Hermes messages and sessions tables")
    conn.execute("BEGIN IMMEDIATE")  # one transaction: all or nothing
    try:
        for fr, records in sources:
            result.files.append(fr)
            _import_session(conn, fr, records, msg_cols, ses_cols)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _import_session(
    conn: apsw.Connection,
    fr: FileResult,
    records: list[_Record],
    msg_cols: set[str],
    ses_cols: set[str],
) -> None:
    sid = fr.session_id
    if not records:
        return
    existing, recovered, newest = _existing(conn, sid, msg_cols)
    todo: list[_Record] = []
    for r in records:
        if r.recovery_id in recovered or existing.take(r.identity):
            fr.already_present += 1
        else:
            todo.append(r)
    if not todo:
        return
    if not conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchall():
        first = next((r.timestamp for r in todo if r.timestamp is not None), None)
        _create_session(conn, sid, first or newest or _mtime(fr.path), ses_cols)
        fr.new_session = True
    last = newest or _mtime(fr.path)
    calls = 0
    for r in todo:
        ts = r.timestamp if r.timestamp is not None else last + 1e-6
        last = max(last, ts)
        values = {**r.values, "session_id": sid, "timestamp": ts}
        if "active" in msg_cols:
            values["active"] = 1
        names = [c for c in values if c in msg_cols]
        cols = ", ".join(quote_ident(c) for c in names)
        marks = ", ".join("?" for _ in names)
        conn.execute(
            f"INSERT INTO messages ({cols}) VALUES ({marks})", tuple(values[c] for c in names)
        )
        calls += r.tool_calls
        fr.imported += 1
    sets = [
        f"{c} = coalesce({c}, 0) + ?" for c in ("message_count", "tool_call_count") if c in ses_cols
    ]
    if sets:
        args = [
            n
            for c, n in (("message_count", fr.imported), ("tool_call_count", calls))
            if c in ses_cols
        ]
        conn.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", (*args, sid))


def _columns(conn: apsw.Connection, table: str) -> set[str]:
    return {str(r[1]) for r in conn.execute(f"PRAGMA table_info({quote_ident(table)})")}


class _Present:
    """The session's rows that no import wrote, by what a line compares, each usable once."""

    def __init__(self) -> None:
        self.exact: Counter[tuple[Any, ...]] = Counter()  # shape + timestamp
        self.times: dict[tuple[Any, ...], list[float | None]] = {}  # shape -> timestamps

    def add(self, shape: tuple[Any, ...], stamp: float | None) -> None:
        self.exact[(*shape, stamp)] += 1
        self.times.setdefault(shape, []).append(stamp)

    def take(self, identity: tuple[Any, ...]) -> bool:
        """Use up a row matching ``identity`` (a line without a time matches any time)."""
        shape, stamp = identity[:-1], identity[-1]
        stamps = self.times.get(shape)
        if not stamps:
            return False
        if stamp is None:
            used = stamps.pop()
        elif self.exact[(*shape, stamp)] > 0:
            used = stamp
            stamps.remove(stamp)
        else:
            return False
        self.exact[(*shape, used)] -= 1
        return True


def _existing(
    conn: apsw.Connection, sid: str, msg_cols: set[str]
) -> tuple[_Present, set[str], float | None]:
    """The session's rows: those no import wrote, recovery ids of those one did, newest time."""
    want = [
        "role",
        "content",
        "tool_call_id",
        "tool_name",
        "tool_calls",
        "timestamp",
        "display_metadata",
    ]
    select = ", ".join(quote_ident(c) if c in msg_cols else "NULL" for c in want)
    rows = conn.execute(f"SELECT {select} FROM messages WHERE session_id = ?", (sid,))
    present = _Present()
    recovered: set[str] = set()
    newest: float | None = None
    for role, content, tcid, tname, calls, ts, meta in rows:
        stamp = float(ts) if isinstance(ts, int | float) else None
        if stamp is not None:
            newest = stamp if newest is None else max(newest, stamp)
        rid = _recovery_id(meta)
        if rid is not None:
            recovered.add(rid)
        else:
            present.add((role, content, tcid, tname, calls), stamp)
    return present, recovered, newest


def _recovery_id(meta: Any) -> str | None:
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


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return dt.datetime.now(dt.UTC).timestamp()
