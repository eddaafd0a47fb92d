"""Tests that need root (setpriv to a second uid, unshare, bindfs): skipped without it, and a
failure under CI (tests/conftest.py), which runs as root."""

from __future__ import annotations

import os

import pytest

IS_ROOT = os.geteuid() == 0

needs_root = pytest.mark.skipif(
    not IS_ROOT, reason="needs root (setpriv / unshare); run the suite as root, as CI does"
)

# The second uid the tests switch to (nobody), and the setpriv prefix that runs as it.
USER = 65534

SETPRIV = ["setpriv", "--reuid", str(USER), "--regid", str(USER), "--clear-groups"]
