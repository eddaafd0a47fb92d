"""A raw copy taken while Hermes writes is the database as of a commit.

A live writer in WAL mode commits by appending frames to the ``-wal``; the file itself
changes only when a checkpoint folds them in. A copy of the bundle during which only
the ``-wal`` changed (the same file, not shorter, the same header) is consistent once
its ``-wal`` is cut where the frames committed when the copy began end, as the
writer's wal-index (the ``-shm``) said then (``bundle._only_appended``): past them a
log that started over is written over frames of the one before, so a copy can hold an
old frame between new ones (a real Hermes writer showed it). Before, any commit during the copy made it start over,
so under a writer committing every few milliseconds every attempt was a whole copy
written for nothing, and the daemon's verification fell back to the backup API.

The invariant, held here: every copy made holds every row committed before it began,
none committed after, and reads clean (no WAL note, integrity ok); a change that is
not an append (a checkpoint) still makes the copy start over.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import apsw
import pytest

from lab import corruption
from lab.hermes_fixtures import SMALL, make_home
from statewarden.errors import DatabaseChanged
from statewarden.recovery.bundle import WorkCopy, make_work_copy
from tests.support.fake_hermes import LOG_ENV, WRITE_EVERY_ENV, install_fake_hermes
from tests.support.key_writer import EXCLUSIVE_WRITER, KeyWriter, keys_in


def copied_while_committing(
    db: Path, work: Path, writer: KeyWriter, attempts: int
) -> tuple[WorkCopy, list[str]]:
    """``make_work_copy`` of ``db`` while ``writer`` commits a key at each step of the
    copy: the copy and the keys committed during it."""
    during: list[str] = []

    def write(phase: str, done: int, total: int) -> None:
        if phase == "copy":
            during.append(f"during{len(during)}")
            writer.commit(during[-1])

    return make_work_copy(db, work, attempts=attempts, progress=write), during


def assert_as_it_began(work: WorkCopy, committed: set[str], during: list[str]) -> None:
    """The copy reads clean, with every key of ``committed`` and none of ``during``
    (the writer did commit during it); removed after."""
    try:
        assert during
        assert work.notes == []
        keys = keys_in(work.db)
        assert committed <= keys
        assert not keys & set(during)
    finally:
        work.cleanup()


@pytest.mark.process
@pytest.mark.parametrize("fold", [False, True], ids=["appends", "checkpoints"])
def test_commits_during_the_copy(tmp_path: Path, fold: bool) -> None:
    """A writer commits at each step of the copy. Appends only: the first attempt is
    the copy, holding the rows committed before it began and none of those committed
    during it. With each commit folded into the file: no attempt is consistent, and
    the copy is refused."""
    case = corruption.fresh_copy(tmp_path / "db")
    writer = KeyWriter(case.db, fold=fold)
    committed = {f"before{i}" for i in range(3)}
    for key in sorted(committed):
        writer.commit(key)
    try:
        if fold:
            with pytest.raises(DatabaseChanged):
                copied_while_committing(case.db, tmp_path / "work", writer, attempts=2)
            return
        work, during = copied_while_committing(case.db, tmp_path / "work", writer, attempts=1)
    finally:
        writer.close()
    assert_as_it_began(work, committed, during)


@pytest.mark.process
def test_commits_over_a_log_started_again(tmp_path: Path) -> None:
    """After a checkpoint the log starts over from its first frame, over the frames of
    the one before, and the -wal no longer grows: commits during the copy change it
    in place. The copy is still kept, holding the rows committed before it began and
    none of those committed during it (the first wal-index check refused every such
    copy: a writer of Hermes' pace then fell back to the backup API)."""
    case = corruption.fresh_copy(tmp_path / "db")
    writer = KeyWriter(case.db)
    committed = {f"old{i}" for i in range(40)} | {"fold", "before0", "before1"}
    try:
        for i in range(40):
            writer.commit(f"old{i}")
        writer.commit("fold", fold=True)  # every frame folded in: the next write starts over
        size = os.path.getsize(f"{case.db}-wal")
        writer.commit("before0")
        writer.commit("before1")
        assert os.path.getsize(f"{case.db}-wal") == size  # written over the old log
        work, during = copied_while_committing(case.db, tmp_path / "work", writer, attempts=1)
        assert os.path.getsize(f"{case.db}-wal") == size
    finally:
        writer.close()
    assert_as_it_began(work, committed, during)


@pytest.mark.process
def test_hermes_writing_while_copies_are_made(tmp_path: Path) -> None:
    """Hermes' own SessionDB appends a message every millisecond (with its own
    checkpoints, every 50 writes) while twelve copies are made: each copy made holds
    every message committed before it began and reads clean; a checkpoint during a
    copy still makes it start over, but not every copy meets one."""
    home = make_home(tmp_path / "hermes", SMALL)
    install_fake_hermes(tmp_path / "bin")
    log = tmp_path / "commits.log"
    env = {**os.environ, "HERMES_HOME": str(home), WRITE_EVERY_ENV: "0.001", LOG_ENV: str(log)}
    writer = subprocess.Popen(
        [str(tmp_path / "bin" / "hermes"), "dashboard"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )

    def logged() -> set[str]:
        return {ln.split("\t")[1] for ln in log.read_text().splitlines()} if log.exists() else set()

    made = changed = 0
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        for i in range(12):
            before = logged()
            try:
                work = make_work_copy(home / "state.db", tmp_path / f"w{i}")
            except DatabaseChanged:
                changed += 1
                continue
            try:
                assert work.notes == []
                conn = apsw.Connection(str(work.db), flags=apsw.SQLITE_OPEN_READONLY)
                assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
                ticks = {
                    str(r[0])
                    for r in conn.execute(
                        "SELECT content FROM messages WHERE content LIKE 'tick %'"
                    )
                }
                conn.close()
                assert before <= ticks
                made += 1
            finally:
                work.cleanup()
        assert writer.poll() is None
    finally:
        writer.terminate()
        writer.communicate(timeout=30)
    assert made >= 1, f"every one of 12 copies saw a checkpoint ({changed})"


@pytest.mark.process
def test_a_stale_wal_index_does_not_cut_the_copy(tmp_path: Path) -> None:
    """A writer killed leaves its -shm behind; the next opens the database in exclusive
    locking mode and commits on in the same log, never touching the -shm, whose salts
    still match. Every copy made holds every row committed before it began: before,
    the copy was cut where the stale index said, and rows committed long before were
    missing from a copy that read clean (10 of 2,850 in the case that found it)."""
    case = corruption.fresh_copy(tmp_path / "db")
    first = KeyWriter(case.db)
    for i in range(3):
        first.commit(f"first{i}")
    first.kill()
    assert os.path.exists(f"{case.db}-shm")
    second = KeyWriter(case.db, EXCLUSIVE_WRITER)
    committed = {f"first{i}" for i in range(3)} | {f"second{i}" for i in range(20)}
    try:
        for i in range(20):
            second.commit(f"second{i}")
        try:
            work, _ = copied_while_committing(case.db, tmp_path / "work", second, attempts=2)
        except DatabaseChanged:
            return  # no attempt was consistent: refused, nothing passed off
    finally:
        second.close()
    try:
        assert committed <= keys_in(work.db)
    finally:
        work.cleanup()
