"""Waiting for a condition in a test: the deadline is for a hung child, not a timing check."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

WAIT_S = 60.0
POLL_S = 0.05


def wait_for(cond: Callable[[], T | None], what: str = "condition", timeout_s: float = WAIT_S) -> T:
    """Call ``cond`` until it returns something truthy and return that; fail with ``what``
    and the last value seen once ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        last = cond()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} (last: {last!r})")
        time.sleep(POLL_S)
