"""``maintenance --apply-captures``: the rows Hermes' retired WAL captures hold that the
live file lost (above its sqlite_sequence) come back through a maintenance run, each
listed with its capture; a row deleted since never does; a capture of another database
is refused and named, a ``.partial`` one named as not used, both left where they are;
the captures used end in the run's quarantine folder; a killed run resumed applies
nothing twice. Real Hermes files (``lab/hermes_fixtures``), real captures as
``tests/recovery/test_captures.py`` makes them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab.hermes_fixtures import SMALL, TINY, built_db, hermes_python, writer_env
from statewarden.maintenance.swap import list_quarantine
from tests.support.captures import CAPTURE, capture_of, image_and_wal
from tests.support.cli import run_ctl
from tests.support.fake_hermes import install_fake_hermes
from tests.support.maintenance import maintenance_config, report_of, rows, run_maintenance
from tests.support.mount_namespace import sh_in_private_mounts
from tests.support.privileges import needs_root

FOREIGN = "state.db.retired-wal-20261130-230000-43"
PARTIAL = "state.db.retired-wal-20261130-233000-44.partial"
LOST = 5  # messages the capture's WAL committed that the live file never got


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return maintenance_config(tmp_path, monkeypatch)


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def quarantine(tmp_path: Path) -> Path:
    return list_quarantine(tmp_path / "xdg-state" / "statewarden")[0].path


class Home:
    """A Hermes home whose live file lost the last ``LOST`` messages a capture beside it
    holds, and deleted one message (id ``deleted``, at or below its sequence) since."""

    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.db = self.home / "state.db"
        shutil.copyfile(built_db(SMALL), self.db)
        image, wal = image_and_wal(self.db, tmp_path, new_messages=LOST)
        capture_of(self.home, image, wal)
        self.capture = self.home / CAPTURE
        self.expected = capture_rows(self.capture, "SELECT * FROM messages ORDER BY id")
        conn = apsw.Connection(str(self.db))
        [(self.deleted,)] = conn.execute("SELECT min(id) FROM messages").fetchall()
        with conn:  # as Hermes deletes one: its session counts one fewer
            conn.execute(
                "UPDATE sessions SET message_count = message_count - 1 WHERE id ="
                " (SELECT session_id FROM messages WHERE id = ?)",
                (self.deleted,),
            )
            conn.execute("DELETE FROM messages WHERE id = ?", (self.deleted,))
        [(self.sequence,)] = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'")
        conn.close()
        self.lost = [r for r in self.expected if r[0] > self.sequence]
        assert len(self.lost) == LOST

    def messages(self) -> list[tuple[Any, ...]]:
        return rows(self.db, "SELECT * FROM messages NOT INDEXED ORDER BY id")


def capture_rows(capture: Path, sql: str) -> list[tuple[Any, ...]]:
    """``sql`` on a copy of the capture's image with its WAL replayed (as Hermes would
    read it)."""
    work = capture.parent.parent / f"read-{capture.name}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    shutil.copyfile(capture / "state.db", work / "state.db")
    shutil.copyfile(capture / "state.db-wal", work / "state.db-wal")
    conn = apsw.Connection(str(work / "state.db"))
    try:
        return [tuple(r) for r in conn.execute(sql)]
    finally:
        conn.close()
        shutil.rmtree(work)


def foreign_and_partial(tmp_path: Path, home: Path) -> None:
    """Beside the database: a capture of another Hermes database, and a capture Hermes
    was still writing (``.partial``)."""
    for name in ("foreign", "partial"):
        (tmp_path / name).mkdir()
    image, wal = image_and_wal(built_db(TINY), tmp_path / "foreign", new_messages=3)
    capture_of(home, image, wal, name=FOREIGN)
    image, wal = image_and_wal(home / "state.db", tmp_path / "partial", new_messages=2)
    capture_of(home, image, wal, name=PARTIAL)


def apply(db: Path, *extra: str, env: dict[str, str] | None = None) -> Any:
    return run_maintenance("--db", str(db), "--apply-captures", "--yes", "--json", *extra, env=env)


def assert_applied_once(h: Home) -> None:
    """Every lost message is in the live file once, as the capture has it; the message
    deleted since is not; every other message as it was; check is clean and the search
    index finds the messages brought back."""
    got = h.messages()
    kept = [r for r in h.expected if r[0] <= h.sequence and r[0] != h.deleted]
    assert got == kept + h.lost
    assert h.deleted not in {r[0] for r in got}
    fts = rows(h.db, "SELECT count(*) FROM messages_fts WHERE rowid > ?", (h.sequence,))
    assert fts == [(LOST,)]
    assert run_ctl("check", "--db", str(h.db)).exit_code == 0


def test_lost_writes_come_back_listed_and_the_capture_ends_in_quarantine(
    tmp_path: Path, config: Path
) -> None:
    """The 5 messages only the capture holds
    come back, each listed with the capture; the message deleted since does not; the
    capture of another database is refused and named, the ``.partial`` one named as not
    used, both left beside state.db byte for byte; the capture used is in the run's
    quarantine folder, whole."""
    h = Home(tmp_path)
    foreign_and_partial(tmp_path, h.home)
    left = {n: digest(h.home / n) for n in (FOREIGN, PARTIAL)}
    used = digest(h.capture)
    proc = apply(h.db)
    assert proc.returncode == 0, proc.stderr
    rep = report_of(proc)
    assert rep["outcome"] == "applied"
    cap = rep["captures"]
    assert cap["rows"] == [{"capture": CAPTURE, "table": "messages", "rowid": r[0]} for r in h.lost]
    verdicts = {c["name"]: c["verdict"] for c in cap["captures"]}
    assert verdicts[CAPTURE] == "of this database"
    assert verdicts[FOREIGN].startswith("refused: not of this database (")
    assert verdicts[PARTIAL].startswith("not used: an interrupted")
    assert cap["proven"] == cap["quarantined"] == [CAPTURE]
    assert_applied_once(h)
    assert not h.capture.exists()
    assert digest(quarantine(tmp_path) / "captures" / CAPTURE) == used
    assert {n: digest(h.home / n) for n in (FOREIGN, PARTIAL)} == left
    text = run_maintenance("--db", str(h.db), "--apply-captures", "--dry-run")
    assert text.returncode == 0, text.stderr
    assert "refused: not of this database (" in text.stdout


def test_the_dry_run_lists_what_would_come_in_and_changes_nothing(
    tmp_path: Path, config: Path
) -> None:
    """--dry-run: the rows that would come in, each with its capture, and the foreign
    capture refused; the home (live file and every capture) unchanged, nothing in
    quarantine."""
    h = Home(tmp_path)
    foreign_and_partial(tmp_path, h.home)
    before = digest(h.home)
    proc = apply(h.db, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    rep = report_of(proc)
    assert rep["outcome"] == "dry run: nothing done"
    assert [r["rowid"] for r in rep["captures"]["rows"]] == [r[0] for r in h.lost]
    assert digest(h.home) == before
    assert list_quarantine(tmp_path / "xdg-state" / "statewarden") == []
    text = run_maintenance("--db", str(h.db), "--apply-captures", "--dry-run")
    first, last = h.lost[0][0], h.lost[-1][0]
    assert f"    brought in: messages rowids {first}-{last} from {CAPTURE}" in text.stdout


def test_a_row_whose_session_the_live_file_lacks_is_left_out_and_named(
    tmp_path: Path, config: Path
) -> None:
    """The capture's WAL also holds a session the live file does not have, with a
    message of it above the sequence: that session may have been deleted since, so the
    message is left out and named, and with nothing else to bring in the run ends before
    anything is stopped, the home as it was."""
    h = Home(tmp_path)
    shutil.rmtree(h.capture)
    base = tmp_path / "base.db"
    shutil.copyfile(h.db, base)
    conn = apsw.Connection(str(base))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    image = base.read_bytes()
    conn.execute("PRAGMA wal_autocheckpoint=0")
    with conn:
        conn.execute(
            "INSERT INTO sessions (id, source, started_at) VALUES ('gone-session', 'cli', 1.0)"
        )
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES ('gone-session', 'user', 'hello', 2.0)"
        )
    wal = Path(f"{base}-wal").read_bytes()
    conn.close()
    capture_of(h.home, image, wal)
    before = digest(h.home)
    proc = apply(h.db)
    assert proc.returncode == 0, proc.stderr
    rep = report_of(proc)
    assert rep["outcome"] == "nothing to apply"
    assert digest(h.home) == before
    (out,) = rep["captures"]["left_out"]
    assert (out["table"], out["capture"]) == ("messages", CAPTURE)
    assert "sessions row gone-session is not in the live file" in out["why"]
    assert rows(h.db, "SELECT count(*) FROM messages WHERE session_id = 'gone-session'") == [(0,)]
    assert rows(h.db, "SELECT count(*) FROM sessions WHERE id = 'gone-session'") == [(0,)]


CRASH_STEPS = ["prebuild", "fence", "settle", "swap", "original-kept", "swapped", "captures"]


@pytest.mark.parametrize("step", CRASH_STEPS)
def test_a_killed_run_is_resumed_and_nothing_is_applied_twice(
    tmp_path: Path, config: Path, step: str
) -> None:
    """kill -9 right after a step: --resume rolls the run back (before the swap: the
    file and the capture as they were) or forward (from the swap on: applied once, the
    capture in quarantine); the run after that applies the rest or finds nothing, and
    every lost message is there exactly once."""
    h = Home(tmp_path)
    before, capture = hashlib.sha256(h.db.read_bytes()).hexdigest(), digest(h.capture)
    env = {**os.environ, "STATEWARDEN_CRASH_AT": step}
    crashed = run_maintenance("--db", str(h.db), "--apply-captures", "--yes", env=env)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    resumed = run_maintenance("--db", str(h.db), "--resume", "--json")
    rep = report_of(resumed)
    forward = CRASH_STEPS.index(step) >= CRASH_STEPS.index("swap")
    if forward:
        assert resumed.returncode == 0, resumed.stderr
        assert rep["outcome"] == "applied"
        assert rep["captures"]["quarantined"] == [CAPTURE]
        assert_applied_once(h)
        assert not h.capture.exists()
        assert digest(quarantine(tmp_path) / "captures" / CAPTURE) == capture
    else:
        assert resumed.returncode == 1, resumed.stderr
        assert rep["outcome"] == "rolled back: the database is unchanged"
        assert hashlib.sha256(h.db.read_bytes()).hexdigest() == before
        assert digest(h.capture) == capture
    assert not list(h.home.glob(".statewarden-*"))
    final = apply(h.db)
    assert final.returncode == 0, final.stderr
    assert report_of(final)["outcome"] == ("nothing to apply" if forward else "applied")
    assert_applied_once(h)


def test_bad_combinations_are_one_line_usage_errors(tmp_path: Path, config: Path) -> None:
    """--apply-captures with --merge-from, --action or --resume: exit 2, one line, nothing
    changed."""
    h = Home(tmp_path)
    before = digest(h.home)
    for extra in (["--merge-from", str(h.db)], ["--action", "vacuum"], ["--resume"]):
        proc = run_maintenance("--db", str(h.db), "--apply-captures", *extra)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
        assert "--apply-captures is an action of its own" in proc.stderr
    assert digest(h.home) == before


def test_a_lost_message_whose_id_hermes_gave_out_again_is_named_not_brought_in(
    tmp_path: Path, config: Path
) -> None:
    """After the loss, real Hermes (its own SessionDB) writes one message into the live
    file: AUTOINCREMENT gives it the first lost message's id again. That lost message is
    named as given out again and not brought in (the live file's message stays as it
    is); the other four, above the new sequence, come back."""
    h = Home(tmp_path)
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir, python=hermes_python())
    hermes = subprocess.Popen(
        [str(bin_dir / "hermes"), "dashboard"],
        env=writer_env(h.home),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert hermes.stdout is not None
    assert hermes.stdout.readline().strip() == "ready"
    hermes.terminate()
    assert hermes.wait(timeout=60) == 0
    hermes.stdout.close()
    reused = h.lost[0][0]
    (live,) = rows(h.db, "SELECT * FROM messages WHERE id = ?", (reused,))
    assert live != h.lost[0]  # Hermes' own new message at the lost one's id
    proc = apply(h.db)
    assert proc.returncode == 0, proc.stderr
    cap = report_of(proc)["captures"]
    assert [r["rowid"] for r in cap["rows"]] == [r[0] for r in h.lost[1:]]
    (out,) = cap["left_out"]
    assert (out["rowid"], out["table"]) == (reused, "messages")
    assert out["why"].startswith("the live file gave its rowid to another row since")
    assert rows(h.db, "SELECT * FROM messages WHERE id = ?", (reused,)) == [live]
    got = {r[0]: r for r in h.messages()}
    assert [got[r[0]] for r in h.lost[1:]] == h.lost[1:]
    assert run_ctl("check", "--db", str(h.db)).exit_code == 0


@needs_root
def test_a_quarantine_on_another_filesystem_gets_the_capture_whole(
    tmp_path: Path, config: Path
) -> None:
    """The state dir on a tmpfs of its own (a private mount namespace): the capture
    cannot be renamed there, so it is copied whole under a temporary name, renamed,
    and only then removed from beside state.db; what lands in quarantine is the
    capture byte for byte, with no temporary name left."""
    h = Home(tmp_path)
    capture = digest(h.capture)
    state = tmp_path / "xdg-state"
    state.mkdir(exist_ok=True)
    kept = tmp_path / "kept"
    out = tmp_path / "report.json"
    script = (
        f"mount -t tmpfs -o size=256m tmpfs {state} && "
        f"{sys.executable} -m statewarden.cli.ctl maintenance --db {h.db} --apply-captures"
        f" --yes --json > {out}; echo rc=$?; cp -a {state}/statewarden/quarantine {kept}"
    )
    proc = sh_in_private_mounts(script, env={**os.environ, "XDG_STATE_HOME": str(state)})
    assert proc.stdout.splitlines() == ["rc=0"], proc.stdout + proc.stderr
    rep = json.loads(out.read_text())
    assert rep["outcome"] == "applied"
    assert "copied into quarantine" in " ".join(rep["notes"])  # another filesystem
    (entry,) = kept.iterdir()
    assert sorted(os.listdir(entry / "captures")) == [CAPTURE]
    assert digest(entry / "captures" / CAPTURE) == capture
    assert not h.capture.exists()
    assert_applied_once(h)


def test_a_pre_update_backup_is_applied_and_moved_with_its_wal(
    tmp_path: Path, config: Path
) -> None:
    """The Desktop updater's backup (``state.db.pre-update-emergency-<ts>.bak`` and its
    ``-wal``) holds the 5 lost messages, partly in its WAL: they come back, listed with
    the backup, and the backup moves to quarantine together with its ``-wal``."""
    h = Home(tmp_path)
    image = (h.capture / "state.db").read_bytes()
    wal = (h.capture / "state.db-wal").read_bytes()
    shutil.rmtree(h.capture)
    backup = h.home / "state.db.pre-update-emergency-20261130T220000.bak"
    backup.write_bytes(image)
    Path(f"{backup}-wal").write_bytes(wal)
    proc = apply(h.db)
    assert proc.returncode == 0, proc.stderr
    cap = report_of(proc)["captures"]
    # Its -wal is part of it, read with it: never listed as a backup of its own.
    assert [(c["name"], c["verdict"]) for c in cap["captures"]] == [
        (backup.name, "of this database")
    ]
    assert {r["capture"] for r in cap["rows"]} == {backup.name}
    assert [r["rowid"] for r in cap["rows"]] == [r[0] for r in h.lost]
    assert_applied_once(h)
    moved = sorted(os.listdir(quarantine(tmp_path) / "captures"))
    assert moved == [backup.name, f"{backup.name}-wal"]
    assert not backup.exists()
    assert not Path(f"{backup}-wal").exists()
