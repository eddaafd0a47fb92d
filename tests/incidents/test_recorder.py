"""The recorder (findings -> timeline and book) and ``incidents show``."""

from __future__ import annotations

from pathlib import Path

import pytest

from statewarden.errors import UsageError
from statewarden.incidents.book import IncidentBook, Update
from statewarden.incidents.recorder import Recorder
from statewarden.incidents.show import show_incident
from statewarden.incidents.signals import Observation, Signal
from statewarden.incidents.timeline import Timeline, format_entry

DB = "/home/u/.hermes/state.db"


def _recorder(tmp_path: Path) -> tuple[Recorder, list[Update]]:
    seen: list[Update] = []
    book = IncidentBook(tmp_path / "incidents.json", quiet_resolve_s=60.0)
    return Recorder(book, Timeline(tmp_path / "timeline"), seen.append), seen


class TestRecorder:
    def test_an_observation_is_a_timeline_entry_only(self, tmp_path: Path) -> None:
        """An observation goes on the timeline only: no incident, no update handed on."""
        rec, seen = _recorder(tmp_path)
        assert rec.record(Observation("holder_arrived", DB, "pid 7 opened state.db", 10.0)) is None
        assert [(e.what, e.text) for e in rec.timeline.entries(DB)] == [
            ("holder_arrived", "pid 7 opened state.db")
        ]
        assert rec.book.incidents == {}
        assert seen == []

    def test_every_update_is_handed_on_with_its_source(self, tmp_path: Path) -> None:
        """Plain updates too: the announcer, not the recorder, decides what is news."""
        rec, seen = _recorder(tmp_path)
        for at in (10.0, 11.0):
            rec.record(
                Signal(
                    "stale_holder", DB, "pid 7 holds an old inode", at, key="7", source="holders"
                )
            )
        rec.record(Signal("stale_holder", DB, "gone", 12.0, key="7", source="holders", clears=True))
        assert [(u.change, u.source) for u in seen] == [
            ("opened", "holders"),
            ("updated", "holders"),
            ("resolved", "holders"),
        ]
        # The signal is on the timeline once (repeats within a minute are not); a clear is not.
        assert [e.what for e in rec.timeline.entries(DB)] == ["signal"]

    def test_tick_hands_on_quiet_resolutions(self, tmp_path: Path) -> None:
        """An incident opened by a signal is handed on at the next tick, and its quiet resolution at
        a later tick, with no source."""
        rec, seen = _recorder(tmp_path)
        rec.record(Signal("corruption", DB, "malformed", 10.0))
        rec.tick(30.0)
        assert [u.change for u in seen] == ["opened"]
        rec.tick(100.0)
        assert [u.change for u in seen] == ["opened", "resolved"]
        assert seen[-1].source == ""


class TestShowIncident:
    def test_the_timeline_around_the_first_signal(self, tmp_path: Path) -> None:
        """Entries an hour before to ten minutes after the first signal, each with its line."""
        rec, _ = _recorder(tmp_path)
        rec.record(Observation("cron_started", DB, "too early", 10_000.0 - 3601))
        rec.record(Observation("cron_started", DB, "cron job x started", 10_000.0 - 5))
        update = rec.record(Signal("corruption", DB, "malformed", 10_000.0, evidence=("l1",)))
        rec.record(Observation("wal_size", DB, "too late", 10_000.0 + 601))
        assert update is not None
        shown = show_incident(rec.book, rec.timeline, update.incident.id)
        assert shown["incident"]["evidence"] == ["l1"]
        assert [e["text"] for e in shown["timeline"]] == ["cron job x started", "malformed"]
        first = rec.timeline.entries(DB)[1]
        assert shown["timeline"][0]["line"] == format_entry(first)

    def test_an_unknown_incident_is_a_usage_error(self, tmp_path: Path) -> None:
        """Showing an incident id the book does not have is a usage error "no incident N"."""
        rec, _ = _recorder(tmp_path)
        with pytest.raises(UsageError, match=r"^no incident 999$"):
            show_incident(rec.book, rec.timeline, 999)
