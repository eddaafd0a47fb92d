"""The suite's own rules, shared by tests/conftest.py and the tests that check them."""

from __future__ import annotations

import os

# Seconds per test for tests marked systemd or slow (a private manager and journald start
# and stop around each; the large fixture is built once, in minutes).
LONG_TIMEOUT_S = 900


def in_ci() -> bool:
    """``CI`` set to anything but empty, 0, false or no."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
