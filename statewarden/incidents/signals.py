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

# Incident kinds and their default severity. The MESSAGE_ID of each kind (a fixed
# 128-bit id, as journald catalogs want) is in ``MESSAGE_IDS``.
KINDS: dict[str, Severity] = {
    "corruption": "critical",  # malformed / disk I/O error / not a database from state.db code
    "jsonl_fallback": "critical",  # the gateway stopped writing to state.db and uses JSONL
    "write_failures": "warning",  # database is locked / append failed, with a rate
    "messages_dropped": "critical",  # pending queue full: messages are being lost
    "self_repair": "error",  # a state.db.malformed-backup-* appeared: Hermes repaired itself
    "stale_holder": "critical",  # a process holds a deleted or replaced state.db/-wal/-shm inode
    "lost_locks": "error",  # a holder has the file open but no SQLite lock on it
    "wal_growth": "warning",  # -wal over the threshold and growing: checkpoints starved
    "unsafe_mount": "error",  # WAL database on virtiofs / 9p / network / FUSE
    "multi_writer": "info",  # more writer processes than configured (advisory)
    "unexpected_holder": "warning",  # a holder of a kind not on the configured list
    "crash_loop": "error",  # a Hermes unit restarting over and over
    "task_died": "error",  # "Supervised task <name> died"
    "watcher_failed": "warning",  # one of statewarden's own watchers keeps failing
    "state_unwritable": "error",  # statewarden cannot write its own state (disk full, ...)
}

MESSAGE_IDS: dict[str, str] = {
    "corruption": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a01",
    "jsonl_fallback": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a02",
    "write_failures": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a03",
    "messages_dropped": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a04",
    "self_repair": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a05",
    "stale_holder": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a06",
    "lost_locks": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a07",
    "wal_growth": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a08",
    "unsafe_mount": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a09",
    "multi_writer": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0a",
    "unexpected_holder": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0b",
    "crash_loop": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0c",
    "task_died": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0d",
    "watcher_failed": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0e",
    "state_unwritable": "5b0e6c1a4f1d4a8e9a3d2c7b8e1f0a0f",
}


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

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown incident kind {self.kind!r}")

    @property
    def fingerprint(self) -> str:
        return f"{self.kind}|{self.db}|{self.key}"

    @property
    def effective_severity(self) -> Severity:
        return self.severity or KINDS[self.kind]


@dataclass(frozen=True)
class Observation:
    """Context for the evidence timeline; never opens an incident."""

    what: str  # "holder_arrived", "holder_left", "wal_size", "checkpoint", "sidecar_created",
    #            "sidecar_deleted", "cron_started", "unit_restarted", "db_replaced", ...
    db: str
    text: str  # one line a person reads: "cron job cron_d0aa05fd7f4a started"
    at: float = field(default_factory=time.time)
    fields: dict[str, Any] = field(default_factory=dict)
