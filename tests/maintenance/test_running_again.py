"""Which process the report calls "running again": only a Hermes of this database.

A run on home A stopped A's gateway; home B's gateway ran the same command, and the
report said B's was A's "running again" (whatever started it started it again), so
nobody started A's (and the default profile's was named a profile's). Invariant: a
process is this database's, running again, only if it holds the file or its Hermes home
(``$HERMES_HOME``, else ``$HOME/.hermes``) is the database's own folder. Real processes: the Hermes
stand-in (Hermes' own SessionDB) on two real homes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, make_home
from statewarden.holders import read_cmdline, short_command
from statewarden.maintenance.quiesce import running_again
from tests.support.fake_hermes import install_fake_hermes
from tests.support.maintenance import FakeHermes

pytestmark = pytest.mark.process  # real Hermes stand-ins


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
        assert running_again([command], set(), b / "state.db") == {command: other.pid}
        # The default profile's Hermes is not a profile's (it was once named one's).
        work = b / "profiles" / "work" / "state.db"
        assert running_again([command], set(), work) == {}
        assert running_again([command], {other.pid}, b / "state.db") == {}
    finally:
        other.stop()
    profile = FakeHermes(bin_dir, work.parent, "dashboard", write_every=0.5)
    try:
        command = short_command(read_cmdline(profile.pid))
        assert running_again([command], set(), work) == {command: profile.pid}
        assert running_again([command], set(), b / "state.db") == {}
    finally:
        profile.stop()
