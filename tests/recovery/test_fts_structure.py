"""FTS5's structure record on a large Hermes file: its own zero bytes are no damage.

Hermes' own writes leave FTS5 indexes with hundreds of levels (323 on the 1.06 GB
``HUGE`` fixture: 637 zero bytes in its 669-byte structure record), so the record can
hold a whole 512-byte sector of zeros. `check` called that file's FTS damaged and
`recover` rebuilt both FTS indexes of a healthy file.
"""

from __future__ import annotations

import json
from pathlib import Path

import apsw

from lab import corruption
from statewarden.recovery.decoding.damaged_cells import zeroed_sectors
from statewarden.recovery.decoding.fts_structure import STRUCTURE_ROWID, zeros_are_its_own
from statewarden.recovery.decoding.pages import DatabaseFile
from tests.support.cli import run_ctl

FTS = ("messages_fts", "messages_fts_trigram")


def structure(db: Path, fts: str) -> bytes:
    conn = apsw.Connection(str(db))
    try:
        row = conn.execute(
            f"SELECT block FROM {fts}_data WHERE id = ?", (STRUCTURE_ROWID,)
        ).fetchone()
        assert row is not None
        block = row[0]
    finally:
        conn.close()
    assert isinstance(block, bytes)
    return block


class TestManyLevels:
    def test_the_file_holds_a_zeroed_sector_and_fts5_finds_it_intact(self, tmp_path: Path) -> None:
        """The set-up is what it claims: a wholly zeroed 512-byte sector on a page of
        each FTS5 index, and FTS5's own check and SQLite's pass."""
        case = corruption.many_fts_levels(tmp_path / "db")
        db = DatabaseFile(case.db)
        try:
            pages = zeroed_sectors(db)
        finally:
            db.close()
        assert pages
        conn = apsw.Connection(str(case.db))
        try:
            for fts in FTS:
                conn.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('integrity-check', 1)")
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            conn.close()

    def test_check_says_healthy(self, tmp_path: Path) -> None:
        """`check`: exit 0, damage none, both FTS tables ok, no zeroed cells (before:
        exit 1, "1 rows of messages_fts_data run into zeroed bytes")."""
        case = corruption.many_fts_levels(tmp_path / "db")
        code, out, err = run_ctl(
            "check", "--db", str(case.db), "--json", "--work-dir", str(tmp_path / "w")
        )
        doc = json.loads(out)["databases"][0]
        assert (code, err) == (0, "")
        assert doc["damage"] == "none"
        assert doc["fts"] == dict.fromkeys(FTS, "ok")
        assert doc["zeroed_cells"] == {}

    def test_recover_copies_the_indexes_as_they_are(self, tmp_path: Path) -> None:
        """`recover`: exit 0, strategy none, no loss, and each FTS index's structure
        record is the source's byte for byte (not rebuilt)."""
        case = corruption.many_fts_levels(tmp_path / "db")
        out = tmp_path / "out.db"
        code, text, _ = run_ctl("recover", "--source", str(case.db), "--output", str(out), "--json")
        doc = json.loads(text)
        assert code == 0
        assert (doc["strategy"], doc["loss_detected"]) == ("none", False)
        for fts in FTS:
            assert structure(out, fts) == structure(case.db, fts)


class TestZerosAreItsOwn:
    def test_empty_levels(self, tmp_path: Path) -> None:
        """A structure record with 700 empty levels: its zeros are its own."""
        case = corruption.many_fts_levels(tmp_path / "db", levels=700)
        for fts in FTS:
            block = structure(case.db, fts)
            assert bytes(1024) in block
            assert zeros_are_its_own(block)

    def test_zeros_over_a_segment_are_not(self, tmp_path: Path) -> None:
        """Zeros written over the record's segments (its first levels), or the record
        cut short, or zeros past its last level: not its own."""
        case = corruption.many_fts_levels(tmp_path / "db", levels=700)
        block = structure(case.db, "messages_fts")
        over_segments = block[:12] + bytes(16) + block[28:]
        assert over_segments != block
        assert not zeros_are_its_own(over_segments)
        assert not zeros_are_its_own(block[:-300])
        assert not zeros_are_its_own(block + bytes(600))
        assert not zeros_are_its_own(b"")

    def test_a_small_record_has_no_long_runs(self, tmp_path: Path) -> None:
        """A fixture's own record (a few levels) reads whole and has no run to judge."""
        case = corruption.fresh_copy(tmp_path / "db")
        for fts in FTS:
            assert zeros_are_its_own(structure(case.db, fts))
