"""A hot ``-journal`` beside a file Hermes half-wrote: the file analysed is the one SQLite
presents.

A rollback-mode writer (Hermes 0.22 on Debian 12's SQLite) killed mid-transaction
leaves new pages in the file, past the size its header gives, and the originals in a
hot ``-journal``. SQLite rolls the journal back on open and the database is healthy:
``check`` says so (exit 0) and ``recover`` gives every committed row and none of the
uncommitted ones, the source and its journal never changed. A page number past
every page the file and its journal can hold is damage of the page holding it, never
evidence that the header's size field is damaged. A journal SQLite would
not apply (its header zeroed) is not applied; one of another file (another database,
or a stale journal of an older state of this one) is set aside and named, and the
file is read alone. Real Hermes writers (0.22 in its own venv, 0.19 switched to
DELETE mode), killed with SIGKILL.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab import corruption
from lab.hermes_fixtures import NEWEST, SMALL, TINY, Spec
from lab.hot_journal import (
    committed_later,
    killed_mid_transaction,
    roll_back_copy,
    spilled_past_header,
    uncommitted_rows,
)
from statewarden.recovery.decoding.schema_root import reached_past_size
from statewarden.sidecars import JOURNAL_SUFFIX, sidecar
from tests.support.cli import run_ctl

# Hermes writers and recover's integrity-check child are real processes.
pytestmark = pytest.mark.process

TABLES = ("sessions", "messages", "session_model_usage")


def _bundle(db: Path) -> tuple[bytes, bytes]:
    return db.read_bytes(), sidecar(db, JOURNAL_SUFFIX).read_bytes()


def _check(db: Path) -> tuple[int, dict[str, Any]]:
    code, stdout, _ = run_ctl("check", "--db", str(db), "--json", "--progress", "none")
    (diag,) = json.loads(stdout)["databases"]
    return code, diag


def _recover(db: Path, tmp_path: Path) -> tuple[int, dict[str, Any], Path]:
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    code, stdout, _ = run_ctl(
        "recover", "--source", str(db), "--output", str(out), "--json", "--progress", "none"
    )
    return code, json.loads(stdout), out


def _assert_rows(out: Path, truth: Path) -> None:
    for name in TABLES:
        sql = f"SELECT rowid, * FROM {name} ORDER BY rowid"
        assert corruption.table_rows(out, sql) == corruption.table_rows(truth, sql), name


@pytest.mark.parametrize(
    ("spec", "uncommitted"),
    [(NEWEST, 3000), (NEWEST, 400), (TINY, 2000)],
    ids=["hermes-0.22-large", "hermes-0.22-small", "hermes-0.19-delete-mode"],
)
def test_a_killed_writers_hot_journal_is_rolled_back_first(
    tmp_path: Path, spec: Spec, uncommitted: int
) -> None:
    """Hermes killed in the middle of a large transaction, its pages spilled past the
    header's size: check says healthy (exit 0, no note), recover gives exactly the
    committed rows (the 10 messages committed before the crash, none of the killed
    transaction's) with no loss, and the file and its journal are left as they were."""
    case = killed_mid_transaction(tmp_path / "home", spec=spec, uncommitted=uncommitted)
    assert spilled_past_header(case.db)
    before = _bundle(case.db)
    code, diag = _check(case.db)
    assert (code, diag["damage"], diag["notes"]) == (0, "none", [])
    code, report, out = _recover(case.db, tmp_path)
    assert (code, report["loss_detected"]) == (0, False), report["notes"]
    _assert_rows(out, case.pristine)
    assert uncommitted_rows(out) == 0
    sql = "SELECT count(*) FROM messages WHERE content LIKE 'committed before the crash %'"
    assert corruption.table_rows(out, sql) == [(10,)]
    assert _bundle(case.db) == before


def _stale_journal_beside_later_commits(tmp_path: Path) -> tuple[Path, Path]:
    """The killed writer's journal beside the same database rolled back and then
    written on by Hermes (5 more commits): returns the file and its truth."""
    case = killed_mid_transaction(tmp_path / "home", uncommitted=400)
    later = tmp_path / "later" / "state.db"
    roll_back_copy(case.db, later)
    committed_later(later, 5)
    truth = tmp_path / "truth.db"
    shutil.copyfile(later, truth)
    shutil.copyfile(sidecar(case.db, JOURNAL_SUFFIX), sidecar(later, JOURNAL_SUFFIX))
    return later, truth


def test_a_journal_with_a_zeroed_header_is_not_applied(tmp_path: Path) -> None:
    """A journal whose header is zeroed is not hot (SQLite applies none of it): beside
    an intact file it changes nothing, check says healthy and recover gives every row
    of the file, the 5 commits its pages would undo among them."""
    db, truth = _stale_journal_beside_later_commits(tmp_path)
    journal = sidecar(db, JOURNAL_SUFFIX)
    journal.write_bytes(bytes(512) + journal.read_bytes()[512:])
    before = _bundle(db)
    code, diag = _check(db)
    assert (code, diag["damage"]) == (0, "none")
    code, report, out = _recover(db, tmp_path)
    assert (code, report["loss_detected"]) == (0, False)
    _assert_rows(out, truth)
    assert _bundle(db) == before


@pytest.mark.parametrize("whose", ["an older state of this file", "another database"])
def test_a_journal_of_another_file_is_set_aside(tmp_path: Path, whose: str) -> None:
    """A hot journal written for another file (this database before 5 later commits,
    or another Hermes database): rolled back, it would write that file's pages over
    this one. It is set aside and named, and the file read alone: recover gives every
    row of the file with no loss; check says base damage (exit 3), since SQLite, and
    so Hermes, would roll it back over the file."""
    db, truth = _stale_journal_beside_later_commits(tmp_path)
    if whose == "another database":
        other = killed_mid_transaction(tmp_path / "other", spec=TINY, uncommitted=2000)
        shutil.copyfile(sidecar(other.db, JOURNAL_SUFFIX), sidecar(db, JOURNAL_SUFFIX))
    before = _bundle(db)
    code, diag = _check(db)
    assert (code, diag["damage"]) == (3, "base")
    assert any("set aside, it belongs to another database" in n for n in diag["notes"])
    code, report, out = _recover(db, tmp_path)
    assert (code, report["loss_detected"]) == (0, False), report["notes"]
    _assert_rows(out, truth)
    assert _bundle(db) == before


@pytest.mark.parametrize("where", ["freelist leaf entry", "child pointer"])
def test_a_pointer_past_every_page_is_no_evidence_about_the_size_field(
    tmp_path: Path, where: str
) -> None:
    """Hermes' file after a delete (a freelist), a stale tail of 4 pages past the
    header's size that nothing reaches, and the freelist trunk's first leaf entry (or
    the right child of the messages root) reading 3,515,107,587, a page no file of
    this size can hold: that pointer is damage of the page holding it; the b-trees
    reach no page past the header's size, and check never says the size field is
    damaged."""
    case = corruption.fresh_copy(tmp_path / "home", SMALL)
    conn = apsw.Connection(str(case.db))
    with conn:
        conn.execute("DELETE FROM messages WHERE id BETWEEN 400 AND 700")
        corruption.recount_messages(conn)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    data = bytearray(case.db.read_bytes())
    if where == "child pointer":
        root = corruption.schema_roots(case.db)["messages"]
        assert data[(root - 1) * 4096] == 0x05  # an interior page: its right child at 8
        at = (root - 1) * 4096 + 8
    else:
        (trunk,) = struct.unpack(">I", data[32:36])
        assert trunk > 0
        assert struct.unpack(">I", data[(trunk - 1) * 4096 + 4 :][:4])[0] > 0  # has leaves
        at = (trunk - 1) * 4096 + 8
    struct.pack_into(">I", data, at, 3_515_107_587)
    case.db.write_bytes(bytes(data) + bytes(4 * 4096))
    assert reached_past_size(case.db) is None
    _, diag = _check(case.db)
    assert not any("size field is damaged" in n for n in diag["notes"]), diag["notes"]
