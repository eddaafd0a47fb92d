"""Evidence enters once, redacted then capped, before any store sees it.

A signal and an observation clean their text as they are made; the incident book,
the timeline and the alert item keep exactly what the signal holds.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from statewarden.alerts.message import item_for
from statewarden.config import REDACTED
from statewarden.incidents.book import IncidentBook, Update
from statewarden.incidents.recorder import Recorder
from statewarden.incidents.signals import EVIDENCE_LINE_MAX_CHARS, Observation, Signal, cap_evidence
from statewarden.incidents.timeline import Timeline

DB = "/home/u/.hermes/state.db"
TOKEN = "123456789:AAHfz1x2y3w4v5u6t7s8r9q0p1o2n3m4l5k6j"
KEY = "sk-proj-Zq8Wm3Kd9Lp2Rt7Yx4Nb6Vc1"


def crossing(secret: str, inside: int) -> str:
    """A line whose ``secret`` crosses the cap: ``inside`` of its characters fall
    before the cut a plain cap makes, the rest after it."""
    cut = len(cap_evidence("x" * (EVIDENCE_LINE_MAX_CHARS * 2)).split("\n…[")[0])
    lead = "x" * (cut - inside - 1) + " "
    return lead + secret + " " + "y" * EVIDENCE_LINE_MAX_CHARS


def test_a_secret_across_the_cap_is_not_kept_in_part(tmp_path: Path) -> None:
    """A bot token or provider key that a cut would split is redacted before the cut:
    the book keeps no piece of it (capping first left a prefix no pattern matched)."""
    book = IncidentBook(tmp_path / "incidents.json")
    for secret, inside in ((TOKEN, 25), (KEY, 14)):
        book.record(
            Signal(
                "corruption",
                DB,
                "malformed",
                1000.0,
                key=secret[:3],
                evidence=(crossing(secret, inside),),
            )
        )
    book.flush()
    stored = "".join(p.read_text() for p in tmp_path.iterdir())
    for inc in book.open_incidents():
        (line,) = inc.evidence
        assert len(line) <= EVIDENCE_LINE_MAX_CHARS
        assert REDACTED in line
    for secret in (TOKEN, KEY):
        assert secret[: len(secret) - 10] not in stored
    assert TOKEN.split(":")[1][:12] not in stored
    assert KEY[3:15] not in stored


def test_signal_and_observation_are_clean_as_made() -> None:
    """A signal's summary and evidence, an observation's text and text fields, hold no
    secret from the moment they exist; a long line is capped with its note."""
    s = Signal(
        "corruption", DB, f"bad api_key={KEY}", 1.0, evidence=(f"POST /bot{TOKEN}/send", "z" * 9000)
    )
    assert KEY not in s.summary
    assert "api_key=" + REDACTED in s.summary
    assert TOKEN not in s.evidence[0]
    assert len(s.evidence[1]) <= EVIDENCE_LINE_MAX_CHARS
    assert s.evidence[1] == cap_evidence("z" * 9000)
    o = Observation(
        "holder_arrived", DB, f"token={TOKEN}", 1.0, fields={"cmd": f"x {KEY}", "pid": 7}
    )
    assert TOKEN not in o.text
    assert KEY not in o.fields["cmd"]
    assert o.fields["pid"] == 7


def test_text_without_secrets_is_kept_as_it_was() -> None:
    """Cleaning changes nothing else: a short line is kept as is, a long one is capped
    exactly as ``cap_evidence`` caps it."""
    short = "ERROR gateway: database disk image is malformed"
    long = "line\n" * 3000
    s = Signal("corruption", DB, short, 1.0, evidence=(short, long))
    assert s.summary == short
    assert s.evidence == (short, cap_evidence(long))


def test_book_timeline_and_alert_see_only_the_clean_text(tmp_path: Path) -> None:
    """Through the recorder: incidents.json, the change log, the timeline file and the
    alert item hold the redacted text and no spelling of the secrets."""
    book = IncidentBook(tmp_path / "incidents.json")
    timeline = Timeline(tmp_path / "timeline")
    updates: list[Update] = []
    rec = Recorder(book, timeline, updates.append)
    rec.record(
        Observation(
            "cron_started",
            DB,
            f"cron with password={KEY}",
            1.0,
            fields={"url": f"https://api.telegram.org/bot{TOKEN}/x"},
        )
    )
    rec.record(
        Signal(
            "corruption",
            DB,
            f"malformed, Authorization: Bearer {KEY}",
            2.0,
            evidence=(f"ERROR telegram: /bot{TOKEN}/getUpdates malformed",),
        )
    )
    book.flush()
    (update,) = updates
    item = item_for(update.incident, update.change, profile="default")
    blobs = [json.dumps(asdict(item))]
    blobs += [p.read_text() for p in tmp_path.rglob("*") if p.is_file()]
    assert len(blobs) >= 3
    for blob in blobs:
        assert TOKEN not in blob
        assert TOKEN.split(":")[1] not in blob
        assert KEY not in blob
    assert any(REDACTED in b for b in blobs[1:])
    assert REDACTED in item.summary
    assert item.evidence
    assert REDACTED in item.evidence[0]
