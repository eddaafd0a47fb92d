"""Incidents: one per fingerprint, counted, resolved, persisted across restarts; the timeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statewarden.errors import StatewardenError, UsageError
from statewarden.incidents.book import IncidentBook
from statewarden.incidents.signals import EVIDENCE_LINE_MAX_CHARS, Signal, cap_evidence
from statewarden.incidents.timeline import Timeline

DB = "/home/u/.hermes/state.db"


def sig(kind: str = "corruption", at: float = 1000.0, **kw: object) -> Signal:
    return Signal(kind, DB, kw.pop("summary", f"{kind} seen"), at, **kw)  # type: ignore[arg-type]


class TestBook:
    def test_flood_is_one_incident_with_a_count(self, tmp_path: Path) -> None:
        """520,000 matching lines are one incident with count 520,000, opened once."""
        book = IncidentBook(tmp_path / "incidents.json")
        changes = [
            book.record(sig(at=1000.0 + i * 0.001, evidence=(f"line {i % 3}",)))
            for i in range(520_000)
        ]
        assert [c.change for c in changes if c and c.change != "updated"] == ["opened"]
        (inc,) = book.open_incidents()
        assert inc.count == 520_000
        assert inc.evidence == ["line 0", "line 1", "line 2"]

    def test_keys_separate_incidents(self) -> None:
        """Different keys (e.g. task names) are different incidents."""
        book = IncidentBook(None)
        book.record(sig("task_died", key="hosted_room_worker"))
        book.record(sig("task_died", key="cron_ticker"))
        book.record(sig("task_died", key="hosted_room_worker"))
        assert sorted((i.key, i.count) for i in book.open_incidents()) == [
            ("cron_ticker", 1),
            ("hosted_room_worker", 2),
        ]

    def test_state_rule_resolves_on_clear(self) -> None:
        """A state incident resolves when its watcher says the condition cleared."""
        book = IncidentBook(None)
        book.record(sig("stale_holder", key="4242"))
        update = book.record(sig("stale_holder", key="4242", clears=True, at=1005.0))
        assert update is not None
        assert update.change == "resolved"
        assert book.open_incidents() == []
        assert book.record(sig("stale_holder", key="4242", clears=True)) is None

    def test_log_rule_resolves_after_quiet_period(self) -> None:
        """A log incident resolves after an hour without a new line; state ones do not."""
        book = IncidentBook(None)
        book.record(sig("corruption", at=1000.0))
        book.record(sig("wal_growth", at=1000.0))
        assert book.tick(now=1000.0 + 3599) == []
        (resolved,) = book.tick(now=1000.0 + 3600)
        assert resolved.incident.kind == "corruption"
        assert [i.kind for i in book.open_incidents()] == ["wal_growth"]

    def test_reopen_within_window_keeps_the_id(self) -> None:
        """A condition that comes back within 10 minutes reopens the same incident."""
        book = IncidentBook(None)
        first = book.record(sig("stale_holder", key="1", at=1000.0))
        book.record(sig("stale_holder", key="1", clears=True, at=1010.0))
        again = book.record(sig("stale_holder", key="1", at=1100.0))
        assert first is not None
        assert again is not None
        assert again.change == "reopened"
        assert again.incident.id == first.incident.id
        later = book.record(sig("stale_holder", key="1", clears=True, at=1200.0))
        assert later is not None
        new = book.record(sig("stale_holder", key="1", at=1200.0 + 601))
        assert new is not None
        assert new.change == "opened"
        assert new.incident.id != first.incident.id

    def test_escalation(self) -> None:
        """A more severe signal on an open incident escalates it."""
        book = IncidentBook(None)
        book.record(sig("write_failures", at=1.0))
        up = book.record(
            sig("write_failures", at=2.0, severity="critical", summary="pending queue")
        )
        assert up is not None
        assert up.change == "escalated"
        assert up.incident.severity == "critical"

    def test_write_failure_rate(self) -> None:
        """write_failures carry a per-minute rate over the last minute."""
        book = IncidentBook(None)
        ups = [book.record(sig("write_failures", at=1000.0 + i)) for i in range(30)]
        assert ups[-1] is not None
        assert ups[-1].rate_per_min == 30.0

    def test_persisted_no_reopen_storm_after_restart(self, tmp_path: Path) -> None:
        """After a restart the open incident is still there; new signals update it, not reopen."""
        path = tmp_path / "incidents.json"
        book = IncidentBook(path)
        book.record(sig(at=1.0))
        book.save()
        again = IncidentBook(path)
        (inc,) = again.open_incidents()
        up = again.record(sig(at=2.0))
        assert up is not None
        assert up.change == "updated"
        assert up.incident.id == inc.id
        assert up.incident.count == 2

    def test_ack_and_unknown_id(self, tmp_path: Path) -> None:
        """ack marks an incident; an unknown id is a usage error."""
        book = IncidentBook(tmp_path / "i.json")
        book.record(sig())
        assert book.ack(1).acked
        assert json.loads((tmp_path / "i.json").read_text())["incidents"][0]["acked"] is True
        with pytest.raises(UsageError, match="no incident 9"):
            book.ack(9)

    def test_damaged_book_is_set_aside(self, tmp_path: Path) -> None:
        """A damaged incidents.json is renamed aside with a clear error, never a traceback."""
        path = tmp_path / "incidents.json"
        path.write_text("{not json")
        with pytest.raises(StatewardenError, match="incident book unreadable"):
            IncidentBook(path)
        assert not path.exists()
        assert len(list(tmp_path.glob("incidents.damaged-*"))) == 1

    def test_write_failures_resolve_sooner(self) -> None:
        """write_failures resolves after 15 quiet minutes (its kind says so), others later."""
        book = IncidentBook(None)
        book.record(sig("write_failures", at=1000.0))
        book.record(sig("task_died", at=1000.0))
        assert book.tick(now=1000.0 + 899) == []
        (resolved,) = book.tick(now=1000.0 + 900)
        assert resolved.incident.kind == "write_failures"
        assert [i.kind for i in book.open_incidents()] == ["task_died"]

    def test_kind_from_an_older_book_resolves_like_a_log_kind(self, tmp_path: Path) -> None:
        """A saved incident whose kind is no longer known does not stop the book's tick."""
        path = tmp_path / "incidents.json"
        book = IncidentBook(path)
        book.record(sig("corruption", at=1000.0))
        book.flush(force=True)  # the whole book in incidents.json, the change log emptied
        data = json.loads(path.read_text())
        data["incidents"][0]["kind"] = "retired_kind"
        path.write_text(json.dumps(data))
        book = IncidentBook(path)
        (resolved,) = book.tick(now=1000.0 + 3600)
        assert resolved.incident.kind == "retired_kind"

    def test_evidence_keeps_the_note_of_what_was_cut(self) -> None:
        """An evidence line over the cap is cut once, and the note saying so is kept."""
        book = IncidentBook(None)
        huge = "Traceback (most recent call last):\n" + "x" * 10_000
        book.record(sig(evidence=(huge,)))
        (inc,) = book.open_incidents()
        (line,) = inc.evidence
        assert len(line) <= EVIDENCE_LINE_MAX_CHARS
        assert line.startswith("Traceback (most recent call last):\nxxx")
        kept = line.rpartition("\n…[")[0]
        assert line.endswith(f"\n…[{len(huge) - len(kept)} chars cut]")
        assert cap_evidence(line) == line

    def test_unknown_kind_rejected(self) -> None:
        """Signals must use a known incident kind."""
        with pytest.raises(ValueError, match="unknown incident kind"):
            Signal("nonsense", DB, "x")


class TestEvidenceCap:
    @given(st.text(max_size=9000))
    @settings(max_examples=200, deadline=None)
    def test_any_text_fits_keeps_its_start_and_is_cut_once(self, text: str) -> None:
        """Whatever the text, the capped line fits the cap, starts like the text, says how
        much was cut, and capping it again changes nothing."""
        line = cap_evidence(text)
        assert len(line) <= EVIDENCE_LINE_MAX_CHARS
        assert cap_evidence(line) == line
        if len(text) <= EVIDENCE_LINE_MAX_CHARS:
            assert line == text
        else:
            kept, _, note = line.rpartition("\n…[")
            assert text.startswith(kept)
            assert note == f"{len(text) - len(kept)} chars cut]"


class TestTimeline:
    def test_around_and_bounded(self, tmp_path: Path) -> None:
        """Entries around a moment are returned in order; old ones are compacted away."""
        tl = Timeline(tmp_path, max_age_s=100.0)
        tl.add(DB, "cron_started", "cron job cron_d0aa05fd7f4a started", at=1000.0)
        tl.add(DB, "holders", "5 writers held state.db", at=1001.0)
        tl.add(DB, "signal", "first 'disk I/O error'", at=4000.0)
        near = tl.around(DB, 4000.0, before_s=3600.0)
        assert [e.text for e in near] == [
            "cron job cron_d0aa05fd7f4a started",
            "5 writers held state.db",
            "first 'disk I/O error'",
        ]
        tl.compact(DB, now=4050.0)
        assert [e.text for e in tl.entries(DB)] == ["first 'disk I/O error'"]

    def test_size_cap(self, tmp_path: Path) -> None:
        """The file never grows far past max_bytes."""
        tl = Timeline(tmp_path, max_bytes=20_000)
        for i in range(2000):
            tl.add(DB, "wal_size", f"-wal {i} bytes", at=1000.0 + i)
        assert tl.path_for(DB).stat().st_size <= 20_000
        assert tl.entries(DB)[-1].text == "-wal 1999 bytes"

    def test_signal_repeats_are_rate_limited(self, tmp_path: Path) -> None:
        """The same signal is written at most once a minute."""
        tl = Timeline(tmp_path)
        written = [tl.add_signal(DB, "fp", "x", at=1000.0 + i) for i in range(120)]
        assert written.count(True) == 2

    def test_torn_line_is_skipped(self, tmp_path: Path) -> None:
        """A half-written last line (crash) is ignored."""
        tl = Timeline(tmp_path)
        tl.add(DB, "a", "kept", at=1.0)
        with open(tl.path_for(DB), "a") as f:
            f.write('{"at": 2, "wh')
        assert [e.text for e in tl.entries(DB)] == ["kept"]
