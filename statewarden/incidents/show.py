"""``incidents show``: one incident with the evidence timeline around its first signal.

The one function both the daemon's ``incident`` request and the CLI's local fallback
(no daemon: the book and timeline read from the state directory) call, so the two
answers are the same document.
"""

from __future__ import annotations

from typing import Any

from statewarden.incidents.book import IncidentBook
from statewarden.incidents.timeline import Timeline, format_entry


def show_incident(book: IncidentBook, timeline: Timeline, incident_id: int) -> dict[str, Any]:
    """``{"incident": ..., "timeline": [...]}``: the incident's JSON and the timeline
    entries around its first signal, each with the line a person reads. An unknown id
    is a ``UsageError`` ("no incident N")."""
    inc = book.get(incident_id)
    entries = timeline.around(inc.db, inc.first_seen)
    return {
        "incident": inc.to_json(),
        "timeline": [{**e.to_json(), "line": format_entry(e)} for e in entries],
    }
