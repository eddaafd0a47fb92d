"""Records not to return twice: another log's copy of one, and a replaced log's history.

agent.log is Hermes' catch-all; errors.log (WARNING+), gateway.log and gui.log get the
same records in the same format. :class:`Copies` drops a record another log already
gave, so one Hermes warning is one record, not three. :func:`drop_history` drops the
records a log replaced by an older copy of itself (restored, copied back) brings back:
read again from its start, its old lines are history, not news.
"""

from __future__ import annotations

from collections import OrderedDict

from statewarden.watch.log_reader import TailStats
from statewarden.watch.records import LogRecord
from statewarden.watch.rotation import FollowedLog, Notice

# Records remembered to recognise another log's copy of them (oldest forgotten first).
DEDUPE_RECORDS_REMEMBERED = 20_000
# Processes writing one log can be a little out of order; older than this is history.
HISTORY_SLACK_S = 60.0


class Copies:
    """The records the logs gave lately, to tell another log's copy of one."""

    def __init__(self, stats: TailStats) -> None:
        self.stats = stats  # counts the copies dropped
        # Record text hash -> the log that gave it, or how many times each log gave it.
        self._recent: OrderedDict[int, str | dict[str, int]] = OrderedDict()

    def drop(self, name: str, records: list[LogRecord]) -> list[LogRecord]:
        """Drop the copies among ``records`` of the log ``name``.

        A record (same text, to the millisecond) is a copy when some other log already
        gave it as many times as this log has now; the same text twice in one log is
        two events.
        """
        kept = []
        recent = self._recent
        for record in records:
            if record.at is None:  # no timestamp: nothing to tell copies apart by
                kept.append(record)
                continue
            key = hash(record.text)
            seen = recent.get(key)
            if seen is None:
                # The common case, kept cheap: first sighting, remembered as the log's name.
                recent[key] = name
                if len(recent) > DEDUPE_RECORDS_REMEMBERED:
                    recent.popitem(last=False)
                kept.append(record)
                continue
            if isinstance(seen, str):
                seen = recent[key] = {seen: 1}
            mine = seen[name] = seen.get(name, 0) + 1
            if len(seen) == 1:  # no other log gave it: this log's events, each kept
                kept.append(record)
                continue
            if mine <= max((n for other, n in seen.items() if other != name), default=0):
                self.stats.duplicates += 1
                continue
            kept.append(record)
        return kept


def drop_history(log: FollowedLog, records: list[LogRecord]) -> list[LogRecord]:
    """Drop the records older than what ``log`` already gave (by more than
    :data:`HISTORY_SLACK_S`, which covers processes writing one log out of order) while it
    reads a file that replaced the one read before; keep its newest time. Counted and
    noticed."""
    kept: list[LogRecord] = []
    old = 0
    for r in records:
        t, newest = r.timestamp, log.newest
        if (
            log.replaying
            and t is not None
            and newest is not None
            and (t < newest - HISTORY_SLACK_S)
        ):
            old += 1
            continue
        if t is not None:
            log.newest = t if log.newest is None else max(log.newest, t)
        kept.append(r)
    if old:
        log.ctx.stats.history_skipped += old
        log.ctx.notices.append(
            Notice(
                log.name,
                "history",
                f"{log.path}: {old} record(s) older than the newest already read"
                " (a replaced or restored log) not read again",
            )
        )
    return kept
