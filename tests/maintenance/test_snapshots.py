"""Verified snapshots (maintenance/snapshots.py) on real files: taken online from a
read-only connection while a real Hermes writer commits, the source's bytes untouched,
each copy passing ``check`` before it counts, retention by count and age, and the one
a maintenance run takes right before it stops anything."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.corruption import phantom_row, wal_commits
from lab.hermes_fixtures import SMALL, TINY, make_home, writer_env
from statewarden.errors import DatabaseError
from statewarden.maintenance.snapshots import (
    list_snapshots,
    newest_of,
    prune_snapshots,
    snapshots_dir,
    take_snapshot,
)
from tests.support.fake_hermes import LOG_ENV, WRITE_EVERY_ENV, install_fake_hermes
from tests.support.maintenance import (
    FakeHermes,
    ctl,
    integrity,
    maintenance_config,
    report_of,
    rows,
)
from tests.support.mount_namespace import sh_in_private_mounts
from tests.support.privileges import needs_root
from tests.support.repo import REPO


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return maintenance_config(tmp_path, monkeypatch)


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    return bin_dir


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_of(db: Path) -> dict[str, tuple[str, int, int]]:
    """Content, size and mtime of the database and its -wal (what a checkpoint changes)."""
    out = {}
    for p in (db, Path(f"{db}-wal")):
        if p.exists():
            st = p.stat()
            out[p.name] = (digest(p), st.st_size, st.st_mtime_ns)
    return out


class TestOnline:
    def test_a_writer_keeps_committing_during_the_snapshot(
        self, tmp_path: Path, fake_bin: Path
    ) -> None:
        """A real SessionDB writer commits every 5 ms: its commits land while the snapshot
        is taken (none waits for it), it reports no error, and the copy passes check."""
        home = make_home(tmp_path / "home", SMALL)
        log = tmp_path / "commits.log"
        env = writer_env(home)
        env.update({WRITE_EVERY_ENV: "0.005", LOG_ENV: str(log)})
        proc = subprocess.Popen(
            [str(fake_bin / "hermes"), "dashboard"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            while not log.exists() or len(log.read_text().splitlines()) < 5:
                time.sleep(0.01)
            before = len(log.read_text().splitlines())
            snap = take_snapshot(home / "state.db", tmp_path / "state", "default", keep=3)
            during = len(log.read_text().splitlines()) - before
            assert proc.poll() is None, "the writer died during the snapshot"
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        assert during > 0, "no commit landed while the snapshot was taken"
        assert err == "", err
        assert snap.verified
        assert snap.check == "none"
        assert integrity(Path(snap.path)) == "ok"
        # A consistent copy: at least the sessions the writer had when it began.
        assert snap.sessions == SMALL.sessions + 1

    def test_the_source_bundle_is_not_written(self, tmp_path: Path) -> None:
        """A database whose last 60 commits are still in its -wal (Hermes killed): the
        snapshot has every committed row, and state.db and -wal keep their bytes, size
        and mtime: nothing was checkpointed, reset or truncated."""
        case = wal_commits(tmp_path / "home")
        before = files_of(case.db)
        assert Path(f"{case.db}-wal").stat().st_size > 0
        snap = take_snapshot(case.db, tmp_path / "state", "default", keep=3)
        assert files_of(case.db) == before
        want = rows(case.pristine, "SELECT count(*) FROM messages NOT INDEXED")
        assert rows(Path(snap.path), "SELECT count(*) FROM messages NOT INDEXED") == want


class TestVerified:
    def test_a_copy_that_fails_check_is_removed_and_said(self, tmp_path: Path) -> None:
        """A phantom row (integrity_check's own finding): the copy fails check, is
        removed, the error names the damage, and recover gets no snapshot."""
        case = phantom_row(tmp_path / "home", TINY)
        state = tmp_path / "state"
        with pytest.raises(DatabaseError) as err:
            take_snapshot(case.db, state, "default", keep=3)
        assert "the snapshot failed its check (base damage" in str(err.value)
        assert "never used" in str(err.value)
        assert sorted(p.name for p in snapshots_dir(state).iterdir()) == [".lock"]
        assert list_snapshots(state) == []
        assert newest_of(state, case.db) is None

    def test_recover_never_takes_a_snapshot_whose_check_failed(self, tmp_path: Path) -> None:
        """A listed snapshot whose recorded check verdict is not ``none`` (an older
        version's, edited) is not the one recover is given."""
        home = make_home(tmp_path / "home", TINY)
        state = tmp_path / "state"
        good = take_snapshot(home / "state.db", state, "default", keep=3)
        bad = take_snapshot(home / "state.db", state, "default", keep=3)
        meta = Path(bad.path).with_suffix(".json")
        meta.write_text(json.dumps({**json.loads(meta.read_text()), "check": "derived"}))
        newest = newest_of(state, home / "state.db")
        assert newest is not None
        assert newest.path == good.path

    def test_a_copy_left_by_a_killed_take_is_removed(self, tmp_path: Path) -> None:
        """A ``.db`` without its ``.json`` (a take killed half-way) was never kept: the
        next take removes it."""
        home = make_home(tmp_path / "home", TINY)
        state = tmp_path / "state"
        take_snapshot(home / "state.db", state, "default", keep=3)
        stray = snapshots_dir(state) / "default-19990101T000000000000Z.db"
        stray.write_bytes(b"half a copy")
        take_snapshot(home / "state.db", state, "default", keep=3)
        assert not stray.exists()
        assert len(list_snapshots(state)) == 2


class TestRetention:
    def test_count_and_age(self, tmp_path: Path) -> None:
        """Four kept, keep 3: the oldest goes; then max age: all but the newest go (the
        newest stays however old)."""
        home = make_home(tmp_path / "home", TINY)
        state = tmp_path / "state"
        taken = [take_snapshot(home / "state.db", state, "default", keep=3) for _ in range(4)]
        listed = [s.path for s in list_snapshots(state)]
        assert listed == [s.path for s in reversed(taken[1:])]
        assert not Path(taken[0].path).exists()
        removed = prune_snapshots(state, "default", 3, 3600.0, now=time.time() + 7200)
        assert sorted(removed) == sorted(listed[1:])
        assert [s.path for s in list_snapshots(state)] == [taken[-1].path]

    def test_other_profiles_are_left_alone(self, tmp_path: Path) -> None:
        """Retention counts per profile."""
        home = make_home(tmp_path / "home", TINY)
        state = tmp_path / "state"
        take_snapshot(home / "state.db", state, "work", keep=1)
        take_snapshot(home / "state.db", state, "default", keep=1)
        take_snapshot(home / "state.db", state, "default", keep=1)
        assert sorted(s.profile for s in list_snapshots(state)) == ["default", "work"]


class TestCommand:
    def test_list_json_and_text(self, tmp_path: Path) -> None:
        """``snapshots --json`` carries schema_version and each snapshot's check; the
        text line says the check passed."""
        home = make_home(tmp_path / "home", TINY)
        env = dict(os.environ)
        take = subprocess.run(
            [
                sys.executable,
                "-m",
                "statewarden.cli.ctl",
                "snapshots",
                "take",
                "--idle",
                "--db",
                str(home / "state.db"),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            check=False,
        )
        assert take.returncode == 0, take.stderr
        assert take.stdout.startswith("kept ")
        assert "check passed" in take.stdout
        listed = subprocess.run(
            [sys.executable, "-m", "statewarden.cli.ctl", "snapshots", "--json"],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            check=True,
        )
        doc = json.loads(listed.stdout)
        assert doc["schema_version"] == 1
        (snap,) = doc["snapshots"]
        assert snap["check"] == "none"
        assert snap["source"] == str(home / "state.db")
        text = subprocess.run(
            [sys.executable, "-m", "statewarden.cli.ctl", "snapshots"],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            check=True,
        )
        assert "  check passed  " in text.stdout


def test_a_run_takes_one_before_it_stops_anything(
    config: Path, tmp_path: Path, fake_bin: Path
) -> None:
    """``maintenance --action vacuum`` with a Hermes writer holding the file: a verified
    snapshot is taken right before the writer is stopped (its step precedes the first
    signal in the ledger order of the report), and is listed."""
    home = make_home(tmp_path / "home", SMALL)
    w = FakeHermes(fake_bin, home, "dashboard", write_every=0.05)
    try:
        proc = ctl("--db", str(home / "state.db"), "--action", "vacuum", "--yes", "--json")
    finally:
        w.stop()
    assert proc.returncode == 0, proc.stderr
    rep = report_of(proc)
    steps = [s["step"] for s in rep["steps"]]
    assert steps.index("snapshot") < steps.index("signal")
    (note,) = [n for n in rep["notes"] if n.startswith("snapshot before the stop: ")]
    path = note.removeprefix("snapshot before the stop: ")
    state = Path(os.environ["XDG_STATE_HOME"]) / "statewarden"
    assert [s.path for s in list_snapshots(state)] == [path]
    assert integrity(Path(path)) == "ok"


def test_kill_9_at_the_snapshot_step_then_resume(
    config: Path, tmp_path: Path, fake_bin: Path
) -> None:
    """kill -9 right after the run's ``snapshot`` step is in its ledger (nothing stopped
    yet): --resume rolls back, state.db is untouched and readable, and the holder was
    never signalled."""
    home = make_home(tmp_path / "home", SMALL)
    db = home / "state.db"
    w = FakeHermes(fake_bin, home, "dashboard", write_every=0.05)
    try:
        crashed = subprocess.run(
            [
                sys.executable,
                "-m",
                "statewarden.cli.ctl",
                "maintenance",
                "--db",
                str(db),
                "--action",
                "vacuum",
                "--yes",
            ],
            env={**os.environ, "STATEWARDEN_CRASH_AT": "snapshot"},
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert crashed.returncode == -9, crashed.stderr
        assert w.proc.poll() is None  # never signalled
        resumed = ctl("--db", str(db), "--resume", "--json")
    finally:
        w.stop()
    rep = report_of(resumed)
    assert rep["outcome"] == "rolled back: the database is unchanged"
    assert integrity(db) == "ok"
    assert oct(db.stat().st_mode & 0o777) == "0o644"
    assert not list(home.glob(".statewarden-*"))


@needs_root
@pytest.mark.parametrize("size", ["2M", "16M"])
def test_a_full_disk_keeps_no_half_snapshot(tmp_path: Path, size: str) -> None:
    """The state dir on a tmpfs too small for the copy (2M), or with room for the copy of
    the 10 MB file but not for the check's own work copy (16M), in a private mount
    namespace: ``snapshots take`` fails with one line (no traceback) saying there is no
    space, never that the live file is damaged, exit 1, and no ``.db`` or ``.json`` is
    left in the snapshots folder; the source is untouched."""
    home = make_home(tmp_path / "home", SMALL)
    db = home / "state.db"
    before = digest(db)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    script = (
        f'mount -t tmpfs -o size={size},mode=0700 tmpfs "{state}" && '
        f'"{sys.executable}" -m statewarden.cli.ctl snapshots take --db "{db}"; '
        f'echo "rc=$?"; ls -A "{state}/statewarden/snapshots"'
    )
    proc = sh_in_private_mounts(script, env={**os.environ, "XDG_STATE_HOME": str(state)})
    lines = proc.stdout.splitlines()
    assert lines[0] == "rc=1", proc.stderr
    assert lines[1:] == [".lock"]
    (err,) = proc.stderr.splitlines()
    assert err.startswith("statewardenctl: error: ")
    assert any(w in err for w in ("disk is full", "not enough free space")), err
    assert "damage" not in err, err
    assert "Traceback" not in proc.stderr
    assert digest(db) == before
