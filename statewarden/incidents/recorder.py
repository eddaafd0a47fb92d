"""What the watchers find, recorded: observations in the timeline, signals in the book.

:meth:`Recorder.record` takes one signal or observation. An observation is one
timeline entry. A signal goes to the incident book; unless it clears a condition it is
also a timeline entry (the timeline writes a repeating one at most once a minute).
Every update the book makes, and each quiet resolution :meth:`Recorder.tick` finds, is
handed to ``on_update`` (the daemon's announcer) in the order it happened.
"""

from __future__ import annotations

from collections.abc import Callable

from statewarden.incidents.book import IncidentBook, Update
from statewarden.incidents.signals import Observation, Signal
from statewarden.incidents.timeline import Timeline


class Recorder:
    def __init__(
        self, book: IncidentBook, timeline: Timeline, on_update: Callable[[Update], None]
    ) -> None:
        self.book = book
        self.timeline = timeline
        self.on_update = on_update

    def record(self, found: Signal | Observation) -> Update | None:
        """Record one finding; the incident update it caused, if any."""
        if isinstance(found, Observation):
            self.timeline.add(found.db, found.what, found.text, found.at, **found.fields)
            return None
        updates = self.book.record_all(found)
        if not found.clears:
            self.timeline.add_signal(
                found.db, found.fingerprint, found.summary, found.at, kind=found.kind
            )
        for update in updates:
            self.on_update(update)
        return updates[-1] if updates else None

    def resolve(self, incident_id: int, why: str) -> Update | None:
        """Close an open incident by hand; the update goes to ``on_update`` like any other."""
        update = self.book.resolve(incident_id, why)
        if update is not None:
            self.on_update(update)
        return update

    def tick(self, now: float) -> None:
        """Resolve the log-rule incidents that have been quiet long enough."""
        for update in self.book.tick(now):
            self.on_update(update)
