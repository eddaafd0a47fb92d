"""Maintenance windows: when the daemon may stop Hermes, in local wall-clock time.

A window is written ``Sun 03:00-04:00`` (grammar in ``config.parse_window``). Times are
local wall-clock times in the zone of ``$TZ`` or ``/etc/localtime``. Each occurrence is
built as a wall-clock datetime in that zone and compared as an absolute instant, so a
DST change is handled as the clock on the wall shows it: on the night the clocks go
forward, a window that starts in the skipped hour starts at the first real instant
after it (when the clock jumps); on the night they go back, a
window in the repeated hour is its first occurrence (``fold=0``) and lasts as long as
its wall-clock length says, not an hour more.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from statewarden.config import parse_window
from statewarden.errors import UsageError

_LOCALTIME = "/etc/localtime"


def local_zone() -> dt.tzinfo:
    """The zone of ``$TZ`` (a zone name), else ``/etc/localtime``, else UTC."""
    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    try:
        with open(_LOCALTIME, "rb") as f:
            return ZoneInfo.from_file(f, key="localtime")
    except (OSError, ValueError):
        return dt.UTC


@dataclass(frozen=True)
class Window:
    """One configured window."""

    text: str
    days: frozenset[int]  # 0 = Monday
    start_min: int
    end_min: int

    @classmethod
    def parse(cls, text: str) -> Window:
        parsed = parse_window(text)
        if parsed is None:
            raise UsageError(f"{text!r}: not a maintenance window (e.g. 'Sun 03:00-04:00')")
        days, start, end = parsed
        return cls(text, days, start, end)

    def occurrences(
        self, around: dt.datetime, zone: dt.tzinfo
    ) -> list[tuple[dt.datetime, dt.datetime]]:
        """Occurrences starting from the day before ``around`` to a week after, as UTC."""
        local_day = around.astimezone(zone).date()
        out = []
        for offset in range(-1, 8):
            day = local_day + dt.timedelta(days=offset)
            if day.weekday() not in self.days:
                continue
            start = _wall(day, self.start_min, zone)
            end_day = day if self.end_min > self.start_min else day + dt.timedelta(days=1)
            end = _wall(end_day, self.end_min, zone)
            if end > start:
                out.append((start, end))
        return out


def _wall(day: dt.date, minute: int, zone: dt.tzinfo) -> dt.datetime:
    """The instant (UTC) the wall clock in ``zone`` shows ``minute`` on ``day``; for a
    wall time skipped by DST, the first instant the clock shows a later time."""
    if minute == 24 * 60:
        day, minute = day + dt.timedelta(days=1), 0
    naive = dt.datetime(day.year, day.month, day.day, minute // 60, minute % 60)
    first = naive.replace(tzinfo=zone).astimezone(dt.UTC)
    if first.astimezone(zone).replace(tzinfo=None) == naive:
        return first  # exists (fold=0: the first of two in a repeated hour)
    # Skipped: the transition lies between the two readings of the wall time.
    lo = int(naive.replace(tzinfo=zone, fold=1).astimezone(dt.UTC).timestamp())
    hi = int(first.timestamp())
    lo, hi = min(lo, hi), max(lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if dt.datetime.fromtimestamp(mid, zone).replace(tzinfo=None) >= naive:
            hi = mid
        else:
            lo = mid
    return dt.datetime.fromtimestamp(hi, dt.UTC)


def parse_windows(texts: Sequence[str]) -> list[Window]:
    return [Window.parse(t) for t in texts]


def current_window(
    windows: Sequence[Window], now: dt.datetime, zone: dt.tzinfo | None = None
) -> tuple[dt.datetime, dt.datetime] | None:
    """The window ``now`` is in (start, end as UTC), the one ending last if several."""
    zone = zone or local_zone()
    now_utc = now.astimezone(dt.UTC)
    inside = [(s, e) for w in windows for s, e in w.occurrences(now_utc, zone) if s <= now_utc < e]
    return max(inside, key=lambda se: se[1]) if inside else None


def next_window(
    windows: Sequence[Window], now: dt.datetime, zone: dt.tzinfo | None = None
) -> tuple[dt.datetime, dt.datetime] | None:
    """The current window, else the next one to start (UTC); None without windows."""
    zone = zone or local_zone()
    now_utc = now.astimezone(dt.UTC)
    current = current_window(windows, now_utc, zone)
    if current is not None:
        return current
    later = [(s, e) for w in windows for s, e in w.occurrences(now_utc, zone) if s > now_utc]
    return min(later) if later else None


def fits(
    windows: Sequence[Window], now: dt.datetime, needed_s: float, zone: dt.tzinfo | None = None
) -> bool:
    """True when ``now`` is in a window that stays open for at least ``needed_s`` more."""
    current = current_window(windows, now, zone)
    if current is None:
        return False
    return (current[1] - now.astimezone(dt.UTC)).total_seconds() >= needed_s
