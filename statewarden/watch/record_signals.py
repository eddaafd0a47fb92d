"""The signal a record becomes: its summary clipped, the fields a rule's match gives, the
record as evidence and where it was read."""

from __future__ import annotations

import re
import time
from typing import Any

from statewarden.incidents import Signal
from statewarden.kinds import Severity
from statewarden.targets import Target
from statewarden.watch.records import LogRecord
from statewarden.watch.rule import Rule

# The error part quoted in a one-line summary is cut to this many characters.
SUMMARY_ERROR_MAX_CHARS = 160
# A transcript append failing this many times in a row is an error, not a warning.
TRANSCRIPT_FAILURES_ERROR = 10

# The named groups of the rules kept as the signal's fields, as numbers or as text.
_INT_FIELDS = frozenset(
    {"failure_count", "pending", "cap", "times", "disk", "memory", "count", "size"}
)
_TEXT_FIELDS = frozenset(
    {"session", "task", "op", "version", "binary", "label", "strategy", "capture", "spool"}
)


def clip(text: str, limit: int) -> str:
    """``text`` on one line (runs of white space squeezed), cut to ``limit`` characters."""
    # Only the head is ever kept: squeeze at most a bit more than that.
    head = text[: limit * 4]
    squeezed = " ".join(head.split())
    if len(squeezed) <= limit and len(head) == len(text):
        return squeezed
    return squeezed[: limit - 1] + "…"


def evidence(record: LogRecord) -> tuple[str, ...]:
    """The record as evidence: the signal redacts and caps it (``incidents/evidence.py``)."""
    return (record.text,)


def source_of(record: LogRecord) -> str:
    """Where the record was read: ``journal:<unit>`` or ``log:<file name>``."""
    if record.path.startswith("journal:"):
        return record.path
    # rpartition, not Path(): this runs for every signal of a flood.
    return "log:" + record.path.rpartition("/")[2] if record.path else "log"


def make_signal(
    record: LogRecord,
    target: Target,
    kind: str,
    summary: str,
    *,
    key: str,
    severity: Severity | None,
    now: float | None,
    **fields: Any,
) -> Signal:
    """The signal ``record`` gives, stamped with its time (``now`` when it has none)."""
    at = record.timestamp
    if at is None:
        at = time.time() if now is None else now
    if record.logger:
        fields.setdefault("logger", record.logger)
    if record.session:
        fields.setdefault("session", record.session)
    return Signal(
        kind=kind,
        db=str(target.db),
        summary=clip(summary, 300),
        at=at,
        key=key,
        evidence=evidence(record),
        source=source_of(record),
        severity=severity,
        fields=fields,
    )


def apply_rule(
    rule: Rule, m: re.Match[str], record: LogRecord, target: Target, now: float | None
) -> Signal:
    """The signal of a rule that matched: its summary filled from the match's groups."""
    groups = {k: (v or "") for k, v in m.groupdict().items()}
    values = {k: clip(v, SUMMARY_ERROR_MAX_CHARS) for k, v in groups.items()}
    values["rest"] = clip(record.message[m.start() :], SUMMARY_ERROR_MAX_CHARS)
    severity = rule.severity
    fields: dict[str, Any] = {"rule": rule.name}
    for name, value in groups.items():
        if m.group(name) is None:
            continue  # a group of the alternative that did not match
        if name in _INT_FIELDS:
            fields[name] = int(value)
        elif name in _TEXT_FIELDS:
            fields[name] = value
        elif name == "error":
            fields["error"] = clip(value, SUMMARY_ERROR_MAX_CHARS)
    if rule.more_fields is not None:
        fields.update(rule.more_fields(m))
    failures = int(groups.get("failure_count") or 0)
    if rule.name == "transcript_append" and failures >= TRANSCRIPT_FAILURES_ERROR:
        severity = "error"
    return make_signal(
        record,
        target,
        rule.kind,
        rule.summary.format(**values),
        key=rule.key(m),
        severity=severity,
        now=now,
        **fields,
    )
