"""Backoff: doubling waits up to a cap, a fresh start after a success, finite forever."""

from __future__ import annotations

import pytest

from statewarden.backoff import Backoff
from statewarden.incidents.signals import Found
from statewarden.watch.monitor import BACKOFF_MAX_S, Guard


class TestBackoff:
    def test_doubles_up_to_the_cap(self) -> None:
        """1, 2, 4, ... seconds, never more than max_s."""
        b = Backoff(1.0, 10.0)
        assert b.delay_s == 0.0
        assert [b.failed() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
        assert b.failures == 6

    def test_success_ends_the_streak(self) -> None:
        """After a success the next failure waits start_s again; succeeded() says how many."""
        b = Backoff(2.0, 300.0)
        b.failed()
        b.failed()
        b.failed()
        assert b.succeeded() == 3
        assert b.succeeded() == 0
        assert b.delay_s == 0.0
        assert b.failed() == 2.0

    def test_a_told_wait_is_respected(self) -> None:
        """A server's retry_after longer than the backoff wins; a shorter one does not."""
        b = Backoff(1.0, 300.0)
        assert b.failed(at_least_s=30.0) == 30.0
        assert b.failed(at_least_s=0.5) == 2.0

    @pytest.mark.parametrize("failures", [1025, 5000, 10**6])
    def test_a_streak_of_any_length_stays_finite(self, failures: int) -> None:
        """2 ** 1100 seconds does not fit a float: the wait must not be computed that way."""
        with pytest.raises(OverflowError):
            _ = 1.0 * 2 ** (failures - 1)
        b = Backoff(1.0, 300.0, failures=failures - 1)
        assert b.failed() == 300.0


class TestGuardStreak:
    def test_a_watcher_failing_for_days_does_not_stop_the_guard(self) -> None:
        """At the 300 s cap, 2,000 failures are a week: the guard keeps backing off."""

        def broken(_now: float) -> list[Found]:
            raise OSError(5, "Input/output error")

        g = Guard("logs", "/db", broken)
        now = 0.0
        for _ in range(2000):
            g.run(now)
            now = g.next_try
        assert g.errors == 2000
        assert g.backoff.delay_s == BACKOFF_MAX_S
