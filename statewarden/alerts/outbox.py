"""The durable outbox: every notification is on disk before a sink is asked to send it.

Layout, in ``<state_dir>/outbox/``:

- ``<seq>.<sink>.json``: one entry per notification and sink, written atomically
  (tmp + fsync + rename + fsync of the folder) before delivery starts, rewritten when a
  multi-part message has sent some parts, removed once the sink accepted it. ``seq``
  grows monotonically, so each sink delivers in the order notifications were made.
- ``delivered.json``: the keys of the last :data:`DELIVERED_KEEP` delivered entries per
  sink. A notification whose key is pending or delivered is not queued again, so a
  restart that makes the same notification again sends nothing twice.

Bounded: past ``max_entries`` pending entries for one sink the oldest is dropped, and
the count of dropped notifications travels with the next one ("the outbox was full").

A full disk (or any error writing the folder) must not silence an alert: the entry is
kept in memory, delivered from there, and :attr:`Outbox.persist_error` says why it is not
on disk; the next successful write clears it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statewarden.alerts.message import Notification
from statewarden.atomic import fsync_dir, write_atomic

DELIVERED_KEEP = 2000
_ENTRY_RE = re.compile(r"^(\d{12})\.([a-z0-9_-]+)\.json$")


@dataclass
class Entry:
    """One notification waiting for one sink."""

    seq: int
    sink: str
    notification: Notification
    queued_at: float
    attempts: int = 0
    parts_sent: int = 0  # a long Telegram message is several; these are already sent
    last_error: str = ""
    on_disk: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.notification.key

    @property
    def filename(self) -> str:
        return f"{self.seq:012d}.{self.sink}.json"

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "sink": self.sink,
            "queued_at": self.queued_at,
            "attempts": self.attempts,
            "parts_sent": self.parts_sent,
            "last_error": self.last_error,
            "notification": self.notification.to_json(),
        }


def _unsafe_folder(folder: Path) -> str:
    """Why ``folder`` is not safe to write state into, or "" (rule 12: no redirection)."""
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not {os.geteuid()}"
    if st.st_mode & 0o022:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


class Outbox:
    def __init__(self, folder: Path, *, max_entries: int) -> None:
        self.folder = folder
        self.max_entries = max_entries
        self._queues: dict[str, deque[Entry]] = {}
        self._pending_keys: set[tuple[str, str]] = set()
        self._delivered: dict[str, deque[str]] = {}
        self._delivered_set: set[tuple[str, str]] = set()
        self._dropped: dict[str, int] = {}
        self._next_seq = 1
        self.persist_error = ""
        self.load_problems: list[str] = []
        self._unsafe = False
        self._load()

    # ------------------------------------------------------------- loading

    def _load(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            unsafe = _unsafe_folder(self.folder)
            names = [] if unsafe else sorted(os.listdir(self.folder))
        except OSError as exc:
            self.persist_error = f"{self.folder}: {exc.strerror or exc}"
            return
        if unsafe:
            # Nothing is written where someone else could redirect it; alerts go from memory.
            self.persist_error = f"{self.folder}: {unsafe}; not written to"
            self._unsafe = True
            return
        try:
            data = json.loads((self.folder / "delivered.json").read_text(encoding="utf-8"))
            for sink, keys in data.get("delivered", {}).items():
                self._delivered[sink] = deque(map(str, keys), maxlen=DELIVERED_KEEP)
                self._delivered_set.update((sink, k) for k in keys)
            self._next_seq = max(self._next_seq, int(data.get("next_seq", 1)))
        except FileNotFoundError:
            pass
        except (OSError, ValueError, AttributeError) as exc:
            self.load_problems.append(f"delivered.json: unreadable ({exc}); started afresh")
        for name in names:
            m = _ENTRY_RE.match(name)
            if not m:
                continue
            path = self.folder / name
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
                entry = Entry(
                    seq=int(m.group(1)),
                    sink=m.group(2),
                    notification=Notification.from_json(raw["notification"]),
                    queued_at=float(raw.get("queued_at", 0.0)),
                    attempts=int(raw.get("attempts", 0)),
                    parts_sent=int(raw.get("parts_sent", 0)),
                    last_error=str(raw.get("last_error", "")),
                )
            except (OSError, ValueError, KeyError, TypeError) as exc:
                # A damaged entry is set aside, not retried forever and not deleted.
                self.load_problems.append(f"{name}: unreadable ({exc}); set aside")
                with contextlib.suppress(OSError):
                    path.rename(path.with_name(name + ".damaged"))
                continue
            if (entry.sink, entry.key) in self._delivered_set:
                # Delivered, then stopped before the file was removed: not sent again.
                self._remove_file(entry)
                continue
            self._queues.setdefault(entry.sink, deque()).append(entry)
            self._pending_keys.add((entry.sink, entry.key))
            self._next_seq = max(self._next_seq, entry.seq + 1)

    # ------------------------------------------------------------- queueing

    def known(self, sink: str, key: str) -> bool:
        """True if this notification is already waiting for, or was delivered to, ``sink``."""
        return (sink, key) in self._pending_keys or (sink, key) in self._delivered_set

    def delivered(self, sink: str, key: str) -> bool:
        """True if ``sink`` accepted this notification (among the last ones it did)."""
        return (sink, key) in self._delivered_set

    def put(self, notification: Notification, sink: str) -> Entry | None:
        """Queue ``notification`` for ``sink``, on disk first; None if it is a duplicate."""
        if self.known(sink, notification.key):
            return None
        queue = self._queues.setdefault(sink, deque())
        while len(queue) >= self.max_entries:
            oldest = queue.popleft()
            self._pending_keys.discard((sink, oldest.key))
            self._remove_file(oldest)
            self._dropped[sink] = self._dropped.get(sink, 0) + 1 + oldest.notification.dropped
        dropped = self._dropped.pop(sink, 0)
        if dropped:
            notification = Notification.from_json(notification.to_json())
            notification.dropped += dropped
        entry = Entry(self._next_seq, sink, notification, time.time())
        self._next_seq += 1
        self._write(entry)
        queue.append(entry)
        self._pending_keys.add((sink, entry.key))
        return entry

    def _write(self, entry: Entry) -> None:
        if self._unsafe:
            entry.on_disk = False
            return
        try:
            write_atomic(self.folder / entry.filename, json.dumps(entry.to_json()))
        except OSError as exc:
            entry.on_disk = False
            self.persist_error = f"{self.folder}: {exc.strerror or exc}"
            with contextlib.suppress(OSError):
                (self.folder / (entry.filename + ".tmp")).unlink()
        else:
            entry.on_disk = True
            self.persist_error = ""

    def next(self, sink: str) -> Entry | None:
        """The oldest entry waiting for ``sink``."""
        queue = self._queues.get(sink)
        return queue[0] if queue else None

    def pending(self, sink: str | None = None) -> list[Entry]:
        if sink is not None:
            return list(self._queues.get(sink, ()))
        return sorted((e for q in self._queues.values() for e in q), key=lambda e: e.seq)

    def sinks(self) -> list[str]:
        return sorted(self._queues)

    def progress(self, entry: Entry, *, parts_sent: int | None = None, error: str = "") -> None:
        """Record an attempt (and parts already sent) so a restart resumes where it was."""
        entry.attempts += 1 if error else 0
        entry.last_error = error
        if parts_sent is not None:
            entry.parts_sent = parts_sent
            self._write(entry)

    def done(self, entry: Entry) -> None:
        """The sink accepted ``entry``: remember its key, then remove it."""
        queue = self._queues.get(entry.sink)
        if queue and queue[0] is entry:
            queue.popleft()
        elif queue and entry in queue:
            queue.remove(entry)
        delivered = self._delivered.setdefault(entry.sink, deque(maxlen=DELIVERED_KEEP))
        if len(delivered) == delivered.maxlen:
            self._delivered_set.discard((entry.sink, delivered[0]))
        delivered.append(entry.key)
        self._delivered_set.add((entry.sink, entry.key))
        self._save_delivered()
        self._pending_keys.discard((entry.sink, entry.key))
        self._remove_file(entry)

    def set_aside(self, entry: Entry, why: str) -> None:
        """A sink refused this entry for good (e.g. 400 Bad Request): keep it, stop retrying."""
        queue = self._queues.get(entry.sink)
        if queue and entry in queue:
            queue.remove(entry)
        self._pending_keys.discard((entry.sink, entry.key))
        entry.last_error = why
        if entry.on_disk:
            with contextlib.suppress(OSError):
                path = self.folder / entry.filename
                path.rename(path.with_name(entry.filename + ".rejected"))

    def _save_delivered(self) -> None:
        if self._unsafe:
            return
        data = {
            "next_seq": self._next_seq,
            "delivered": {s: list(keys) for s, keys in self._delivered.items()},
        }
        try:
            write_atomic(self.folder / "delivered.json", json.dumps(data))
        except OSError as exc:
            self.persist_error = f"{self.folder}: {exc.strerror or exc}"

    def _remove_file(self, entry: Entry) -> None:
        if not entry.on_disk:
            return
        try:
            (self.folder / entry.filename).unlink()
            fsync_dir(self.folder)
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.persist_error = f"{self.folder}: {exc.strerror or exc}"

    def retry_persist(self) -> None:
        """Write entries kept only in memory (the disk was full) once it can take them."""
        for entry in self.pending():
            if not entry.on_disk:
                self._write(entry)
                if not entry.on_disk:
                    return
