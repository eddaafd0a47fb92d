"""An inode a bundle file had when a scan began matches only while it is that file.

Hermes 0.22 in rollback mode creates and deletes its ``-journal`` at every transaction;
a scan reads the bundle's inodes once, when it begins, and the journal's number may be
given to another file before the scan reads a process holding that other file (another
Hermes' next journal, on the same filesystem). A maintenance run once listed the
gateway and dashboard of another Hermes home as holders of its database that way, and
refused to go on. Invariant: a descriptor or map matched by inode holds the bundle file
(its path is the file's, or the file there has the inode still).

The freed-and-reused number is made here without waiting for the filesystem to reuse
one: the journal is a second name of a file this process holds under another name, and
that name is removed after the bundle is read, as a journal is deleted.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from statewarden.holders.bundle import Bundle, Hit, bundle_of, match_descriptor, match_maps
from statewarden.holders.report import JOURNAL_FILE


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, Path, int]]:
    """(the database, another home's journal held open, its descriptor)."""
    db = tmp_path / "mine" / "state.db"
    db.parent.mkdir()
    db.write_bytes(b"\0" * 4096)
    other = tmp_path / "other" / "state.db-journal"
    other.parent.mkdir()
    other.write_bytes(b"\1" * 4096)
    fd = os.open(other, os.O_RDWR)
    try:
        yield db, other, fd
    finally:
        os.close(fd)


def _descriptor_hit(fd: int, bundle: Bundle) -> Hit | None:
    link = f"/proc/self/fd/{fd}"
    return match_descriptor(os.stat(link), link, [bundle])


def _map_hits(fd: int, bundle: Bundle) -> dict[Hit, int]:
    found: dict[Hit, int] = {}
    with mmap.mmap(fd, 4096):
        maps = Path("/proc/self/maps").read_bytes()
        match_maps(maps, [bundle], found, {})
    return found


def test_a_journal_number_given_to_another_file_holds_nothing_of_the_database(
    held: tuple[Path, Path, int],
) -> None:
    """The journal's number, read when the bundle was, is another home's journal's once
    the database's journal is deleted: its descriptor and its map hold nothing of the
    database (both matched it before)."""
    db, other, fd = held
    journal = db.with_name("state.db-journal")
    os.link(other, journal)
    bundle = bundle_of(str(db))
    assert bundle.ids[JOURNAL_FILE] == (os.fstat(fd).st_dev, os.fstat(fd).st_ino)
    journal.unlink()  # deleted, its number now another file's
    assert _descriptor_hit(fd, bundle) is None
    assert _map_hits(fd, bundle) == {}


def test_the_bundle_file_held_by_another_name_is_still_held(
    held: tuple[Path, Path, int],
) -> None:
    """The control: while the journal is the file the descriptor holds (a second name of
    it), the descriptor and the map hold the database's journal."""
    db, other, fd = held
    os.link(other, db.with_name("state.db-journal"))
    bundle = bundle_of(str(db))
    assert _descriptor_hit(fd, bundle) == (0, JOURNAL_FILE, False)
    assert _map_hits(fd, bundle) == {(0, JOURNAL_FILE, False): 1}


def test_a_journal_deleted_while_its_writer_holds_it_is_still_held(tmp_path: Path) -> None:
    """A writer holding the database's own journal when it is deleted (its transaction
    ends) held the database's file: the path /proc shows is the journal's."""
    db = tmp_path / "state.db"
    db.write_bytes(b"\0" * 4096)
    journal = db.with_name("state.db-journal")
    journal.write_bytes(b"\1" * 4096)
    fd = os.open(journal, os.O_RDWR)
    try:
        bundle = bundle_of(str(db))
        journal.unlink()
        assert _descriptor_hit(fd, bundle) == (0, JOURNAL_FILE, False)
        assert _map_hits(fd, bundle) == {(0, JOURNAL_FILE, False): 1}
    finally:
        os.close(fd)
