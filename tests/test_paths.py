"""Paths made without pathlib: a database's profile, its sidecars' names, its URI.

``statewardenctl holders --db X`` names these as strings (pathlib and urllib cost it a
quarter of its CPU time next to ``fuser``); each must give what the pathlib and urllib
forms gave, and a file name that is not UTF-8 must open too.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import apsw
import pytest

from lab.hermes_fixtures import TINY, holding, make_home
from statewarden.sidecars import sidecar, sidecar_name
from statewarden.sqlite import open_readonly, uri_for, wal_sidecars_absent
from statewarden.targets import DEFAULT_PROFILE, gateway_unit_for, profile_for_db, target_for_db

pytestmark = pytest.mark.process

PATHS = [
    "state.db",
    "profiles/coder/state.db",
    "/h/profiles/coder//state.db",
    "/h/profiles/coder/./state.db",
    "/h/profiles/coder/sub/../state.db",
    "./profiles/./coder/state.db",
    "profiles/state.db",
    "/profiles/coder/state.db",
    "/h/profiles/coder/extra/state.db",
    "/h/x/profiles/y/",
    "/",
    "~/profiles/p/state.db",
]


@pytest.mark.parametrize("db", PATHS)
def test_profile_for_db_is_pathlibs_rule(db: str) -> None:
    """The profile of a --db path is what the pathlib rule gave: the home's name when the
    home sits in a `profiles` folder, else `default`; and target_for_db agrees."""
    home = Path(os.path.expanduser(db)).parent
    expected = home.name if home.parent.name == "profiles" else DEFAULT_PROFILE
    assert profile_for_db(db) == expected
    assert target_for_db(db).name == expected


def test_sidecar_name_is_sidecar_as_a_string(tmp_path: Path) -> None:
    """sidecar_name gives the same file as sidecar, for a str and for a Path."""
    db = tmp_path / "state.db"
    for suffix in ("", "-wal", "-shm", "-journal"):
        assert sidecar_name(db, suffix) == str(sidecar(db, suffix))
        assert sidecar_name(str(db), suffix) == str(sidecar(str(db), suffix))


@pytest.mark.parametrize("name", ["state.db", "a b#c?d%e.db", "ümlaut ☃.db", "semi;colon&x=1.db"])
def test_uri_for_quotes_as_urllib_did(tmp_path: Path, name: str) -> None:
    """For a UTF-8 name, the URI is the one urllib.parse.quote gave, and it opens the file."""
    db = tmp_path / name
    with apsw.Connection(str(db)) as conn:
        conn.execute("CREATE TABLE t(x); INSERT INTO t VALUES (7)")
    assert uri_for(db, mode="ro") == f"file:{urllib.parse.quote(str(db))}?mode=ro"
    conn = open_readonly(db)
    try:
        assert conn.execute("SELECT x FROM t").fetchall() == [(7,)]
    finally:
        conn.close()


def test_a_name_that_is_not_utf8_opens(tmp_path: Path) -> None:
    """A folder whose name is not UTF-8 (bytes 0xff 0xfe): urllib.parse.quote raised
    UnicodeEncodeError on it; the URI now carries the bytes as they are on disk."""
    folder = os.path.join(os.fsencode(tmp_path), b"h\xff\xfe")
    os.mkdir(folder)
    db = os.fsdecode(os.path.join(folder, b"state.db"))
    with pytest.raises(UnicodeEncodeError):
        urllib.parse.quote(db)
    made = tmp_path / "made.db"  # apsw takes no such name itself; the URI is plain ASCII
    with apsw.Connection(str(made)) as conn:
        conn.execute("CREATE TABLE t(x); INSERT INTO t VALUES ('kept')")
    os.rename(made, db)
    assert "%FF%FE" in uri_for(db)
    assert wal_sidecars_absent(db)
    conn = open_readonly(db, immutable=True)
    try:
        assert conn.execute("SELECT x FROM t").fetchall() == [("kept",)]
    finally:
        conn.close()


def odd_home(tmp_path: Path) -> Path:
    """A Hermes home (Hermes' own writer) in a folder named with the bytes 0xff 0xfe."""
    home = make_home(tmp_path / "hermes", TINY)
    odd = os.path.join(os.fsencode(tmp_path), b"h\xff\xfe")
    os.rename(os.fsencode(home), odd)
    return Path(os.fsdecode(odd))


def ctl(*args: str, home: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "HOME": str(home.parent), "XDG_CONFIG_HOME": str(home.parent / "c")}
    env.pop("STATEWARDEN_CONFIG", None)
    env.pop("STATEWARDEN_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-c", "from statewarden.cli.quick import main; main()", *args],
        capture_output=True,
        env=env,
        check=False,
        timeout=300,
    )


def test_holders_and_status_on_a_home_whose_path_is_not_utf8(tmp_path: Path) -> None:
    """`holders --db` with Hermes' writer holding a database under a non-UTF-8 folder name
    lists the writer (its kind read from the heartbeats, through a file: URI), and `status`
    reports it: both failed with 'unexpected UnicodeEncodeError' (the URI quoting, and the
    gateway unit's hash of the home's path, now of its bytes)."""
    home = odd_home(tmp_path)
    db = str(home / "state.db")
    with holding(home) as writer:
        held = ctl("holders", "--db", db, "--no-systemd", home=home)
    assert held.returncode == 0, held.stderr
    assert f"\n{writer.pid} ".encode() in held.stdout
    status = ctl("status", "--db", db, "--json", home=home)
    assert status.returncode == 0, status.stderr
    assert b"UnicodeEncodeError" not in status.stderr


def test_gateway_unit_hashes_the_homes_bytes(tmp_path: Path) -> None:
    """Hermes' rule (sha256 of str(path).encode()) for a UTF-8 home; the path's bytes for
    one that is not UTF-8, which Hermes cannot hash."""
    plain = tmp_path / "plain"
    plain.mkdir()
    want = hashlib.sha256(str(plain.resolve()).encode()).hexdigest()[:8]
    assert gateway_unit_for(plain) == f"hermes-gateway-{want}.service"
    odd = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"o\xff")))
    os.mkdir(odd)
    raw = hashlib.sha256(os.fsencode(odd.resolve())).hexdigest()[:8]
    assert gateway_unit_for(odd) == f"hermes-gateway-{raw}.service"


def test_recover_into_a_folder_whose_name_is_not_utf8_is_a_usage_error(tmp_path: Path) -> None:
    """SQLite cannot be given such a file name by apsw: one line, exit 2, nothing left
    in the folder, the source unchanged."""
    home = odd_home(tmp_path)
    db = home / "state.db"
    before = sorted(os.listdir(home))
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    r = ctl("recover", "--source", str(db), "--output", str(home / "out.db"), home=home)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.decode(errors="replace").strip().splitlines()
    assert len(lines) == 1, lines
    assert "not valid UTF-8" in lines[0]
    assert "Traceback" not in lines[0]
    assert sorted(os.listdir(home)) == before
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
