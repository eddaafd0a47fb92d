"""``check`` and ``recover`` given paths they cannot use, or a file they cannot read.

Each answer is one line naming the path and the real reason, with the documented exit
code: 2 for a path that cannot be used (usage), 5 for a ``check`` that could not finish
(never 1, which is ``check``'s "derived damage"), 4 for a file SQLite cannot read.
The databases are Hermes' own (``lab.hermes_fixtures.later_db``); other users are real uids
(``setpriv``), file size limits real ``RLIMIT_FSIZE``.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.hermes_fixtures import later_db
from statewarden.recovery.bundle import fingerprint
from tests.support.cli import run_ctl
from tests.support.privileges import needs_root
from tests.support.repo import REPO

NOBODY = "65534"
SETPRIV = ("setpriv", "--reuid", NOBODY, "--regid", NOBODY, "--clear-groups")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A copy of a database Hermes wrote, in a folder of its own."""
    home = tmp_path / "home"
    home.mkdir()
    path = home / "state.db"
    shutil.copyfile(later_db(), path)
    return path


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every uid can enter (pytest's own are 0700), removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="statewarden-input-"))
    base.chmod(0o755)
    shutil.copyfile(later_db(), base / "state.db")
    (base / "state.db").chmod(0o644)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    """``statewardenctl ARGS`` run as uid 65534."""
    return subprocess.run(
        [*SETPRIV, sys.executable, "-m", "statewarden.cli.ctl", *args, "--progress", "none"],
        env={**os.environ, "HOME": "/tmp"},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def loop(tmp_path: Path) -> Path:
    """Two symlinks naming each other."""
    a, b = tmp_path / "loop_a", tmp_path / "loop_b"
    b.symlink_to(a)
    a.symlink_to(b)
    return a


class TestPathsThatCannotBeUsed:
    def test_database_that_is_a_symlink_loop(self, tmp_path: Path) -> None:
        """A symlink loop as the database was "unexpected OSError", exit 1 (for ``check``
        "derived damage"): now the path and the loop, exit 2, for both commands."""
        a = loop(tmp_path)
        want = f"statewardenctl: error: {a}: a loop of symbolic links"
        code, out, err = run_ctl("check", "--db", str(a), "--work-dir", str(tmp_path / "w"))
        assert (code, out) == (2, "")
        assert err.startswith(want), err
        assert err.count("\n") == 1, err
        code, _, err = run_ctl("recover", "--source", str(a), "--output", str(tmp_path / "o.db"))
        assert code == 2
        assert err.startswith(want), err
        assert err.count("\n") == 1, err
        assert not (tmp_path / "o.db").exists()

    def test_work_dir_that_is_a_file(self, db: Path, tmp_path: Path) -> None:
        """``--work-dir`` naming a regular file was "unexpected FileExistsError", exit 1:
        now exit 2 saying it is not a directory; the file is left as it was."""
        before = fingerprint(db)
        code, out, err = run_ctl("check", "--db", str(db), "--work-dir", str(db))
        assert (code, out) == (2, "")
        assert err == f"statewardenctl: error: {db}: not a directory (--work-dir)\n"
        assert fingerprint(db) == before

    def test_work_dir_that_is_a_symlink_loop(self, db: Path, tmp_path: Path) -> None:
        """``--work-dir`` naming a symlink loop: the loop, not "File exists", exit 2."""
        a = loop(tmp_path)
        code, _, err = run_ctl("check", "--db", str(db), "--work-dir", str(a))
        assert code == 2
        assert err == (
            f"statewardenctl: error: {a}: a loop of symbolic links"
            " (too many levels of symbolic links) (--work-dir)\n"
        )

    def test_output_in_a_symlink_loop(self, db: Path, tmp_path: Path) -> None:
        """``recover --output loop/x.db`` said "no such directory": it is a symlink loop."""
        a = loop(tmp_path)
        code, _, err = run_ctl("recover", "--source", str(db), "--output", str(a / "x.db"))
        assert code == 2
        assert err == (
            f"statewardenctl: error: {a}: a loop of symbolic links"
            " (too many levels of symbolic links) for --output\n"
        )

    def test_output_in_a_file(self, db: Path, tmp_path: Path) -> None:
        """``recover --output FILE/x.db``: the parent is a file, not a missing folder."""
        code, _, err = run_ctl("recover", "--source", str(db), "--output", str(db / "x.db"))
        assert code == 2
        assert err == f"statewardenctl: error: {db}: not a directory for --output\n"


@needs_root
class TestOtherUsers:
    def test_work_dir_the_user_cannot_write(self, shared: Path) -> None:
        """A ``--work-dir`` uid 65534 may not write in was "unexpected PermissionError",
        exit 1: now the folder and "permission denied", exit 2, nothing left there."""
        ro = shared / "ro"
        ro.mkdir(mode=0o555)
        ro.chmod(0o555)
        r = as_nobody("check", "--db", str(shared / "state.db"), "--work-dir", str(ro))
        assert (r.returncode, r.stdout) == (2, "")
        assert r.stderr == f"statewardenctl: error: {ro}: permission denied (--work-dir)\n"
        assert os.listdir(ro) == []

    def test_database_in_a_folder_the_user_cannot_search(self, shared: Path) -> None:
        """The file exists, in a folder (0700, root's) uid 65534 cannot search: it was
        "no such file"; now "permission denied", exit 2."""
        locked = shared / "locked"
        locked.mkdir()
        locked.chmod(0o700)
        shutil.copyfile(shared / "state.db", locked / "state.db")
        r = as_nobody("check", "--db", str(locked / "state.db"))
        assert (r.returncode, r.stdout) == (2, "")
        assert r.stderr == f"statewardenctl: error: {locked / 'state.db'}: permission denied\n"

    @pytest.mark.parametrize("which", ["state.db", "state.db-wal"])
    def test_file_the_user_may_not_read(self, shared: Path, which: str) -> None:
        """A database or ``-wal`` uid 65534 may not read was exit 4, "database unreadable"
        (damage): the file is fine, the user may not read it: exit 2, for both commands."""
        wal = shared / "state.db-wal"
        wal.write_bytes(b"")
        wal.chmod(0o644)
        (shared / which).chmod(0o000)
        want = f"statewardenctl: error: {shared / which}: permission denied\n"
        r = as_nobody("check", "--db", str(shared / "state.db"))
        assert (r.returncode, r.stderr) == (2, want)
        out = shared / "out"
        out.mkdir()
        os.chown(out, int(NOBODY), int(NOBODY))
        r = as_nobody("recover", "--source", str(shared / "state.db"), "--output", f"{out}/x.db")
        assert (r.returncode, r.stderr) == (2, want)
        assert os.listdir(out) == []

    def test_not_enough_free_space_is_not_derived_damage(self, db: Path, tmp_path: Path) -> None:
        """No room for the private copy (a real 1 MiB tmpfs) was exit 1, ``check``'s
        "derived damage": now 5, "not checked", one line naming the folder."""
        small = tmp_path / "small"
        small.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
        try:
            code, out, err = run_ctl("check", "--db", str(db), "--work-dir", str(small))
            assert (code, out) == (5, "")
            assert err.startswith(f"statewardenctl: error: {small}: not enough free space: ")
            assert err.endswith(" (free some space there or choose another folder)\n")
            assert os.listdir(small) == []
        finally:
            subprocess.run(["umount", str(small)], check=True)


def limited_to(size: int) -> None:
    """In the child: writes past ``size`` bytes fail with EFBIG (SIGXFSZ ignored)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def test_write_failure_while_copying(db: Path, tmp_path: Path) -> None:
    """The private copy cannot be written whole (``RLIMIT_FSIZE`` below the file's size):
    it was "unexpected OSError: [Errno 27] File too large", exit 1 (``check``'s "derived
    damage"); now ``check`` exits 5 and ``recover`` 1 ("failed"), one line naming the
    folder and the reason, and no work folder is left behind."""
    work = tmp_path / "w"
    work.mkdir()
    limit = db.stat().st_size // 2
    for args, want_code, folder in (
        (["check", "--db", str(db), "--work-dir", str(work)], 5, work),
        (["recover", "--source", str(db), "--output", str(work / "o.db")], 1, work),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "statewarden.cli.ctl", *args, "--progress", "none"],
            cwd=REPO,
            capture_output=True,
            text=True,
            preexec_fn=lambda: limited_to(limit),
            check=False,
        )
        assert r.returncode == want_code, r.stderr
        assert r.stderr == (
            f"statewardenctl: error: {folder}: cannot write the private copy of {db}"
            " there: File too large\n"
        )
        assert os.listdir(work) == []


@pytest.mark.parametrize(("at", "value"), [(21, 0), (22, 64), (23, 255)])
def test_payload_fractions_other_than_sqlites_are_unreadable(
    db: Path, tmp_path: Path, at: int, value: int
) -> None:
    """Header bytes 21 to 23 (the payload fractions, 64, 32 and 32 in every file) set to
    anything else: SQLite refuses the file ("file is not a database"), and ``check`` and
    ``recover`` refused it too (exit 4). ``check`` now exits 4 naming the field it read
    as SQLite writes it; ``recover`` brings every row back (exit 0) in a file ``check``
    finds healthy."""
    with open(db, "r+b") as f:
        f.seek(at)
        f.write(bytes([value]))
    code, out, err = run_ctl("check", "--db", str(db), "--work-dir", str(tmp_path / "w"))
    assert (code, err) == (4, "")
    assert "payload fractions" in out
    assert "read as 64/32/32" in out
    out_db = tmp_path / "o.db"
    code, _, err = run_ctl("recover", "--source", str(db), "--output", str(out_db))
    assert (code, err) == (0, "")
    code, out, err = run_ctl("check", "--db", str(out_db), "--work-dir", str(tmp_path / "w"))
    assert code == 0, out + err


def test_unsupported_schema_format_is_unreadable(db: Path, tmp_path: Path) -> None:
    """The header's schema format number 4 -> 9: SQLite answers "unsupported file
    format", which was exit 1 (``check``: "derived damage only"; ``recover``: "failed").
    It is a file SQLite cannot read as it is: ``check`` exits 4 and names the field it
    read as the file proves; ``recover`` brings every row back (exit 0)."""
    with open(db, "r+b") as f:
        f.seek(44)
        f.write(struct.pack(">I", 9))
    code, out, err = run_ctl("check", "--db", str(db), "--work-dir", str(tmp_path / "w"))
    assert (code, err) == (4, "")
    assert "schema format 9, read as 4" in out
    assert out.splitlines()[-1].startswith("  damage: unreadable")
    code, _, err = run_ctl("recover", "--source", str(db), "--output", str(tmp_path / "o.db"))
    assert (code, err) == (0, "")
