"""SQLite's page accounting ("Page N: never used") stands for a walk of every b-tree when
the integrity check got through it, even if the check stopped afterwards on a row read
against an index (a zeroed page does that): recover then salvages the orphaned leaves
it names without walking the file again. A check that stopped with no sign of that
accounting is not taken for it: every page is walked, as before."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from lab import corruption
from lab.hermes_fixtures import SMALL
from statewarden.recovery.integrity import IntegrityCheck, pages_accounted
from statewarden.recovery.pages import PAGE_TABLE_LEAF, DatabaseFile, orphan_table_leaves
from statewarden.recovery.recover import recover
from statewarden.recovery.salvage import never_used
from statewarden.recovery.schema import read_schema


def _check(db: Path) -> tuple[IntegrityCheck, list[str], bool, str | None]:
    conn = apsw.Connection(str(db))
    try:
        check = IntegrityCheck(conn, None, ["sessions", "messages"])
        lines, complete, abort = check.result()
    finally:
        conn.close()
    return check, lines, complete, abort


def _walked_orphan_leaves(db: Path) -> list[int]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        schema = read_schema(conn)
    finally:
        conn.close()
    raw = DatabaseFile(db)
    try:
        return orphan_table_leaves(raw, [o.rootpage for o in schema.objects if o.rootpage] + [1])
    finally:
        raw.close()


def _leaves_among(db: Path, pages: list[int]) -> list[int]:
    raw = DatabaseFile(db)
    try:
        return [n for n in pages if raw.page_kind(n) == PAGE_TABLE_LEAF]
    finally:
        raw.close()


def test_a_check_stopped_on_a_row_read_has_accounted_for_every_page(tmp_path: Path) -> None:
    """A zeroed interior page of messages: the check stops early (a row read against
    its index meets the zeroed page) but its page accounting is whole, and the orphaned
    leaves it names are the ones a walk of every b-tree finds."""
    case = corruption.zeroed_interior(tmp_path, spec=SMALL)
    check, lines, complete, abort = _check(case.db)
    assert not complete
    assert abort is not None
    assert check.pages_accounted()
    unused = never_used(lines, complete=True)
    assert unused is not None
    leaves = _leaves_among(case.db, unused)
    assert leaves  # the leaves below the zeroed page
    assert leaves == _walked_orphan_leaves(case.db)


@pytest.mark.parametrize(
    ("rows", "abort", "accounted"),
    [
        (["ok"], None, True),
        (["*** in database main ***\nPage 9: never used"], None, True),
        (
            ["*** in database main ***\nPage 9: never used"],
            "database disk image is malformed",
            True,
        ),
        (
            ["row 5 missing from index idx_messages_session"],
            "database disk image is malformed",
            False,
        ),
        ([], "database disk image is malformed", False),
        ([], "disk I/O error", False),
    ],
)
def test_a_check_stopped_with_no_sign_of_its_accounting_is_not_taken_for_it(
    rows: list[str], abort: str | None, accounted: bool
) -> None:
    """Only the pragma's first row (its b-tree and page-accounting errors, which SQLite
    gives once it has checked every page) shows the accounting done; a pragma that
    stopped with none (the b-trees may have been sound, or it stopped in them) is not
    taken for it, and every page is walked."""
    assert pages_accounted(rows, abort) is accounted


def test_recover_takes_the_accounting_instead_of_walking_the_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """recover of the zeroed interior page: the rows of the orphaned leaves come back,
    every one, and no walk of the file's b-trees was made to find those leaves (the
    walk is counted, not replaced: it would still run if called)."""
    case = corruption.zeroed_interior(tmp_path / "case", spec=SMALL)
    walks = []
    real = DatabaseFile.reachable

    def counted(self: DatabaseFile, roots: list[int]) -> set[int]:
        walks.append(roots)
        return real(self, roots)

    monkeypatch.setattr(DatabaseFile, "reachable", counted)
    out = tmp_path / "out.db"
    report = recover(case.db, out)
    assert report.verified
    assert walks == []
    want = corruption.table_rows(case.pristine, "SELECT id FROM messages ORDER BY id")
    got = corruption.table_rows(out, "SELECT id FROM messages ORDER BY id")
    assert got == want
