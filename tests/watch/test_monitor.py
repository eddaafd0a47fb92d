"""A failing watcher is backed off, reported once, and says when it recovered."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from statewarden.incidents.signals import Observation, Signal
from statewarden.watch.monitor import BACKOFF_MAX_S, Guard


class Flaky:
    """A real poll function that fails for its first ``failures`` calls."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self, now: float) -> list[Signal | Observation]:
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(5, "Input/output error")
        return [Observation("ok", "/db", "polled", now)]


class TestGuard:
    def test_reported_once_backed_off_then_recovered(self, tmp_path: Path) -> None:
        """Five failures: one watcher_failed signal, polls spaced 1, 2, 4, 8 s apart,
        then 'recovered after 5 errors' clears it."""
        flaky = Flaky(5)
        g = Guard("logs", "/db", flaky)
        now = 1000.0
        found: list[Signal | Observation] = []
        tried_at = []
        while flaky.calls < 6:
            before = flaky.calls
            found += g.run(now)
            if flaky.calls != before:
                tried_at.append(now)
            now += 0.5
        signals = [f for f in found if isinstance(f, Signal)]
        assert [(s.kind, s.clears) for s in signals] == [
            ("watcher_failed", False),
            ("watcher_failed", True),
        ]
        assert (
            signals[0].summary == "the logs watcher failed: OSError: [Errno 5] Input/output error"
        )
        assert signals[1].summary == "the logs watcher recovered after 5 errors"
        gaps = [b - a for a, b in itertools.pairwise(tried_at)]
        assert gaps == [1.0, 2.0, 4.0, 8.0, 16.0]
        assert g.status() == {"watcher": "logs", "errors": 0, "last_error": None}

    def test_backoff_is_capped(self) -> None:
        """However long the streak, the next try is at most BACKOFF_MAX_S away."""
        g = Guard("files", "/db", Flaky(10_000))
        now = 0.0
        for _ in range(30):
            g.failed(OSError("x"), now)
            assert g.next_try - now <= BACKOFF_MAX_S
            now = g.next_try
        assert g.errors == 30

    @pytest.mark.parametrize("exc", [ValueError("bad"), KeyError("k"), RuntimeError("r")])
    def test_any_exception_is_contained(self, exc: Exception) -> None:
        """Whatever a watcher raises, the guard returns a signal instead of raising."""

        def boom(_now: float) -> list[Signal | Observation]:
            raise exc

        (sig,) = Guard("holders", "*", boom).run(1.0)
        assert isinstance(sig, Signal)
        assert sig.kind == "watcher_failed"
