"""Restart accounting of the unit watcher (the D-Bus side is tested with a real manager
in tests/watch/test_journal.py and tests/test_systemd.py)."""

from __future__ import annotations

from statewarden.incidents.signals import Observation, Signal
from statewarden.watch.units import UnitWatcher

DB = "/h/state.db"


def make() -> tuple[UnitWatcher, list[Signal | Observation]]:
    found: list[Signal | Observation] = []
    w = UnitWatcher(found.append, lambda _u: DB, crash_restarts=3, crash_window_s=60.0)
    return w, found


class TestRestarts:
    def test_first_value_is_the_baseline(self) -> None:
        """The restart count read at start is history, not news."""
        w, found = make()
        w.restarted("hermes-gateway.service", 40, 1000.0)
        assert found == []

    def test_loop_opens_once_and_clears_when_quiet(self) -> None:
        """Three restarts within the window open crash_loop once; a quiet window clears it."""
        w, found = make()
        w.restarted("u.service", 0, 1000.0)
        for i in range(1, 6):
            w.restarted("u.service", i, 1000.0 + i)
        signals = [f for f in found if isinstance(f, Signal)]
        assert [(s.kind, s.key, s.clears) for s in signals] == [("crash_loop", "u.service", False)]
        assert sum(isinstance(f, Observation) for f in found) == 5
        w.check_quiet(1030.0)
        assert len([f for f in found if isinstance(f, Signal)]) == 1
        w.check_quiet(1100.0)
        assert [f.clears for f in found if isinstance(f, Signal)] == [False, True]

    def test_slow_restarts_are_not_a_loop(self) -> None:
        """Restarts spread wider than the window never make a loop."""
        w, found = make()
        w.restarted("u.service", 0, 0.0)
        for i in range(1, 10):
            w.restarted("u.service", i, i * 100.0)
        assert [f for f in found if isinstance(f, Signal)] == []
