"""What one notification says: its data, and its text for a person who has to act.

A **notification** is what the router hands to the sinks: one or more incidents of one
database in one state (``firing``, ``resolved``) or a ``test``. Each incident in it is an
:class:`Item`: what is wrong, on which profile and host, since when, how often, two or
three evidence lines, the holders, and the next step. The data is copied out of the
incident when the notification is made, so the outbox can send it after a restart
exactly as it was meant.

Text comes in two shapes: plain lines (journald, the CLI) and HTML lines (Telegram,
``parse_mode=HTML``). Every HTML line is complete on its own (no tag spans two lines), so
a long message can be split between any two lines.
"""

from __future__ import annotations

import html
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from statewarden.incidents import Incident, scrub
from statewarden.kinds import KINDS, SEVERITY_RANK

NotificationState = Literal["firing", "resolved", "test"]
EVIDENCE_LINES = 3  # evidence entries shown per incident
EVIDENCE_LINE_CHARS = 300
HOLDER_LINES = 5
TEST_TEXT = "If you can read this, statewarden's alerts reach you here."


@dataclass
class Item:
    """One incident as a notification shows it."""

    incident: int
    kind: str
    severity: str
    db: str
    profile: str
    summary: str
    change: str  # opened, reopened, escalated, reminder, resolved, test
    first_seen: float
    last_seen: float
    count: int
    rate_per_min: float | None = None
    evidence: list[str] = field(default_factory=list)
    holders: list[str] = field(default_factory=list)
    next_step: str = ""
    resolution: str = ""
    folded: list[str] = field(default_factory=list)

    @property
    def message_id(self) -> str:
        kind = KINDS.get(self.kind)
        return kind.message_id if kind is not None else ""

    @property
    def state(self) -> str:
        return "resolved" if self.change == "resolved" else "firing"


@dataclass
class Notification:
    """What the sinks deliver: incidents of one database in one state, or a test."""

    key: str  # deduplication: the same key is never queued or delivered twice
    state: NotificationState
    host: str
    created_at: float
    items: list[Item]
    dropped: int = 0  # notifications the outbox had to drop before this one (it was full)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Notification:
        items = [Item(**raw) for raw in data.get("items", [])]
        return cls(
            key=str(data["key"]),
            state=data["state"],
            host=str(data.get("host", "")),
            created_at=float(data.get("created_at", 0.0)),
            items=items,
            dropped=int(data.get("dropped", 0)),
        )


def severity_rank(severity: str) -> int:
    """How severe (0 info .. 3 critical); a name from a saved file that is unknown is 0."""
    for name, rank in SEVERITY_RANK.items():
        if name == severity:
            return rank
    return 0


def evidence_lines(evidence: list[str]) -> list[str]:
    """Two or three lines a person reads: each entry's first line, and a traceback's last."""
    out: list[str] = []
    for entry in evidence[:EVIDENCE_LINES]:
        lines = [ln for ln in entry.splitlines() if ln.strip()]
        if not lines:
            continue
        text = lines[0].strip()
        if len(lines) > 1:
            text += " ... " + lines[-1].strip()
        # Hermes' Telegram gateway can log its bot's URL: a token there is not sent on.
        # Evidence is scrubbed as it enters (``incidents/evidence.py``); a book written by
        # an older statewarden, whose patterns knew fewer secrets, is scrubbed again here.
        text = scrub(text)
        if len(text) > EVIDENCE_LINE_CHARS:
            text = text[: EVIDENCE_LINE_CHARS - 3] + "..."
        out.append(text)
    return out


def next_step(kind: str, profile: str) -> str:
    """What a person does next about an incident of ``kind`` on ``profile`` (a kind no
    longer known, from an older incident book: look at the incidents)."""
    known = KINDS.get(kind)
    step = known.next_step if known is not None else "statewardenctl incidents"
    return step.format(profile=profile)


def item_for(
    inc: Incident,
    change: str,
    *,
    profile: str,
    holders: list[str] | None = None,
    folded: list[str] | None = None,
    rate_per_min: float | None = None,
) -> Item:
    return Item(
        incident=inc.id,
        kind=inc.kind,
        severity=inc.severity,
        db=inc.db,
        profile=profile,
        summary=inc.summary,  # scrubbed when its signal was made
        change=change,
        first_seen=inc.first_seen,
        last_seen=inc.last_seen,
        count=inc.count,
        rate_per_min=rate_per_min,
        evidence=evidence_lines(inc.evidence),
        holders=list(holders or [])[:HOLDER_LINES],
        next_step=next_step(inc.kind, profile),
        resolution=inc.resolution,
        folded=list(folded or []),
    )


# --------------------------------------------------------------------------- text


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def headline(n: Notification) -> str:
    """The first line: what, how bad, where."""
    if n.state == "test":
        return f"statewarden test notification from {n.host}"
    first = n.items[0]
    where = f"{n.host}, profile {first.profile}"
    if n.state == "resolved":
        if len(n.items) == 1:
            return f"RESOLVED {first.kind} on {where}"
        return f"RESOLVED {len(n.items)} incidents on {where}"
    if len(n.items) == 1:
        what = "REMINDER " if first.change == "reminder" else ""
        return f"{what}{first.severity.upper()} {first.kind} on {where}"
    worst = max(n.items, key=lambda i: severity_rank(i.severity)).severity
    return f"{worst.upper()} {len(n.items)} incidents on {where}"


def item_lines(item: Item, now: float, *, holders: bool = True) -> list[tuple[str, str]]:
    """(label, text) lines for one incident; label "" is a continuation line.

    ``holders=False`` leaves the holders out (the item before listed the same ones).
    """
    out: list[tuple[str, str]] = []
    change = "" if item.change in ("opened", "test") else f" ({item.change})"
    if not item.incident:
        # Not an incident (a maintenance run's outcome, statewarden's own failure).
        out.append(("what", f"{item.kind}: {item.summary}"))
        out.append(("database", item.db))
        out.append(("when", f"{_when(item.first_seen)} to {_when(item.last_seen)}"))
        out += [("details" if i == 0 else "", line) for i, line in enumerate(item.evidence)]
        if item.next_step:
            out.append(("next step", item.next_step))
        return out
    out.append(("what", f"#{item.incident} {item.kind}{change}: {item.summary}"))
    out.append(("database", item.db))
    how_often = f"{item.count} time{'s' if item.count != 1 else ''}"
    if item.rate_per_min:
        how_often += f", {item.rate_per_min:.1f}/min"
    out.append(
        (
            "since",
            f"{_when(item.first_seen)} ({_ago(now - item.first_seen)} ago), "
            f"seen {how_often}, last {_when(item.last_seen)}",
        )
    )
    if item.change == "resolved":
        out.append(("resolved", item.resolution or "condition cleared"))
    for i, line in enumerate(item.evidence):
        out.append(("evidence" if i == 0 else "", line))
    for i, line in enumerate(item.holders if holders else []):
        out.append(("holders" if i == 0 else "", line))
    if item.folded:
        out.append(("also open", "; ".join(item.folded)))
    if item.change != "resolved" and item.next_step:
        out.append(("next step", item.next_step))
    return out


def plain_lines(n: Notification, now: float | None = None) -> list[str]:
    now = time.time() if now is None else now
    lines = [headline(n)]
    if n.state == "test":
        lines.append(TEST_TEXT)
    if n.dropped:
        lines.append(f"(the outbox was full: {n.dropped} earlier notification(s) were dropped)")
    previous: list[str] = []
    for item in n.items:
        lines.append("")
        for label, text in item_lines(item, now, holders=item.holders != previous):
            lines.append(f"  {label + ':':<11} {text}" if label else f"  {'':<11} {text}")
        previous = item.holders
    return lines


def plain_text(n: Notification, now: float | None = None) -> str:
    return "\n".join(plain_lines(n, now))


def html_lines(n: Notification, now: float | None = None) -> list[str]:
    """Telegram HTML, one complete line per entry (no tag spans two lines)."""
    now = time.time() if now is None else now
    esc = html.escape
    lines = [f"<b>{esc(headline(n))}</b>"]
    if n.state == "test":
        lines.append(esc(TEST_TEXT))
    if n.dropped:
        lines.append(
            esc(f"(the outbox was full: {n.dropped} earlier notification(s) were dropped)")
        )
    previous: list[str] = []
    for item in n.items:
        lines.append("")
        for label, text in item_lines(item, now, holders=item.holders != previous):
            if label in ("evidence", "details", "holders", "next step", ""):
                body = f"<code>{esc(text)}</code>"
            else:
                body = esc(text)
            lines.append(f"<i>{esc(label)}:</i> {body}" if label else f"    {body}")
        previous = item.holders
    return lines
