"""What watchers report: signals (possible trouble) and observations (context).

A **signal** says something may be wrong with one database (a corruption line in a
log, a sidecar unlinked under a live writer, ...). ``incidents`` turns signals into
incidents. A signal with ``clears=True`` says a state-based condition is back to
normal (the stale holder is gone), which resolves the matching incident.

An **observation** is context for the evidence timeline: a holder arrived, a WAL size
sample, a cron session started. Observations never open incidents.

A signal names its incident kind; every kind is an entry of ``incidents/kinds.py``.
Signals and observations are where evidence enters: each one is redacted and capped as
it is made (``incidents/evidence.py``), so no store ever sees a secret or an endless line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from statewarden.incidents.evidence import (
    EVIDENCE_LINE_MAX_CHARS,
    cap_evidence,
    clean_lines,
    scrub,
    scrub_fields,
)
from statewarden.kinds import KINDS, Severity

# ``KINDS`` and ``Severity`` are ``incidents/kinds.py``'s, ``cap_evidence`` and its cap
# ``incidents/evidence.py``'s, named here too for the watchers that make signals.
__all__ = [
    "EVIDENCE_LINE_MAX_CHARS",
    "KINDS",
    "Found",
    "Observation",
    "Severity",
    "Signal",
    "cap_evidence",
]


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
    # The identity ("<device>:<inode>") of the database file a damage signal is about
    # (``Kind.of_one_file``); "" when unknown.
    file: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown incident kind {self.kind!r}")
        # Evidence enters here: redacted and capped once (``evidence.py``).
        object.__setattr__(self, "summary", scrub(self.summary))
        object.__setattr__(self, "evidence", clean_lines(self.evidence))

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

    def __post_init__(self) -> None:
        # Evidence enters here: secrets redacted once (``evidence.py``).
        object.__setattr__(self, "text", scrub(self.text))
        object.__setattr__(self, "fields", scrub_fields(self.fields))


# What a watcher's poll gives: signals and observations, in the order seen.
Found = Signal | Observation
