"""The suite's three tiers, one per test, and the check that keeps ``unit`` honest.

* ``unit``: in-process only: no subprocess, no daemon, no user manager. The default.
* ``process``: real subprocesses or daemons (``statewarden run``, Hermes writers, setpriv,
  unshare, chromium, the installed scripts).
* ``systemd``: a real private systemd --user manager and journald (root only).

A test gets its tier from a mark on it, its class or its module (``pytestmark``); without
one, from what it uses: a fixture in ``SYSTEMD_FIXTURES`` makes it ``systemd``, one in
``PROCESS_FIXTURES`` or a folder in ``PROCESS_FOLDERS`` makes it ``process``, anything else
is ``unit``. Two tier marks on one test are a contradiction (tests/project/test_tiers.py).

A ``unit`` test that starts a process fails, naming the process (``Spawns``, an audit hook):
the tier says what a test needs, so the unit pass can run anywhere, fast, in parallel.
Building a cached Hermes fixture the first time (``lab/hermes_fixtures.py``) is not the
test's process and is let through.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

TIERS = ("unit", "process", "systemd")
# Fixtures that start a private user manager, and ones that start real processes.
SYSTEMD_FIXTURES = frozenset({"units"})
PROCESS_FIXTURES = frozenset({"daemon", "shared_daemon"})
# Folders under tests/ whose tests mostly start processes: the daemon, Hermes writers and
# holders, the commands as a user runs them, `check` and `recover` (whose SQLite checks run
# in a child process: statewarden/recovery/integrity.py).
PROCESS_FOLDERS = frozenset(
    {"cli", "daemon", "demo", "holders", "maintenance", "packaging", "recovery", "system"}
)

# Audit events that start a process (subprocess, asyncio and multiprocessing all raise one).
SPAWN_EVENTS = frozenset(
    {"subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.system", "pty.spawn"}
)
# The fixture cache's writers, run once per machine by lab/hermes_fixtures.built_db.
FIXTURE_WRITERS = ("hermes_writer.py", "hermes_main_writer.py")


def marked_tiers(item: pytest.Item) -> list[str]:
    """The tier marks on ``item``, its class and its module, in that order."""
    return [m.name for m in item.iter_markers() if m.name in TIERS]


def implied_tier(item: pytest.Item) -> str:
    """The tier of an unmarked test: from the fixtures it uses, then its folder."""
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & SYSTEMD_FIXTURES:
        return "systemd"
    if fixtures & PROCESS_FIXTURES:
        return "process"
    parts = Path(str(item.path)).parts
    if "tests" in parts and PROCESS_FOLDERS & set(parts[parts.index("tests") + 1 : -1]):
        return "process"
    return "unit"


def tier_of(item: pytest.Item) -> str:
    """``item``'s one tier (the first mark when there are several: the check names those)."""
    marked = marked_tiers(item)
    return marked[0] if marked else implied_tier(item)


def _describe(event: str, args: Sequence[object]) -> str:
    if event == "subprocess.Popen" and len(args) > 1:
        argv = args[1]
        if isinstance(argv, str | bytes):
            return f"subprocess: {argv!r}"
        if isinstance(argv, Sequence):
            return "subprocess: " + " ".join(str(a) for a in argv)[:200]
    return event


def _is_fixture_build(event: str, args: Sequence[object]) -> bool:
    if event != "subprocess.Popen" or len(args) < 2 or not isinstance(args[1], list | tuple):
        return False
    argv = [str(a) for a in args[1]]
    return len(argv) > 2 and argv[1].endswith(FIXTURE_WRITERS) and argv[2] == "build"


class Spawns:
    """The processes started since the last ``take``: an audit hook, added once."""

    def __init__(self, *, audit: bool = True) -> None:
        """``audit=False``: no hook is added (an audit hook cannot be removed)."""
        self.seen: list[str] = []
        if audit:
            sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[object, ...]) -> None:
        if event in SPAWN_EVENTS and not _is_fixture_build(event, args):
            self.seen.append(_describe(event, args))

    def take(self) -> list[str]:
        seen, self.seen = self.seen, []
        return seen
