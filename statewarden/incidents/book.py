"""Signals -> incidents: open, update, resolve; persisted so a restart changes nothing.

An incident is one problem with one database, identified by its fingerprint
(kind | database | key). Every signal with that fingerprint updates the same incident:
a flood of 520,000 lines is one incident with a count, not 520,000 events.

Resolution:
- state rules (stale holder, WAL growth, unsafe mount, ...) resolve when their watcher
  sends a signal with ``clears=True``;
- log rules resolve after a quiet period without a new matching signal
  (``quiet_resolve_s``, per kind where it matters).

An incident that resolved less than ``reopen_window_s`` ago and fires again is reopened
(the same id, count carried on) rather than a new one, so a flapping condition does not
become a storm of incidents. The book is saved atomically (tmp + fsync + rename) to
``<state_dir>/incidents.json``: at once when an incident opens, resolves or is
acknowledged, and at most every ``save_interval_s`` for plain updates.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from statewarden.atomic import write_atomic
from statewarden.config import DEFAULT_QUIET_RESOLVE_S, DEFAULT_REOPEN_WINDOW_S
from statewarden.errors import StatewardenError, UsageError
from statewarden.incidents.signals import (
    KINDS,
    SEVERITY_RANK,
    Severity,
    Signal,
    cap_evidence,
    is_state_kind,
)

DEFAULT_SAVE_INTERVAL_S = 1.0
DEFAULT_KEEP_RESOLVED = 500
EVIDENCE_KEEP = 10  # evidence lines kept per incident: the first few and the latest
RATE_WINDOW_S = 60.0

Change = Literal["opened", "reopened", "escalated", "updated", "resolved"]


@dataclass
class Incident:
    id: int
    kind: str
    db: str
    key: str
    severity: Severity
    summary: str
    first_seen: float
    last_seen: float
    count: int = 1
    state: Literal["open", "resolved"] = "open"
    resolved_at: float | None = None
    resolution: str = ""
    acked: bool = False
    source: str = ""
    evidence: list[str] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        return f"{self.kind}|{self.db}|{self.key}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Update:
    """What one signal did to the book; alerts are raised from these."""

    change: Change
    incident: Incident
    rate_per_min: float | None = None
    source: str = ""  # the watcher whose signal caused it; "" for a quiet resolution


class IncidentBook:
    def __init__(
        self,
        path: Path | None,
        *,
        reopen_window_s: float = DEFAULT_REOPEN_WINDOW_S,
        quiet_resolve_s: float = DEFAULT_QUIET_RESOLVE_S,
        save_interval_s: float = DEFAULT_SAVE_INTERVAL_S,
        keep_resolved: int = DEFAULT_KEEP_RESOLVED,
    ) -> None:
        self.path = path
        self.reopen_window_s = reopen_window_s
        self.quiet_resolve_s = quiet_resolve_s
        self.save_interval_s = save_interval_s
        self.keep_resolved = keep_resolved
        self.incidents: dict[int, Incident] = {}
        self._by_fingerprint: dict[str, int] = {}
        self._next_id = 1
        self._dirty = False
        self._saved_at = 0.0
        self._recent: dict[str, deque[float]] = {}
        if path is not None:
            self._load(path)

    # ------------------------------------------------------------- persistence

    def _load(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            # A damaged book must not stop the daemon; keep it aside and start afresh.
            with contextlib.suppress(OSError):
                path.rename(path.with_suffix(f".damaged-{int(time.time())}"))
            raise StatewardenError(f"{path}: incident book unreadable ({exc}); set aside") from None
        self._next_id = int(data.get("next_id", 1))
        for raw in data.get("incidents", []):
            inc = Incident(**raw)
            self.incidents[inc.id] = inc
            self._by_fingerprint[inc.fingerprint] = inc.id

    def save(self, *, force: bool = True) -> None:
        if self.path is None or not (self._dirty or force):
            return
        now = time.monotonic()
        if not force and now - self._saved_at < self.save_interval_s:
            return
        self._prune()
        data = {
            "next_id": self._next_id,
            "incidents": [i.to_json() for i in self.incidents.values()],
        }
        write_atomic(self.path, json.dumps(data, default=str))
        self._dirty = False
        self._saved_at = now

    def _prune(self) -> None:
        resolved = sorted(
            (i for i in self.incidents.values() if i.state == "resolved"),
            key=lambda i: i.resolved_at or 0,
        )
        for inc in resolved[: max(0, len(resolved) - self.keep_resolved)]:
            del self.incidents[inc.id]
            if self._by_fingerprint.get(inc.fingerprint) == inc.id:
                del self._by_fingerprint[inc.fingerprint]

    # ------------------------------------------------------------- signals

    def _rate(self, fingerprint: str, at: float) -> float:
        window = self._recent.setdefault(fingerprint, deque(maxlen=10_000))
        window.append(at)
        while window and window[0] < at - RATE_WINDOW_S:
            window.popleft()
        return len(window) * 60.0 / RATE_WINDOW_S

    @staticmethod
    def _add_evidence(inc: Incident, lines: tuple[str, ...]) -> None:
        for raw in lines:
            line = cap_evidence(raw)
            if line in inc.evidence:
                continue
            if len(inc.evidence) >= EVIDENCE_KEEP:
                # Keep the first lines (how it began) and the latest.
                del inc.evidence[EVIDENCE_KEEP // 2]
            inc.evidence.append(line)

    def record(self, sig: Signal) -> Update | None:
        """Apply one signal; the update it caused, or None if it changed nothing."""
        update = self._apply(sig)
        return None if update is None else replace(update, source=sig.source)

    def _apply(self, sig: Signal) -> Update | None:
        fp = sig.fingerprint
        existing = self.incidents.get(self._by_fingerprint.get(fp, -1))
        if sig.clears:
            if existing is None or existing.state != "open":
                return None
            return self._resolve(existing, sig.at, sig.summary or "condition cleared")
        rate = self._rate(fp, sig.at) if sig.kind == "write_failures" else None
        severity = sig.effective_severity
        if existing is not None and existing.state == "open":
            existing.count += 1
            existing.last_seen = max(existing.last_seen, sig.at)
            self._add_evidence(existing, sig.evidence)
            existing.fields.update(sig.fields)
            self._dirty = True
            if SEVERITY_RANK[severity] > SEVERITY_RANK[existing.severity]:
                existing.severity = severity
                existing.summary = sig.summary
                self.save()
                return Update("escalated", existing, rate)
            self.save(force=False)
            return Update("updated", existing, rate)
        if (
            existing is not None
            and existing.resolved_at is not None
            and sig.at - existing.resolved_at < self.reopen_window_s
        ):
            existing.state = "open"
            existing.resolved_at = None
            existing.resolution = ""
            existing.count += 1
            existing.last_seen = sig.at
            existing.summary = sig.summary
            existing.severity = severity
            self._add_evidence(existing, sig.evidence)
            self.save()
            return Update("reopened", existing, rate)
        inc = Incident(
            id=self._next_id,
            kind=sig.kind,
            db=sig.db,
            key=sig.key,
            severity=severity,
            summary=sig.summary,
            first_seen=sig.at,
            last_seen=sig.at,
            source=sig.source,
            fields=dict(sig.fields),
        )
        self._add_evidence(inc, sig.evidence)
        self._next_id += 1
        self.incidents[inc.id] = inc
        self._by_fingerprint[fp] = inc.id
        self.save()
        return Update("opened", inc, rate)

    def resolve(self, incident_id: int, why: str, at: float | None = None) -> Update | None:
        """Close an open incident by hand (a maintenance run repaired its database);
        None if it is not open."""
        inc = self.incidents.get(incident_id)
        if inc is None or inc.state != "open":
            return None
        return self._resolve(inc, time.time() if at is None else at, why)

    def _resolve(self, inc: Incident, at: float, why: str) -> Update:
        inc.state = "resolved"
        inc.resolved_at = at
        inc.resolution = why
        self.save()
        return Update("resolved", inc)

    def tick(self, now: float | None = None) -> list[Update]:
        """Resolve log-rule incidents that have been quiet long enough."""
        now = time.time() if now is None else now
        out = []
        for inc in list(self.incidents.values()):
            if inc.state != "open" or is_state_kind(inc.kind):
                continue
            quiet = self._quiet_resolve_s(inc.kind)
            if now - inc.last_seen >= quiet:
                out.append(self._resolve(inc, now, f"no new signal for {quiet:.0f} s"))
        self.save(force=False)
        return out

    def _quiet_resolve_s(self, kind: str) -> float:
        known = KINDS.get(kind)
        if known is None or known.quiet_resolve_s is None:
            return self.quiet_resolve_s
        return min(known.quiet_resolve_s, self.quiet_resolve_s)

    # ------------------------------------------------------------- queries

    def ack(self, incident_id: int) -> Incident:
        inc = self.incidents.get(incident_id)
        if inc is None:
            raise UsageError(f"no incident {incident_id}")
        inc.acked = True
        self._dirty = True
        self.save()
        return inc

    def get(self, incident_id: int) -> Incident:
        inc = self.incidents.get(incident_id)
        if inc is None:
            raise UsageError(f"no incident {incident_id}")
        return inc

    def open_incidents(self) -> list[Incident]:
        return sorted(
            (i for i in self.incidents.values() if i.state == "open"),
            key=lambda i: (-SEVERITY_RANK[i.severity], i.first_seen),
        )

    def listing(self, *, include_resolved: bool = False) -> list[Incident]:
        if not include_resolved:
            return self.open_incidents()
        return sorted(self.incidents.values(), key=lambda i: i.id)
