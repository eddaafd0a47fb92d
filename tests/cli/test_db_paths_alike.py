"""Invariant: a ``--db`` path that cannot be used is one line with the same reason and
exit code whatever the command. ``check`` was the one that got it right: as a user
whose folder search is denied, ``maintenance`` ended in "unexpected PermissionError"
(exit 1), ``status`` too, and ``holders`` said "no such file"; as root, ``maintenance``
gave exit 1 for a missing file (2 elsewhere), a folder and a FIFO (4 elsewhere). Real
processes, the installed command, as uid 65534 through ``setpriv``."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, built_db
from statewarden.errors import EXIT_UNREADABLE, EXIT_USAGE
from tests.support.cli import run_installed

pytestmark = pytest.mark.process

NOBODY = 65534
COMMANDS = [
    ("check",),
    ("maintenance", "--yes", "--here"),
    ("maintenance", "--dry-run", "--here"),
    ("maintenance", "--action", "vacuum", "--yes", "--here"),
    ("maintenance", "--resume", "--here"),  # (it once said "nothing to resume", exit 0)
    ("holders",),
]


@pytest.fixture
def nobody_env() -> Iterator[dict[str, str]]:
    """The environment of uid 65534: a home of its own in a folder it can reach (the
    test's folder is root's, mode 0700), removed at the end."""
    home = Path(tempfile.mkdtemp(prefix="statewarden-nobody-"))
    home.chmod(0o755)
    os.chown(home, NOBODY, NOBODY)
    try:
        yield {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "XDG_STATE_HOME": str(home / "state"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_RUNTIME_DIR": str(home / "run"),
        }
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def unsearchable(tmp_path: Path) -> Path:
    """A Hermes state.db in a folder of root's, mode 0700: uid 65534 cannot search it."""
    if os.geteuid() != 0:
        pytest.skip("setpriv to another uid needs root")
    tmp_path.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    shutil.copyfile(built_db(TINY), home / "state.db")
    return home / "state.db"


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_folder_the_user_cannot_search_is_permission_denied(
    nobody_env: dict[str, str], unsearchable: Path, command: tuple[str, ...]
) -> None:
    """Each command, as the user: exit 2, one line naming the file and the real reason."""
    r = run_installed(*command, "--db", str(unsearchable), env=nobody_env, uid=NOBODY)
    assert r.exit_code == EXIT_USAGE, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert str(unsearchable) in line
    assert "ermission denied" in line
    assert "unexpected" not in line


def test_status_names_a_folder_the_user_cannot_search(
    nobody_env: dict[str, str], unsearchable: Path
) -> None:
    """``status`` lists problems rather than failing: the file cannot be looked at (not
    "not present"), and why."""
    r = run_installed("status", "--db", str(unsearchable), env=nobody_env, uid=NOBODY)
    assert "Traceback" not in r.stderr
    assert "unexpected" not in r.stderr
    assert "cannot be looked at" in r.stdout
    assert "Permission denied" in r.stdout
    assert "not present" not in r.stdout


@pytest.mark.parametrize(
    ("make", "code"),
    [
        (lambda p: None, EXIT_USAGE),
        (lambda p: p.mkdir(), EXIT_UNREADABLE),
        (os.mkfifo, EXIT_UNREADABLE),
        (lambda p: os.mknod(p, stat.S_IFSOCK | 0o600), EXIT_UNREADABLE),
    ],
    ids=["missing", "a folder", "a FIFO", "a socket"],
)
@pytest.mark.parametrize("command", COMMANDS[:5], ids=" ".join)
def test_a_path_that_names_no_database_has_one_exit_code(
    tmp_path: Path, command: tuple[str, ...], make: object, code: int
) -> None:
    """As root: a missing file is exit 2, a folder, a FIFO or a socket exit 4 (a socket
    was "No such device or address"), for ``check`` and every ``maintenance`` alike;
    one line naming it."""
    db = tmp_path / "state.db"
    assert callable(make)
    make(db)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    r = run_installed(*command, "--db", str(db), env=env)
    assert r.exit_code == code, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert str(db) in line
    assert "unexpected" not in line
