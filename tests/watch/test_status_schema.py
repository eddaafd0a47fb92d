"""`statewardenctl status` names Hermes' schema_version, and says when it is newer than the
newest statewarden knows and what is then not verified."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from lab.hermes_fixtures import NEWEST, TINY, AnySpec, make_home
from statewarden.watch.status import NEWEST_KNOWN_SCHEMA
from tests.support.cli import run_ctl


def status(db: Path, *args: str) -> str:
    r = run_ctl("status", "--db", str(db), *args)
    assert r.exit_code == 0, r.stderr
    return r.stdout


def bump_schema(db: Path, version: int) -> None:
    """What the next Hermes release would do: its own schema_version row, raised."""
    conn = apsw.Connection(str(db))
    try:
        conn.execute("UPDATE schema_version SET version = ?", (version,))
    finally:
        conn.close()


@pytest.mark.parametrize(("spec", "version"), [(TINY, 22), (NEWEST, NEWEST_KNOWN_SCHEMA)])
def test_known_schema_is_named_without_a_note(tmp_path: Path, spec: AnySpec, version: int) -> None:
    """A file written by Hermes 0.19.0 (22) or by the newest Hermes installed (0.22, the
    newest schema statewarden knows: this test holds NEWEST_KNOWN_SCHEMA to what that Hermes
    really writes) is named with its version and no note."""
    db = make_home(tmp_path / "h", spec) / "state.db"
    [st] = json.loads(status(db, "--json"))["databases"]
    assert (st["schema_version"], st["schema_note"]) == (version, None)
    assert f"  schema_version  {version}\n" in status(db)


def test_newer_schema_says_what_is_not_verified(tmp_path: Path) -> None:
    """A schema_version past the newest known is named with a note saying statewarden does
    not know it and that its rules, check, recover and maintenance are not verified on it,
    in the text and in --json."""
    db = make_home(tmp_path / "h", NEWEST) / "state.db"
    bump_schema(db, NEWEST_KNOWN_SCHEMA + 1)
    [st] = json.loads(status(db, "--json"))["databases"]
    assert st["schema_version"] == NEWEST_KNOWN_SCHEMA + 1
    note = st["schema_note"]
    assert note.startswith(f"newer than statewarden knows ({NEWEST_KNOWN_SCHEMA})")
    assert "not verified" in note
    assert f"  schema_version  {NEWEST_KNOWN_SCHEMA + 1} ({note})\n" in status(db)
