"""The verification of a recovered file catches a wrong output: damage to a table's
b-tree and damage only FTS5's own check sees (its index disagreeing with its content),
the latter checked on a second connection while the tables are counted."""

from __future__ import annotations

from pathlib import Path

import apsw

from lab import corruption
from lab.hermes_fixtures import MAIN_EXTERNAL
from statewarden.recovery.decoding.schema import read_schema
from statewarden.recovery.evidence.copies import feeds
from statewarden.recovery.recover import recover
from statewarden.recovery.verify import Verification, verify_output
from statewarden.sqlite import read_header


def _verify(path: Path, version: int | None = None) -> Verification:
    return verify_output(
        path,
        source_schema_version=version,
        source_journal_mode=read_header(path).journal_mode,
    )


def _recovered(tmp_path: Path) -> tuple[Path, int | None]:
    case = corruption.phantom_row(tmp_path / "src")
    out = tmp_path / "out.db"
    report = recover(case.db, out)
    assert report.verified
    assert report.verification is not None
    return out, report.verification.schema_version


def test_a_recovered_file_verifies(tmp_path: Path) -> None:
    """The output of a recovery passes: integrity ok, counts agree, each FTS table ok."""
    out, version = _recovered(tmp_path)
    v = _verify(out, version)
    assert v.ok, v.problems
    assert v.integrity == "ok"
    assert set(v.fts.values()) == {"ok"}


def test_a_leaf_zeroed_after_the_rebuild_fails(tmp_path: Path) -> None:
    """A messages leaf zeroed in the output after it was written: not verified, and
    the integrity problem is named first."""
    out, version = _recovered(tmp_path)
    case = corruption.Case(db=out, pristine=out, roots=corruption.schema_roots(out))
    _, leaves = corruption.PristineFile(out).tree_pages(case.roots["messages"])
    corruption.zero_page(case, leaves[2])
    v = _verify(out, version)
    assert not v.ok
    assert v.problems[0].startswith("integrity_check: ")
    assert v.integrity != "ok"


def test_an_fts_copy_that_disagrees_with_its_index_fails(tmp_path: Path) -> None:
    """One letter changed in a message's FTS content copy, every page well formed: only
    FTS5's own check (run in the thread) sees it, and the output is not verified."""
    case = corruption.bit_rot(tmp_path / "db", "fts")
    v = _verify(case.db)
    assert "fts5: checksum mismatch" in v.integrity
    assert any(p.startswith("integrity_check: ") for p in v.problems)


def test_only_fts_tables_the_rebuild_changed_are_checked_again(tmp_path: Path) -> None:
    """Damage in sessions only: both FTS tables are copied whole and unchanged, their
    check on the work copy passed, so the output's verification does not run FTS5's
    check on them again (and says so). A zeroed messages leaf: both FTS tables are
    reconciled with the rows recovered (the lost rows' entries deleted through the FTS
    table), so FTS5 kept their index: they are held against messages instead."""
    phantom = corruption.phantom_row(tmp_path / "phantom")
    report = recover(phantom.db, tmp_path / "phantom-out.db")
    assert report.verification is not None
    assert report.verified
    assert report.verification.fts_checked_on_source == ["messages_fts", "messages_fts_trigram"]
    leaf = corruption.zeroed_leaf(tmp_path / "leaf")
    report = recover(leaf.db, tmp_path / "leaf-out.db")
    assert report.verification is not None
    assert report.verified
    assert report.verification.fts_checked_on_source == []
    assert report.verification.fts_checked_by_construction == [
        "messages_fts",
        "messages_fts_trigram",
    ]
    assert set(report.verification.fts.values()) == {"ok"}


def test_fts_tables_not_kept_by_fts5_from_clean_rows_keep_their_full_check(
    tmp_path: Path,
) -> None:
    """FTS5's own check of the output is skipped for no FTS table whose index is not
    kept by FTS5 from clean rows (the source's passing one, or its 'rebuild' of its own
    content: ``test_recover.py``): external content (schema 30: its index is built
    from another table), rows added from dropped WAL commits (decoded from frames) and
    a partial row (its completion fires the triggers with a damaged row's values)."""
    external = corruption.fresh_copy(tmp_path / "external", MAIN_EXTERNAL)
    _, leaves = corruption.PristineFile(external.db).tree_pages(external.roots["messages"])
    corruption.zero_page(external, leaves[3])
    cases = {
        "external": external,
        "wal": corruption.wal_bad_frame(tmp_path / "wal"),
        "partial": corruption.broken_overflow(tmp_path / "partial"),
    }
    for name, case in cases.items():
        report = recover(case.db, tmp_path / f"{name}-out.db")
        assert report.verified, name
        assert report.verification is not None
        assert report.verification.fts_checked_by_construction == [], name
        assert report.verification.fts_checked_on_source == [], name
        assert set(report.verification.fts.values()) == {"ok"}, name


def test_a_reconciled_fts_that_disagrees_with_its_table_gets_the_full_check(
    tmp_path: Path,
) -> None:
    """An output whose reconciled FTS copy lost a content row, or a ``_docsize`` row,
    behind FTS5's back: the check by construction fails, FTS5's own check runs after all
    and names the damage; the output is not verified."""
    for shadow in ("content", "docsize"):
        case = corruption.zeroed_leaf(tmp_path / shadow)
        out = tmp_path / f"{shadow}-out.db"
        report = recover(case.db, out)
        assert report.verified
        conn = apsw.Connection(str(out))
        try:
            schema = read_schema(conn)
            conn.execute(
                f"DELETE FROM messages_fts_{shadow} WHERE id = (SELECT max(id) FROM messages)"
            )
        finally:
            conn.close()
        reconciled = {f.fts: f for f in feeds(schema)}
        assert set(reconciled) == {"messages_fts", "messages_fts_trigram"}
        assert report.verification is not None
        v = verify_output(
            out,
            source_schema_version=report.verification.schema_version,
            source_journal_mode=read_header(out).journal_mode,
            reconciled=reconciled,
        )
        assert v.fts_checked_by_construction == ["messages_fts_trigram"], shadow
        assert v.fts["messages_fts"].startswith("integrity-check failed"), shadow
        assert v.fts["messages_fts_trigram"] == "ok"
        assert not v.ok
