"""A record changed on disk that SQLite still reads without complaint: a bit flipped in a
record header's serial type (another type, another length: the columns after it read
from the wrong bytes) or in a value no index covers.

Invariant: a row whose values break the type its column holds as Hermes writes it (an
INTEGER or REAL column holding a blob, a TEXT column holding a blob or a number, an
epoch outside Hermes' own window), or that differs from its two agreeing FTS copies, is
never written out as a good row: it is partial, or its changed columns come back from
its witnesses and the rest are named unverified. Hermes' own rows never trip the rules.
(Before: ``compacted`` 0 came back as an empty blob in a good row of a file ``check``
called clean; a timestamp a record header shifted, read whole by that header, was
written over the value the indexes restored; changed text beside a read error was
copied as good; a changed key restored from its indexes was counted a lost row.)
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from lab import corruption, fuzz
from lab.hermes_fixtures import NEWEST, OLDEST, SMALL, Spec, built_db
from statewarden.recovery.check import check_database
from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.schema import read_schema
from statewarden.recovery.evidence.column_types import EPOCH_MAX, column_checks, find_misfits
from statewarden.recovery.evidence.copies import compare
from statewarden.recovery.evidence.copy_vote import rows_differing_from_copies
from statewarden.recovery.recover import recover

# (column, bit of its serial type flipped): another type of the same length (8 -> 12:
# the integer 0 as an empty blob; a text as a blob), a shorter text (the columns after
# it shifted), a real read as a 3-byte integer (5 bytes left over), a shorter key text.
FLIPS = [
    ("compacted", 4),
    ("content", 1),
    ("content", 2),
    ("content", 4),
    ("role", 1),
    ("timestamp", 4),
    ("session_id", 1),
]


def promises_broken(case: corruption.Case, tmp_path: Path) -> list[str]:
    """``recover`` on the damaged copy, held to the fuzz lab's promises against the
    truth carved from the bytes (``fuzz.carve_truth``, no code shared with recover)."""
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    report = recover(case.db, out).to_json()
    held = fuzz.FuzzCase(db=case.db, pristine=case.pristine, older=case.pristine, seed=0)
    held.truth = fuzz.carve_truth(case.pristine, case.db)
    assert not held.truth["messages"][case.phantom["messages"]][1], "the cell is unchanged"
    found = fuzz.violations(held, report, out)
    found += fuzz.output_check_violations(out, tmp_path / "check-out", report)
    return found


@pytest.mark.parametrize(("column", "mask"), FLIPS)
def test_a_flipped_serial_type_is_never_a_good_row(tmp_path: Path, column: str, mask: int) -> None:
    """The row whose record header lies comes back exact or flagged (partial, or its
    columns named unverified), loss is reported, and the output passes check."""
    case = corruption.flipped_serial_type(tmp_path / "db", 50, column, mask)
    assert promises_broken(case, tmp_path) == [], case.note


def test_an_integer_read_as_a_blob_is_base_damage(tmp_path: Path) -> None:
    """``check`` names the row (the file's pages, indexes and FTS copies are all
    consistent: only the column's type tells), as base damage."""
    case = corruption.flipped_serial_type(tmp_path / "db", 50, "compacted", 4)
    diag = check_database(case.db, tmp_path / "work")
    assert diag.damage == "base"
    assert [(m.table, m.rows) for m in diag.misfits] == [("messages", {50: ["compacted"]})]
    assert any("never writes in its column (compacted)" in f for f in diag.findings())


@pytest.mark.parametrize("name", sorted(fuzz.BIT_FLIP_FINDINGS))
def test_named_bit_flip_finding(tmp_path: Path, name: str) -> None:
    """A bit-flip seed that once broke a promise (``lab/fuzz.BIT_FLIP_FINDINGS``) now
    keeps every promise."""
    case, found = fuzz.run_seed(tmp_path, fuzz.BIT_FLIP_FINDINGS[name], bit_flips=True)
    assert found == [], case.describe()


@pytest.mark.parametrize("spec", [SMALL, OLDEST, NEWEST], ids=str)
def test_hermes_own_rows_break_no_rule(spec: Spec) -> None:
    """Every row Hermes wrote (0.19.0, 0.13.0 and 0.22 fixtures) fits its columns: the
    rules flag changed records only, and they do hold columns of every kind."""
    db = built_db(spec)
    conn = apsw.Connection(
        f"file:{db}?mode=ro&immutable=1", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        schema = read_schema(conn)
        assert find_misfits(conn, schema) == []
        messages = schema.by_name("messages")
        assert messages is not None
        kinds = {kind for _i, _name, kind in column_checks(messages)}
        assert kinds == {"number", "text", "epoch"}
        row = conn.execute("SELECT max(timestamp) FROM messages").fetchone()
        assert row is not None
        assert 0 < row[0] < EPOCH_MAX
    finally:
        conn.close()


def test_the_rules_see_a_changed_row(tmp_path: Path) -> None:
    """The rules can fail: a row given a blob, a number in a text column and an epoch
    past the window, in a copy of a Hermes file, is found with those columns. (The
    indexes that hold those columns are dropped first: an index entry holding the value
    too would vouch for it, ``column_types.unwitnessed``.)"""
    case = corruption.fresh_copy(tmp_path, SMALL)
    conn = apsw.Connection(str(case.db))
    try:
        conn.execute("DROP TRIGGER IF EXISTS messages_fts_update")
        conn.execute("DROP TRIGGER IF EXISTS messages_fts_trigram_update")
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL"
            " AND tbl_name IN ('messages', 'sessions')"
        ).fetchall():
            conn.execute(f'DROP INDEX "{name}"')
        conn.execute(
            "UPDATE messages SET compacted = x'', timestamp = 3.55e161 WHERE id = 7;"
            " UPDATE sessions SET model = CAST(12 AS BLOB) WHERE rowid = 2"
        )
        found = {m.table: m.rows for m in find_misfits(conn, read_schema(conn))}
    finally:
        conn.close()
    assert found == {"messages": {7: ["timestamp", "compacted"]}, "sessions": {2: ["model"]}}


@pytest.mark.parametrize("where", ["row", "fts"])
def test_the_copy_vote_in_sqlite_and_in_python_agree(tmp_path: Path, where: str) -> None:
    """``copy_vote``'s two ways (one join with the work copy attached, three streams
    merged when it is not) find the same rows, and the diagnosis's comparison's: the
    message whose letter changed, none when a copy changed (the copies disagree)."""
    case = corruption.bit_rot(tmp_path / "db", where, 50)
    src = apsw.Connection(str(case.db))
    dst = apsw.Connection(str(case.db))
    try:
        schema = read_schema(src)
        [check] = compare(src, schema)
        dst.execute("ATTACH ? AS src", (str(case.db),))
        read = KeySet(range(1, 3000))
        joined = rows_differing_from_copies(src, dst, schema, check, read, attached=True)
        merged = rows_differing_from_copies(src, dst, schema, check, read, attached=False)
    finally:
        dst.close()
        src.close()
    assert joined == merged == check.rows_rotted == ([50] if where == "row" else [])
