"""``statewardenctl captures``: what Hermes' retired WAL captures and pre-update backups
hold that the live file lacks (``recovery/captures.py``), read on private copies, each
counted only once it proves it is of this database; nothing is changed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw

from lab.hermes_fixtures import SMALL, TINY, built_db
from tests.support.captures import CAPTURE, capture_of, image_and_wal
from tests.support.cli import run_ctl
from tests.support.privileges import needs_root


def digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` by its SHA-256: what must not change."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def captures_json(db: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    code, out, err = run_ctl("captures", "--db", str(db), "--json", *extra)
    return code, json.loads(out) if out else {}, err


def live_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    shutil.copyfile(built_db(SMALL), home / "state.db")
    return home


def test_rows_only_a_capture_holds_are_counted_and_nothing_changes(tmp_path: Path) -> None:
    """A capture whose WAL committed 5 messages the live file never got (their ids are
    above its sqlite_sequence: lost writes), and a message the live file deleted since
    (at or below it: maybe deleted). Both counted in their table, the sessions table
    lacking nothing; the live file and the capture unchanged."""
    home = live_home(tmp_path)
    db = home / "state.db"
    image, wal = image_and_wal(db, tmp_path, new_messages=5)
    capture_of(home, image, wal)
    conn = apsw.Connection(str(db))
    [(gone,)] = conn.execute("SELECT min(id) FROM messages").fetchall()
    conn.execute("DELETE FROM messages WHERE id = ?", (gone,))
    [(sequence,)] = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'")
    conn.close()
    before = digest(home)
    code, doc, err = captures_json(db)
    assert (code, err) == (0, "")
    (d,) = doc["databases"]
    (c,) = d["captures"]
    assert (c["kind"], c["name"], c["verdict"], c["used"]) == (
        "retired WAL capture",
        CAPTURE,
        "of this database",
        True,
    )
    tables = {t["table"]: t for t in c["tables"]}
    m = tables["messages"]
    assert (m["lacking"], m["never_given_out"], m["sequence"]) == (6, 5, sequence)
    assert m["sample"][0] == gone
    assert tables["sessions"]["lacking"] == 0
    assert (c["lacking"], c["never_given_out"]) == (6, 5)
    assert digest(home) == before
    code, text, _ = run_ctl("captures", "--db", str(db))
    assert code == 0
    assert (
        f"    messages: 6 rows the live file lacks, 5 never given out there (above its"
        f" sqlite_sequence {sequence}): writes the live file lost; 1 may have been deleted"
        " since (nothing here tells which)"
    ) in text.splitlines()


def test_a_capture_of_another_database_is_refused_and_named(tmp_path: Path) -> None:
    """A capture of another Hermes database (a different home's file) beside this one: it
    proves nothing of this file (the messages both hold under one rowid belong to
    other sessions), so it is refused, named, and none of its rows is counted."""
    home = live_home(tmp_path)
    image, wal = image_and_wal(built_db(TINY), tmp_path, new_messages=3)
    capture_of(home, image, wal)
    code, doc, _ = captures_json(home / "state.db")
    assert code == 0
    (c,) = doc["databases"][0]["captures"]
    assert c["verdict"].startswith("refused: not of this database (")
    assert (c["used"], c["tables"], c["lacking"]) == (False, [], 0)


def test_unfinished_damaged_and_planted_copies_are_not_used(tmp_path: Path) -> None:
    """A capture Hermes was still writing (``.partial``), a backup that is no database,
    and a backup name planted as a symlink to a file the user may not read: the first
    two are named as not used, the symlink is neither listed nor followed."""
    home = live_home(tmp_path)
    db = home / "state.db"
    image, wal = image_and_wal(db, tmp_path, new_messages=2)
    capture_of(home, image, wal, name=CAPTURE + ".partial")
    (home / "state.db.pre-update-emergency-20261129.bak").write_bytes(b"not a database" * 100)
    secret = tmp_path / "secret.db"
    shutil.copyfile(built_db(SMALL), secret)
    os.chmod(secret, 0o600)
    os.symlink(secret, home / "state.db.pre-update-emergency-20261130.bak")
    code, doc, _ = captures_json(db)
    assert code == 0
    found = {c["name"]: c for c in doc["databases"][0]["captures"]}
    assert set(found) == {CAPTURE + ".partial", "state.db.pre-update-emergency-20261129.bak"}
    assert found[CAPTURE + ".partial"]["verdict"].startswith("not used: an interrupted")
    assert found["state.db.pre-update-emergency-20261129.bak"]["verdict"].startswith("not used")
    assert not any(c["used"] for c in found.values())


def test_none_beside_the_database_and_bad_paths(tmp_path: Path) -> None:
    """No capture: one line saying so, exit 0. A database path that does not exist, or a
    --work-dir that is a file: one line, exit 2, no traceback."""
    home = live_home(tmp_path)
    code, out, err = run_ctl("captures", "--db", str(home / "state.db"))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{home / 'state.db'}: no retired WAL capture or pre-update backup beside it"
    ]
    code, out, err = run_ctl("captures", "--db", str(tmp_path / "nothing" / "state.db"))
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
    image, wal = image_and_wal(home / "state.db", tmp_path, new_messages=1)
    capture_of(home, image, wal)
    (tmp_path / "a-file").write_text("x")
    code, out, err = run_ctl(
        "captures", "--db", str(home / "state.db"), "--work-dir", str(tmp_path / "a-file")
    )
    assert code == 2
    assert err.strip().endswith("not a directory (--work-dir)")
    assert "Traceback" not in err


@needs_root
def test_no_room_for_the_private_copies_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """A --work-dir on a full 1 MiB tmpfs (a private mount namespace): one line naming the
    folder and the room needed, exit 1, nothing left there, the live file and the capture
    unchanged."""
    home = live_home(tmp_path)
    image, wal = image_and_wal(home / "state.db", tmp_path, new_messages=1)
    capture_of(home, image, wal)
    before = digest(home)
    work = tmp_path / "work"
    work.mkdir()
    script = (
        f"mount -t tmpfs -o size=1m tmpfs {work} && "
        f"{sys.executable} -m statewarden.cli.ctl captures --db {home / 'state.db'}"
        f" --work-dir {work}; echo rc=$?; ls -A {work}"
    )
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.stdout.splitlines() == ["rc=1"], proc.stdout + proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"statewardenctl: error: {work}: not enough free space")
    assert digest(home) == before
