"""Root reads another copy only as the database's owner could hand it over: every file of
a copy is opened relative to a descriptor of its folder with ``O_NOFOLLOW``, proven on
the descriptor (a regular file or folder owned by the database's owner) and copied from
that descriptor (docs/safety.md rule 12). A capture, a capture's main image or a backup
that is a symlink to a database only root may read, or a file of root's in the user's
capture, gives no row; nor does a user who swaps a name between a file and a symlink
while root recovers, however often it is tried."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab import corruption
from lab.hermes_fixtures import TINY, built_db
from tests.support.cli import run_ctl
from tests.support.maintenance import maintenance_config, run_maintenance

USER = 65534
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root (files of a second uid); run the suite as root"
)
CAPTURE = "state.db.retired-wal-20261130-220000-42"
BACKUP = "state.db.pre-update-emergency-20261130.bak"
RACE_RUNS = 30


@dataclass
class Setup:
    db: Path  # the user's damaged database
    lost: list[int]  # the rowids of its zeroed leaf
    secret: Path  # a database only root may read: this file's rows, the lost ones too
    secret_dir: Path  # its folder, 0700 root
    work: Path  # where root writes its outputs


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    """The user's Hermes home (uid 65534) with a zeroed messages leaf, and in a root-only
    folder a 0600 copy of the same database before the damage: every row it holds
    agrees with the user's file, so only the way it is opened keeps it out."""
    case = corruption.zeroed_leaf(tmp_path / "home", spec=TINY, which=1)
    for p in [case.db.parent, *case.db.parent.iterdir()]:
        os.chown(p, USER, USER)
    secret_dir = tmp_path / "root-only"
    secret_dir.mkdir(mode=0o700)
    secret = secret_dir / "secret.db"
    shutil.copyfile(built_db(TINY), secret)
    secret.chmod(0o600)
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    return Setup(case.db, case.lost_rowids["messages"], secret, secret_dir, work)


def manifest(folder: Path) -> None:
    (folder / "manifest.json").write_text(
        json.dumps(
            {
                "version": 1,
                "captured_at": "2026-11-30T22:00:00Z",
                "main": {"mode": "copied", "file": "state.db"},
                "wal": {"file": "state.db-wal"},
            }
        )
    )


def users_capture(s: Setup) -> Path:
    """An empty capture folder of the user's beside the database, with its manifest."""
    cap = s.db.parent / CAPTURE
    cap.mkdir()
    manifest(cap)
    for p in (cap, cap / "manifest.json"):
        os.chown(p, USER, USER)
    return cap


def image_without_lost_rows(s: Setup, dest: Path) -> None:
    """A genuine image of the user's file that lacks the lost rows (it gives none), the
    user's own file."""
    shutil.copyfile(built_db(TINY), dest)
    conn = apsw.Connection(str(dest))
    with conn:
        conn.execute(f"DELETE FROM messages WHERE id IN ({', '.join(map(str, s.lost))})")
    conn.close()
    os.chown(dest, USER, USER)


def main_image_a_symlink(s: Setup) -> tuple[Path, str]:
    cap = users_capture(s)
    os.symlink(s.secret, cap / "state.db")
    os.lchown(cap / "state.db", USER, USER)
    return cap, "state.db is a symlink, not followed"


def capture_a_symlink(s: Setup) -> tuple[Path, str]:
    real = s.secret_dir / CAPTURE
    real.mkdir()
    manifest(real)
    shutil.copyfile(s.secret, real / "state.db")
    os.symlink(real, s.db.parent / CAPTURE)
    os.lchown(s.db.parent / CAPTURE, USER, USER)
    return s.db.parent / CAPTURE, f"{CAPTURE} is a symlink, not followed"


def backup_a_symlink(s: Setup) -> tuple[Path, str]:
    os.symlink(s.secret, s.db.parent / BACKUP)
    os.lchown(s.db.parent / BACKUP, USER, USER)
    return s.db.parent / BACKUP, f"{BACKUP} is a symlink, not followed"


def main_image_roots_file(s: Setup) -> tuple[Path, str]:
    """The secret itself, linked into the user's capture (root can; so can a user where
    the kernel's protected_hardlinks is off)."""
    cap = users_capture(s)
    os.link(s.secret, cap / "state.db")
    return cap, f"state.db is owned by uid 0, not by the database's owner (uid {USER})"


def recover(s: Setup, extra: Path, run: int = 0) -> tuple[int, dict[str, Any], Path]:
    out = s.work / f"out-{run}" / "recovered.db"
    out.parent.mkdir()
    code, stdout, stderr = run_ctl(
        "recover",
        "--source",
        str(s.db),
        "--output",
        str(out),
        "--json",
        "--extra-source",
        str(extra),
    )
    assert stderr == ""
    return code, json.loads(stdout), out


def secret_rows_in(s: Setup, doc: dict[str, Any], out: Path) -> list[int]:
    """The lost rowids the output holds: only the root-only file could have given them."""
    conn = apsw.Connection(str(out), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        marks = ", ".join("?" for _ in s.lost)
        held = [
            r[0] for r in conn.execute(f"SELECT id FROM messages WHERE id IN ({marks})", s.lost)
        ]
    finally:
        conn.close()
    return sorted(set(held) | {e["rowid"] for e in doc["from_other_copies"]})


class TestNeverFollowed:
    @pytest.mark.parametrize(
        "plant",
        [main_image_a_symlink, capture_a_symlink, backup_a_symlink, main_image_roots_file],
        ids=["main-image-symlink", "capture-symlink", "backup-symlink", "main-image-roots"],
    )
    def test_a_root_only_database_gives_no_row(
        self, setup: Setup, plant: Callable[[Setup], tuple[Path, str]]
    ) -> None:
        """Root recovers the user's file with a copy that leads to the root-only
        database: the copy is refused with why, no row of it is in the output, the
        zeroed leaf's rows are counted lost."""
        extra, why = plant(setup)
        code, doc, out = recover(setup, extra)
        assert secret_rows_in(setup, doc, out) == []
        assert (code, doc["lost"]) == (3, {"messages": len(setup.lost)})
        assert any(n.endswith(f": not used, it cannot be read ({why})") for n in doc["notes"]), doc[
            "notes"
        ]


@contextlib.contextmanager
def swapping(name: Path, regular: Path, target: Path) -> Iterator[list[int]]:
    """A thread of the user's that swaps ``name`` between the user's own ``regular``
    file (another name of it) and a symlink to ``target``, each swap one rename, as
    fast as it can until the block ends; yields how many times it swapped."""
    stop = threading.Event()
    swaps = [0]
    tmp = name.with_name(name.name + ".swap")

    def run() -> None:
        while not stop.is_set():
            os.symlink(target, tmp)
            os.replace(tmp, name)
            os.link(regular, tmp)
            os.replace(tmp, name)
            swaps[0] += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield swaps
    finally:
        stop.set()
        thread.join()


class TestSwappedWhileRead:
    @pytest.mark.parametrize("where", ["capture-main-image", "backup"])
    def test_no_root_only_row_in_any_run(self, setup: Setup, where: str) -> None:
        """The user swaps the capture's main image (or the backup file) between a file of
        theirs and a symlink to the root-only database while root recovers, RACE_RUNS
        times: the file of theirs lacks the lost rows, so a lost row in any output could
        only have come through the symlink; none ever does."""
        folder = setup.db.parent if where == "backup" else users_capture(setup)
        name = folder / (BACKUP if where == "backup" else "state.db")
        regular = name.with_name("users-own.db")
        image_without_lost_rows(setup, regular)
        os.link(regular, name)
        extra = name if where == "backup" else name.parent
        with swapping(name, regular, setup.secret) as swaps:
            for run in range(RACE_RUNS):
                code, doc, out = recover(setup, extra, run)
                assert secret_rows_in(setup, doc, out) == [], f"run {run}"
                assert (code, doc["lost"]) == (3, {"messages": len(setup.lost)})
        assert swaps[0] > 0


class TestMaintenanceAsRoot:
    def test_the_users_own_capture_repairs_the_users_file(
        self, setup: Setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Root's maintenance of the user's file recovers from a work copy of its own, yet
        reads the captures as the database's owner's: the user's genuine capture beside
        the file gives every lost row back (exit 0, repaired)."""
        maintenance_config(tmp_path, monkeypatch)
        cap = users_capture(setup)
        shutil.copyfile(built_db(TINY), cap / "state.db")
        os.chown(cap / "state.db", USER, USER)
        proc = run_maintenance("--db", str(setup.db), "--yes", "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert json.loads(proc.stdout)["outcome"] == "repaired"
        conn = apsw.Connection(str(setup.db), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            held = [r[0] for r in conn.execute("SELECT id FROM messages ORDER BY id")]
        finally:
            conn.close()
        assert set(setup.lost) <= set(held)

    def test_a_symlink_to_a_root_only_database_is_no_repair(
        self, setup: Setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The same run with the capture's main image a symlink to the root-only
        database: nothing of it is read, the repair would lose the rows and stops
        (exit 3), the user's file untouched."""
        maintenance_config(tmp_path, monkeypatch)
        main_image_a_symlink(setup)
        before = setup.db.read_bytes()
        proc = run_maintenance("--db", str(setup.db), "--yes", "--json")
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert json.loads(proc.stdout)["outcome"] == "stopped: the repair would lose rows"
        assert setup.db.read_bytes() == before
