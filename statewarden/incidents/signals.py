"""What watchers report: signals (possible trouble) and observations (context).

A **signal** says something may be wrong with one database (a corruption line in a
log, a sidecar unlinked under a live writer, ...). ``incidents`` turns signals into
incidents. A signal with ``clears=True`` says a state-based condition is back to
normal (the stale holder is gone), which resolves the matching incident.

An **observation** is context for the evidence timeline: a holder arrived, a WAL size
sample, a cron session started. Observations never open incidents.

Incident kinds use one word per concept, the same in code, CLI, docs and journald.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["info", "warning", "error", "critical"]
# Most severe last: an update escalates an incident only to a higher rank.
SEVERITY_RANK: dict[Severity, int] = {"info": 0, "warning": 1, "error": 2, "critical": 3}

# Evidence lines are cut to this many characters (the note saying so included), by the
# rules that quote a record and again by the incident book that keeps them.
EVIDENCE_LINE_MAX_CHARS = 4000


@dataclass(frozen=True)
class Kind:
    """One incident kind: its default severity, journald MESSAGE_ID and how it resolves."""

    severity: Severity
    # A fixed 128-bit id, as journald catalogs want; documented in README.md.
    message_id: str
    # "state": a watcher says when the condition clears (``Signal.clears``);
    # "log": from log or journal lines, resolved after a quiet period.
    rule: Literal["state", "log"]
    what: str  # what it means, in one line
    # A log kind whose incidents resolve sooner than the configured quiet period.
    quiet_resolve_s: float | None = None


# Every incident kind, once. Kinds use one word per concept, the same in code, CLI,
# docs and journald; README.md lists them with their MESSAGE_IDs (a test keeps the two
# in step).
KINDS: dict[str, Kind] = {
    "corruption": Kind("critical", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a01", "log",
        "malformed / disk I/O error / not a database from state.db code"),
    "jsonl_fallback": Kind("critical", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a02", "log",
        "the gateway stopped writing to state.db and uses JSONL"),
    # "database is locked" bursts come and go with load; they resolve sooner.
    "write_failures": Kind("warning", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a03", "log",
        "database is locked / append failed, with a rate", quiet_resolve_s=900.0),
    "messages_dropped": Kind("critical", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a04", "log",
        "pending queue full: messages are being lost"),
    "self_repair": Kind("error", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a05", "log",
        "a state.db.malformed-backup-* appeared: Hermes repaired itself"),
    "stale_holder": Kind("critical", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a06", "state",
        "a process holds a deleted or replaced state.db/-wal/-shm inode"),
    "lost_locks": Kind("error", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a07", "state",
        "a holder has the file open but no SQLite lock on it"),
    "wal_growth": Kind("warning", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a08", "state",
        "-wal over the threshold and growing: checkpoints starved"),
    "unsafe_mount": Kind("error", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a09", "state",
        "WAL database on virtiofs / 9p / network / FUSE"),
    "multi_writer": Kind("info", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0a", "state",
        "more writer processes than configured (advisory)"),
    "unexpected_holder": Kind("warning", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0b", "state",
        "a holder of a kind not on the configured list"),
    "crash_loop": Kind("error", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0c", "state",
        "a Hermes unit restarting over and over"),
    "task_died": Kind("error", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0d", "log",
        '"Supervised task <name> died"'),
    "watcher_failed": Kind("warning", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0e", "state",
        "one of statewarden's own watchers keeps failing"),
    "state_unwritable": Kind("error", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0f", "state",
        "statewarden cannot write its own state (disk full, no descriptors, ...)"),
    # Sent by statewarden-failed@.service (OnFailure= of the unit), not by the daemon.
    "supervisor_failed": Kind("critical", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a10", "log",
        "statewarden itself stopped for good (its unit hit the start limit)"),
    # A maintenance run's outcome, told through the alert sinks (never an open incident).
    "maintenance_repaired": Kind("warning", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a11", "log",
        "a maintenance run swapped a repaired (or converted) state.db in"),
    "maintenance_rolled_back": Kind("error", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a12", "log",
        "a maintenance run aborted and rolled back; the database is unchanged"),
    "maintenance_refused": Kind("warning", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a13", "log",
        "a maintenance run refused to start; nothing was stopped"),
    "watcher_degraded": Kind("warning", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a21", "state",
        "a watcher got no inotify (limits used up) and polls instead: slower, still detecting"),
    "lock_guard": Kind("warning", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a22", "log",
        'a Hermes writer could not arm its WAL lock guard ("WAL lock guard incomplete")'),
    "wal_reset_bug": Kind("warning", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a23", "log",
        "Hermes' SQLite or the sqlite3 shell has the WAL-reset bug (fixed in 3.51.3)"),
    "recovery_files": Kind("info", "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a24", "state",
        "retired WAL captures, a pending_messages spool or pre-update backups beside state.db"),
}  # fmt: skip


def is_state_kind(kind: str) -> bool:
    """True for a kind a watcher clears; False for log kinds (and kinds no longer known,
    from an older incident book)."""
    known = KINDS.get(kind)
    return known is not None and known.rule == "state"


def cap_evidence(text: str) -> str:
    """``text`` cut to ``EVIDENCE_LINE_MAX_CHARS``, ending with a note of what was cut."""
    if len(text) <= EVIDENCE_LINE_MAX_CHARS:
        return text
    # The note is no longer than one that counts every character as cut.
    keep = EVIDENCE_LINE_MAX_CHARS - len(f"\n…[{len(text)} chars cut]")
    return text[:keep] + f"\n…[{len(text) - keep} chars cut]"


@dataclass(frozen=True)
class Signal:
    """Possible trouble with one database, as one watcher saw it."""

    kind: str
    db: str
    summary: str
    at: float = field(default_factory=time.time)
    key: str = ""  # narrows the fingerprint (a pid, a unit, a session id); "" = per database
    evidence: tuple[str, ...] = ()
    source: str = ""  # which watcher: "log:agent.log", "journal:<unit>", "files", ...
    severity: Severity | None = None  # None = the kind's default
    clears: bool = False  # a state rule saying the condition is back to normal
    fields: dict[str, Any] = field(default_factory=dict)
    # Signals merged into this one (``watch.rules.SignalBatch``: one poll's flood of one
    # error), and the time of the last of them (None: ``at``).
    count: int = 1
    last_at: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown incident kind {self.kind!r}")

    @property
    def fingerprint(self) -> str:
        return f"{self.kind}|{self.db}|{self.key}"

    @property
    def effective_severity(self) -> Severity:
        return self.severity or KINDS[self.kind].severity


@dataclass(frozen=True)
class Observation:
    """Context for the evidence timeline; never opens an incident."""

    what: str  # "holder_arrived", "holder_left", "wal_size", "checkpoint", "sidecar_created",
    #            "sidecar_deleted", "cron_started", "unit_restarted", "db_replaced", ...
    db: str
    text: str  # one line a person reads: "cron job cron_d0aa05fd7f4a started"
    at: float = field(default_factory=time.time)
    fields: dict[str, Any] = field(default_factory=dict)


# What a watcher's poll gives: signals and observations, in the order seen.
Found = Signal | Observation
