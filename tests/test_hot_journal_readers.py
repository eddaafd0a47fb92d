"""Every reader of a file that is not the live database (a moved-aside file, a quarantined
original, a snapshot) sees it as SQLite presents it, and never writes it.

Hermes 0.22 writes in rollback mode on this SQLite; killed in the middle of a
transaction it leaves a hot ``-journal`` beside a half-written file, and a quarantined
original keeps that journal. An immutable read sees the half-written pages ("database
disk image is malformed" from a file that is fine, or rows never committed); a
read-only one cannot roll the journal back. So: the merge's proof reads such a copy
through a private copy rolled back; the count of a moved-aside file says why it was not
counted; the tests' own witness reads a copy of the bundle.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lab.corruption import Case
from lab.hot_journal import killed_mid_transaction
from statewarden.maintenance import merge
from statewarden.moved_aside import HOT_JOURNAL, count_held
from tests.support.maintenance import rows

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    return killed_mid_transaction(
        tmp_path_factory.mktemp("hot"), committed=3, uncommitted=400, words=4
    )


def digest(db: Path) -> tuple[str, str]:
    journal = db.with_name(db.name + "-journal")
    return (
        hashlib.sha256(db.read_bytes()).hexdigest(),
        hashlib.sha256(journal.read_bytes()).hexdigest(),
    )


def test_the_merge_proof_reads_the_ids_sqlite_presents(case: Case, tmp_path: Path) -> None:
    """The ids an earlier copy beside a hot journal proves a merge with are those of the
    file SQLite rolls back (read through a private copy, removed after); the copy and its
    journal are not touched."""
    assert case.pristine is not None
    before = digest(case.db)
    ids = merge._meta_ids(case.db, tmp_path / "work")
    assert ids
    assert ids == merge._meta_ids(case.pristine, tmp_path / "work")
    assert digest(case.db) == before
    assert not list((tmp_path / "work").glob(".statewarden-work-*"))


def test_a_file_beside_a_hot_journal_is_not_counted_and_says_why(case: Case) -> None:
    """It was "database disk image is malformed": a false verdict of damage."""
    assert case.pristine is not None
    before = digest(case.db)
    held = count_held(case.db)
    assert (held.sessions, held.messages, held.why) == (None, None, HOT_JOURNAL)
    assert digest(case.db) == before
    rolled_back = count_held(case.pristine)
    assert (rolled_back.sessions, rolled_back.why) == (12, "")


def test_the_tests_witness_reads_the_rolled_back_file(case: Case) -> None:
    """The tests' ``rows`` reads what SQLite presents: no row of the killed transaction,
    the file and its journal untouched. It read such a quarantined original immutable and
    counted a rolled-back row as lost by a merge."""
    assert case.pristine is not None
    before = digest(case.db)
    sql = "SELECT id, session_id, content FROM messages ORDER BY id"
    assert rows(case.db, sql) == rows(case.pristine, sql)
    assert not rows(case.db, "SELECT id FROM messages WHERE content LIKE 'uncommitted %'")
    assert digest(case.db) == before
