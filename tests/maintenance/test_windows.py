"""Maintenance windows: the grammar, local time, DST nights, and 'fits before the end'."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from statewarden.config import parse_config, parse_window
from statewarden.errors import ConfigError
from statewarden.maintenance.windows import current_window, fits, next_window, parse_windows

BERLIN = ZoneInfo("Europe/Berlin")
UTC = dt.UTC


def local(year: int, month: int, day: int, hour: int, minute: int) -> dt.datetime:
    return dt.datetime(year, month, day, hour, minute, tzinfo=BERLIN)


class TestGrammar:
    @pytest.mark.parametrize(
        ("text", "days", "start", "end"),
        [
            ("Sun 03:00-04:00", {6}, 180, 240),
            ("daily 04:30-05:00", set(range(7)), 270, 300),
            ("Sat,Sun 23:30-01:00", {5, 6}, 1410, 60),
            ("weekdays 02:00-24:00", set(range(5)), 120, 1440),
            ("monday 1:05-2:00", {0}, 65, 120),
        ],
    )
    def test_valid(self, text: str, days: set[int], start: int, end: int) -> None:
        """Windows parse to their days and start and end minutes: single days, daily, lists,
        weekdays, full day names, a window across midnight and one ending at 24:00."""
        assert parse_window(text) == (frozenset(days), start, end)

    @pytest.mark.parametrize(
        "text",
        [
            "Sun",
            "Sun 03:00",
            "Funday 03:00-04:00",
            "Sun 25:00-26:00",
            "Sun 03:00-03:00",
            "Sun 03:60-04:00",
            "",
        ],
    )
    def test_invalid(self, text: str) -> None:
        """A window with no times, one time, an unknown day, hours past 24, no length or minutes
        past 59 does not parse."""
        assert parse_window(text) is None

    def test_config_error_names_the_key_and_line(self) -> None:
        """A bad window is a config error with file, line, key and an example."""
        with pytest.raises(ConfigError) as err:
            parse_config("maintenance:\n  windows: ['Sun 03:00-04:00', 'soon']\n", source="c.yaml")
        assert str(err.value).startswith("c.yaml:2: maintenance.windows[1]: expected a window")

    def test_defaults(self) -> None:
        """By default there are no windows, auto-repair is in_window, and it repairs corruption
        only."""
        m = parse_config("{}").maintenance
        assert m.windows == ()
        assert m.auto_repair == "in_window"
        assert m.repair_kinds == ("corruption",)


class TestTimes:
    def test_inside_and_next(self) -> None:
        """Inside a window its start and end are given in UTC; at its end it is over and the next
        one is a week later."""
        w = parse_windows(["Sun 03:00-04:00"])
        # 2026-11-29 is a Sunday.
        inside = current_window(w, local(2026, 11, 29, 3, 30), BERLIN)
        assert inside == (
            local(2026, 11, 29, 3, 0).astimezone(UTC),
            local(2026, 11, 29, 4, 0).astimezone(UTC),
        )
        assert current_window(w, local(2026, 11, 29, 4, 0), BERLIN) is None
        nxt = next_window(w, local(2026, 11, 29, 4, 0), BERLIN)
        assert nxt is not None
        assert nxt[0] == local(2026, 12, 6, 3, 0).astimezone(UTC)

    def test_past_midnight(self) -> None:
        """An end before the start runs into the next day, counted from the start day."""
        w = parse_windows(["Sat 23:30-01:00"])
        assert current_window(w, local(2026, 11, 29, 0, 30), BERLIN) is not None  # Sunday
        assert current_window(w, local(2026, 11, 30, 0, 30), BERLIN) is None  # Monday

    def test_spring_forward_gap(self) -> None:
        """2026-03-29 02:00 does not exist in Berlin: a 02:30-03:30 window is one real
        hour shorter on the wall clock, from 03:00 CEST (01:00 UTC) to 03:30 CEST."""
        w = parse_windows(["Sun 02:30-03:30"])
        start, end = next_window(w, local(2026, 3, 28, 12, 0), BERLIN)  # type: ignore[misc]
        assert start == dt.datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
        assert end == dt.datetime(2026, 3, 29, 1, 30, tzinfo=UTC)

    def test_fall_back_repeat(self) -> None:
        """2026-10-25 02:00-03:00 happens twice; the window is its first occurrence."""
        w = parse_windows(["Sun 02:00-02:30"])
        start, end = next_window(w, local(2026, 10, 24, 12, 0), BERLIN)  # type: ignore[misc]
        assert start == dt.datetime(2026, 10, 25, 0, 0, tzinfo=UTC)
        assert end - start == dt.timedelta(minutes=30)

    def test_fits_only_with_time_left(self) -> None:
        """A run that would not finish before the window ends is not started."""
        w = parse_windows(["daily 04:30-05:00"])
        now = local(2026, 11, 30, 4, 50)
        assert fits(w, now, 300, BERLIN)
        assert not fits(w, now, 900, BERLIN)
        assert not fits(w, local(2026, 11, 30, 6, 0), 1, BERLIN)
