"""Which process the report calls "running again": only a Hermes of this database.

A run on home A stopped A's gateway; home B's gateway ran the same command, and the
report said B's was A's "running again" (whatever started it started it again), so
nobody started A's (and the default profile's was named a profile's). Invariant: a
process is this database's, running again, only if it holds the file or its Hermes home
(``$HERMES_HOME``, else ``$HOME/.hermes``) is the database's own folder. Real processes: the Hermes
stand-in (Hermes' own SessionDB) on two real homes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, make_home
from statewarden.holders import read_cmdline, short_command
from statewarden.maintenance.quiesce import running_again
from statewarden.maintenance.stopping import start_again
from tests.support.fake_hermes import install_fake_hermes
from tests.support.maintenance import FakeHermes

pytestmark = pytest.mark.process  # real Hermes stand-ins


def _pids(found: dict[str, list[tuple[int, int]]]) -> dict[str, list[int]]:
    return {command: [pid for pid, _parent in live] for command, live in found.items()}


def test_the_same_command_of_another_home_is_not_running_again(tmp_path: Path) -> None:
    """B's dashboard runs; A's was stopped: nothing of A's runs again. B's is found
    for B's database, not for a profile of B's home; the profile's own dashboard is
    found for the profile's database only."""
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    a = make_home(tmp_path / "a", TINY)
    b = make_home(tmp_path / "b", TINY, profiles=("work",))
    other = FakeHermes(bin_dir, b, "dashboard", write_every=0.5)
    try:
        command = short_command(read_cmdline(other.pid))
        assert running_again([command], set(), a / "state.db") == {}
        assert _pids(running_again([command], set(), b / "state.db")) == {command: [other.pid]}
        # The default profile's Hermes is not a profile's (it was once named one's).
        work = b / "profiles" / "work" / "state.db"
        assert running_again([command], set(), work) == {}
        assert running_again([command], {other.pid}, b / "state.db") == {}
    finally:
        other.stop()
    profile = FakeHermes(bin_dir, work.parent, "dashboard", write_every=0.5)
    try:
        command = short_command(read_cmdline(profile.pid))
        assert _pids(running_again([command], set(), work)) == {command: [profile.pid]}
        assert running_again([command], set(), b / "state.db") == {}
    finally:
        profile.stop()


def test_two_stopped_with_one_command_line_are_both_named(tmp_path: Path) -> None:
    """Invariant: every process the run stopped is named once, running again or to be
    started again. Two dashboards of one home (one command line) stopped together are
    two: both named while neither runs (the report once named one of them only); when
    one process of that command comes back, it stands for the one with its parent,
    and the other is still named to start again (it was once hidden behind it)."""
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    home = make_home(tmp_path / "a", TINY)
    db = home / "state.db"
    first = FakeHermes(bin_dir, home, "dashboard", write_every=0.5)
    second = FakeHermes(bin_dir, home, "dashboard", write_every=0.5)
    command = short_command(read_cmdline(first.pid))
    signalled = [
        {"pid": first.pid, "command": command, "parent": 1},  # (an orphan's parent)
        {"pid": second.pid, "command": command, "parent": os.getpid()},
    ]
    first.stop()
    second.stop()
    named = start_again(signalled, db)
    assert [(p.pid, p.running_again) for p in named] == [(first.pid, None), (second.pid, None)]
    back = FakeHermes(bin_dir, home, "dashboard", write_every=0.5)
    try:
        named = start_again(signalled, db)
    finally:
        back.stop()
    assert [(p.pid, p.running_again) for p in named] == [(first.pid, None), (second.pid, back.pid)]


def test_one_signalled_while_settling_stands_for_the_one_it_replaced(tmp_path: Path) -> None:
    """A process signalled while the run settled (a respawn) came back in the place of
    the one of its command stopped before: one process, named once, running again when
    its respawner started it again after the run; a newcomer of another command is one
    more."""
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    home = make_home(tmp_path / "a", TINY)
    db = home / "state.db"
    back = FakeHermes(bin_dir, home, "dashboard", write_every=0.5)
    try:
        command = short_command(read_cmdline(back.pid))
        signalled = [
            {"pid": 999_999_001, "command": command, "parent": os.getpid()},
            {"pid": 999_999_002, "command": command, "parent": os.getpid(), "settle": True},
            {"pid": 999_999_003, "command": "hermes chat", "parent": 1, "settle": True},
        ]
        named = start_again(signalled, db)
    finally:
        back.stop()
    assert [(p.pid, p.command, p.running_again) for p in named] == [
        (999_999_002, command, back.pid),
        (999_999_003, "hermes chat", None),
    ]
