"""Sessions that vanish: Hermes 0.22's own SessionDB moves a damaged state.db aside and
starts an empty one, or state.db is replaced by a file with far fewer sessions, and a
real daemon raises one critical ``sessions_vanished`` incident naming the old file, its
size and the sessions it holds."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from lab.hermes_fixtures import NEWEST, NEWEST_HERMES, Spec, make_home
from statewarden.daemon.vanished import VANISHED_MIN, vanished
from tests.support.daemon import DaemonProc, configured
from tests.support.vanishing import damage, hermes_starts_fresh
from tests.support.waiting import wait_for

# NEWEST: 12 sessions and 60 messages written by Hermes 0.22.
OLD_SESSIONS, OLD_MESSAGES = 12, 60


def _started(tmp_path: Path, home: Path) -> DaemonProc:
    """A daemon that has verified (and so counted) the home's database."""
    d = DaemonProc(configured(tmp_path, home, verify_interval="1h"))
    d.wait_for_line("database verified healthy")
    return d


def _vanished(d: DaemonProc) -> dict[str, Any]:
    """The one open sessions_vanished incident, once the daemon told it."""
    d.wait_for_line("sessions vanished")
    (incident,) = d.incidents_of("sessions_vanished")
    return incident


@pytest.mark.parametrize("how", ["zeroed", "garbage"])
def test_a_file_hermes_moved_aside_is_one_incident_naming_it_and_its_sessions(
    tmp_path: Path, how: str
) -> None:
    """Hermes moves the damaged file aside and writes 5 new sessions into a fresh one:
    one critical incident names the moved-aside path, its size, and the 12 sessions and
    60 messages the daemon counted in it before (the file cannot be read as it is), with
    the merge that brings them back as the next step."""
    home = make_home(tmp_path / "hermes", NEWEST)
    d = _started(tmp_path, home)
    try:
        damage(home / "state.db", how)
        moved = hermes_starts_fresh(home, sessions=5, messages=20, seed=2)
        assert moved.name.startswith("state.db.zeroed-" if how == "zeroed" else "state.db.notadb-")
        incident = _vanished(d)
    finally:
        d.stop()
    f = incident["fields"]
    assert incident["severity"] == "critical"
    assert incident["key"] == "fresh_db"
    assert f["moved_aside"] == str(moved)
    assert f["old_bytes"] == moved.stat().st_size > 0
    assert (f["old_sessions"], f["old_messages"]) == (OLD_SESSIONS, OLD_MESSAGES)
    assert f["old_counted"] == "verified"
    assert f"{OLD_SESSIONS} sessions and {OLD_MESSAGES} messages" in incident["summary"]
    assert f"--merge-from {moved}" in f["next_step"]
    assert str(moved) in incident["summary"]


def test_hermes_own_log_line_folds_into_the_same_incident(tmp_path: Path) -> None:
    """Hermes 0.22 logs that it moved state.db aside (into logs/agent.log, as its file
    handler does) while the daemon sees the file: the two are one incident (the log
    line's key, ``fresh_db``), which has both the counts and Hermes' own line."""
    home = make_home(tmp_path / "hermes", NEWEST)
    d = _started(tmp_path, home)
    try:
        damage(home / "state.db", "zeroed")
        moved = hermes_starts_fresh(home, sessions=5, messages=20, seed=2)
        assert f"has been moved aside to {moved}" in (home / "logs" / "agent.log").read_text()
        _vanished(d)

        def folded() -> dict[str, Any] | None:
            (incident,) = d.incidents_of("sessions_vanished")
            return incident if incident["count"] == 2 else None

        incident = wait_for(folded, "the log line folded into the incident")
    finally:
        d.stop()
    assert incident["fields"]["old_sessions"] == OLD_SESSIONS
    assert incident["fields"]["rule"] == "sessions_vanished"  # the log rule's own field
    assert any(
        "Hermes started with a fresh, empty session database" in e for e in incident["evidence"]
    )
    assert f"{OLD_SESSIONS} sessions and {OLD_MESSAGES} messages" in incident["summary"]


def test_an_empty_moved_aside_file_is_named_as_holding_nothing(tmp_path: Path) -> None:
    """A state.db emptied to 0 bytes is moved aside too: the incident says the file holds
    nothing, and that the 12 sessions counted in that file before are not in it."""
    home = make_home(tmp_path / "hermes", NEWEST)
    d = _started(tmp_path, home)
    try:
        damage(home / "state.db", "empty")
        moved = hermes_starts_fresh(home, sessions=5, messages=20, seed=2)
        incident = _vanished(d)
    finally:
        d.stop()
    assert moved.stat().st_size == 0
    assert incident["fields"]["old_bytes"] == 0
    assert incident["fields"]["old_sessions"] == 0
    assert "it holds nothing" in incident["summary"]
    assert f"the {OLD_SESSIONS} sessions verified in it" in incident["summary"]
    assert incident["severity"] == "critical"


def test_a_vanishing_while_the_daemon_was_down_is_told_when_it_starts(tmp_path: Path) -> None:
    """The daemon verified the file and stopped; Hermes moved it aside meanwhile. At its
    next start the moved-aside file is the file last verified (its inode): one incident,
    with the counts remembered in verified.json."""
    home = make_home(tmp_path / "hermes", NEWEST)
    _started(tmp_path, home).stop()
    damage(home / "state.db", "zeroed")
    moved = hermes_starts_fresh(home, sessions=5, messages=20, seed=2)
    d = DaemonProc(configured(tmp_path, home, verify_interval="1h"))
    try:
        incident = _vanished(d)
    finally:
        d.stop()
    assert incident["fields"]["moved_aside"] == str(moved)
    assert incident["fields"]["old_sessions"] == OLD_SESSIONS


def test_old_moved_aside_files_are_history_at_start(tmp_path: Path) -> None:
    """A moved-aside file that is not the file last verified (Hermes moved it aside before
    the daemon ever counted it) is history at the first start, not a new incident: the
    daemon verifies the fresh file and opens nothing."""
    home = make_home(tmp_path / "hermes", NEWEST)
    damage(home / "state.db", "zeroed")
    hermes_starts_fresh(home, sessions=5, messages=20, seed=2)
    d = _started(tmp_path, home)
    try:
        assert d.incidents_of("sessions_vanished") == []
    finally:
        d.stop()
    assert not any("sessions vanished" in line for line in d.output())


def test_a_file_replaced_by_one_with_far_fewer_sessions_is_a_vanishing(tmp_path: Path) -> None:
    """A copy of the same rows renamed over state.db (a new inode) is no vanishing; a file
    with 2 sessions renamed over it after that is one: the incident names the old file's
    identity and both counts."""
    home = make_home(tmp_path / "hermes", NEWEST)
    db = home / "state.db"
    d = _started(tmp_path, home)
    try:
        same = db.with_name("state.db.copy")
        shutil.copyfile(db, same)
        os.rename(same, db)
        d.wait_for_line('reason="new file"')
        d.wait_for_line("database verified healthy")
        assert d.incidents_of("sessions_vanished") == []
        few = make_home(tmp_path / "few", Spec(hermes=NEWEST_HERMES, sessions=2, messages=4))
        smaller = db.with_name("state.db.smaller")
        shutil.copyfile(few / "state.db", smaller)
        old = os.stat(db)
        os.rename(smaller, db)
        incident = _vanished(d)
    finally:
        d.stop()
    f = incident["fields"]
    assert f["old_file"] == f"{old.st_dev}:{old.st_ino}"
    assert (f["old_sessions"], f["new_sessions"]) == (OLD_SESSIONS, 2)
    assert "10 sessions vanished" in incident["summary"]


@pytest.mark.parametrize(
    ("old", "new", "is_vanishing"),
    [
        (12, 0, True),  # Hermes started empty
        (12, 5, True),  # fewer than half, 7 fewer
        (12, 6, False),  # half is not fewer than half
        (9, 4, True),  # fewer than half, exactly VANISHED_MIN fewer
        (8, 3, True),
        (7, 3, False),  # fewer than half, but only 4 fewer: a small home emptied by hand
        (4, 0, False),
        (100, 100, False),  # a repair that kept every session
        (100, 120, False),
        (1000, 499, True),
    ],
)
def test_the_threshold_is_fewer_than_half_and_at_least_five_fewer(
    old: int, new: int, is_vanishing: bool
) -> None:
    """A new file is a vanishing when it holds fewer than half the sessions of the file
    before it and at least VANISHED_MIN fewer: both halves of the rule can fail."""
    assert VANISHED_MIN == 5
    assert vanished(old, new) is is_vanishing
