"""The b-tree check run in a thread (``IntegrityCheck(background=True)``) gives exactly
what the check on the caller's thread gives, on healthy and damaged Hermes files, while
the caller reads the same file on its own connection meanwhile."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from lab import corruption
from lab.hermes_fixtures import SMALL
from statewarden.recovery.decoding.integrity import IntegrityCheck

CASES: dict[str, Callable[[Path], corruption.Case]] = {
    "healthy": lambda d: corruption.fresh_copy(d, SMALL),
    "phantom row": lambda d: corruption.phantom_row(d, spec=SMALL),
    "zeroed messages leaf": lambda d: corruption.zeroed_leaf(d, spec=SMALL),
    "zeroed interior page": lambda d: corruption.zeroed_interior(d, spec=SMALL),
    "FTS shadow pages zeroed": lambda d: corruption.scribbled_trees(
        d, {"messages_fts_data": 3}, spec=SMALL
    ),
}


def _run(db: Path, *, background: bool) -> tuple[list[str], bool, str | None, list[str], int]:
    conn = apsw.Connection(str(db))
    try:
        check = IntegrityCheck(conn, None, ["sessions", "messages"], background=background)
        # The caller reads on while the check runs (a full scan of its own).
        rows = -1
        try:
            rows = len(conn.execute("SELECT rowid FROM sessions NOT INDEXED").fetchall())
        except apsw.Error:
            rows = -2
        btree_lines, _ = check.btree_result()
        lines, complete, abort = check.result()
        return lines, complete, abort, btree_lines, rows
    finally:
        conn.close()


@pytest.mark.parametrize("name", list(CASES))
def test_background_check_gives_the_same_lines(tmp_path: Path, name: str) -> None:
    """Lines, whether it finished, the abort note, the b-tree lines alone: all the
    same; and the damaged cases do print lines (the comparison is not of two empties)."""
    case = CASES[name](tmp_path)
    here = _run(case.db, background=False)
    there = _run(case.db, background=True)
    assert there == here
    if name == "healthy":
        assert here[:3] == ([], True, None)
    else:
        assert here[0] or not here[1], here


def test_wait_joins_the_thread(tmp_path: Path) -> None:
    """``stop`` (an error path) returns only once the b-tree thread is done with the
    file, so that the work folder can go."""
    case = corruption.zeroed_leaf(tmp_path, spec=SMALL)
    conn = apsw.Connection(str(case.db))
    try:
        check = IntegrityCheck(conn, None, background=True)
        check.stop()
        assert check._btree_thread is None or not check._btree_thread.is_alive()
    finally:
        conn.close()
