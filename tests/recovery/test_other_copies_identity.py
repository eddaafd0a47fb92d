"""A row comes from another copy only when the copy proves it is of this database and the
row agrees with every witness this file still has (docs/safety.md rule 15): another Hermes
database of the same schema, planted as a retired WAL capture, a snapshot or a backup,
gives no row (refused, named, its rows counted lost, exit 3); an earlier generation of
the same file gives the rows that agree with this file's indexes and FTS copies and not
the ones that disagree; a genuine capture still gives every row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab import corruption
from lab.corruption import PristineFile
from lab.hermes_fixtures import (
    MAIN_EXTERNAL,
    NEWEST,
    NEWEST_HERMES,
    SMALL,
    AnySpec,
    MainSpec,
    Spec,
    built_db,
)
from tests.support.cli import run_ctl
from tests.support.maintenance import maintenance_config, run_maintenance

# Another Hermes home's database: the same Hermes, the same schema, other sessions.
OTHER_SMALL = Spec(sessions=64, messages=2000, text_bytes=600, seed=2)
OTHER_NEWEST = Spec(hermes=NEWEST_HERMES, seed=2)
OTHER_MAIN = MainSpec(seed=2)
CAPTURE = "state.db.retired-wal-20261130-220000-42"
BACKUP = "state.db.pre-update-emergency-20261130.bak"


def capture_of(folder: Path, image: Path) -> Path:
    """A retired WAL capture of ``image`` as Hermes lays it out (main image, manifest)."""
    d = folder / CAPTURE
    d.mkdir(parents=True)
    shutil.copyfile(image, d / "state.db")
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


def planted(kind: str, folder: Path, image: Path) -> tuple[Path, str]:
    """``image`` laid down as a copy of ``kind`` in ``folder``, and how the report names it."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "capture":
        return capture_of(folder, image), f"retired WAL capture {CAPTURE}"
    if kind == "backup":
        shutil.copyfile(image, folder / BACKUP)
        return folder / BACKUP, f"pre-update backup {BACKUP}"
    snap = folder / "default-1.db"
    shutil.copyfile(image, snap)
    snap.with_suffix(".json").write_text(json.dumps({"taken_at": 1796076000.0}))
    return snap, "snapshot 2026-11-30T22:00Z"


def recover_with(db: Path, tmp_path: Path, extra: Path) -> tuple[int, dict[str, Any], Path]:
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    code, stdout, stderr = run_ctl(
        "recover", "--source", str(db), "--output", str(out), "--json", "--extra-source", str(extra)
    )
    assert stderr == ""
    return code, json.loads(stdout), out


def query(path: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [tuple(r) for r in conn.execute(sql, args)]
    finally:
        conn.close()


def messages(path: Path, where: str = "") -> list[tuple[Any, ...]]:
    return query(path, f"SELECT rowid, * FROM messages {where} ORDER BY rowid")


def of(rowids: list[int]) -> str:
    return f"WHERE id IN ({', '.join(str(r) for r in rowids)})"


def write(db: Path, *sql: tuple[str, tuple[Any, ...]]) -> None:
    """Changes made after a copy was taken, through the file's own triggers."""
    conn = apsw.Connection(str(db))
    try:
        with conn:
            for statement, args in sql:
                conn.execute(statement, args)
    finally:
        conn.close()


def zero_leaf(case: corruption.Case, which: int = 3) -> list[int]:
    """Zero a messages leaf of the file as it is now; the rowids it held."""
    pf = PristineFile(case.db)
    _, leaves = pf.tree_pages(case.roots["messages"])
    lost = pf.leaf_rowids(leaves[which])
    corruption.zero_page(case, leaves[which])
    return lost


class TestAForeignDatabase:
    @pytest.mark.parametrize(
        ("spec", "other", "kind", "why"),
        [
            (SMALL, OTHER_SMALL, "capture", "its messages rowid 1 is another row (session_id"),
            (SMALL, OTHER_SMALL, "snapshot", "its messages rowid 1 is another row (session_id"),
            (SMALL, OTHER_SMALL, "backup", "its messages rowid 1 is another row (session_id"),
            (NEWEST, OTHER_NEWEST, "capture", "its state_meta db_file_generation is"),
            (
                MAIN_EXTERNAL,
                OTHER_MAIN,
                "capture",
                "its messages rowid 1 is another row (session_id",
            ),
        ],
        ids=["0.19-capture", "0.19-snapshot", "0.19-backup", "0.22-capture", "main-capture"],
    )
    def test_gives_no_row(
        self, tmp_path: Path, spec: AnySpec, other: AnySpec, kind: str, why: str
    ) -> None:
        """Another Hermes database of the same schema (0.19.0 and main: no identity
        recorded, told by the rows both hold; 0.22: by its generation stamp) is refused
        and named; the rows of the zeroed leaf stay lost (exit 3), none of its text is
        in the output."""
        case = corruption.fresh_copy(tmp_path / "db", spec)
        lost = zero_leaf(case)
        copy, label = planted(kind, tmp_path / "home", built_db(other))
        code, doc, out = recover_with(case.db, tmp_path, copy)
        assert (code, doc["verified"]) == (3, True)
        assert doc["from_other_copies"] == []
        assert doc["lost"] == {"messages": len(lost)}
        assert doc["tables"]["messages"]["recovered_from_other_copies"] == 0
        refusals = [n for n in doc["notes"] if n.startswith(f"{label}: not used,")]
        assert len(refusals) == 1
        assert f"{label}: not used, it is not a copy of this database ({why}" in refusals[0]
        assert messages(out, of(lost)) == []
        theirs = tuple(
            r[0] for r in query(built_db(other), f"SELECT content FROM messages {of(lost)}")
        )
        marks = ", ".join("?" for _ in theirs)
        assert query(out, f"SELECT count(*) FROM messages WHERE content IN ({marks})", theirs) == [
            (0,)
        ]

    def test_another_generation_stamp_is_refused_though_its_rows_agree(
        self, tmp_path: Path
    ) -> None:
        """A copy whose rows are this file's but whose generation stamp is another file's
        (Hermes minted it once per file) is not of this file: refused, the rows stay lost."""
        case = corruption.zeroed_leaf(tmp_path / "db", spec=NEWEST)
        image = tmp_path / "image.db"
        shutil.copyfile(built_db(NEWEST), image)
        write(
            image, ("UPDATE state_meta SET value = ? WHERE key = 'db_file_generation'", ("f" * 32,))
        )
        copy, label = planted("capture", tmp_path / "home", image)
        code, doc, _ = recover_with(case.db, tmp_path, copy)
        assert code == 3
        assert doc["from_other_copies"] == []
        assert doc["lost"] == {"messages": len(case.lost_rowids["messages"])}
        assert any(
            n.startswith(
                f"{label}: not used, it is not a copy of this database (its state_meta"
                f" db_file_generation is {'f' * 32}, this file's "
            )
            for n in doc["notes"]
        )

    def test_a_copy_that_shares_nothing_proves_nothing(self, tmp_path: Path) -> None:
        """A 0.19.0 copy holding only the lost rows (no identity recorded, no row both files
        hold to compare) does not prove it is of this database: refused."""
        case = corruption.zeroed_leaf(tmp_path / "db")
        lost = case.lost_rowids["messages"]
        image = tmp_path / "image.db"
        shutil.copyfile(built_db(SMALL), image)
        write(image, (f"DELETE FROM messages WHERE id NOT IN ({', '.join(map(str, lost))})", ()))
        copy, label = planted("snapshot", tmp_path / "home", image)
        code, doc, _ = recover_with(case.db, tmp_path, copy)
        assert (code, doc["from_other_copies"]) == (3, [])
        assert doc["lost"] == {"messages": len(lost)}
        assert (
            f"{label}: not used, it is not a copy of this database (nothing shows it is of"
            " this database: no identity Hermes records in both files, no row both hold)"
        ) in doc["notes"]


class TestAnEarlierGeneration:
    def test_rows_that_disagree_with_the_witnesses_are_not_taken(self, tmp_path: Path) -> None:
        """A snapshot of this file, then the file goes on: a message's text is edited (its
        FTS copy changes with it), another's time (its index entries change), new messages
        come and a session is updated. After its leaf is zeroed, the snapshot gives the
        leaf's other rows exactly; the two it holds older versions of are refused, named,
        and counted lost (exit 3)."""
        case = corruption.fresh_copy(tmp_path / "db")
        snap, label = planted("snapshot", tmp_path / "snapshots", case.db)
        pf = PristineFile(case.db)
        _, leaves = pf.tree_pages(case.roots["messages"])
        on_leaf = pf.leaf_rowids(leaves[3])
        edited, moved = on_leaf[0], on_leaf[-1]
        ((sid,),) = query(case.db, "SELECT id FROM sessions ORDER BY rowid LIMIT 1")
        write(
            case.db,
            ("UPDATE messages SET content = 'edited afterwards' WHERE id = ?", (edited,)),
            ("UPDATE messages SET timestamp = timestamp + 1 WHERE id = ?", (moved,)),
            (
                "INSERT INTO messages(session_id, role, content, timestamp)"
                " VALUES (?, 'user', 'a later message', 1796999999.5)",
                (sid,),
            ),
            ("UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", (sid,)),
        )
        before = messages(case.db)
        lost = zero_leaf(case)
        assert lost == on_leaf
        code, doc, out = recover_with(case.db, tmp_path, snap)
        assert (code, doc["verified"]) == (3, True)
        taken = [e["rowid"] for e in doc["from_other_copies"]]
        assert taken == [r for r in lost if r not in (edited, moved)]
        assert {e["from"] for e in doc["from_other_copies"]} == {label}
        assert doc["lost"] == {"messages": 2}
        assert doc["tables"]["messages"]["lost_keys"] == sorted([edited, moved])
        assert messages(out, of(taken)) == [r for r in before if r[0] in taken]
        assert messages(out, of([edited, moved])) == []
        assert (
            f"messages: 2 rows of {label} not taken, they disagree with what this file still"
            f" holds of them (rowid {min(edited, moved)}: "
        ) in " ".join(doc["notes"])
        note = next(n for n in doc["notes"] if n.startswith(f"messages: 2 rows of {label}"))
        assert f"rowid {edited}: its text is not what messages_fts holds" in note
        assert f"rowid {moved}: its timestamp is not what index idx_messages_session holds" in note

    @pytest.mark.parametrize("spec", [SMALL, NEWEST, MAIN_EXTERNAL], ids=["0.19", "0.22", "main"])
    def test_a_genuine_capture_gives_every_row(self, tmp_path: Path, spec: AnySpec) -> None:
        """A capture of this file taken before later writes (new messages, a session
        updated) still gives every row of the zeroed leaf back exactly: exit 0, no loss,
        no refusal."""
        case = corruption.fresh_copy(tmp_path / "db", spec)
        copy, label = planted("capture", tmp_path / "home", case.db)
        ((sid,),) = query(case.db, "SELECT id FROM sessions ORDER BY rowid LIMIT 1")
        write(
            case.db,
            (
                "INSERT INTO messages(session_id, role, content, timestamp)"
                " VALUES (?, 'user', 'a later message', 1796999999.5)",
                (sid,),
            ),
            ("UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", (sid,)),
        )
        before = messages(case.db)
        lost = zero_leaf(case)
        code, doc, out = recover_with(case.db, tmp_path, copy)
        assert (code, doc["verified"], doc["lost"]) == (0, True, {})
        assert [e["rowid"] for e in doc["from_other_copies"]] == lost
        assert {e["from"] for e in doc["from_other_copies"]} == {label}
        assert messages(out) == before
        assert not [n for n in doc["notes"] if label in n and "not" in n]


class TestMaintenance:
    def test_a_foreign_capture_beside_the_database_is_no_repair(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """maintenance passes the captures beside the database to recover: a foreign one
        planted in the Hermes home gives no row, so the repair would lose the zeroed
        leaf's rows and stops (exit 3), the file untouched."""
        maintenance_config(tmp_path, monkeypatch)
        case = corruption.zeroed_leaf(tmp_path / "home")
        capture_of(case.db.parent, built_db(OTHER_SMALL))
        before = case.db.read_bytes()
        proc = run_maintenance("--db", str(case.db), "--yes", "--json")
        assert proc.returncode == 3, proc.stderr
        assert json.loads(proc.stdout)["outcome"] == "stopped: the repair would lose rows"
        assert case.db.read_bytes() == before

    def test_a_genuine_capture_beside_the_database_repairs_it(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The same run with a capture of this file beside it repairs the file with every
        row: exit 0."""
        maintenance_config(tmp_path, monkeypatch)
        case = corruption.fresh_copy(tmp_path / "home")
        capture_of(case.db.parent, case.db)
        before = messages(case.db)
        zero_leaf(case)
        proc = run_maintenance("--db", str(case.db), "--yes", "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["outcome"] == "repaired"
        assert messages(case.db) == before
