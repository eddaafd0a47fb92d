"""A poll's signals merged: those of many records that share a fingerprint and a
severity become one that counts them (``SignalBatch``)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from statewarden.incidents import Found, Signal
from statewarden.kinds import Severity
from statewarden.targets import Target
from statewarden.watch.cron import CronSessions
from statewarden.watch.matching import Hit, build_signal, classify
from statewarden.watch.record_signals import evidence
from statewarden.watch.records import LogRecord

# Records whose evidence a merged signal carries from the start and from the end of its
# batch (``SignalBatch``): at least what an incident keeps (the book's EVIDENCE_KEEP).
MERGED_EVIDENCE_RECORDS = 10


@dataclass(slots=True)
class _Group:
    """The signals of one fingerprint and severity in a batch, built once at its end."""

    first: Hit
    first_record: LogRecord
    last: Hit
    last_record: LogRecord
    count: int = 1
    head: list[LogRecord] = field(default_factory=list)  # the first MERGED_EVIDENCE_RECORDS records
    tail: deque[LogRecord] = field(default_factory=lambda: deque(maxlen=MERGED_EVIDENCE_RECORDS))


class SignalBatch:
    """The signals of many records (one poll's), those that share a fingerprint and a
    severity merged into one that counts them.

    A flood of one error is then one signal per batch for the incident book, the
    timeline and the alerts, not one per line: the merged signal is the first one, with
    ``count`` the number merged, ``last_at`` the time of the last, the fields of the first
    updated with those of the last, and the evidence of the first and the last
    ``MERGED_EVIDENCE_RECORDS`` records (all an incident keeps). Building a signal
    (summary, clipping, fields) is done once per merged signal, not once per record.
    Observations (a cron session seen) are kept one by one, in order.
    """

    def __init__(
        self, target: Target, *, cron: CronSessions | None = None, now: float | None = None
    ) -> None:
        self.target = target
        self.cron = cron
        self.now = now
        self.records = 0
        self._out: list[Found | _Group] = []
        self._groups: dict[tuple[str, str, Severity | None], _Group] = {}

    def add(self, record: LogRecord) -> None:
        """Classify one record (in the order the records were written)."""
        self.records += 1
        if self.cron is not None and (
            "cron_" in record.message or (record.session or "").startswith("cron_")
        ):
            self._out.extend(self.cron.observe(record, self.target, self.now))
        for hit in classify(record, self.target):
            key = (hit.kind, hit.key, hit.severity)
            group = self._groups.get(key)
            if group is None:
                group = _Group(hit, record, hit, record)
                group.head.append(record)
                self._groups[key] = group
                self._out.append(group)
                continue
            group.count += 1
            group.last, group.last_record = hit, record
            if len(group.head) < MERGED_EVIDENCE_RECORDS:
                group.head.append(record)
            else:
                group.tail.append(record)

    def signals(self) -> list[Found]:
        """What the batch gives, in the order first seen."""
        return [self._merged(g) if isinstance(g, _Group) else g for g in self._out]

    def _merged(self, group: _Group) -> Signal:
        first = build_signal(group.first, group.first_record, self.target, self.now)
        if group.count == 1:
            return first
        last = build_signal(group.last, group.last_record, self.target, self.now)
        return replace(
            first,
            count=group.count,
            last_at=max(first.at, last.at),
            evidence=tuple(evidence(r)[0] for r in [*group.head, *group.tail]),
            fields={**first.fields, **last.fields},
        )
