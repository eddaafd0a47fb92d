"""Exponential backoff: how long to wait before trying again after failures in a row.

The first failure of a streak waits ``start_s``; each further one doubles the wait, up
to ``max_s``. A success ends the streak, and the next failure waits ``start_s`` again.
A caller that was told how long to wait (an HTTP 429's ``retry_after``) waits at least
that. There is no clock inside: the caller adds the wait to its own clock or sleeps it.

Used by the watcher guard (``watch/monitor.py``), the unit watcher, the journal
follower and the alert delivery loop (``alerts/delivery.py``: a sink's retries and the
loop's own restarts): each retries what failed without ever stopping the daemon.
"""

from __future__ import annotations

from dataclasses import dataclass

# Doubling past this many times cannot matter for any cap (2**64 seconds is far beyond
# any cap) and keeps the arithmetic finite however long a streak runs.
_MAX_DOUBLINGS = 64


@dataclass
class Backoff:
    start_s: float
    max_s: float
    failures: int = 0  # failures in a row, since the last success

    @property
    def delay_s(self) -> float:
        """The wait after the failures so far (0 when there are none)."""
        if self.failures == 0:
            return 0.0
        doublings = min(self.failures - 1, _MAX_DOUBLINGS)
        return min(self.start_s * 2.0**doublings, self.max_s)

    def failed(self, *, at_least_s: float = 0.0) -> float:
        """Count one more failure; the wait before the next try, in seconds."""
        self.failures += 1
        return max(self.delay_s, at_least_s)

    def succeeded(self) -> int:
        """End the streak; how many failures it had."""
        failures, self.failures = self.failures, 0
        return failures
