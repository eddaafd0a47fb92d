"""SQLite's page accounting ("Page N: never used") stands for a walk of every b-tree when
the integrity check got through it, even if the check stopped afterwards on a row read
against an index (a zeroed page does that): recover then salvages the orphaned leaves
it names without walking the file again. A check that stopped with no sign of that
accounting is not taken for it: every page is walked, as before."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

import apsw
import pytest

from lab import corruption
from lab.hermes_fixtures import SMALL
from statewarden.recovery.building.salvage import never_used
from statewarden.recovery.decoding.carving import orphan_table_leaves
from statewarden.recovery.decoding.integrity import (
    NEVER_USED_RE,
    IntegrityCheck,
    accounting_skipped,
    pages_accounted,
)
from statewarden.recovery.decoding.page_format import PAGE_TABLE_LEAF
from statewarden.recovery.decoding.pages import DatabaseFile
from statewarden.recovery.decoding.schema import read_schema
from statewarden.recovery.recover import recover
from tests.support.cli import run_installed


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


def _count_walks(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The roots of each walk of every b-tree (``DatabaseFile.reachable``) made from
    now on, in a list filled as they are made; each walk still runs."""
    walks: list[list[int]] = []
    real = DatabaseFile.reachable

    def counted(self: DatabaseFile, roots: list[int]) -> set[int]:
        walks.append(roots)
        return real(self, roots)

    monkeypatch.setattr(DatabaseFile, "reachable", counted)
    return walks


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
    walks = _count_walks(monkeypatch)
    out = tmp_path / "out.db"
    report = recover(case.db, out)
    assert report.verified
    assert walks == []
    want = corruption.table_rows(case.pristine, "SELECT id FROM messages ORDER BY id")
    got = corruption.table_rows(out, "SELECT id FROM messages ORDER BY id")
    assert got == want


def _random_schema_db(path: Path, seed: int) -> None:
    """Tables, views and FTS5 tables of random names (the order of SQLite's schema
    hash follows the names), and a table ``big`` whose root page is then zeroed: its
    leaves are orphaned, so a check that does its page accounting names them."""
    rnd = random.Random(seed)
    conn = apsw.Connection(str(path))
    try:
        for i in range(rnd.randint(3, 20)):
            name = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6)) + str(i)
            kind = rnd.choice(["table", "table", "view", "fts"])
            if kind == "table":
                conn.execute(f"CREATE TABLE {name}(x)")
            elif kind == "view":
                conn.execute(f"CREATE VIEW {name} AS SELECT 1")
            else:
                conn.execute(f"CREATE VIRTUAL TABLE {name} USING fts5(x)")
        conn.execute("CREATE TABLE big(x)")
        conn.execute(
            "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 2000)"
            " INSERT INTO big SELECT randomblob(300) FROM r"
        )
        root = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'big'").get
        page_size = conn.execute("PRAGMA page_size").get
    finally:
        conn.close()
    with path.open("r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(bytes(page_size))


@pytest.mark.parametrize("seed", range(40))
def test_a_skipped_accounting_is_known_before_the_check(tmp_path: Path, seed: int) -> None:
    """SQLite skips its page accounting when the first table of its schema hash is a
    view or a virtual table: ``accounting_skipped`` says so exactly when the check of a
    file with orphaned leaves names no page "never used", and such a check is never
    taken for an accounting."""
    db = tmp_path / "random.db"
    _random_schema_db(db, seed)
    conn = apsw.Connection(str(db))
    try:
        skipped = accounting_skipped(conn)
        check = IntegrityCheck(conn, None, None)
        lines, _, _ = check.result()
    finally:
        conn.close()
    named = any(NEVER_USED_RE.match(ln) for ln in lines)
    assert skipped is (not named)
    assert check.pages_accounted() is named


def test_recover_walks_the_pages_where_the_accounting_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Hermes file whose schema hash starts with a view (SQLite skips its page
    accounting) and a zeroed interior page of messages: the pages are walked, and
    every message of the orphaned leaves comes back (trusting the check's silence
    lost all 2,000)."""
    case = corruption.fresh_copy(tmp_path / "case", SMALL)
    corruption.view_first_in_hash(case.db)
    pf = corruption.PristineFile(case.db)
    interior, _ = pf.tree_pages(case.roots["messages"])
    corruption.zero_page(case, interior[-1] if len(interior) > 1 else case.roots["messages"])
    walks = _count_walks(monkeypatch)
    out = tmp_path / "out.db"
    report = recover(case.db, out)
    assert report.verified
    assert walks != []
    want = corruption.table_rows(case.pristine, "SELECT id FROM messages ORDER BY id")
    got = corruption.table_rows(out, "SELECT id FROM messages ORDER BY id")
    assert got == want


@pytest.mark.parametrize("view_first", [False, True], ids=["accounted", "accounting skipped"])
@pytest.mark.parametrize("table", ["sessions", "messages"])
def test_a_leaf_an_interior_page_forgot_comes_back(
    tmp_path: Path, table: str, view_first: bool
) -> None:
    """An interior page forgets its rightmost leaf and the check runs to its end: the
    leaf's rows are intact and come back, whether or not SQLite's check says the leaf
    is unused (with a view first in the schema hash it says nothing: taken for "none
    unused", 16 of 64 sessions were reported lost)."""
    case = corruption.lost_last_leaf(tmp_path / "case", table, view_first=view_first)
    assert case.unreached[table]
    conn = apsw.Connection(str(case.db))
    try:
        _, complete, _ = IntegrityCheck(conn, None, None).result()
    finally:
        conn.close()
    assert complete
    out = tmp_path / "out.db"
    report = recover(case.db, out)
    assert report.verified
    assert report.lost == {}
    want = corruption.table_rows(case.pristine, f"SELECT * FROM {table} ORDER BY rowid")
    got = corruption.table_rows(out, f"SELECT * FROM {table} ORDER BY rowid")
    assert got == want


def test_a_destroyed_schema_leaf_of_a_file_with_a_view_of_its_own(tmp_path: Path) -> None:
    """A Hermes file with a view of the user's own loses a ``sqlite_schema`` leaf: the
    Hermes objects named there come back from Hermes' known schema (the view, which
    holds no rows, does not rule it out), their tables with every row, and the view
    stays in the schema. Before, no known layout held the view: the tables named on
    the destroyed leaf were left out with their intact rows."""
    case = corruption.fresh_copy(tmp_path / "case", SMALL)
    view = corruption.view_first_in_hash(case.db)
    pf = corruption.PristineFile(case.db)
    _, leaves = pf.tree_pages(1)
    assert len(leaves) >= 2, "the schema must span leaves for one to be destroyed"
    raw = DatabaseFile(case.db)
    try:
        named = {n: {str(v[1]): str(v[0]) for _, v in raw.leaf_rows(n)[0]} for n in leaves}
    finally:
        raw.close()
    # A leaf past the first that names tables, not the view (whose row is then still
    # read); the first leaf gone, the schema is rebuilt whole from the known one.
    leaf = next(n for n in leaves[1:] if view not in named[n] and "table" in named[n].values())
    on_leaf = {name for name, kind in named[leaf].items() if kind == "table"}
    corruption.zero_page(case, leaf)
    out = tmp_path / "out.db"
    report = recover(case.db, out)
    assert report.verified
    for table in sorted(on_leaf):
        if table.startswith("sqlite_") or "_fts" in table:
            continue
        want = corruption.table_rows(case.pristine, f"SELECT * FROM {table} ORDER BY rowid")
        got = corruption.table_rows(out, f"SELECT * FROM {table} ORDER BY rowid")
        assert got == want, table
    views = corruption.table_rows(out, "SELECT name FROM sqlite_schema WHERE type = 'view'")
    assert (view,) in views


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (setpriv to a second uid), as CI runs")
def test_recover_as_a_user_finds_the_forgotten_leaf_and_leaves_no_checker(tmp_path: Path) -> None:
    """``statewardenctl recover`` run as uid 65534 on a file whose schema hash starts
    with a view and whose sessions interior page forgot a leaf: every session back, no
    loss (exit 0), and no checker process of that user left running after it."""
    base = Path(tempfile.mkdtemp(prefix="statewarden-accounting-"))
    try:
        base.chmod(0o755)
        case = corruption.lost_last_leaf(base / "case", "sessions", view_first=True)
        for path in [base, *base.rglob("*")]:
            os.chown(path, 65534, 65534)
        out = base / "out.db"
        env = {"PATH": os.environ["PATH"], "HOME": str(base), "XDG_CONFIG_HOME": str(base)}
        source, output = ("--source", str(case.db)), ("--output", str(out))
        done = run_installed("recover", *source, *output, "--json", env=env, uid=65534)
        assert done.exit_code == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["lost"] == {}
        assert report["tables"]["sessions"]["recovered"] == 64
        left = subprocess.run(["pgrep", "-u", "65534", "-f", "import apsw"], check=False)
        assert left.returncode == 1  # pgrep: no process matched
        want = corruption.table_rows(case.pristine, "SELECT * FROM sessions ORDER BY rowid")
        assert corruption.table_rows(out, "SELECT * FROM sessions ORDER BY rowid") == want
    finally:
        shutil.rmtree(base, ignore_errors=True)
