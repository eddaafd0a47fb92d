"""Signals -> incidents: open, update, resolve; persisted so a restart changes nothing.

An incident is one problem with one database, identified by its fingerprint
(kind | database | key). Every signal with that fingerprint updates the same incident:
a flood of 520,000 lines is one incident with a count, not 520,000 events.

Resolution:
- state rules (stale holder, WAL growth, unsafe mount, ...) resolve when their watcher
  sends a signal with ``clears=True``;
- log rules resolve after a quiet period without a new matching signal
  (``quiet_resolve_s``, per kind where it matters), and so does an incident of a state
  kind that a log or journal line raised (no watcher will ever clear it);
- after a restart the daemon evaluates every state rule afresh and resolves
  (:meth:`IncidentBook.resolve`) what no longer holds.

An incident that resolved less than ``reopen_window_s`` ago and fires again is reopened
(the same id, count carried on) rather than a new one, so a flapping condition does not
become a storm of incidents. A damage incident is of one file (``Signal.file``, the
database's device and inode): damage on a new file (after a repair or a replacement)
opens a new incident with its own evidence and time, and one still open on the old file
is resolved first (:meth:`IncidentBook.record_all`).

Persistence, so that a burst of n distinct incidents costs O(n), not O(n^2): every
opening, reopening, escalation and resolution is appended at once as one JSON line to
``<state_dir>/incidents.jsonl`` (before it is announced; fsynced by the next
:meth:`IncidentBook.flush`, once per batch). ``flush`` also compacts: the whole book
is written atomically to ``<state_dir>/incidents.json`` (with the sequence number of
the last change it holds) and the change log emptied, when the log holds more lines
than the book has incidents, or plain updates (counts) waited ``save_interval_s``.
Loading reads the snapshot, then replays the changes after its sequence number.

Evidence and summaries arrive capped and with secrets redacted (a signal cleans them as
it is made, ``evidence.py``); a resolution is scrubbed as it comes in. A write that
fails (a full disk, no descriptors) never stops :meth:`IncidentBook.record`: the book
keeps working in memory, ``write_error`` says why, and the next ``flush`` writes the
whole book again.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from statewarden.atomic import StateUnwritable, append_line, fsync_file, write_atomic
from statewarden.config import DEFAULT_QUIET_RESOLVE_S, DEFAULT_REOPEN_WINDOW_S
from statewarden.errors import StatewardenError, UsageError
from statewarden.incidents.evidence import scrub
from statewarden.incidents.signals import Signal
from statewarden.kinds import KINDS, SEVERITY_RANK, Severity, is_state_kind

DEFAULT_SAVE_INTERVAL_S = 1.0
# The change log is compacted when it holds more lines than this or than the book has
# incidents, whichever is more: each line then costs O(1) amortised.
COMPACT_MIN_LINES = 1000
CHANGES_SUFFIX = ".jsonl"
DEFAULT_KEEP_RESOLVED = 500
EVIDENCE_KEEP = 10  # evidence lines kept per incident: the first few and the latest
RATE_WINDOW_S = 60.0


def from_logs(inc: Incident) -> bool:
    """True for an incident raised from a log or journal line: no watcher will ever say
    its condition cleared, so it resolves after a quiet period whatever its kind."""
    return inc.source.startswith(("log:", "journal:"))


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
    file: str = ""  # the database file's identity ("<device>:<inode>"), "" when unknown

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


def _other_file(inc: Incident, sig: Signal) -> bool:
    """True when ``sig`` is about another file than the one ``inc`` is of (both known)."""
    return bool(inc.file and sig.file and inc.file != sig.file)


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
        self._seq = 0  # number of the last change appended
        self._log_lines = 0  # lines in the change log since the last compaction
        self._unsynced = False  # lines appended but not yet fsynced
        self._rewrite = False  # a write failed: the next flush writes the whole book
        self.write_error: StateUnwritable | None = None
        self.compactions = 0  # whole-book writes since start (a burst costs a few)
        self._recent: dict[str, deque[float]] = {}
        if path is not None:
            self._load(path)

    @property
    def changes_path(self) -> Path | None:
        return None if self.path is None else self.path.with_suffix(CHANGES_SUFFIX)

    # ------------------------------------------------------------- persistence

    def _load(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            self._next_id = int(data.get("next_id", 1))
            self._seq = int(data.get("seq", 0))
            for raw in data.get("incidents", []):
                self._put(Incident(**raw))
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError) as exc:
            # A damaged book must not stop the daemon; keep it aside and start afresh.
            with contextlib.suppress(OSError):
                path.rename(path.with_suffix(f".damaged-{int(time.time())}"))
            raise StatewardenError(f"{path}: incident book unreadable ({exc}); set aside") from None
        self._replay()

    def _put(self, inc: Incident) -> None:
        old = self.incidents.get(inc.id)
        if old is not None and self._by_fingerprint.get(old.fingerprint) == old.id:
            del self._by_fingerprint[old.fingerprint]
        self.incidents[inc.id] = inc
        self._by_fingerprint[inc.fingerprint] = inc.id

    def _replay(self) -> None:
        """Apply the changes appended after the snapshot (a torn last line is skipped)."""
        assert self.changes_path is not None
        try:
            text = self.changes_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        for line in text.splitlines():
            try:
                raw = json.loads(line)
                seq = int(raw["seq"])
                if seq <= self._seq:
                    continue
                self._put(Incident(**raw["incident"]))
                self._seq = seq
                self._next_id = max(self._next_id, int(raw["next_id"]))
                self._log_lines += 1
            except (ValueError, KeyError, TypeError):
                continue

    def _append(self, inc: Incident) -> None:
        """One change, appended before it is announced (fsynced by the next flush)."""
        if self.path is None:
            return
        self._seq += 1
        line = {"seq": self._seq, "next_id": self._next_id, "incident": inc.to_json()}
        assert self.changes_path is not None
        try:
            append_line(self.changes_path, json.dumps(line, default=str) + "\n")
        except StateUnwritable as exc:
            self.write_error = exc
            self._rewrite = True
        else:
            self._log_lines += 1
            self._unsynced = True

    def flush(self, *, force: bool = False) -> None:
        """Make what was recorded durable: fsync the change log, compact when due.

        Called once per batch of signals; never raises (see ``write_error``).
        """
        if self.path is None:
            return
        now = time.monotonic()
        compact = (
            force
            or self._rewrite
            or self._log_lines > max(COMPACT_MIN_LINES, len(self.incidents))
            or (self._dirty and now - self._saved_at >= self.save_interval_s)
        )
        try:
            if compact and (self._dirty or self._log_lines or self._rewrite or force):
                self._compact()
                self._saved_at = now
            elif self._unsynced:
                assert self.changes_path is not None
                fsync_file(self.changes_path)
                self._unsynced = False
        except StateUnwritable as exc:
            self.write_error = exc
            self._rewrite = True
        else:
            self.write_error = None

    def _compact(self) -> None:
        assert self.path is not None
        assert self.changes_path is not None
        self._prune()
        data = {
            "next_id": self._next_id,
            "seq": self._seq,
            "incidents": [i.to_json() for i in self.incidents.values()],
        }
        write_atomic(self.path, json.dumps(data, default=str))
        # The snapshot holds every change up to seq: the log can go (a crash before
        # this line only leaves changes that the snapshot's seq makes replay skip).
        write_atomic(self.changes_path, "")
        self._dirty = False
        self._rewrite = False
        self._unsynced = False
        self._log_lines = 0
        self.compactions += 1

    def save(self, *, force: bool = True) -> None:
        """Write the whole book now (``force``) or when due; see :meth:`flush`."""
        self.flush(force=force)

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

    def _rate(self, fingerprint: str, at: float, count: int = 1) -> float:
        window = self._recent.setdefault(fingerprint, deque(maxlen=10_000))
        if count == 1:
            window.append(at)
        else:
            window.extend([at] * min(count, 10_000))
        while window and window[0] < at - RATE_WINDOW_S:
            window.popleft()
        return len(window) * 60.0 / RATE_WINDOW_S

    @staticmethod
    def _add_evidence(inc: Incident, lines: tuple[str, ...]) -> None:
        for line in lines:  # capped and redacted when the signal was made
            if line in inc.evidence:
                continue
            if len(inc.evidence) >= EVIDENCE_KEEP:
                # Keep the first lines (how it began) and the latest.
                del inc.evidence[EVIDENCE_KEEP // 2]
            inc.evidence.append(line)

    def record(self, sig: Signal) -> Update | None:
        """Apply one signal; the update it caused, or None if it changed nothing."""
        updates = self.record_all(sig)
        return updates[-1] if updates else None

    def record_all(self, sig: Signal) -> list[Update]:
        """Apply one signal; every update it caused, in order: a damage signal about a
        new file first resolves the incident still open on the old one."""
        out: list[Update] = []
        existing = self.incidents.get(self._by_fingerprint.get(sig.fingerprint, -1))
        if (
            existing is not None
            and existing.state == "open"
            and not sig.clears
            and _other_file(existing, sig)
        ):
            why = "state.db is another file now (repaired or replaced): this was the old one's"
            out.append(replace(self._resolve(existing, sig.at, why), source=sig.source))
        update = self._apply(sig)
        return out if update is None else [*out, update]

    def _apply(self, sig: Signal) -> Update | None:
        fp = sig.fingerprint
        existing = self.incidents.get(self._by_fingerprint.get(fp, -1))
        if sig.clears:
            if existing is None or existing.state != "open":
                return None
            update = self._resolve(existing, sig.at, sig.summary or "condition cleared")
            return replace(update, source=sig.source)
        last_at = sig.at if sig.last_at is None else sig.last_at
        rate = self._rate(fp, last_at, sig.count) if sig.kind == "write_failures" else None
        severity = sig.effective_severity
        source = sig.source
        if existing is not None and existing.state == "open":
            existing.count += sig.count
            existing.last_seen = max(existing.last_seen, last_at)
            self._add_evidence(existing, sig.evidence)
            existing.fields.update(sig.fields)
            self._dirty = True
            if SEVERITY_RANK[severity] > SEVERITY_RANK[existing.severity]:
                existing.severity = severity
                existing.summary = sig.summary
                self._append(existing)
                return Update("escalated", existing, rate, source)
            return Update("updated", existing, rate, source)
        if (
            existing is not None
            and existing.resolved_at is not None
            and sig.at - existing.resolved_at < self.reopen_window_s
            and not _other_file(existing, sig)
        ):
            existing.state = "open"
            existing.resolved_at = None
            existing.resolution = ""
            existing.count += sig.count
            existing.last_seen = last_at
            existing.summary = sig.summary
            existing.severity = severity
            self._add_evidence(existing, sig.evidence)
            self._append(existing)
            return Update("reopened", existing, rate, source)
        inc = Incident(
            id=self._next_id,
            kind=sig.kind,
            db=sig.db,
            key=sig.key,
            severity=severity,
            summary=sig.summary,
            first_seen=sig.at,
            last_seen=max(sig.at, last_at),
            count=sig.count,
            source=sig.source,
            fields=dict(sig.fields),
            file=sig.file,
        )
        self._add_evidence(inc, sig.evidence)
        self._next_id += 1
        self.incidents[inc.id] = inc
        self._by_fingerprint[fp] = inc.id
        self._append(inc)
        return Update("opened", inc, rate, source)

    def resolve(self, incident_id: int, why: str, at: float | None = None) -> Update | None:
        """Resolve one open incident (a state rule found it no longer holds, or a
        maintenance run repaired its database); None if it is not open."""
        inc = self.incidents.get(incident_id)
        if inc is None or inc.state != "open":
            return None
        return self._resolve(inc, time.time() if at is None else at, why)

    def _resolve(self, inc: Incident, at: float, why: str) -> Update:
        inc.state = "resolved"
        inc.resolved_at = at
        inc.resolution = scrub(why)
        self._append(inc)
        return Update("resolved", inc)

    def tick(self, now: float | None = None) -> list[Update]:
        """Resolve log-rule incidents that have been quiet long enough."""
        now = time.time() if now is None else now
        out = []
        for inc in list(self.incidents.values()):
            if inc.state != "open" or (is_state_kind(inc.kind) and not from_logs(inc)):
                continue
            quiet = self._quiet_resolve_s(inc.kind)
            if now - inc.last_seen >= quiet:
                out.append(self._resolve(inc, now, f"no new signal for {quiet:.0f} s"))
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
        self._append(inc)
        self.flush(force=True)
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
