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
from tests.support.daemon import DaemonProc, daemon_env
from tests.support.waiting import wait_for

pytestmark = pytest.mark.process


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


def test_the_daemon_opens_one_info_incident_for_a_newer_schema(tmp_path: Path) -> None:
    """A real daemon on a 0.22 home raised to schema 32: one schema_newer incident (info)
    saying what is not verified; lowered back, it is resolved."""
    home = make_home(tmp_path / "h", NEWEST)
    bump_schema(home / "state.db", NEWEST_KNOWN_SCHEMA + 1)
    env = daemon_env(tmp_path, home)
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps({"watch": {"verify_interval": "1h"}, "discovery": {"rescan_interval": "1s"}})
    )
    env["STATEWARDEN_CONFIG"] = str(config)
    d = DaemonProc(env)
    try:
        d.wait_for_line("statewarden ready")
        (inc,) = wait_for(lambda: d.incidents_of("schema_newer"), what="schema_newer")
        assert inc["severity"] == "info"
        assert f"newer than statewarden knows ({NEWEST_KNOWN_SCHEMA})" in inc["summary"]
        bump_schema(home / "state.db", NEWEST_KNOWN_SCHEMA)
        wait_for(
            lambda: all(i["state"] == "resolved" for i in d.incidents_of("schema_newer")),
            what="schema_newer resolved",
            timeout_s=120,
        )
    finally:
        d.stop()
