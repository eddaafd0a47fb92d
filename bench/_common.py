"""Shared helpers for benchmarks: timing and a one-line figure format."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def time_it(fn: Callable[[], object], repeat: int = 20, warmup: int = 2) -> float:
    """Median wall time of ``fn`` in seconds."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def figure(
    name: str, seconds: float, *, versus: str | None = None, other_s: float | None = None
) -> str:
    """``name: 12.3 ms`` and, when given, the comparison tool's figure from the same run."""
    line = f"{name}: {seconds * 1000:.2f} ms"
    if versus and other_s is not None:
        line += f"  |  {versus}: {other_s * 1000:.2f} ms  (ratio {seconds / other_s:.2f}x)"
    return line
