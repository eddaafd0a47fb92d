"""Incident changes announced: one daemon log line and one timeline line per change.

The daemon hands every :class:`~statewarden.incidents.book.Update` the incident book
produces to :meth:`Announcer.submit`, and nothing else. An incident that opens,
reopens, escalates or resolves is announced; a plain ``updated`` (one more signal for
an open incident) is not, so a flood of 520,000 lines is one line. The timeline line
makes the change part of the incident's own evidence.

The log line is the daemon's record of what it saw, at ``info`` and without a
``MESSAGE_ID``: the alert itself, with the kind's ``MESSAGE_ID`` and the incident's
severity as its priority, is the journald sink's one entry per change
(``alerts/journald_sink.py``), after grouping, maintenance muting and silences. A
failure to persist does not stop that entry: the outbox delivers from memory.
"""

from __future__ import annotations

import time
from typing import Any

from statewarden.incidents import Timeline, Update
from statewarden.logs import get_logger


def announced(update: Update) -> bool:
    """Whether an update is a change a person hears about (not one more signal)."""
    return update.change != "updated"


def announcement(update: Update) -> str:
    """The one line that says what happened to the incident."""
    inc = update.incident
    if update.change == "resolved":
        return f"incident resolved: {inc.kind} ({inc.resolution})"
    return f"incident {update.change}: {inc.summary}"


class Announcer:
    """Writes each announced incident change to the daemon's log and the evidence timeline."""

    def __init__(self, timeline: Timeline, log: Any | None = None) -> None:
        self.timeline = timeline
        self.log = get_logger() if log is None else log

    def submit(self, update: Update) -> None:
        if not announced(update):
            return
        inc = update.incident
        text = announcement(update)
        # At info: the record of a change, not the alert about it (the journald sink's
        # entry, at the incident's severity), so ``journalctl -p warning`` lists it once.
        self.log.info(
            text,
            incident=inc.id,
            kind=inc.kind,
            severity=inc.severity,
            db=inc.db,
            count=inc.count,
            change=update.change,
            source=update.source or None,
        )
        self.timeline.add(inc.db, "incident", text, time.time(), incident=inc.id, kind=inc.kind)
