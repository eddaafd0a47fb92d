"""The evidence timeline: what the watchers saw around each database, kept for a while.

The question a postmortem cannot answer afterwards is *why*: which writers held the
file, which cron job ran, when the WAL stopped shrinking, just before the first
error. The timeline keeps that history per database: holders arriving and leaving,
WAL size samples and checkpoints, sidecar creations and deletions, cron sessions
starting, unit restarts, and every incident change.

Storage: one JSON-lines file (0600) per database under
``<state_dir>/timeline/``, appended to (cheap), and compacted when it passes
``max_bytes`` or holds entries older than ``max_age_s``: the file is rewritten with
what is young enough, newest half first when size is the reason. Bounded in both time and space.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statewarden.atomic import StateUnwritable, append_line, write_atomic
from statewarden.config import DEFAULT_TIMELINE_MAX_AGE_S as DEFAULT_MAX_AGE_S
from statewarden.config import DEFAULT_TIMELINE_MAX_BYTES as DEFAULT_MAX_BYTES

# A signal that fires again within this window is not written again (a flood is
# one line a minute in the timeline, with the count so far).
SIGNAL_REPEAT_S = 60.0
PENDING_MAX = 1000  # entries kept in memory while the timeline cannot be written


@dataclass(frozen=True)
class Entry:
    at: float
    what: str
    text: str
    fields: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "what": self.what, "text": self.text, "fields": self.fields}


class Timeline:
    def __init__(
        self,
        directory: Path,
        *,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.directory = directory
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        self._last_signal: dict[str, float] = {}
        # The last write that failed (a full disk), None once one succeeds again: a
        # timeline that cannot be written never stops the caller; the lines wait here
        # (the newest PENDING_MAX) and are written by the next add or flush.
        self.write_error: StateUnwritable | None = None
        self._pending: deque[tuple[str, str]] = deque(maxlen=PENDING_MAX)

    def path_for(self, db: str) -> Path:
        digest = hashlib.sha256(db.encode()).hexdigest()[:16]
        return self.directory / f"{digest}.jsonl"

    def add(self, db: str, what: str, text: str, at: float | None = None, **fields: Any) -> None:
        """Append one entry; a failed write is kept in ``write_error``.

        Its text comes from a signal, an observation or an incident: secrets are already
        redacted (``evidence.py``).
        """
        entry = {
            "at": time.time() if at is None else at,
            "what": what,
            "text": text,
            "db": db,
            "fields": fields,
        }
        self._pending.append((db, json.dumps(entry, default=str) + "\n"))
        self.flush()

    def flush(self) -> None:
        """Write the lines waiting since a failed write; never raises (``write_error``)."""
        while self._pending:
            db, line = self._pending[0]
            try:
                size = append_line(self.path_for(db), line)
                if size > self.max_bytes:
                    self.compact(db)
            except StateUnwritable as exc:
                self.write_error = exc
                return
            except OSError as exc:  # the compaction's read (no descriptors left, EIO)
                self.write_error = StateUnwritable(self.path_for(db), exc)
                return
            self._pending.popleft()
        self.write_error = None

    def add_signal(self, db: str, fingerprint: str, text: str, at: float, **fields: Any) -> bool:
        """Record a signal unless the same fingerprint was written in the last minute."""
        last = self._last_signal.get(fingerprint)
        if last is not None and at - last < SIGNAL_REPEAT_S:
            return False
        self._last_signal[fingerprint] = at
        self.add(db, "signal", text, at, **fields)
        return True

    def entries(self, db: str) -> list[Entry]:
        path = self.path_for(db)
        out: list[Entry] = []
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return out
        for line in text.splitlines():
            try:
                raw = json.loads(line)
                out.append(
                    Entry(
                        float(raw["at"]),
                        str(raw["what"]),
                        str(raw["text"]),
                        dict(raw.get("fields") or {}),
                    )
                )
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line after a crash; skip it
        out.sort(key=lambda e: e.at)
        return out

    def around(
        self, db: str, at: float, before_s: float = 3600.0, after_s: float = 600.0
    ) -> list[Entry]:
        """Entries from ``before_s`` before ``at`` to ``after_s`` after it."""
        return [e for e in self.entries(db) if at - before_s <= e.at <= at + after_s]

    def compact(self, db: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        path = self.path_for(db)
        keep = [e for e in self.entries(db) if now - e.at <= self.max_age_s]
        lines = [json.dumps({**e.to_json(), "db": db}, default=str) + "\n" for e in keep]
        while lines and sum(len(x) for x in lines) > self.max_bytes // 2:
            lines = lines[len(lines) // 2 :]  # drop the older half
        write_atomic(path, "".join(lines))


def format_entry(entry: Entry) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.at))
    return f"{stamp}  {entry.text}"
