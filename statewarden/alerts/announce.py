"""Incident changes announced: one journald entry and one timeline line per change.

The daemon hands every :class:`~statewarden.incidents.book.Update` the incident book
produces to :meth:`Announcer.submit`, and nothing else. An incident that opens,
reopens, escalates or resolves is announced; a plain ``updated`` (one more signal for
an open incident) is not, so a flood of 520,000 lines is one entry. The journald entry
carries the kind's ``MESSAGE_ID`` and the incident's severity as its priority (a
resolution is ``info``); the timeline line makes the change part of the incident's
own evidence.
"""

from __future__ import annotations

import time
from typing import Any

from statewarden.incidents.book import Update
from statewarden.incidents.kinds import KINDS
from statewarden.incidents.timeline import Timeline
from statewarden.logs import get_logger

# Incident severities are logger method names already; a resolution is news, not trouble.
RESOLVED_LEVEL = "info"


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
    """Writes each announced incident change to journald and the evidence timeline."""

    def __init__(self, timeline: Timeline, log: Any | None = None) -> None:
        self.timeline = timeline
        self.log = get_logger() if log is None else log

    def submit(self, update: Update) -> None:
        if not announced(update):
            return
        inc = update.incident
        level = RESOLVED_LEVEL if update.change == "resolved" else inc.severity
        text = announcement(update)
        getattr(self.log, level)(
            text,
            message_id=KINDS[inc.kind].message_id,
            incident=inc.id,
            kind=inc.kind,
            db=inc.db,
            count=inc.count,
            change=update.change,
            source=update.source or None,
        )
        self.timeline.add(inc.db, "incident", text, time.time(), incident=inc.id, kind=inc.kind)
