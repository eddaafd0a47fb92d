"""Paths made without pathlib: a database's profile, its sidecars' names, its URI.

``statewardenctl holders --db X`` names these as strings (pathlib and urllib cost it a
quarter of its CPU time next to ``fuser``); each must give what the pathlib and urllib
forms gave, and a file name that is not UTF-8 must open too.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import apsw
import pytest

from statewarden.sidecars import sidecar, sidecar_name
from statewarden.sqlite import open_readonly, uri_for, wal_sidecars_absent
from statewarden.targets import DEFAULT_PROFILE, profile_for_db, target_for_db

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
