"""`statewardenctl recover` on real Hermes databases with real byte damage.

The expected numbers come from the corruption lab's ground truth and from the pristine
file (what Hermes wrote), never from the code under test. Every recovered row is
compared with the pristine row, column by column.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from lab import corruption
from lab.corruption import table_rows as rows
from lab.hermes_fixtures import SMALL, TALL, Spec, built_db, holding, make_home
from statewarden.demo import damage
from statewarden.errors import DatabaseChanged
from statewarden.recovery.bundle import fingerprint
from statewarden.recovery.recover import recover
from statewarden.sqlite import read_header
from tests.support.cli import run_ctl
from tests.support.recovery import (
    assert_same_rows,
    fts_version_changed,
    pristine,
    scramble_fts_index,
    scrambled_fts_index,
)
from tests.support.recovery import recover_reported as recover_json
from tests.support.repo import REPO

REPORT_KEYS = {"source", "output", "strategy", "verified", "loss_detected", "tables", "lost"}
TABLE_KEYS = {
    "source_rows",
    "source_distinct",
    "recovered",
    "duplicates_dropped",
    "unreadable_rows",
    "unreadable_ranges",
    "status",
}


def n_pristine(table: str) -> int:
    value = pristine(f"SELECT count(*) FROM {table}")[0][0]
    assert isinstance(value, int)
    return value


class TestReportShape:
    def test_healthy_database(self, tmp_path: Path) -> None:
        """A healthy database: strategy none, verified, no loss, exit 0, every table
        complete with source = distinct = recovered, and the report keys of the issue."""
        case = corruption.fresh_copy(tmp_path / "db")
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        assert set(doc) >= REPORT_KEYS
        assert doc["strategy"] == "none"
        assert (doc["verified"], doc["loss_detected"], doc["lost"]) == (True, False, {})
        for name, t in doc["tables"].items():
            assert set(t) >= TABLE_KEYS
            n = n_pristine(name)
            assert (t["source_rows"], t["source_distinct"], t["recovered"]) == (n, n, n)
            assert t["status"] == "complete"
        assert_same_rows(out, "messages")
        assert_same_rows(out, "sessions")

    def test_output_keeps_journal_mode_and_schema(self, tmp_path: Path) -> None:
        """The output is in WAL mode like the source, with the same sqlite_schema SQL and
        Hermes' schema_version; no -wal/-shm are left behind."""
        case = corruption.phantom_row(tmp_path / "db")
        _, doc, out = recover_json(case, tmp_path)
        assert read_header(out).journal_mode == "wal"
        schema_sql = "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name"
        assert rows(out, schema_sql) == pristine(schema_sql)
        assert rows(out, "SELECT version FROM schema_version") == [(22,)]
        assert doc["verification"]["schema_version_preserved"] is True
        assert sorted(os.listdir(out.parent)) == ["recovered.db"]


class TestPhantomRow:
    def test_one_phantom_row_costs_nothing(self, tmp_path: Path) -> None:
        """docs/stories.md story 3: 65 stored rows, 64 distinct ids; the row is kept once, one
        duplicate dropped, nothing lost, verified, exit 0."""
        case = corruption.phantom_row(tmp_path / "db")
        n = n_pristine("sessions")
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        s = doc["tables"]["sessions"]
        assert (s["source_rows"], s["source_distinct"], s["recovered"]) == (n + 1, n, n)
        assert (s["duplicates_dropped"], s["status"]) == (1, "complete")
        assert (doc["verified"], doc["loss_detected"], doc["lost"]) == (True, False, {})
        assert doc["strategy"] == "rebuild"
        rowid = case.phantom["sessions"]
        assert rows(out, f"SELECT count(*) FROM sessions NOT INDEXED WHERE rowid = {rowid}") == [
            (1,)
        ]
        assert_same_rows(out, "sessions")
        assert_same_rows(out, "messages")

    def test_source_is_untouched_and_work_dir_removed(self, tmp_path: Path) -> None:
        """The source bundle keeps its bytes and fingerprint; only the output (and the
        report) appear in the output directory."""
        case = corruption.phantom_row(tmp_path / "db")
        before, data = fingerprint(case.db), case.db.read_bytes()
        recover_json(case, tmp_path)
        assert (fingerprint(case.db), case.db.read_bytes()) == (before, data)
        assert sorted(os.listdir(case.db.parent)) == ["state.db"]
        assert sorted(os.listdir(tmp_path / "out")) == ["recovered.db"]

    def test_capped_check_trap_recovers_everything(self, tmp_path: Path) -> None:
        """FTS damage plus the phantom row: FTS rebuilt, the row kept once, no loss."""
        case = corruption.capped_check_trap(tmp_path / "db")
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        assert doc["tables"]["sessions"]["duplicates_dropped"] == 1
        assert doc["verification"]["fts"] == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
        assert rows(out, "SELECT count(*) FROM messages_fts_trigram") == [(n_pristine("messages"),)]


class TestDerivedDamage:
    @pytest.mark.parametrize(
        "trees",
        [
            {"messages_fts_data": 2, "messages_fts_trigram_data": 3},
            {"idx_messages_session": 1},
        ],
        ids=["fts", "index"],
    )
    def test_derived_damage_is_lossless(self, tmp_path: Path, trees: dict[str, int]) -> None:
        """FTS shadow or index pages zeroed: strategy reindex, every row kept, FTS
        answers MATCH like the pristine file, exit 0."""
        case = corruption.scribbled_trees(tmp_path / "db", trees)
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        assert doc["strategy"] == "reindex"
        assert (doc["verified"], doc["loss_detected"]) == (True, False)
        assert_same_rows(out, "messages")
        for fts in ("messages_fts", "messages_fts_trigram"):
            q = f"SELECT rowid FROM {fts} WHERE {fts} MATCH 'checkpoint' ORDER BY rowid"
            assert rows(out, q) == pristine(q)
            assert len(rows(out, q)) > 0

    def test_fts_index_rebuilt_from_its_content_is_proven_by_construction(
        self, tmp_path: Path
    ) -> None:
        """FTS shadow pages zeroed, their content tables intact: each index is made by
        FTS5's 'rebuild' from the content the output stores, so the verification holds
        the FTS tables against their base table instead of running FTS5's check again,
        and says so; each still answers MATCH as the pristine file does."""
        case = corruption.scribbled_trees(
            tmp_path / "db", {"messages_fts_data": 2, "messages_fts_trigram_data": 3}
        )
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        v = doc["verification"]
        assert v["fts_checked_by_construction"] == ["messages_fts", "messages_fts_trigram"]
        assert v["fts"] == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
        assert v["fts_checked_on_source"] == []
        conn = apsw.Connection(str(out))
        try:
            for fts in ("messages_fts", "messages_fts_trigram"):
                conn.execute(f"INSERT INTO {fts}({fts}) VALUES('integrity-check')")
        finally:
            conn.close()
        q = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'checkpoint' ORDER BY rowid"
        assert rows(out, q) == pristine(q)


class TestBaseDamage:
    def test_zeroed_leaf_loses_exactly_its_rowids(self, tmp_path: Path) -> None:
        """A zeroed messages leaf: every other message is recovered, lost = the rowids
        on that page exactly, the range is named, exit 3."""
        case = corruption.zeroed_leaf(tmp_path / "db")
        lost = case.lost_rowids["messages"]
        n = n_pristine("messages")
        code, doc, out = recover_json(case, tmp_path)
        assert code == 3
        m = doc["tables"]["messages"]
        assert (m["source_rows"], m["recovered"]) == (n - len(lost), n - len(lost))
        assert m["unreadable_ranges"] == [[lost[0], lost[-1]]]
        assert m["lost_keys_sample"] == lost
        assert doc["lost"] == {"messages": len(lost)}
        assert (doc["verified"], doc["loss_detected"], m["status"]) == (True, True, "partial")
        assert_same_rows(out, "messages", missing=set(lost))
        assert rows(out, "SELECT count(*) FROM messages_fts") == [(n - len(lost),)]

    def test_lost_rows_rebuilt_from_their_copies_into_a_side_table(self, tmp_path: Path) -> None:
        """A zeroed messages leaf: the lost rows are still lost from messages (exit 3),
        but their session, time, active flag (from the intact indexes) and search text
        (from the FTS copy) come back in statewarden_rebuilt_messages, each value named
        by the copy it came from; nothing else is invented."""
        case = corruption.zeroed_leaf(tmp_path / "db")
        lost = case.lost_rowids["messages"]
        code, doc, out = recover_json(case, tmp_path)
        assert code == 3
        assert doc["rebuilt"] == {"messages": "statewarden_rebuilt_messages"}
        assert doc["tables"]["messages"]["rebuilt_from_copies"] == len(lost)
        marks = ", ".join(str(r) for r in lost)
        got = rows(
            out,
            "SELECT source_rowid, session_id, timestamp, active, search_text"
            " FROM statewarden_rebuilt_messages ORDER BY source_rowid",
        )
        want = pristine(
            "SELECT m.id, m.session_id, m.timestamp, m.active, f.c0 FROM messages AS m"
            f" JOIN messages_fts_content AS f ON f.id = m.id WHERE m.id IN ({marks}) ORDER BY m.id"
        )
        assert got == want
        [(sources,)] = rows(
            out,
            f"SELECT rebuilt_from FROM statewarden_rebuilt_messages WHERE source_rowid = {lost[0]}",
        )
        assert json.loads(str(sources)) == {
            "session_id": "index idx_messages_session",
            "timestamp": "index idx_messages_session",
            "active": "index idx_messages_session_active",
            "search_text": "FTS copy messages_fts",
        }
        assert rows(out, f"SELECT count(*) FROM messages WHERE id IN ({marks})") == [(0,)]

    def test_last_leaf_lost_range_ends_at_the_sequence(self, tmp_path: Path) -> None:
        """The last messages leaf zeroed: the unreadable range ends at the table's
        sqlite_sequence (AUTOINCREMENT gave out no rowid above it), not at 2^63-1, and
        every lost rowid is listed (known from the FTS copies)."""
        case = corruption.zeroed_leaf(tmp_path / "db", which=-1)
        lost = case.lost_rowids["messages"]
        [(seq,)] = pristine("SELECT seq FROM sqlite_sequence WHERE name = 'messages'")
        code, doc, _ = recover_json(case, tmp_path)
        assert code == 3
        m = doc["tables"]["messages"]
        assert m["unreadable_ranges"] == [[lost[0], seq]]
        assert seq == lost[-1]
        assert m["lost_keys"] == lost

    def test_zeroed_interior_page_recovered_from_pages(self, tmp_path: Path) -> None:
        """The interior page of messages zeroed: every leaf below it is decoded from the
        file; all messages come back identical; strategy salvage; no loss."""
        case = corruption.zeroed_interior(tmp_path / "db")
        n = n_pristine("messages")
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        m = doc["tables"]["messages"]
        assert doc["strategy"] == "salvage"
        assert (m["recovered"], m["recovered_from_pages"], m["unreadable_ranges"]) == (n, n, [])
        assert (doc["verified"], doc["loss_detected"]) == (True, False)
        assert_same_rows(out, "messages")
        assert rows(out, "SELECT seq FROM sqlite_sequence WHERE name = 'messages'") == pristine(
            "SELECT seq FROM sqlite_sequence WHERE name = 'messages'"
        )

    def test_zeroed_sessions_root_every_row_back_is_no_loss(self, tmp_path: Path) -> None:
        """The sessions root page zeroed (keyed by the text id, not the rowid): every
        session is decoded from its intact leaf and comes back identical, and the intact
        unique index on id lists exactly those rows; so no loss, exit 0, status
        complete, no unreadable range left."""
        case = corruption.zeroed_sessions_root(tmp_path / "db")
        want = case.unreached["sessions"]
        assert want == [r[0] for r in pristine("SELECT rowid FROM sessions ORDER BY rowid")]
        code, doc, out = recover_json(case, tmp_path)
        s = doc["tables"]["sessions"]
        assert (s["recovered"], s["recovered_from_pages"]) == (len(want), len(want))
        assert (s["unreadable_ranges"], s["status"], s["lost_keys"]) == ([], "complete", [])
        assert (doc["verified"], doc["loss_detected"], code) == (True, False, 0)
        assert_same_rows(out, "sessions")

    def test_zeroed_inner_interior_page_of_a_three_level_tree(self, tmp_path: Path) -> None:
        """In a three-level messages b-tree, an interior page below the root zeroed: the
        scan reads the other leaves, the unreachable leaves below that page are decoded
        from the file, and every message comes back; no loss."""
        case = corruption.zeroed_interior(tmp_path / "db", spec=TALL)
        pf = corruption.PristineFile(case.pristine)
        [target] = case.damaged_pages
        _, below = pf.tree_pages(target)
        on_pages = sum(len(pf.leaf_rowids(leaf)) for leaf in below)
        n = int(rows(case.pristine, "SELECT count(*) FROM messages")[0][0])  # type: ignore[call-overload]
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        m = doc["tables"]["messages"]
        assert target != case.roots["messages"]
        assert (m["recovered"], m["recovered_from_pages"]) == (n, on_pages)
        assert 0 < on_pages < n
        assert (m["unreadable_ranges"], doc["lost"], doc["strategy"]) == ([], {}, "salvage")
        want = rows(case.pristine, "SELECT rowid, * FROM messages ORDER BY rowid")
        assert rows(out, "SELECT rowid, * FROM messages ORDER BY rowid") == want

    def test_truncated_file(self, tmp_path: Path) -> None:
        """A file cut in half: every message on a page that remains is recovered
        identical; each lost rowid lies in a reported unreadable range; exit 3."""
        total = len(corruption.PristineFile(built_db(SMALL)).data) // 4096
        case = corruption.truncated(tmp_path / "db", total // 2)
        lost = case.lost_rowids["messages"]
        assert lost
        code, doc, out = recover_json(case, tmp_path)
        assert code == 3
        m = doc["tables"]["messages"]
        assert m["recovered"] == n_pristine("messages") - len(lost)
        assert all(any(lo <= r <= hi for lo, hi in m["unreadable_ranges"]) for r in lost)
        assert (doc["verified"], doc["loss_detected"]) == (True, True)
        assert_same_rows(out, "messages", missing=set(lost))


class TestUnreachedRows:
    @pytest.mark.parametrize("spec", [SMALL, TALL], ids=["two-level", "three-level"])
    def test_flipped_child_pointer_brings_every_row_back(self, tmp_path: Path, spec: Spec) -> None:
        """One bit flipped in a child pointer: no read fails, one leaf is reached twice
        and another not at all. The rows on the unreached leaf are decoded from it:
        every message comes back identical, no loss, strategy salvage."""
        case = corruption.flipped_child_pointer(tmp_path / "db", spec=spec)
        unreached = case.unreached["messages"]
        assert unreached
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        m = doc["tables"]["messages"]
        assert (doc["strategy"], doc["lost"], doc["loss_detected"]) == ("salvage", {}, False)
        assert m["recovered_from_pages"] == len(unreached)
        want = rows(case.pristine, "SELECT rowid, * FROM messages ORDER BY rowid")
        assert rows(out, "SELECT rowid, * FROM messages ORDER BY rowid") == want
        # The intact FTS tables were copied and reconciled, not re-indexed: the rows
        # brought back are found by search, exactly as in the pristine file.
        for fts in ("messages_fts", "messages_fts_trigram"):
            q = f"SELECT c0 FROM {fts}_content ORDER BY id"
            assert rows(out, q) == rows(case.pristine, q)
            q = f"SELECT rowid FROM {fts} WHERE {fts} MATCH 'checkpoint' ORDER BY rowid"
            assert rows(out, q) == rows(case.pristine, q) != []
        assert set(doc["timings"]) == {"copy", "diagnose", "salvage", "rebuild", "fts", "verify"}

    def test_deleted_rows_on_a_lost_freelist_stay_deleted(self, tmp_path: Path) -> None:
        """Deleted messages whose freed leaves are no longer on the freelist (its trunk
        pointer zeroed): nothing vouches for them (no index entry, no FTS copy), so none
        comes back; every live message does; the skipped rows are counted."""
        case = corruption.lost_freelist(tmp_path / "db")
        deleted = case.lost_rowids["messages"]
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        m = doc["tables"]["messages"]
        assert (m["recovered_from_pages"], doc["loss_detected"]) == (0, False)
        assert m["unvouched_skipped"] > 0
        marks = ", ".join(str(r) for r in deleted)
        assert rows(out, f"SELECT count(*) FROM messages WHERE rowid IN ({marks})") == [(0,)]
        want = rows(case.pristine, "SELECT rowid, * FROM messages ORDER BY rowid")
        assert rows(out, "SELECT rowid, * FROM messages ORDER BY rowid") == want
        assert rows(out, "SELECT count(*) FROM state_meta") == [(0,)]


class TestDeletedRows:
    def test_stale_index_entries_are_not_reported_lost(self, tmp_path: Path) -> None:
        """Messages deleted on purpose whose index page was written back stale: the
        index lists them but no FTS copy does, so they are not lost (exit 0), and they
        do not come back."""
        case = corruption.stale_index_entries(tmp_path / "db")
        code, doc, out = recover_json(case, tmp_path)
        assert (code, doc["lost"], doc["loss_detected"]) == (0, {}, False)
        q = "SELECT rowid, * FROM messages ORDER BY rowid"
        assert rows(out, q) == rows(case.pristine, q)


class TestInterruptAndLiveWriter:
    def test_interrupt_leaves_no_output_and_no_work_dir(self, tmp_path: Path) -> None:
        """Ctrl-C in the middle of copying tables: nothing at --output, the work dir is
        gone, the source is untouched."""
        case = corruption.phantom_row(tmp_path / "db")
        before = fingerprint(case.db)
        out_dir = tmp_path / "o"
        out_dir.mkdir()

        def interrupt(phase: str, done: int, total: int) -> None:
            if phase == "copy tables" and done == 2:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            recover(case.db, out_dir / "out.db", progress=interrupt)
        assert os.listdir(out_dir) == []
        assert fingerprint(case.db) == before

    def test_source_changing_during_the_copy_is_refused(self, tmp_path: Path) -> None:
        """A writer commits to the source and folds the commit into the file (a
        checkpoint) while its bundle is copied (each time the copy reports progress):
        after three attempts the copy is refused, exit 1."""
        case = corruption.fresh_copy(tmp_path / "db")
        writer = apsw.Connection(str(case.db))
        writer.execute("PRAGMA journal_mode=WAL")
        out_dir = tmp_path / "o"
        out_dir.mkdir()
        n = [0]

        def write(phase: str, done: int, total: int) -> None:
            if phase == "copy":
                n[0] += 1
                writer.execute("INSERT INTO state_meta(key, value) VALUES (?, 'x')", (f"k{n[0]}",))
                writer.execute("PRAGMA wal_checkpoint(PASSIVE)")

        try:
            with pytest.raises(DatabaseChanged, match="changed while it was being copied"):
                recover(case.db, out_dir / "out.db", progress=write)
        finally:
            writer.close()
        assert os.listdir(out_dir) == []

    def test_check_of_a_database_held_open_by_hermes(self, tmp_path: Path) -> None:
        """A real Hermes process holds the database open with a fresh message in its
        -wal: check reads the bundle (the message is counted), changes nothing, and the
        holder's files keep their fingerprints."""
        home = make_home(tmp_path / "home", SMALL)
        with holding(home):
            db = home / "state.db"
            assert Path(f"{db}-wal").exists()
            before = fingerprint(db)
            code, stdout, _ = run_ctl(
                "check", "--db", str(db), "--json", "--work-dir", str(tmp_path / "w")
            )
            assert fingerprint(db) == before
        doc = json.loads(stdout)["databases"][0]
        assert code == 0
        m = next(t for t in doc["tables"] if t["name"] == "messages")
        assert m["scan_rows"] == n_pristine("messages") + 1


class TestRefusals:
    def test_output_exists(self, tmp_path: Path) -> None:
        """An existing --output is never overwritten: exit 2, file unchanged."""
        case = corruption.fresh_copy(tmp_path / "db")
        out = tmp_path / "exists.db"
        out.write_text("keep me")
        code, _, err = run_ctl("recover", "--source", str(case.db), "--output", str(out))
        assert code == 2
        assert err == f"statewardenctl: error: {out}: already exists; refusing to overwrite it\n"
        assert out.read_text() == "keep me"

    @pytest.mark.parametrize(
        ("option", "suffix", "through_link"),
        [("--output", "-wal", False), ("--report", "-journal", False), ("--output", "", True)],
        ids=["output-wal", "report-journal", "output-through-a-link"],
    )
    def test_a_name_of_the_source_s_files(
        self, tmp_path: Path, option: str, suffix: str, through_link: bool
    ) -> None:
        """--output or --report naming the source's -wal, -journal or the database itself
        (by a symlinked folder): SQLite would take a file written there for part of the
        database. Exit 2, one line, nothing written."""
        case = corruption.fresh_copy(tmp_path / "db")
        folder = case.db.parent
        if through_link:
            (tmp_path / "link").symlink_to(folder)
            folder = tmp_path / "link"
        target = folder / f"{case.db.name}{suffix}"
        args = {"--output": str(tmp_path / "out.db"), option: str(target)}
        before = sorted(p.name for p in case.db.parent.iterdir())
        code, _, err = run_ctl("recover", "--source", str(case.db), *itertools.chain(*args.items()))
        assert code == 2
        assert err == (
            f"statewardenctl: error: {target}: a name of the source's files; {option} must be"
            " another\n"
        )
        assert sorted(p.name for p in case.db.parent.iterdir()) == before
        assert not (tmp_path / "out.db").exists()

    @pytest.mark.parametrize("option", ["--output", "--report"])
    def test_a_name_too_long_is_refused_before_any_work(self, tmp_path: Path, option: str) -> None:
        """A name longer than its folder takes: exit 2, one line, before the recovery
        (it once ended, after the whole recovery, in "unexpected OSError")."""
        case = corruption.fresh_copy(tmp_path / "db")
        long = tmp_path / ("a" * 300 + ".db")
        args = {"--output": str(tmp_path / "out.db"), option: str(long)}
        code, out, err = run_ctl(
            "recover", "--source", str(case.db), *itertools.chain(*args.items())
        )
        assert code == 2, out + err
        assert err == (
            f"statewardenctl: error: {long}: file name too long ({option}; at most 255 bytes)\n"
        )
        assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]

    @pytest.mark.parametrize("spelling", ["as given", "through a symlinked folder"])
    def test_report_and_output_the_same_file(self, tmp_path: Path, spelling: str) -> None:
        """--report naming the --output, as given or through a symlink to its folder:
        exit 2, one line, before any work (the report was once refused after the
        recovery, left at the output's path)."""
        case = corruption.fresh_copy(tmp_path / "db")
        same = tmp_path / "same.db"
        report = same
        if spelling != "as given":
            (tmp_path / "link").symlink_to(tmp_path)
            report = tmp_path / "link" / "same.db"
        code, out, err = run_ctl(
            "recover", "--source", str(case.db), "--output", str(same), "--report", str(report)
        )
        assert code == 2, out + err
        assert err == (
            f"statewardenctl: error: {report}: --report and --output name the same file\n"
        )
        assert not same.exists()

    def test_a_report_name_as_long_as_the_folder_takes_is_written(self, tmp_path: Path) -> None:
        """A --report name of 255 bytes (the most the folder takes) is written: its
        temporary name is shorter (names of 242 to 255 bytes failed at the end)."""
        case = corruption.fresh_copy(tmp_path / "db")
        report = tmp_path / ("r" * 250 + ".json")
        code, out, err = run_ctl(
            "recover",
            "--source",
            str(case.db),
            "--output",
            str(tmp_path / "o.db"),
            "--report",
            str(report),
        )
        assert code == 0, out + err
        assert json.loads(report.read_text())["verified"] is True

    @pytest.mark.parametrize("option", ["--output", "--report"])
    def test_a_name_of_the_source_s_files_through_a_bind_mount(
        self, tmp_path: Path, option: str
    ) -> None:
        """The source's folder bind-mounted elsewhere is the same folder (the same device
        and inode): its -journal named there is refused as by its own name (it was
        written, and the next open of the source deleted the recovered file). Exit 2,
        one line, nothing written. In a private mount namespace, as root."""
        if os.geteuid() != 0:
            pytest.skip("a bind mount needs root")
        case = corruption.fresh_copy(tmp_path / "db")
        bind = tmp_path / "bind"
        bind.mkdir()
        target = bind / f"{case.db.name}-journal"
        out = tmp_path / "out.db"
        args = {"--output": str(out), option: str(target)}
        script = (
            f"mount --bind {case.db.parent} {bind} && {sys.executable} -m statewarden.cli.ctl"
            f" recover --source {case.db} " + " ".join(f"{k} {v}" for k, v in args.items())
        )
        before = sorted(p.name for p in case.db.parent.iterdir())
        r = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
            capture_output=True,
            text=True,
            check=False,
            cwd=REPO,
        )
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr == (
            f"statewardenctl: error: {target}: a name of the source's files; {option} must be"
            " another\n"
        )
        assert sorted(p.name for p in case.db.parent.iterdir()) == before
        assert not out.exists()

    @pytest.mark.parametrize("suffix", ["-journal", "-wal"])
    def test_the_source_is_a_name_of_the_output_s_files(self, tmp_path: Path, suffix: str) -> None:
        """--source y.db-journal --output y.db: SQLite would take the source for the
        output's hot journal (or WAL) and roll it back (replay it) and delete it the
        first time the output is opened. Exit 2, one line, the source untouched."""
        case = corruption.fresh_copy(tmp_path / "db")
        source = tmp_path / f"y.db{suffix}"
        case.db.rename(source)
        before = source.read_bytes()
        out = tmp_path / "y.db"
        code, _, err = run_ctl("recover", "--source", str(source), "--output", str(out))
        assert code == 2
        assert err == (
            f"statewardenctl: error: {source}: a name of the output's files; --output must be"
            " another\n"
        )
        assert source.read_bytes() == before
        assert not out.exists()

    @pytest.mark.parametrize(
        ("content", "message"),
        [
            (b"", "the file is empty (0 bytes), not a SQLite database"),
            (b"just text\n", "not a SQLite database (no SQLite header)"),
            (b"\x00" * 4096, "the database header is zeroed; the file is unreadable as SQLite"),
        ],
    )
    def test_unreadable_source(self, tmp_path: Path, content: bytes, message: str) -> None:
        """Not a database: exit 4, one line, no output file, no work dir left."""
        src = tmp_path / "src.db"
        src.write_bytes(content)
        out = tmp_path / "o" / "out.db"
        out.parent.mkdir()
        code, _, err = run_ctl("recover", "--source", str(src), "--output", str(out))
        assert code == 4
        assert err == f"statewardenctl: error: {src}: {message}\n"
        assert os.listdir(out.parent) == []

    def test_foreign_wal(self, tmp_path: Path) -> None:
        """A -wal from another database: refused (exit 4), source bundle untouched."""
        case = corruption.foreign_wal(tmp_path / "db")
        before = fingerprint(case.db)
        out = tmp_path / "o" / "out.db"
        out.parent.mkdir()
        code, _, err = run_ctl("recover", "--source", str(case.db), "--output", str(out))
        assert code == 4
        assert err.startswith(f"statewardenctl: error: {case.db}-wal: belongs to another database")
        assert fingerprint(case.db) == before
        assert os.listdir(out.parent) == []

    def test_no_space(self, tmp_path: Path) -> None:
        """Not enough room next to --output (a real 1 MiB tmpfs): exit 1, one line, the
        source untouched, nothing written there. Needs root to mount; skips otherwise."""
        case = corruption.fresh_copy(tmp_path / "db")
        small = tmp_path / "small"
        small.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a 1 MiB tmpfs needs root (run the suite as root, as CI does)")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
        try:
            before = fingerprint(case.db)
            code, _, err = run_ctl(
                "recover", "--source", str(case.db), "--output", str(small / "x.db")
            )
            assert code == 1
            assert err.startswith(f"statewardenctl: error: {small}: not enough free space: ")
            assert err.endswith(" needed (free some space there or choose another folder)\n")
            assert os.listdir(small) == []
            assert fingerprint(case.db) == before
        finally:
            subprocess.run(["umount", str(small)], check=True)

    def test_missing_output_directory(self, tmp_path: Path) -> None:
        """An --output in a folder that does not exist is a one-line usage error (exit 2) naming
        it."""
        case = corruption.fresh_copy(tmp_path / "db")
        out = tmp_path / "nope" / "out.db"
        code, _, err = run_ctl("recover", "--source", str(case.db), "--output", str(out))
        assert code == 2
        assert err == f"statewardenctl: error: {out.parent}: no such directory for --output\n"


class TestHumanReport:
    def test_table_and_verdict(self, tmp_path: Path) -> None:
        """The text report has one line per table and ends with the verdict."""
        case = corruption.zeroed_leaf(tmp_path / "db")
        lost = case.lost_rowids["messages"]
        out = tmp_path / "out.db"
        code, stdout, _ = run_ctl("recover", "--source", str(case.db), "--output", str(out))
        assert code == 3
        lines = stdout.splitlines()
        assert lines[-1] == f"result: verified, loss detected: messages {len(lost)}"
        assert f"  messages: rowids {lost[0]}..{lost[-1]} could not be read" in lines


class TestCollisions:
    def test_two_rows_claim_one_id(self, tmp_path: Path) -> None:
        """A later session stored with an earlier session's id: the first is kept, the
        later one is set aside in the report with its whole row (never dropped
        silently); its old id, still listed by the unique index, counts as lost; its
        messages are kept as orphans and counted."""
        case = corruption.duplicate_key(tmp_path / "db")
        c = case.collision
        n = n_pristine("sessions")
        orphans = n_pristine(f"messages WHERE session_id = '{c['old_key']}'")
        code, doc, out = recover_json(case, tmp_path)
        assert code == 3
        s = doc["tables"]["sessions"]
        assert (s["source_rows"], s["source_distinct"], s["recovered"]) == (n, n - 1, n - 1)
        assert (s["set_aside"], s["duplicates_dropped"], s["status"]) == (1, 0, "partial")
        assert s["lost_keys_sample"] == [[c["old_key"]]]
        assert doc["lost"] == {"sessions": 1}
        [aside] = doc["set_aside"]
        assert (aside["table"], aside["rowid"], aside["row"]["id"]) == (
            "sessions",
            c["rowid"],
            c["key"],
        )
        assert aside["reason"].startswith(
            "a different row already has this key (UNIQUE constraint failed: sessions.id"
        )
        assert doc["orphans"]["messages"] == orphans > 0
        _, checked, _ = run_ctl("check", "--db", str(case.db), "--json")
        assert json.loads(checked)["databases"][0]["orphans"] == doc["orphans"]
        assert doc["tables"]["messages"]["recovered"] == n_pristine("messages")
        assert rows(out, f"SELECT rowid FROM sessions WHERE id = '{c['key']}'") == [
            (c["kept_rowid"],)
        ]
        assert doc["verified"] is True

    def test_two_rows_claim_one_title(self, tmp_path: Path) -> None:
        """Two different sessions with one title (behind the UNIQUE title index): both are
        kept, the later one with its title renamed, and the rename is in the report."""
        case = corruption.duplicate_title(tmp_path / "db")
        c = case.collision
        n = n_pristine("sessions")
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        s = doc["tables"]["sessions"]
        assert (s["recovered"], s["renamed"], s["set_aside"], s["status"]) == (n, 1, 0, "complete")
        new_title = f"{c['key']} (duplicate, rowid {c['rowid']})"
        assert doc["renamed"] == [
            {
                "table": "sessions",
                "rowid": c["rowid"],
                "column": "title",
                "old": c["key"],
                "new": new_title,
            }
        ]
        assert rows(out, f"SELECT title FROM sessions WHERE rowid = {c['rowid']}") == [(new_title,)]
        assert rows(out, f"SELECT title FROM sessions WHERE rowid = {c['kept_rowid']}") == [
            (c["key"],)
        ]
        assert (doc["verified"], doc["loss_detected"]) == (True, False)


class TestFtsIndexScrambled:
    def test_copy_made_ahead_of_the_fts_check_is_not_kept(self, tmp_path: Path) -> None:
        """An FTS index scrambled inside its pages, every b-tree intact: the whole-file
        copy made while FTS5's own check runs is dropped when the check fails; the index
        is rebuilt from its content (reindex, nothing lost, exit 0) and MATCH answers as
        on the pristine file."""
        case = scrambled_fts_index(tmp_path / "db")
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        assert doc["strategy"] == "reindex"
        assert (doc["verified"], doc["loss_detected"]) == (True, False)
        assert doc["verification"]["fts"]["messages_fts"] == "ok"
        q = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'the' ORDER BY rowid"
        assert rows(out, q) == rows(case.pristine, q)
        assert rows(out, q)
        assert_same_rows(out, "messages")
        assert sorted(os.listdir(out.parent)) == ["recovered.db"]

    def test_fts_check_that_stops_makes_a_new_diagnosis(self, tmp_path: Path) -> None:
        """FTS5 refuses to open messages_fts (its stored version changed), every b-tree
        intact: the copy made ahead is dropped, the file diagnosed again (derived) and
        the FTS table rebuilt from its content; MATCH answers as on the pristine file."""
        case = fts_version_changed(tmp_path / "db")
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        assert doc["strategy"] == "reindex"
        assert (doc["verified"], doc["loss_detected"]) == (True, False)
        assert doc["verification"]["fts"] == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
        q = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'the' ORDER BY rowid"
        assert rows(out, q) == rows(case.pristine, q)
        assert sorted(os.listdir(out.parent)) == ["recovered.db"]

    def test_fts_index_damage_joined_after_the_data_of_a_damaged_file(self, tmp_path: Path) -> None:
        """A phantom row and messages_fts's index scrambled inside its pages: FTS5's
        own verdict, joined once the base tables are in, makes the index rebuilt from
        its content instead of copied; nothing lost, exit 0, and MATCH answers
        as on the pristine file."""
        case = corruption.phantom_row(tmp_path / "db")
        scramble_fts_index(case)
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        assert (doc["damage"], doc["strategy"]) == ("base", "rebuild")
        assert (doc["verified"], doc["loss_detected"]) == (True, False)
        assert doc["verification"]["fts"] == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
        q = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'the' ORDER BY rowid"
        assert rows(out, q) == rows(case.pristine, q)
        assert_same_rows(out, "messages")
        assert_same_rows(out, "sessions")

    def test_fts_check_that_stops_in_a_damaged_file(self, tmp_path: Path) -> None:
        """A phantom row and an FTS table FTS5 refuses to open: the verdicts cannot be
        joined, so the file is diagnosed again, waiting for them, and rebuilt with
        that diagnosis; nothing lost and MATCH answers as on the pristine file."""
        case = fts_version_changed(tmp_path / "db")
        damage.duplicate_cell(case.db, "sessions", 5)
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        assert (doc["damage"], doc["verified"], doc["loss_detected"]) == ("base", True, False)
        assert doc["verification"]["fts"] == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
        q = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'the' ORDER BY rowid"
        assert rows(out, q) == rows(case.pristine, q)
        assert_same_rows(out, "sessions")
        assert sorted(os.listdir(out.parent)) == ["recovered.db"]

    def test_fts_checks_that_cannot_start_make_a_new_diagnosis(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """No interpreter to start the child process of FTS5's checks with: the
        damaged file is diagnosed again, waiting for checks run in this process, and
        recovered as ever: the same report as with the child (but the timings and the
        output's name), nothing lost, verified, no file left behind."""
        case = corruption.phantom_row(tmp_path / "db")
        scramble_fts_index(case)
        with_child = recover(case.db, tmp_path / "with-child.db").to_json()
        monkeypatch.setattr("sys.executable", str(tmp_path / "no-such-python"))
        out = tmp_path / "out.db"
        report = recover(case.db, out)
        assert (report.damage, report.verified, report.loss_detected) == ("base", True, False)
        doc = report.to_json()
        for d in (doc, with_child):
            del d["timings"], d["output"]
        assert doc == with_child
        q = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'the' ORDER BY rowid"
        assert rows(out, q) == rows(case.pristine, q)
        assert sorted(os.listdir(tmp_path)) == ["db", "out.db", "with-child.db"]


class TestExternalContentFts:
    def test_fts_damage_is_rebuilt_from_the_view(self, tmp_path: Path) -> None:
        """Newer Hermes' shape (FTS5 with content= a view): the FTS pages zeroed, the
        index is rebuilt with FTS5's 'rebuild' from the view; MATCH answers as before."""
        case = corruption.external_content_db(tmp_path / "db")
        pf = corruption.PristineFile(case.db)
        _, leaves = pf.tree_pages(case.roots["messages_fts_data"])
        for leaf in leaves[:2]:
            corruption.zero_page(case, leaf)
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        assert (doc["strategy"], doc["verified"], doc["loss_detected"]) == ("reindex", True, False)
        q = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'tool3 AND golf' ORDER BY rowid"
        assert rows(out, q) == rows(case.pristine, q)
        assert len(rows(out, q)) == 600
        assert rows(out, "SELECT version FROM schema_version") == [(40,)]

    def test_base_damage_rebuilds_fts_without_the_lost_rows(self, tmp_path: Path) -> None:
        """A messages leaf zeroed: the other rows are copied, the FTS index is rebuilt
        from what is there (no entry for a lost row), lost = the page's rowids."""
        case = corruption.external_content_db(tmp_path / "db")
        pf = corruption.PristineFile(case.db)
        _, leaves = pf.tree_pages(case.roots["messages"])
        lost = pf.leaf_rowids(leaves[5])
        corruption.zero_page(case, leaves[5])
        code, doc, out = recover_json(case, tmp_path)
        assert code == 3
        assert doc["lost"] == {"messages": len(lost)}
        assert doc["verification"]["fts"] == {"messages_fts": "ok"}
        hits = rows(out, "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'alpha'")
        assert hits == rows(out, "SELECT count(*) FROM messages WHERE content LIKE '%alpha%'")


class TestSessionsDamage:
    def test_zeroed_sessions_leaf(self, tmp_path: Path) -> None:
        """A sessions leaf zeroed: the lost sessions are named by their ids (known from
        the intact primary-key index), their messages are kept as orphans and counted."""
        case = corruption.zeroed_leaf(tmp_path / "db", table="sessions", which=0)
        lost_rowids = case.lost_rowids["sessions"]
        marks = ", ".join(str(r) for r in lost_rowids)
        lost_ids = sorted(
            str(r[0]) for r in pristine(f"SELECT id FROM sessions WHERE rowid IN ({marks})")
        )
        quoted = ", ".join(f"'{i}'" for i in lost_ids)
        orphans = n_pristine(f"messages WHERE session_id IN ({quoted})")
        code, doc, out = recover_json(case, tmp_path)
        assert code == 3
        s = doc["tables"]["sessions"]
        assert doc["lost"] == {"sessions": len(lost_ids)}
        assert s["lost_keys_sample"] == [[i] for i in lost_ids]
        # The first leaf: nothing before it could be read either, so the range is open
        # below ("rowids up to N").
        assert s["unreadable_ranges"] == [[-(2**63), lost_rowids[-1]]]
        assert doc["orphans"]["messages"] == orphans > 0
        _, checked, _ = run_ctl("check", "--db", str(case.db), "--json")
        assert json.loads(checked)["databases"][0]["orphans"] == doc["orphans"]
        assert doc["tables"]["messages"]["recovered"] == n_pristine("messages")
        assert_same_rows(out, "sessions", missing=set(lost_rowids))


class TestBundles:
    def test_hot_journal_source_keeps_rollback_mode(self, tmp_path: Path) -> None:
        """A rollback-mode source with a crashed writer's hot -journal: the copy is rolled
        back, every message is recovered, and the output stays in rollback mode."""
        case = corruption.fresh_copy(tmp_path / "db")
        corruption.crash_mid_transaction(case)
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        assert read_header(out).journal_mode == "rollback"
        assert doc["verification"]["journal_mode_preserved"] is True
        assert_same_rows(out, "messages")
        assert Path(f"{case.db}-journal").exists()

    def test_wal_with_another_page_size(self, tmp_path: Path) -> None:
        """A -wal written for a database with 1024-byte pages next to a 4096-byte one:
        refused by its page size, exit 4."""
        case = corruption.fresh_copy(tmp_path / "db")
        other = tmp_path / "other.db"
        conn = apsw.Connection(str(other))
        conn.execute("PRAGMA page_size=1024")
        conn.execute("PRAGMA journal_mode=wal")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("CREATE TABLE t(x)")
        Path(f"{case.db}-wal").write_bytes(Path(f"{other}-wal").read_bytes())
        conn.close()
        out = tmp_path / "o" / "out.db"
        out.parent.mkdir()
        code, _, err = run_ctl("recover", "--source", str(case.db), "--output", str(out))
        assert code == 4
        assert err == (
            f"statewardenctl: error: {case.db}-wal: belongs to another database (page size"
            " 1024, database has 4096) (move the -wal aside to read the database file alone)\n"
        )


class TestWal:
    def test_commits_after_a_bad_frame_come_back(self, tmp_path: Path) -> None:
        """One bit flipped in a WAL frame: SQLite replays the frames before it and drops
        every later commit without a word. recover walks the frames, names the bad one,
        counts the dropped commits and adds their rows from the frame images: every
        message and session of the pristine (fully replayed) file comes back."""
        case = corruption.wal_bad_frame(tmp_path / "db")
        as_sqlite_reads_it = tmp_path / "folded.db"
        corruption.fold_copy(case.db, as_sqlite_reads_it)
        sqlite_sees = int(rows(as_sqlite_reads_it, "SELECT count(*) FROM messages")[0][0])  # type: ignore[call-overload]
        want = rows(case.pristine, "SELECT rowid, * FROM messages ORDER BY rowid")
        assert sqlite_sees < len(want)  # the damage hides rows from SQLite
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        m = doc["tables"]["messages"]
        assert m["recovered_from_wal"] == len(want) - sqlite_sees
        assert (doc["strategy"], doc["loss_detected"]) == ("salvage", False)
        assert any("fails its checksum" in n for n in doc["notes"])
        assert any("committed transactions" in n for n in doc["notes"])
        assert rows(out, "SELECT rowid, * FROM messages ORDER BY rowid") == want
        for t in ("sessions", "session_model_usage"):
            q = f"SELECT rowid, * FROM {t} ORDER BY rowid"
            assert rows(out, q) == rows(case.pristine, q)

    @pytest.mark.parametrize("how", ["magic", "page-size"])
    def test_wal_with_a_damaged_header_is_ignored_and_its_commits_salvaged(
        self, tmp_path: Path, how: str
    ) -> None:
        """A WAL whose header SQLite rejects (magic zeroed, a page-size bit flipped):
        the database is read as SQLite reads it (without the WAL), the WAL is named as
        ignored, and its committed frames, which still check out one by one, give back
        every row written to it."""
        case = corruption.wal_header_damage(tmp_path / "db", how)
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        assert any("ignored, as SQLite does" in n for n in doc["notes"])
        for t in ("messages", "sessions"):
            q = f"SELECT rowid, * FROM {t} ORDER BY rowid"
            assert rows(out, q) == rows(case.pristine, q)
        assert doc["tables"]["messages"]["recovered_from_wal"] == len(case.unreached["messages"])

    def test_zero_filled_wal_is_ignored(self, tmp_path: Path) -> None:
        """A zero-filled -wal holds nothing: the database file is read alone, the WAL is
        named as ignored, every row of the file is recovered, exit 0."""
        case = corruption.wal_header_damage(tmp_path / "db", "zeroed")
        code, doc, out = recover_json(case, tmp_path)
        assert code == 0
        assert any(
            "ignored, as SQLite does: bad magic number (zero-filled)" in n for n in doc["notes"]
        )
        assert_same_rows(out, "messages")
        assert_same_rows(out, "sessions")


class TestBitRot:
    def test_rotted_copy_is_rebuilt_from_the_row(self, tmp_path: Path) -> None:
        """A message's FTS copy changed on disk: the FTS table is rebuilt from the
        messages, and a search for the original word finds the message again."""
        case = corruption.bit_rot(tmp_path / "db", "fts")
        rowid = case.phantom["messages_fts_content"]
        code, doc, out = recover_json(case, tmp_path)
        assert (code, doc["loss_detected"]) == (0, False)
        assert_same_rows(out, "messages")
        q = f"SELECT c0 FROM messages_fts_content WHERE id = {rowid}"
        assert rows(out, q) == pristine(q)

    def test_rotted_row_is_restored_from_its_copies(self, tmp_path: Path) -> None:
        """A message row changed on disk (one letter), its two FTS copies agreeing on
        the original: the text is restored from the copies (the only column that,
        changed alone, gives their text back), listed in restored_from_copies with
        what the file held and named in the notes; the row equals what Hermes wrote,
        no loss, exit 0. (It was kept as stored, altered, with exit 0.)"""
        case = corruption.bit_rot(tmp_path / "db", "row")
        rowid = case.phantom["messages"]
        code, doc, out = recover_json(case, tmp_path)
        assert (code, doc["loss_detected"]) == (0, False)
        [fix] = doc["restored_from_copies"]
        q = f"SELECT content FROM messages WHERE rowid = {rowid}"
        assert (fix["rowid"], fix["column"], fix["stored"]) == (
            rowid,
            "content",
            rows(case.db, q)[0][0],
        )
        assert fix["from"] == ["messages_fts", "messages_fts_trigram"]
        assert any("restored from their search-index copies" in n for n in doc["notes"])
        assert_same_rows(out, "messages")
        q = f"SELECT c0 FROM messages_fts_content WHERE id = {rowid}"
        assert rows(out, q) == pristine(q)


class TestPartialRows:
    def test_broken_overflow_chain_keeps_the_row(self, tmp_path: Path) -> None:
        """A session whose system_prompt overflow page is zeroed: the row is kept. The
        columns in its cell (id, source, model, ...) read in place; the columns after
        the prompt come back from the rest of its overflow chain, found among the pages
        no b-tree reaches (started_at and title, which its intact indexes hold, from
        those first); only system_prompt (whose bytes were on the zeroed page) is NULL,
        listed as the row's one unreadable column. Its 8 messages are not orphans;
        loss is detected (exit 3) but no row is lost."""
        case = corruption.broken_overflow(tmp_path / "db")
        rowid = case.phantom["sessions"]
        code, doc, out = recover_json(case, tmp_path)
        assert code == 3
        s = doc["tables"]["sessions"]
        assert (s["partial"], s["lost_keys"], doc["lost"]) == (1, [], {})
        [p] = doc["partial_rows"]
        assert (p["table"], p["rowid"], p["columns"], p["filled"]) == (
            "sessions",
            rowid,
            ["system_prompt"],
            {},
        )
        assert {"input_tokens", "output_tokens"} <= set(p["recovered_from_pages"])
        from_indexes = {
            r["column"]
            for r in doc["restored_from_copies"]
            if r["rowid"] == rowid and r["from"][0].startswith("index")
        }
        assert {"started_at", "title"} <= from_indexes
        q = f"SELECT * FROM sessions WHERE rowid = {rowid}"
        [got] = rows(out, q)
        [want] = rows(case.pristine, q)
        names = [c[1] for c in rows(out, "PRAGMA table_info(sessions)")]
        differ = [n for n, a, b in zip(names, got, want, strict=True) if a != b]
        assert differ == ["system_prompt"]
        assert got[names.index("system_prompt")] is None
        assert rows(out, "SELECT count(*) FROM messages WHERE session_id = 'long_prompt'") == [(8,)]
        assert "messages" not in doc["orphans"]
        q = "SELECT rowid, * FROM messages ORDER BY rowid"
        assert rows(out, q) == rows(case.pristine, q)
        q = "SELECT rowid, * FROM sessions WHERE id != 'long_prompt' ORDER BY rowid"
        assert rows(out, q) == rows(case.pristine, q)


class TestPageOne:
    def test_page_one_damaged_past_the_header(self, tmp_path: Path) -> None:
        """Page 1 zeroed past its 100-byte header: the schema's root is rebuilt from its
        intact leaves in the private copy, and every row of every table comes back; the
        note says so; the source's class stays unreadable."""
        case = corruption.fresh_copy(tmp_path / "db")
        with open(case.db, "r+b") as f:
            f.seek(100)
            f.write(b"\x00" * (4096 - 100))
        code, doc, out = recover_json(case, tmp_path)
        assert (code, doc["damage"], doc["verified"]) == (0, "unreadable", True)
        assert any("it was rebuilt in the private copy" in n for n in doc["notes"])
        for t in ("messages", "sessions", "session_model_usage", "gateway_routing"):
            assert_same_rows(out, t)
        q = "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name"
        assert rows(out, q) == pristine(q)


class TestPartialRowsFill:
    def test_whole_chain_lost_fills_not_null_columns_by_the_rule(self, tmp_path: Path) -> None:
        """Every overflow page of the session zeroed: only what the cell holds survives;
        a NOT NULL column past it gets the documented fill (DEFAULT, else 0 or ''),
        unless an intact index holds its value: started_at (REAL, no DEFAULT, filled 0)
        is then put back from the indexes, the fill named as what was stored, and so is
        the title (its unique index lists it); the row and its messages are kept."""
        case = corruption.broken_overflow(tmp_path / "db", whole_chain=True)
        rowid = case.phantom["sessions"]
        code, doc, out = recover_json(case, tmp_path)
        assert code == 3
        [p] = doc["partial_rows"]
        assert p["columns"][0] == "system_prompt"
        # Columns stored as NULL, 0 or 1 need no body bytes and read in place; of the
        # others, started_at is the one NOT NULL column: REAL, no DEFAULT, so 0, then
        # its value from the intact indexes that hold it.
        assert p["columns"] == [
            "system_prompt",
            "message_count",
            "input_tokens",
            "output_tokens",
            "cwd",
        ]
        assert p["filled"] == {}
        assert "recovered_from_pages" not in p
        fixes = {
            r["column"]: r["stored"] for r in doc["restored_from_copies"] if r["rowid"] == rowid
        }
        assert fixes == {"started_at": 0, "title": None}
        q = f"SELECT id, source, model, started_at FROM sessions WHERE rowid = {rowid}"
        assert rows(out, q) == rows(case.pristine, q)
        assert "messages" not in doc["orphans"]


class TestSmallTables:
    def test_schema_version_page_zeroed(self, tmp_path: Path) -> None:
        """The only page of schema_version zeroed: no row of it can be read; the output
        is built and verified anyway, the loss is flagged (exit 3) and the unreadable
        schema_version is named in the notes; every other table is complete."""
        case = corruption.zeroed_leaf(tmp_path / "db", table="schema_version", which=0)
        code, doc, out = recover_json(case, tmp_path)
        assert code == 3
        sv = doc["tables"]["schema_version"]
        assert (sv["source_rows"], sv["recovered"]) == (0, 0)
        assert sv["unreadable_ranges"] == [[-(2**63), 2**63 - 1]]
        assert (doc["verified"], doc["loss_detected"]) == (True, True)
        assert any(n.startswith("Hermes' schema_version could not be read") for n in doc["notes"])
        assert all(
            t["status"] == "complete"
            for name, t in doc["tables"].items()
            if name != "schema_version"
        )
        assert_same_rows(out, "messages")


class TestInvalidText:
    def test_clean_table_restores_the_text(self, tmp_path: Path) -> None:
        """Text with an invalid UTF-8 byte in an otherwise healthy table: SQLite does not
        validate text, but Hermes writes none, so the column is unreadable; its two FTS
        copies agree on the original, so it is restored from them and the row equals
        what Hermes wrote. The record was changed on disk, so the columns nothing
        vouches for (neither an index nor the copies: role, ...) are named in
        unverified_rows and loss is detected (exit 3): nothing proves them. (It was
        copied byte for byte, 0xFF and all, as a good row.)"""
        case = corruption.invalid_utf8(tmp_path / "db")
        rowid = case.phantom["messages"]
        code, doc, out = recover_json(case, tmp_path)
        assert (code, doc["loss_detected"], doc["partial_rows"], doc["lost"]) == (3, True, [], {})
        assert [(r["rowid"], r["column"]) for r in doc["restored_from_copies"]] == [
            (rowid, "content")
        ]
        [u] = doc["unverified_rows"]
        assert (u["rowid"], u["why"]) == (rowid, "its text is not valid UTF-8 (changed on disk)")
        assert "role" in u["columns"]
        assert "content" not in u["columns"]
        assert_same_rows(out, "messages")

    def test_damaged_table_row_by_row_repairs_the_text(self, tmp_path: Path) -> None:
        """The same bad byte in a table that is copied row by row (a leaf elsewhere is
        zeroed): the text is unreadable (not UTF-8), named in the notes, and restored
        from its two agreeing FTS copies: the row equals what Hermes wrote (it was kept
        with U+FFFD for the bad byte, as a good row)."""
        case = corruption.invalid_utf8(tmp_path / "db", rowid=700)
        pf = corruption.PristineFile(case.db)
        _, leaves = pf.tree_pages(case.roots["messages"])
        lost = pf.leaf_rowids(leaves[3])
        corruption.zero_page(case, leaves[3])
        code, doc, out = recover_json(case, tmp_path)
        assert code == 3
        assert doc["lost"] == {"messages": len(lost)}
        assert any(
            n.startswith("messages: 1 rows held text that is not valid UTF-8") for n in doc["notes"]
        )
        assert [(r["rowid"], r["column"]) for r in doc["restored_from_copies"]] == [
            (700, "content")
        ]
        got = rows(out, "SELECT rowid, * FROM messages ORDER BY rowid")
        want = pristine("SELECT rowid, * FROM messages ORDER BY rowid")
        assert got == [r for r in want if r[0] not in set(lost)]


class TestChangedIndexedValue:
    def test_a_changed_timestamp_is_set_back_from_two_agreeing_indexes(
        self, tmp_path: Path
    ) -> None:
        """In a table copied row by row (a messages leaf zeroed), one row's timestamp
        changed on disk (the record still valid): both indexes holding the column agree
        on the value Hermes wrote, so it is set back and listed in restored_from_copies;
        every other row, which its entries agree with, is as Hermes wrote it. (SQLite
        names the rows that differ from an entry; only they are compared one by one.)"""
        case = corruption.zeroed_leaf(tmp_path / "db")
        lost = set(case.lost_rowids["messages"])
        pf = corruption.PristineFile(case.db)
        _, leaves = pf.tree_pages(case.roots["messages"])
        rowid = min(pf.leaf_rowids(leaves[10]))
        [(stamp,)] = pristine(f"SELECT timestamp FROM messages WHERE id = {rowid}")
        assert isinstance(stamp, float)
        start, end = corruption._cell_span(pf, leaves[10], rowid)
        at = pf.data.find(struct.pack(">d", stamp), start, end)
        assert at != -1
        with case.db.open("r+b") as f:
            f.seek(at)
            f.write(struct.pack(">d", stamp + 1000.0))
        code, doc, out = recover_json(case, tmp_path)
        assert code == 3
        fixes = [r for r in doc["restored_from_copies"] if r["rowid"] == rowid]
        assert [(r["column"], r["stored"]) for r in fixes] == [("timestamp", stamp + 1000.0)]
        assert sorted(fixes[0]["from"]) == [
            "index idx_messages_session",
            "index idx_messages_session_active",
        ]
        assert_same_rows(out, "messages", missing=lost)
