"""A state.db that is a symlink is read with the real file's sidecars, as SQLite reads it.

SQLite names ``-wal``, ``-shm`` and ``-journal`` after the real file, not the link. The
work copy (``bundle.make_work_copy``: ``check``, ``recover``, maintenance's pre-build)
copied ``state.db-wal`` beside the link, which never exists, and checked the main file
alone: rows committed only in the real file's ``-wal`` were not seen (a table of 50
rows missing from ``check``'s facts). ``sqlite.no_sidecars`` and
``wal_sidecars_absent`` looked beside the link too, and a reader then opened a live WAL
database ``immutable``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import apsw

from lab.hermes_fixtures import TINY, built_db
from statewarden.recovery.check import check_database
from statewarden.sqlite import closed_wal, no_sidecars, wal_sidecars_absent

ROWS = 50


def bundle_with_wal(folder: Path) -> tuple[Path, Path]:
    """(the link ``state.db``, the real file ``real.db``): Hermes' database with a
    table of ``ROWS`` rows committed only in ``real.db-wal`` (no ``-shm``: a writer
    that was killed, its index gone with it)."""
    folder.mkdir()
    work = folder.with_name(folder.name + "-work")
    work.mkdir()
    shutil.copyfile(built_db(TINY), work / "real.db")
    conn = apsw.Connection(str(work / "real.db"))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    with conn:
        conn.execute("CREATE TABLE only_in_wal(x)")
        conn.executemany("INSERT INTO only_in_wal VALUES (?)", [(i,) for i in range(ROWS)])
    # The files as they stand while the connection is open: main file and -wal.
    real = folder / "real.db"
    shutil.copyfile(work / "real.db", real)
    shutil.copyfile(work / "real.db-wal", folder / "real.db-wal")
    conn.close()
    link = folder / "state.db"
    link.symlink_to("real.db")
    return link, real


def digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file() and not p.is_symlink()
    }


def scanned(facts: Any) -> dict[str, int]:
    return {t.name: t.scan_rows for t in facts.tables}


def test_the_sidecar_tests_look_beside_the_real_file(tmp_path: Path) -> None:
    """Through the link, the real file's ``-wal`` is seen: not closed, not bare."""
    link, real = bundle_with_wal(tmp_path / "db")
    for path in (link, real):
        assert not wal_sidecars_absent(path)
        assert not no_sidecars(path)
        assert not closed_wal(path)


def test_check_through_the_link_sees_the_wal(tmp_path: Path) -> None:
    """``check`` of the link and of the real file find the same rows, those only in
    the ``-wal`` among them; nothing beside either is written."""
    link, real = bundle_with_wal(tmp_path / "db")
    before = digest(link.parent)
    by_link = check_database(link, tmp_path / "w1")
    by_real = check_database(real, tmp_path / "w2")
    assert scanned(by_link) == scanned(by_real)
    assert scanned(by_link)["only_in_wal"] == ROWS
    assert by_link.path == str(link)
    assert digest(link.parent) == before
    assert sorted(os.listdir(link.parent)) == ["real.db", "real.db-wal", "state.db"]
