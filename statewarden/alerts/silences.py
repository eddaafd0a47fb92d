"""Silences: notifications of one incident kind muted for a while, on purpose.

``statewardenctl silence add --kind K [--db PATH] --for 2h --reason TEXT`` writes one
to ``<state_dir>/silences.json`` (atomically: tmp + fsync + rename, under
``silences.lock`` so two commands at once lose neither); ``silence expire ID`` ends one
early. The file is the one place silences live: the command writes it whether or not the
daemon runs, and tells a running daemon over the control socket (request ``silences``)
to read it at once; a daemon that was not told reads it when it changes (it looks every
:data:`CHECK_S` seconds), at its start and on SIGHUP. So a silence survives restarts.

A silence mutes notifications only (firing, reminders, resolved), never incidents: the
incident book records them as always and ``incidents`` shows them "muted: silence #N".
When it ends (its time is up, or it was expired), what it muted and is still open is
notified then (``Router.set_silences``). Ended silences are kept :data:`KEEP_ENDED_S`
for ``silence list``, then dropped.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from statewarden.atomic import private_dir, write_atomic
from statewarden.errors import StatewardenError, UsageError

FILE_NAME = "silences.json"
LOCK_NAME = "silences.lock"
CHECK_S = 5.0  # how often the daemon looks whether the file changed
KEEP_ENDED_S = 7 * 86400.0
MAX_SILENCES = 1000  # active and recently ended, in one file
REASON_CHARS = 300


@dataclass
class Silence:
    id: int
    kind: str
    db: str | None  # None: every database
    reason: str
    created_at: float
    ends_at: float
    expired_at: float | None = None  # ended early by ``silence expire``

    def active(self, now: float) -> bool:
        return self.expired_at is None and now < self.ends_at

    @property
    def ended_at(self) -> float:
        return self.ends_at if self.expired_at is None else min(self.ends_at, self.expired_at)

    def matches(self, kind: str, db: str) -> bool:
        return kind == self.kind and (self.db is None or self.db == db)

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        out = asdict(self)
        if now is not None:
            out["state"] = "active" if self.active(now) else "ended"
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Silence:
        expired = raw.get("expired_at")
        db = raw.get("db")
        return cls(
            id=int(raw["id"]),
            kind=str(raw["kind"]),
            db=None if db is None else str(db),
            reason=str(raw.get("reason", "")),
            created_at=float(raw["created_at"]),
            ends_at=float(raw["ends_at"]),
            expired_at=None if expired is None else float(expired),
        )


def describe(s: Silence) -> str:
    where = f" on {s.db}" if s.db else ""
    return f"silence #{s.id} ({s.kind}{where})"


class SilenceFile:
    """``<state_dir>/silences.json``: read by the daemon, written by ``statewardenctl``."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / FILE_NAME

    def signature(self) -> tuple[int, int, int] | None:
        """What changes when the file is replaced (inode, size, mtime); None if missing."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def read(self) -> list[Silence]:
        """Every silence in the file (none if it is missing); a file that cannot be read
        as silences raises :class:`~statewarden.errors.StatewardenError`."""
        try:
            st = os.lstat(self.path)
            if not stat.S_ISREG(st.st_mode):
                raise StatewardenError(f"{self.path}: not a regular file")
            if st.st_size > MAX_SILENCES * 2048:
                raise StatewardenError(f"{self.path}: too large ({st.st_size} bytes)")
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return [Silence.from_json(raw) for raw in data["silences"]]
        except FileNotFoundError:
            return []
        except StatewardenError:
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            why = getattr(exc, "strerror", None) or f"{type(exc).__name__}: {exc}"
            raise StatewardenError(f"{self.path}: unreadable ({why})") from None

    def _write(self, silences: list[Silence]) -> None:
        data = {"silences": [asdict(s) for s in silences]}
        write_atomic(self.path, json.dumps(data, indent=1))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        private_dir(self.state_dir)
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.state_dir / LOCK_NAME, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def add(self, kind: str, db: str | None, for_s: float, reason: str, now: float) -> Silence:
        with self._locked():
            silences = _pruned(self.read(), now)
            if len(silences) >= MAX_SILENCES:
                raise UsageError(
                    f"{len(silences)} silences already; expire some first (silence list)"
                )
            next_id = max((s.id for s in silences), default=0) + 1
            silence = Silence(next_id, kind, db, reason[:REASON_CHARS], now, now + for_s)
            self._write([*silences, silence])
            return silence

    def expire(self, silence_id: int, now: float) -> Silence:
        with self._locked():
            silences = self.read()
            for s in silences:
                if s.id == silence_id:
                    if not s.active(now):
                        raise UsageError(f"silence #{silence_id} has already ended")
                    s.expired_at = now
                    self._write(_pruned(silences, now))
                    return s
            known = ", ".join(f"#{s.id}" for s in silences if s.active(now)) or "none"
            raise UsageError(f"no silence #{silence_id} (active ones: {known})")


def _pruned(silences: list[Silence], now: float) -> list[Silence]:
    return [s for s in silences if s.active(now) or now - s.ended_at < KEEP_ENDED_S]


def listing(silences: list[Silence], now: float) -> list[dict[str, Any]]:
    """Silences for ``silence list`` and ``alerts``: active first, then ended, newest first."""
    ordered = sorted(silences, key=lambda s: (not s.active(now), -s.id))
    return [s.to_json(now) for s in ordered]
