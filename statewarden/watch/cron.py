"""Cron sessions seen in Hermes' records: each new ``cron_<job>_<stamp>`` session id is a
``cron_started`` observation (the timeline says when each job ran)."""

from __future__ import annotations

import re
import time
from collections import OrderedDict

from statewarden.incidents import Observation
from statewarden.targets import Target
from statewarden.watch.record_signals import source_of
from statewarden.watch.records import LogRecord

# Cron session ids remembered by ``CronSessions`` (oldest forgotten first).
CRON_SESSIONS_REMEMBERED = 4096

_CRON_RE = re.compile(r"\bcron_(?P<job>[0-9A-Za-z-]+(?:_[0-9A-Za-z-]+)*?)_(?P<stamp>\d{8}_\d{6})\b")


def cron_sessions(record: LogRecord) -> list[str]:
    """The cron session ids (``cron_<job>_<YYYYmmdd_HHMMSS>``) a record names, in order."""
    found: list[str] = []
    if "cron_" not in record.message and not (record.session or "").startswith("cron_"):
        return found
    for text in (record.session or "", record.message):
        for m in _CRON_RE.finditer(text):
            if m.group(0) not in found:
                found.append(m.group(0))
    return found


class CronSessions:
    """Which cron session ids were seen already (bounded; oldest forgotten first)."""

    def __init__(self, remember: int = CRON_SESSIONS_REMEMBERED) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._remember = remember

    def __contains__(self, session: object) -> bool:
        return session in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def observe(
        self, record: LogRecord, target: Target, now: float | None = None
    ) -> list[Observation]:
        """A ``cron_started`` observation per cron session id not seen before."""
        out = []
        for session in cron_sessions(record):
            if session in self._seen:
                self._seen.move_to_end(session)
                continue
            self._seen[session] = None
            while len(self._seen) > self._remember:
                self._seen.popitem(last=False)
            m = _CRON_RE.fullmatch(session)
            job = m["job"] if m else session
            at = record.timestamp
            if at is None:
                at = time.time() if now is None else now
            out.append(
                Observation(
                    what="cron_started",
                    db=str(target.db),
                    text=f"cron job {job} started (session {session})",
                    at=at,
                    fields={"session": session, "job": job, "source": source_of(record)},
                )
            )
        return out
