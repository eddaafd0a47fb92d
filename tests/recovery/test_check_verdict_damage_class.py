"""``check``'s damage class where the fuzz lab found it wrong (``lab/fuzz.FINDINGS``:
``page_line_on_a_derived_root``, ``zeroed_sequence_header``,
``unreadable_table_its_indexes_list_empty``, ``unreadable_row_while_a_copy_is_malformed``).

Each file is the fuzz lab's Hermes database (``later_db``) with bytes zeroed or with a
seed's damage; what each page holds is read from the pristine file with SQLite's
``dbstat``, and what was damaged from the lab's carved truth, never from the code
under test.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import apsw
import pytest

from lab import fuzz
from lab.corruption import table_rows
from lab.hermes_fixtures import FUZZ, later_db
from statewarden.demo.damage import schema_roots, write_at
from statewarden.recovery.check import check_database
from statewarden.recovery.decoding.integrity import group_errors
from statewarden.recovery.decoding.schema import read_schema
from statewarden.recovery.diagnose import _attribute_by_page
from statewarden.recovery.diagnosis import Diagnosis

pytestmark = pytest.mark.process

PAGE = 4096
SECTOR = 512
READ_ONLY = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI


def copy_with_zeroed_headers(tmp_path: Path, *objects: str) -> Path:
    """A copy of the lab's file with the first sector (the page header, the cell
    pointers) of each named object's root page zeroed."""
    src = later_db(FUZZ)
    db = tmp_path / "db" / "state.db"
    db.parent.mkdir(parents=True)
    shutil.copyfile(src, db)
    roots = schema_roots(src)
    for name in objects:
        write_at(db, (roots[name] - 1) * PAGE, bytes(SECTOR))
    return db


def checked(db: Path, tmp_path: Path) -> Diagnosis:
    """``check`` of ``db`` (on a work copy, as ``statewardenctl check`` makes it)."""
    return check_database(db, tmp_path / "work")


def leaves(db: Path, name: str) -> list[int]:
    """The leaf pages of ``name``'s b-tree other than its root, by SQLite's ``dbstat``."""
    conn = apsw.Connection(f"file:{db}?mode=ro&immutable=1", flags=READ_ONLY)
    try:
        return [
            int(r[0])
            for r in conn.execute(
                "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' AND path != '/'",
                (name,),
            )
        ]
    finally:
        conn.close()


def test_damage_confined_to_the_sequence_table_is_derived(tmp_path: Path) -> None:
    """``sqlite_sequence`` holds only AUTOINCREMENT's counters, which follow the rows
    (recover sets each from its table): its page header zeroed is derived damage, not
    base, and the group says so."""
    diag = checked(copy_with_zeroed_headers(tmp_path, "sqlite_sequence"), tmp_path)
    assert [(g.object, g.derived) for g in diag.groups] == [("sqlite_sequence", True)]
    assert diag.damage == "derived"


def test_a_table_that_cannot_be_read_whose_intact_indexes_list_no_row_lost_nothing(
    tmp_path: Path,
) -> None:
    """``compression_locks`` (empty in the pristine file) with its root's header zeroed:
    no row can be read, but both of its indexes, which the integrity check walked and
    found nothing in, list no row: nothing was there, and the class is derived."""
    assert table_rows(later_db(FUZZ), "SELECT * FROM compression_locks") == []
    diag = checked(copy_with_zeroed_headers(tmp_path, "compression_locks"), tmp_path)
    facts = next(t for t in diag.tables if t.name == "compression_locks")
    assert facts.unreadable_ranges
    assert facts.unread_held_nothing
    assert "compression_locks: its intact indexes list exactly the 0 rows read" in " ".join(
        diag.findings()
    )
    assert diag.damage == "derived"


def test_a_table_whose_intact_indexes_list_rows_that_do_not_read_is_base(
    tmp_path: Path,
) -> None:
    """``gateway_routing`` (3 rows on its root leaf) with that leaf's header zeroed: its
    intact unique index still lists the 3 rows the scan cannot read, so they may be
    lost: base damage."""
    assert len(table_rows(later_db(FUZZ), "SELECT * FROM gateway_routing")) == 3
    diag = checked(copy_with_zeroed_headers(tmp_path, "gateway_routing"), tmp_path)
    facts = next(t for t in diag.tables if t.name == "gateway_routing")
    assert facts.unreadable_ranges
    assert not facts.unread_held_nothing
    assert diag.damage == "base"


def test_a_page_line_naming_a_root_page_goes_to_that_roots_tree() -> None:
    """SQLite prints a page's "Fragmentation" line, with no tree named, once it has
    checked the page's cells, and a tree's root last: a line naming a root page goes to
    that root's b-tree, not to the tree named before it (seed 7637's lines); one naming
    another page still goes to the tree named before it."""
    db = later_db(FUZZ)
    roots = schema_roots(db)
    conn = apsw.Connection(f"file:{db}?mode=ro&immutable=1", flags=READ_ONLY)
    try:
        schema = read_schema(conn)
    finally:
        conn.close()
    locks, index = roots["compression_locks"], roots["sqlite_autoindex_gateway_routing_1"]
    content = roots["messages_fts_content"]
    leaf = leaves(db, "messages_fts_content")[0]
    lines = [
        f"Tree {locks} page {locks}: btreeInitPage() returns error code 11",
        f"Fragmentation of 53 bytes reported as 0 on page {index}",
        f"Tree {content} page {leaf} cell 3: invalid page number 1668247156",
        f"Multiple uses for byte 1015 of page {leaf}",
    ]
    found = {g.object: g.sample for g in group_errors(lines, schema)}
    assert found == {
        "compression_locks": lines[:1],
        "sqlite_autoindex_gateway_routing_1": lines[1:2],
        "messages_fts_content": lines[2:],
    }


def test_a_page_line_is_attributed_tree_by_tree_when_dbstat_fails_on_the_file(
    tmp_path: Path,
) -> None:
    """Seed 7141's file: random bytes over a ``messages_fts_content`` leaf make SQLite's
    ``dbstat`` fail on the whole file. A line with no tree named, about a (non-root)
    page of the trigram copy's content, is still attributed to it (each b-tree walked
    on its own) and is derived; a line about the scribbled leaf, which only the tree
    whose walk fails reaches, stays unattributed: the careful verdict."""
    case = fuzz.fuzz_case(tmp_path / "db", 7141)
    (scribbled,) = [d.page for d in case.damage if d.kind == "scribble"]
    assert scribbled in leaves(case.pristine, "messages_fts_content")
    other = leaves(case.pristine, "messages_fts_trigram_content")[0]
    conn = apsw.Connection(str(case.db))
    try:
        with pytest.raises(apsw.CorruptError):
            conn.execute("SELECT count(*) FROM dbstat").fetchall()
        schema = read_schema(conn)
        owned = group_errors([f"Multiple uses for byte 1015 of page {other}"], schema)
        unowned = group_errors([f"Multiple uses for byte 1015 of page {scribbled}"], schema)
        assert [(g.object, g.derived) for g in owned + unowned] == [
            ("(other)", False),
            ("(other)", False),
        ]
        _attribute_by_page(conn, schema, owned)
        _attribute_by_page(conn, schema, unowned)
    finally:
        conn.close()
    assert [(g.object, g.derived) for g in owned] == [("messages_fts_trigram_content", True)]
    assert [(g.object, g.derived) for g in unowned] == [("(other)", False)]


def test_a_row_that_does_not_read_is_base_damage_though_a_copy_is_malformed(
    tmp_path: Path,
) -> None:
    """Seed 7297: a message's record scribbled so that its columns do not read, and a
    page of the trigram copy's content zeroed (malformed). The comparison with the FTS
    copies stops as a whole; the table's rows are then read past damage, and the row
    whose columns do not read (the one the lab's truth says is damaged) is named and
    makes the class base."""
    case = fuzz.fuzz_case(tmp_path / "db", 7297)
    damaged = [r for r, (_, ok) in case.truth["messages"].items() if not ok]
    diag = checked(case.db, tmp_path)
    (copies,) = diag.copies
    assert copies.error is not None
    assert copies.rows_unreadable == damaged
    assert diag.damage == "base"
