"""A damage incident is of one file: damage on a new state.db (after a repair or a
replacement: a new inode) opens a new incident with its own evidence and time, never the
old one reopened; the same file's damage reopens or updates its own incident. Real
database files, replaced the way a swap does (a new file renamed over the old)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from statewarden.daemon.core import of_file
from statewarden.incidents.book import IncidentBook, Update
from statewarden.incidents.recorder import Recorder
from statewarden.incidents.signals import Signal
from statewarden.incidents.timeline import Timeline
from statewarden.kinds import KINDS

OF_ONE_FILE = sorted(n for n, k in KINDS.items() if k.of_one_file)


def replace_file(db: Path) -> None:
    """A new file with the same bytes renamed over ``db`` (what a swap does)."""
    new = db.with_name(db.name + ".new")
    shutil.copyfile(db, new)
    os.rename(new, db)


def damage(kind: str, db: Path, at: float, text: str) -> Signal:
    found = of_file(Signal(kind, str(db), text, at, evidence=(text,), source="verify"))
    assert isinstance(found, Signal)
    return found


def test_damage_kinds_are_of_one_file() -> None:
    """Corruption and every kind folded into it are of one file."""
    assert "corruption" in OF_ONE_FILE
    assert set(OF_ONE_FILE) >= {n for n, k in KINDS.items() if k.folded_into_corruption}


@pytest.mark.parametrize("kind", OF_ONE_FILE)
def test_new_damage_on_a_new_file_is_a_new_incident(
    kind: str, tmp_path: Path, hermes_home: Path
) -> None:
    """Damage, resolved (a repair), then damage on the new file within the reopen window:
    a new incident, with only the new evidence and its own first time. Damage again on
    that same file reopens it (the same id)."""
    db = hermes_home / "state.db"
    book = IncidentBook(tmp_path / "incidents.json", reopen_window_s=600.0)
    first = book.record(damage(kind, db, 100.0, "old damage"))
    assert first is not None
    assert first.change == "opened"
    old = first.incident
    assert old.file
    book.resolve(old.id, "repaired by maintenance run r1", at=110.0)
    replace_file(db)
    again = book.record(damage(kind, db, 120.0, "new damage"))
    assert again is not None
    assert again.change == "opened"
    new = again.incident
    assert new.id != old.id
    assert new.file != old.file
    assert (new.first_seen, new.evidence, new.count) == (120.0, ["new damage"], 1)
    assert book.get(old.id).state == "resolved"
    book.resolve(new.id, "quiet", at=130.0)
    same = book.record(damage(kind, db, 140.0, "more damage"))
    assert same is not None
    assert (same.change, same.incident.id) == ("reopened", new.id)


def test_damage_on_a_new_file_resolves_the_old_files_open_incident(
    tmp_path: Path, hermes_home: Path
) -> None:
    """An incident still open on the old file is resolved (the file it was of is gone)
    before the new file's opens; the recorder hands both updates on, in that order."""
    db = hermes_home / "state.db"
    book = IncidentBook(tmp_path / "incidents.json")
    updates: list[Update] = []
    recorder = Recorder(book, Timeline(tmp_path / "timeline"), updates.append)
    recorder.record(damage("corruption", db, 100.0, "old damage"))
    replace_file(db)
    recorder.record(damage("corruption", db, 120.0, "new damage"))
    assert [u.change for u in updates] == ["opened", "resolved", "opened"]
    assert updates[1].incident.id == updates[0].incident.id
    assert "another file now" in updates[1].incident.resolution
    assert updates[2].incident.evidence == ["new damage"]
    # The same file again: an update of the open incident, nothing resolved.
    recorder.record(damage("corruption", db, 130.0, "still damaged"))
    assert [u.change for u in updates[3:]] == ["updated"]


def test_a_signal_of_another_kind_or_a_clear_is_not_stamped(hermes_home: Path) -> None:
    """Only damage signals get the file's identity; a missing file leaves it unknown."""
    db = hermes_home / "state.db"
    stale = of_file(Signal("stale_holder", str(db), "x", 1.0, key="1"))
    assert isinstance(stale, Signal)
    assert stale.file == ""
    gone = of_file(Signal("corruption", str(hermes_home / "nope.db"), "x", 1.0))
    assert isinstance(gone, Signal)
    assert gone.file == ""
