"""``recover --extra-source``: rows whose pages are destroyed come back from another copy
that proves them (a snapshot, a retired WAL capture, a pre-update backup), and a row
deleted since that copy never does (docs/safety.md, "Rows from other copies")."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab import corruption
from lab.corruption import PristineFile
from lab.hermes_fixtures import SMALL, built_db
from tests.support.cli import run_ctl


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    return corruption.table_rows(path, sql)


def recover_with(
    case: corruption.Case, tmp_path: Path, *extra: Path
) -> tuple[int, dict[str, Any], Path]:
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    args = ["recover", "--source", str(case.db), "--output", str(out), "--json"]
    for p in extra:
        args += ["--extra-source", str(p)]
    code, stdout, stderr = run_ctl(*args)
    assert stderr == ""
    return code, json.loads(stdout), out


def snapshot_of(db: Path, dest: Path, taken_at: float = 1796076000.0) -> Path:
    """A snapshot as ``statewardenctl snapshots take`` keeps it: the file and its .json."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(db, dest)
    dest.with_suffix(".json").write_text(json.dumps({"taken_at": taken_at}))
    return dest


def all_messages(path: Path) -> list[tuple[object, ...]]:
    return rows(path, "SELECT rowid, * FROM messages ORDER BY rowid")


class TestFromASnapshot:
    def test_lost_rows_come_back_from_the_snapshot(self, tmp_path: Path) -> None:
        """A zeroed messages leaf and a snapshot taken before: every row of the leaf
        comes back exactly, each marked with the snapshot it came from."""
        case = corruption.zeroed_leaf(tmp_path / "db")
        lost = case.lost_rowids["messages"]
        snap = snapshot_of(built_db(SMALL), tmp_path / "snapshots" / "default-1.db")
        code, doc, out = recover_with(case, tmp_path, snap)
        assert code == 0  # the intact indexes list exactly the rows now held
        assert doc["verified"] is True
        assert doc["lost"] == {}
        assert all_messages(out) == all_messages(built_db(SMALL))
        m = doc["tables"]["messages"]
        assert (m["recovered_from_other_copies"], m["lost_keys"]) == (len(lost), [])
        assert doc["notes"] == [
            "messages: rowids 22..24 could not be read, but its intact indexes list exactly"
            f" the 2000 rows recovered ({len(lost)} of them from other copies): nothing else"
            " was there"
        ]
        assert doc["from_other_copies"] == [
            {
                "table": "messages",
                "rowid": r,
                "from": "snapshot 2026-11-30T22:00Z",
                "copy_taken_at": "2026-11-30T22:00Z",
            }
            for r in lost
        ]
        assert doc["rebuilt"] == {}  # nothing left for the side table
        n = len(all_messages(out))
        assert rows(out, "SELECT count(*) FROM messages_fts") == [(n,)]

    def test_a_row_deleted_after_the_snapshot_does_not_come_back(self, tmp_path: Path) -> None:
        """The snapshot holds a message deleted since (Hermes' delete triggers removed
        its FTS copies); the leaf that held it is then zeroed: its neighbours come back
        from the snapshot, the deleted row does not."""
        case = corruption.fresh_copy(tmp_path / "db")
        snap = snapshot_of(case.db, tmp_path / "snapshots" / "default-1.db")
        pf = PristineFile(case.db)
        _, leaves = pf.tree_pages(case.roots["messages"])
        leaf = leaves[3]
        on_leaf = pf.leaf_rowids(leaf)
        gone = on_leaf[len(on_leaf) // 2]
        conn = apsw.Connection(str(case.db))
        conn.execute("DELETE FROM messages WHERE id = ?", (gone,))
        conn.close()
        pf = PristineFile(case.db)
        _, leaves_after = pf.tree_pages(case.roots["messages"])
        assert leaf in leaves_after
        assert gone not in pf.leaf_rowids(leaf)
        lost = pf.leaf_rowids(leaf)
        before = all_messages(case.db)
        corruption.zero_page(case, leaf)
        _code, doc, out = recover_with(case, tmp_path, snap)
        assert doc["verified"] is True
        assert all_messages(out) == before
        assert gone not in {r[0] for r in all_messages(out)}
        m = doc["tables"]["messages"]
        assert (m["recovered_from_other_copies"], m["deleted_since_copy"]) == (len(lost), 1)
        assert doc["lost"] == {}

    def test_without_a_damaged_table_no_copy_is_read(self, tmp_path: Path) -> None:
        """Without a damaged table the extra source is never read: even a file that is no database
        leaves recover at exit 0 with nothing taken from other copies and no note."""
        case = corruption.fresh_copy(tmp_path / "db")
        bogus = tmp_path / "not-a-db.db"
        bogus.write_bytes(b"garbage" * 100)
        code, doc, _ = recover_with(case, tmp_path, bogus)
        assert (code, doc["from_other_copies"], doc["notes"]) == (0, [], [])


class TestOtherKinds:
    def make_capture(self, folder: Path, main: Path) -> Path:
        """A retired WAL capture as Hermes writes it: main image, WAL, manifest.json."""
        d = folder / "state.db.retired-wal-20261130-220000-42"
        d.mkdir(parents=True)
        shutil.copyfile(main, d / "state.db")
        (d / "manifest.json").write_text(
            json.dumps(
                {
                    "version": 1,
                    "captured_at": "2026-11-30T22:00:00Z",
                    "main": {"mode": "copied", "file": "state.db"},
                    "wal": {"file": "state.db-wal"},
                }
            )
        )
        return d

    def test_a_retired_wal_capture_replays_its_committed_frames(self, tmp_path: Path) -> None:
        """The capture's main image is older; the rows of the lost leaf are only in the
        WAL it holds (committed frames): they come back, marked with the capture."""
        case = corruption.zeroed_leaf(tmp_path / "db")
        lost = case.lost_rowids["messages"]
        # The capture: an image without the lost rows, and a WAL that adds them back.
        base = tmp_path / "base" / "state.db"
        base.parent.mkdir()
        shutil.copyfile(built_db(SMALL), base)
        conn = apsw.Connection(str(base))
        conn.execute("PRAGMA journal_mode=WAL")
        saved = conn.execute(
            f"SELECT * FROM messages WHERE id BETWEEN {lost[0]} AND {lost[-1]}"
        ).fetchall()
        conn.execute(f"DELETE FROM messages WHERE id BETWEEN {lost[0]} AND {lost[-1]}")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        image = base.read_bytes()
        marks = ", ".join("?" for _ in saved[0])
        conn.execute("PRAGMA wal_autocheckpoint=0")
        with conn:
            conn.executemany(f"INSERT INTO messages VALUES ({marks})", saved)
        wal = Path(str(base) + "-wal").read_bytes()
        conn.close()
        cap = self.make_capture(tmp_path / "home", built_db(SMALL))
        (cap / "state.db").write_bytes(image)
        (cap / "state.db-wal").write_bytes(wal)
        _code, doc, out = recover_with(case, tmp_path, cap)
        assert doc["verified"] is True
        assert doc["lost"] == {}
        assert all_messages(out) == all_messages(built_db(SMALL))
        froms = {e["from"] for e in doc["from_other_copies"]}
        assert froms == {"retired WAL capture state.db.retired-wal-20261130-220000-42"}
        assert len(doc["from_other_copies"]) == len(lost)

    def test_a_manifest_naming_a_file_outside_its_folder_is_not_followed(
        self, tmp_path: Path
    ) -> None:
        """The manifest is the folder owner's text: a name like ``../other.db`` (another
        database root could read) is refused, and the capture is not used."""
        case = corruption.zeroed_leaf(tmp_path / "db")
        outside = tmp_path / "home" / "other.db"
        outside.parent.mkdir()
        shutil.copyfile(built_db(SMALL), outside)
        cap = self.make_capture(tmp_path / "home", built_db(SMALL))
        manifest = json.loads((cap / "manifest.json").read_text())
        manifest["main"]["file"] = "../other.db"
        (cap / "manifest.json").write_text(json.dumps(manifest))
        _code, doc, _out = recover_with(case, tmp_path, cap)
        assert doc["from_other_copies"] == []
        assert any(
            "'../other.db', not a file of the capture's own folder" in n for n in doc["notes"]
        )

    def test_a_damaged_backup_is_not_used(self, tmp_path: Path) -> None:
        """A pre-update backup that fails its check is left out with a note; the rows
        stay lost (and go to the side table as before)."""
        case = corruption.zeroed_leaf(tmp_path / "db")
        bak = tmp_path / "home" / "state.db.pre-update-emergency-20261130.bak"
        bak.parent.mkdir()
        shutil.copyfile(built_db(SMALL), bak)
        pf = PristineFile(bak)
        _, leaves = pf.tree_pages(case.roots["sessions"])
        with open(bak, "r+b") as f:
            f.seek((leaves[0] - 1) * pf.page_size)
            f.write(bytes(pf.page_size))
        code, doc, _ = recover_with(case, tmp_path, bak)
        assert code == 3
        assert doc["from_other_copies"] == []
        assert doc["lost"] == {"messages": len(case.lost_rowids["messages"])}
        assert any(
            n.startswith(
                "pre-update backup state.db.pre-update-emergency-20261130.bak: not used,"
                " it fails its check"
            )
            for n in doc["notes"]
        )

    def test_a_missing_extra_source_is_a_usage_error(self, tmp_path: Path) -> None:
        """An --extra-source that does not exist is a usage error (exit 2) naming it, and no output
        is written."""
        case = corruption.fresh_copy(tmp_path / "db")
        out = tmp_path / "out.db"
        code, _stdout, stderr = run_ctl(
            "recover",
            "--source",
            str(case.db),
            "--output",
            str(out),
            "--extra-source",
            str(tmp_path / "nope.db"),
        )
        assert code == 2
        assert f"{tmp_path / 'nope.db'}: no such file for --extra-source" in stderr
        assert not out.exists()

    @pytest.mark.parametrize("kind", ["a FIFO", "a device"])
    def test_an_extra_source_that_is_no_file_says_what_it_is(
        self, tmp_path: Path, kind: str
    ) -> None:
        """A FIFO or a device as --extra-source: exit 2, one line saying it is no regular
        file (it was called "no such file"), no output written."""
        case = corruption.fresh_copy(tmp_path / "db")
        out = tmp_path / "out.db"
        extra = tmp_path / "fifo"
        if kind == "a FIFO":
            os.mkfifo(extra)
        else:
            extra = Path("/dev/zero")
        code, _stdout, stderr = run_ctl(
            "recover", "--source", str(case.db), "--output", str(out), "--extra-source", str(extra)
        )
        assert code == 2
        assert stderr == (
            f"statewardenctl: error: {extra}: not a regular file (a FIFO, a device?) for"
            " --extra-source\n"
        )
        assert not out.exists()


class TestMaintenancePassesThem:
    def test_newest_verified_snapshot_and_the_files_beside_the_database(
        self, tmp_path: Path
    ) -> None:
        """maintenance gives recover the newest verified snapshot of this database (not
        another's, not a failed one), the published captures and the backups."""
        from statewarden.maintenance.run import other_copies
        from statewarden.maintenance.snapshots import Snapshot, snapshots_dir

        home = tmp_path / "home"
        home.mkdir()
        db = home / "state.db"
        shutil.copyfile(built_db(SMALL), db)
        folder = snapshots_dir(tmp_path / "state")
        folder.mkdir(parents=True)
        for name, source, when, ok in (
            ("old", db, 1.0, "ok"),
            ("new", db, 3.0, "ok"),
            ("other", home / "other.db", 4.0, "ok"),
            ("bad", db, 5.0, "*** in database main ***"),
        ):
            path = folder / f"{name}.db"
            shutil.copyfile(db, path)
            snap = Snapshot(str(path), str(source), "p", when, 1, "0", ok, None, 0.0)
            path.with_suffix(".json").write_text(json.dumps(snap.to_json()))
        cap = TestOtherKinds().make_capture(home, db)
        (home / "state.db.retired-wal-20261201-000000-7.partial").mkdir()
        bak = home / "state.db.pre-update-emergency-20261130.bak"
        shutil.copyfile(db, bak)
        assert other_copies(db, tmp_path / "state") == [folder / "new.db", bak, cap]
