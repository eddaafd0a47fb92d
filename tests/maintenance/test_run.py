"""statewardenctl maintenance on real parts: real Hermes writers holding a damaged file,
real signals, a respawner, another uid, kill -9 mid-run then --resume, a planted
symlink, a full disk (a small tmpfs in a private mount namespace)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lab.corruption import phantom_row, zeroed_leaf
from lab.hermes_fixtures import SMALL, TINY, make_home, writer_env
from statewarden.holders.scan import HolderScanner
from statewarden.maintenance.ledger import run_dir
from tests.support.cli import ctl_process
from tests.support.fake_hermes import PIDFILE_ENV, install_fake_hermes
from tests.support.maintenance import (
    FakeHermes,
    ctl,
    exempt_comms,
    integrity,
    ledger_of,
    maintenance_config,
    phantom_home_for_nobody,
    report_of,
    rows,
    run_maintenance,
    session_ids,
)
from tests.support.mount_namespace import sh_in_private_mounts
from tests.support.privileges import SETPRIV, needs_root
from tests.support.repo import REPO

WAIT_S = 60.0


def maintenance_beside(
    fake_bin: Path, home: Path, command: str, *args: str
) -> tuple[subprocess.CompletedProcess[str], bool, int]:
    """``statewardenctl maintenance ARGS`` while ``hermes COMMAND`` runs on ``home``:
    the run, whether that Hermes was still alive when it ended, and its pid (it is
    stopped since)."""
    w = FakeHermes(fake_bin, home, command)
    try:
        proc = ctl(*args)
        alive = w.proc.poll() is None
    finally:
        w.stop()
    return proc, alive, w.pid


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return maintenance_config(tmp_path, monkeypatch)


@pytest.fixture
def short_grace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The config with the shortest ``stop_grace`` it takes (1 s): for holders that ignore
    SIGTERM, whose tests wait the grace out and prove what follows it (SIGKILL, to all of
    them together), not its length."""
    return maintenance_config(tmp_path, monkeypatch, stop_grace="1s")


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    return bin_dir


@pytest.fixture
def phantom(tmp_path: Path) -> tuple[Path, list[str]]:
    """A Hermes home whose sessions table has a phantom row; and the distinct ids before."""
    case = phantom_row(tmp_path / "home", SMALL)
    before = session_ids(case.db)
    assert len(before) == len(set(before)) + 1  # the phantom: one row stored twice
    return case.db, sorted(set(before))


class TestRepair:
    def test_phantom_row_repaired_with_writers_holding_it(
        self, config: Path, phantom: tuple[Path, list[str]], fake_bin: Path
    ) -> None:
        """Two Hermes processes write to the damaged file; maintenance stops both, swaps in
        a file with exactly the distinct sessions and every message, keeps the original."""
        db, distinct = phantom
        messages_before = rows(db, "SELECT count(*) FROM messages NOT INDEXED")[0][0]
        writers = [
            FakeHermes(fake_bin, db.parent, "dashboard"),
            FakeHermes(fake_bin, db.parent, "serve"),
        ]
        try:
            proc = ctl("--db", str(db), "--yes", "--json")
        finally:
            codes = [w.proc.poll() for w in writers]
            for w in writers:
                w.stop()
        assert proc.returncode == 0, proc.stderr
        rep = report_of(proc)
        assert rep["outcome"] == "repaired"
        assert codes == [0, 0]  # both exited on SIGTERM, cleanly
        assert sorted(p["pid"] for p in rep["start_again"]) == sorted(w.pid for w in writers)
        ids = session_ids(db)
        assert len(ids) == len(set(ids))  # no phantom left
        assert set(distinct) <= set(ids)
        assert len(ids) == len(distinct) + 2  # plus one session per writer
        assert rows(db, "SELECT count(*) FROM messages NOT INDEXED")[0][0] > messages_before
        assert integrity(db) == "ok"
        assert rep["recover"]["tables"]["sessions"]["duplicates_dropped"] == 1
        assert rep["recover"]["loss_detected"] is False
        assert rep["post_check"]["ok"] is True
        assert stat.S_IMODE(db.stat().st_mode) == 0o644
        # The original is in quarantine with its checksum, never deleted.
        q = Path(rep["quarantine"])
        manifest = json.loads((q / "manifest.json").read_text())
        assert set(manifest["files"]) >= {"state.db"}
        kept = session_ids(q / "state.db")
        assert len(kept) == len(distinct) + 3  # the damaged original: phantom, and both writers
        assert not list(db.parent.glob(".statewarden-*"))
        steps = [e["step"] for e in ledger_of(db)]
        assert steps[0] == "begin"
        assert steps[-1] == "finished"
        assert steps.index("prebuild") < steps.index("signal") < steps.index("fence")
        assert steps.index("fence") < steps.index("swap") < steps.index("swapped")

    def test_healthy_database_stops_nothing(
        self, config: Path, tmp_path: Path, fake_bin: Path
    ) -> None:
        """A healthy file is checked while Hermes runs; nothing is stopped or swapped."""
        home = make_home(tmp_path / "home", TINY)
        ino = (home / "state.db").stat().st_ino
        proc, alive, _ = maintenance_beside(
            fake_bin, home, "dashboard", "--db", str(home / "state.db"), "--yes", "--json"
        )
        assert proc.returncode == 0, proc.stderr
        assert report_of(proc)["outcome"] == "healthy: nothing to repair"
        assert alive
        assert (home / "state.db").stat().st_ino == ino
        assert not list(home.glob(".statewarden-*"))

    def test_dry_run_prints_the_plan_and_stops(
        self, config: Path, phantom: tuple[Path, list[str]], fake_bin: Path
    ) -> None:
        """--dry-run prints how each holder would be stopped, does nothing, and the holder keeps
        running."""
        db, _ = phantom
        proc, alive, pid = maintenance_beside(
            fake_bin, db.parent, "serve", "--db", str(db), "--dry-run"
        )
        assert proc.returncode == 0, proc.stderr
        assert f"pid {pid} serve (hermes serve): SIGTERM, then SIGKILL" in proc.stderr
        assert "dry run: nothing done" in proc.stdout
        assert alive

    def test_interactive_cli_is_refused_without_force(
        self, config: Path, phantom: tuple[Path, list[str]], fake_bin: Path
    ) -> None:
        """The user's own `hermes chat` is not killed unless they say so: exit 5."""
        db, _ = phantom
        proc, alive, _ = maintenance_beside(fake_bin, db.parent, "chat", "--db", str(db), "--yes")
        assert proc.returncode == 5, proc.stderr
        assert "the user's interactive Hermes (cli)" in proc.stdout
        assert alive

    def test_loss_stops_before_anything_is_stopped(self, config: Path, tmp_path: Path) -> None:
        """A repair that would lose rows is not swapped without --accept-loss: exit 3."""
        case = zeroed_leaf(tmp_path / "home")
        before = case.db.read_bytes()
        proc = ctl("--db", str(case.db), "--yes", "--json")
        assert proc.returncode == 3, proc.stderr
        rep = report_of(proc)
        assert rep["outcome"] == "stopped: the repair would lose rows"
        assert case.db.read_bytes() == before
        proc = ctl("--db", str(case.db), "--yes", "--json", "--accept-loss")
        assert proc.returncode == 3, proc.stderr
        assert report_of(proc)["outcome"] == "repaired"
        assert integrity(case.db) == "ok"


class TestRefusals:
    def test_planted_symlink_is_refused(self, config: Path, tmp_path: Path) -> None:
        """state.db as a symlink: nothing is fenced or replaced through it."""
        home = make_home(tmp_path / "home", TINY)
        real = tmp_path / "elsewhere.db"
        os.replace(home / "state.db", real)
        (home / "state.db").symlink_to(real)
        mode = stat.S_IMODE(real.stat().st_mode)
        proc = ctl("--db", str(home / "state.db"), "--yes")
        assert proc.returncode == 1
        assert "is a symlink; refusing" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert (home / "state.db").is_symlink()
        assert stat.S_IMODE(real.stat().st_mode) == mode

    @needs_root
    def test_holder_of_another_uid_is_never_signalled(
        self, config: Path, phantom: tuple[Path, list[str]]
    ) -> None:
        """Even with --force: exit 5, the other uid's process keeps running."""
        db, _ = phantom
        holder = subprocess.Popen(
            [
                "sh",
                "-c",
                f'exec 3<"{db}"; exec setpriv --reuid 65534 --regid 65534 --clear-groups sleep 300',
            ],
        )
        try:
            deadline = time.monotonic() + WAIT_S
            while holder.pid not in {h.pid for h in HolderScanner([db]).scan()[0].holders}:
                assert time.monotonic() < deadline, "the other uid's holder never showed up"
                time.sleep(0.05)
            proc = ctl("--db", str(db), "--yes", "--force")
            alive = holder.poll() is None
        finally:
            holder.kill()
            holder.wait()
        assert proc.returncode == 5, proc.stderr
        assert "runs as uid 65534, not 0: only its owner can stop it" in proc.stdout
        assert alive

    def test_unfinished_run_blocks_a_new_one(
        self, config: Path, phantom: tuple[Path, list[str]]
    ) -> None:
        """After a run killed with SIGKILL mid-way, a new run is refused (exit 5, as the
        help says of a run not finished) and points at --resume."""
        db, _ = phantom
        env = {**os.environ, "STATEWARDEN_CRASH_AT": "prebuild"}
        assert ctl("--db", str(db), "--yes", env=env).returncode == -signal.SIGKILL
        proc = ctl("--db", str(db), "--yes")
        assert proc.returncode == 5
        assert "an earlier maintenance run did not finish" in proc.stderr
        assert "--resume" in proc.stderr


class TestRespawn:
    def test_a_respawned_serve_isolated_aborts_and_rolls_back(
        self, config: Path, phantom: tuple[Path, list[str]], fake_bin: Path, tmp_path: Path
    ) -> None:
        """The desktop app's serve --isolated keeps coming back; as root the fence cannot
        stop it, so after the limit the run aborts, names it, and restores everything
        (or, if a slow respawn misses the settle scans, wins with no stale holder)."""
        db, distinct = phantom
        pidfile = tmp_path / "serve.pid"
        env = {**writer_env(db.parent), PIDFILE_ENV: str(pidfile)}
        respawner = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "tests" / "support" / "respawner.py"),
                str(fake_bin / "hermes"),
                "serve",
                "--isolated",
            ],
            env=env,
        )
        try:
            deadline = time.monotonic() + WAIT_S
            while not pidfile.exists():
                assert time.monotonic() < deadline
                time.sleep(0.05)
            ino = db.stat().st_ino
            proc = ctl("--db", str(db), "--yes", "--json")
        finally:
            respawner.send_signal(signal.SIGTERM)
            respawner.wait(timeout=WAIT_S)
        rep = report_of(proc)
        if proc.returncode == 0:
            # It beat the respawner (a slow respawn under load missed the settle scans):
            # then nothing may hold the old file.
            assert rep["outcome"] == "repaired"
            assert rep["post_check"]["stale_holders"] == []
            assert set(distinct) <= set(session_ids(db))
            return
        assert proc.returncode == 1, proc.stderr
        assert rep["outcome"] == "rolled back: the database is unchanged"
        # Named, whether it came back during the settle scans or during the catch-up.
        assert "hermes serve --isolated" in rep["message"]
        # Once per command, and not for the user to start: its respawner did.
        (again,) = rep["start_again"]
        assert again["command"] == "hermes serve --isolated"
        assert again["running_again"] == int(pidfile.read_text())
        if "came back" in rep["message"]:
            assert "hermes serve --isolated came back 3 times" in rep["message"]
            assert "parent chain:" in rep["message"]
        assert db.stat().st_ino == ino
        assert stat.S_IMODE(db.stat().st_mode) == 0o644
        assert set(distinct) <= set(session_ids(db))
        assert not list(db.parent.glob(".statewarden-*"))


CRASH_STEPS = [
    "prebuild",
    "signal",
    "fence",
    "settle",
    "verify-source",
    "catch-up",
    "swap",
    "sidecars-moved",
    "original-kept",
    "renamed",
    "swapped",
    "post-check",
]


class TestCrash:
    @pytest.mark.parametrize("step", CRASH_STEPS)
    def test_kill_9_then_resume(
        self, step: str, config: Path, phantom: tuple[Path, list[str]], fake_bin: Path
    ) -> None:
        """kill -9 right after a step is in the ledger; --resume rolls back (before the
        swap) or forward (from the swap on). state.db is always there and readable, no
        readable row is lost, and nothing of ours is left next to it."""
        db, distinct = phantom
        # Writing often: the source changes after the pre-build, so the catch-up runs.
        w = FakeHermes(fake_bin, db.parent, "dashboard", write_every=0.1)
        try:
            env = {**os.environ, "STATEWARDEN_CRASH_AT": step}
            crashed = ctl("--db", str(db), "--yes", env=env)
            assert crashed.returncode == -signal.SIGKILL, crashed.stderr
            assert db.exists()
            resumed = ctl("--db", str(db), "--resume", "--json")
            never_stopped = w.proc.poll() is None
        finally:
            w.stop()
        rep = report_of(resumed)
        # A Hermes the run never got to stop is said to run still, never to be started
        # by hand a second time.
        for again in rep["start_again"]:
            assert (again["running_again"] == w.pid) == never_stopped, (step, again)
        forward = CRASH_STEPS.index(step) >= CRASH_STEPS.index("swap")
        if forward:
            assert resumed.returncode == 0, resumed.stderr
            assert rep["outcome"] == "repaired"
            ids = session_ids(db)
            assert len(ids) == len(set(ids))
        else:
            assert resumed.returncode == 1, resumed.stderr
            assert rep["outcome"] == "rolled back: the database is unchanged"
        assert stat.S_IMODE(db.stat().st_mode) == 0o644
        assert set(distinct) <= set(session_ids(db))
        assert not list(db.parent.glob(".statewarden-new-*"))
        assert ledger_of(db)[-1]["step"] == "finished"
        again = ctl("--db", str(db), "--resume", "--json")
        assert report_of(again)["outcome"] == "nothing to resume"


@needs_root
class TestFullDisk:
    def test_no_room_for_the_prebuild_stops_nothing(
        self, config: Path, fake_bin: Path, tmp_path: Path
    ) -> None:
        """A tmpfs with room for the database but not for the new file: the run ends
        before anything is stopped, with one line; the database is untouched."""
        src = make_home(tmp_path / "src", SMALL) / "state.db"
        size = src.stat().st_size
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        script = (
            f"mount -t tmpfs -o size={size + size // 2} tmpfs {mnt} && mkdir {mnt}/home && "
            f"cp {src} {mnt}/home/state.db && "
            f"{sys.executable} -m statewarden.cli.ctl maintenance --db {mnt}/home/state.db"
            f" --yes --json; echo rc=$?; sha256sum {src} {mnt}/home/state.db; ls -a {mnt}/home"
        )
        proc = sh_in_private_mounts(script)
        assert "rc=1" in proc.stdout, proc.stdout + proc.stderr
        assert "not enough free space" in proc.stdout
        sums = {
            line.split()[0]
            for line in proc.stdout.splitlines()
            if "state.db" in line and len(line.split()[0]) == 64
        }
        assert len(sums) == 1  # unchanged
        assert ".statewarden" not in proc.stdout.split("rc=1")[1]
        assert "Traceback" not in proc.stderr

    def test_disk_fills_during_the_prebuild(self, config: Path, tmp_path: Path) -> None:
        """Space enough, but too few inodes for the new file's work folder (it once ran
        out of them while the new file was written): said before the build, one line,
        exit 1, nothing stopped, nothing of ours left behind."""
        src = make_home(tmp_path / "src", TINY) / "state.db"
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        script = (
            f"mount -t tmpfs -o size=200M,nr_inodes=9 tmpfs {mnt} && mkdir {mnt}/home && "
            f"cp {src} {mnt}/home/state.db && "
            f"{sys.executable} -m statewarden.cli.ctl maintenance --db {mnt}/home/state.db"
            f" --yes; echo rc=$?; ls -a {mnt}/home; cmp {src} {mnt}/home/state.db && echo same"
        )
        proc = sh_in_private_mounts(script)
        out = proc.stdout + proc.stderr
        assert "Traceback" not in out
        assert "failed before stopping anything" in proc.stdout, out
        assert "not enough free inodes" in proc.stdout
        assert "rc=1" in proc.stdout
        after = proc.stdout.split("rc=1")[1]
        assert ".statewarden" not in after
        assert "same" in after


def test_resume_without_a_run(config: Path, tmp_path: Path) -> None:
    """--resume with no unfinished run exits 0 with the outcome "nothing to resume"."""
    home = make_home(tmp_path / "home", TINY)
    proc = ctl("--db", str(home / "state.db"), "--resume", "--json")
    assert proc.returncode == 0
    assert report_of(proc)["outcome"] == "nothing to resume"


def test_bad_action_is_a_usage_error(config: Path, tmp_path: Path) -> None:
    """An unknown --action is a usage error (exit 2) without a traceback."""
    home = make_home(tmp_path / "home", TINY)
    proc = ctl("--db", str(home / "state.db"), "--action", "defrag")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_several_databases_need_a_choice(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With several profiles and neither --db nor --profile, maintenance is a usage error (exit 2)
    asking for one."""
    home = make_home(tmp_path / "hermes", TINY, profiles=("work",))
    monkeypatch.setenv("HERMES_HOME", str(home))
    proc = ctl("--yes")
    assert proc.returncode == 2
    assert "choose one with --db or --profile" in proc.stderr


def test_vacuum_and_journal_mode(config: Path, tmp_path: Path) -> None:
    """Other actions swap in a compacted copy; journal-mode=delete converts the file."""
    home = make_home(tmp_path / "home", TINY)
    db = home / "state.db"
    ids = session_ids(db)
    proc = ctl("--db", str(db), "--yes", "--json", "--action", "journal-mode=delete")
    assert proc.returncode == 0, proc.stderr
    assert report_of(proc)["outcome"] == "swapped"
    assert any("does not pin database.journal_mode: delete" in n for n in report_of(proc)["notes"])
    assert rows(db, "PRAGMA journal_mode")[0][0] == "delete"
    assert session_ids(db) == ids
    proc = ctl("--db", str(db), "--yes", "--json", "--action", "checkpoint")
    assert proc.returncode == 0, proc.stderr
    assert report_of(proc)["outcome"] == "checkpointed"
    proc = ctl("--db", str(db), "--yes", "--json", "--action", "check")
    assert proc.returncode == 0, proc.stderr
    assert shutil.which("sh")


NS_SCRIPT = """\
set -u
export HERMES_HOME="$BASE/home" XDG_STATE_HOME="$BASE/state" HOME="$BASE"
FAKE_HERMES_PIDFILE="$BASE/serve.pid" "$PY" "$REPO/tests/support/respawner.py" "$BASE/bin/hermes" \\
    serve --isolated &
respawner=$!
i=0; while [ ! -s "$BASE/serve.pid" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
first=$(cat "$BASE/serve.pid")
cd "$REPO"
"$PY" -m statewarden.cli.ctl maintenance --db "$BASE/home/state.db" --yes --json \\
    > "$BASE/report.json" 2> "$BASE/stderr.txt"
echo $? > "$BASE/rc"
echo "$first" > "$BASE/first.pid"
kill -TERM $respawner; wait $respawner
"""


@needs_root
class TestUnprivileged:
    def test_the_fence_beats_a_respawner_of_the_same_uid(self, tmp_path: Path) -> None:
        """As a normal user, in a PID namespace of its own (so the scan is complete), the
        respawned serve --isolated cannot open the fenced file: the run settles, swaps
        and the database is repaired; the serve that came back fails to open it."""
        base = Path(tempfile.mkdtemp(prefix="statewarden-maint-"))
        try:
            case, env = phantom_home_for_nobody(base, stop_grace="3s")
            distinct = sorted(set(session_ids(case.db)))
            proc = subprocess.run(
                [
                    "unshare",
                    "--pid",
                    "--fork",
                    "--mount-proc",
                    *SETPRIV,
                    "sh",
                    "-c",
                    NS_SCRIPT,
                ],
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=300,
            )
            rc = (base / "rc").read_text().strip()
            stderr = (base / "stderr.txt").read_text()
            assert rc == "0", f"{proc.stderr}\n{stderr}\n{(base / 'report.json').read_text()}"
            rep = json.loads((base / "report.json").read_text())
            assert rep["outcome"] == "repaired"
            assert rep["start_again"][0]["command"] == "hermes serve --isolated"
            ids = session_ids(case.db)
            assert len(ids) == len(set(ids))
            assert set(distinct) <= set(ids)
            assert integrity(case.db) == "ok"
            assert case.db.stat().st_uid == 65534
            assert stat.S_IMODE(case.db.stat().st_mode) == 0o644
        finally:
            shutil.rmtree(base, ignore_errors=True)

    def test_a_home_this_user_cannot_write_says_so(self, tmp_path: Path) -> None:
        """As the database's owner (uid 65534), the Hermes home read-only: the run
        stops nothing (exit 1, one line), and the line says the user must be let
        write there, not that space is short."""
        base = Path(tempfile.mkdtemp(prefix="statewarden-maint-"))
        try:
            case, env = phantom_home_for_nobody(base, stop_grace="3s")
            case.db.parent.chmod(0o555)
            proc = run_maintenance(
                "--db",
                str(case.db),
                "--yes",
                env={**env, "XDG_STATE_HOME": str(base / "state"), "HOME": str(base)},
                prefix=SETPRIV,
            )
            assert proc.returncode == 1, proc.stdout + proc.stderr
            assert "Traceback" not in proc.stderr
            assert "Permission denied" in proc.stdout + proc.stderr
            assert "let this user write there" in proc.stdout + proc.stderr
            assert "free some space" not in proc.stdout + proc.stderr
        finally:
            shutil.rmtree(base, ignore_errors=True)

    def test_a_run_killed_with_the_file_fenced_is_taken_up_by_its_owner(
        self, tmp_path: Path
    ) -> None:
        """As the database's owner (uid 65534): a run killed with SIGKILL after the fence
        leaves state.db at mode 000, which the owner may not open. The next run is
        refused as a run that did not finish (exit 5, pointing at --resume), not as a
        file it may not read, and --resume as the owner rolls the run back: the mode
        as it was, the rows as they were."""
        base = Path(tempfile.mkdtemp(prefix="statewarden-maint-"))
        try:
            case, env = phantom_home_for_nobody(base, stop_grace="3s")
            mode = stat.S_IMODE(case.db.stat().st_mode)
            distinct = sorted(set(session_ids(case.db)))
            env = {**env, "XDG_STATE_HOME": str(base / "state"), "HOME": str(base)}

            def as_owner(*args: str, crash: str = "") -> subprocess.CompletedProcess[str]:
                extra = {"STATEWARDEN_CRASH_AT": crash} if crash else {}
                command = ["--db", str(case.db), "--yes", "--here", *args]
                return run_maintenance(*command, env={**env, **extra}, prefix=SETPRIV)

            assert as_owner(crash="settle").returncode == -signal.SIGKILL
            assert stat.S_IMODE(case.db.stat().st_mode) == 0
            again = as_owner()
            assert again.returncode == 5, again.stdout + again.stderr
            assert "an earlier maintenance run did not finish" in again.stderr
            assert "--resume" in again.stderr
            resumed = as_owner("--resume")
            assert resumed.returncode == 1, resumed.stdout + resumed.stderr  # rolled back
            assert stat.S_IMODE(case.db.stat().st_mode) == mode
            assert sorted(set(session_ids(case.db))) == distinct
        finally:
            shutil.rmtree(base, ignore_errors=True)


def test_quarantine_list_and_restore(config: Path, phantom: tuple[Path, list[str]]) -> None:
    """A repaired file's original is listed, and restoring it swaps it back in (the
    repaired file goes to quarantine in turn): the phantom is back, nothing deleted."""
    db, distinct = phantom
    rep = report_of(ctl("--db", str(db), "--yes", "--json"))
    assert rep["outcome"] == "repaired"
    listed = ctl_process("quarantine", "list", "--json")
    listed.check_returncode()
    entries = json.loads(listed.stdout)["quarantine"]
    assert [e["name"] for e in entries] == [Path(rep["quarantine"]).name]
    assert entries[0]["db"] == str(db)
    restored = ctl_process("quarantine", "restore", entries[0]["name"], "--yes", "--json")
    # The original was damaged, and the post-check says so: exit 1, but swapped back.
    assert restored.returncode == 1, restored.stderr
    back = report_of(restored)
    assert back["outcome"] == "swapped"
    assert "the post-check failed: integrity FAILED" in back["message"]
    ids = session_ids(db)
    assert len(ids) == len(distinct) + 1  # the original again, phantom row and all
    listed = ctl_process("quarantine", "list", "--json")
    listed.check_returncode()
    assert len(json.loads(listed.stdout)["quarantine"]) == 2


def test_a_writer_too_busy_for_a_prebuild(
    config: Path, phantom: tuple[Path, list[str]], fake_bin: Path
) -> None:
    """A writer that changes the file during every copy attempt: the new file is built
    after the stop instead, and the run still repairs."""
    db, distinct = phantom
    w = FakeHermes(fake_bin, db.parent, "dashboard", write_every=0.005)
    try:
        proc = ctl("--db", str(db), "--yes", "--json")
    finally:
        w.stop()
    assert proc.returncode == 0, proc.stderr
    rep = report_of(proc)
    assert rep["outcome"] == "repaired"
    ids = session_ids(db)
    assert len(ids) == len(set(ids))
    assert set(distinct) <= set(ids)
    if any("no pre-build while Hermes ran" in n for n in rep["notes"]):
        assert rep["path"].startswith("recovered offline")


class TestSnapshots:
    def test_take_and_list(self, config: Path, tmp_path: Path, fake_bin: Path) -> None:
        """A verified copy of a live, written-to database; listed; retention keeps N."""
        home = make_home(tmp_path / "home", SMALL)
        w = FakeHermes(fake_bin, home, "dashboard", write_every=0.05)
        try:
            for _ in range(4):  # one more than snapshots_keep
                r = ctl_process("snapshots", "take", "--db", str(home / "state.db"), "--json")
                assert r.returncode == 0, r.stderr
        finally:
            w.stop()
        snap = json.loads(r.stdout)["snapshots"][0]
        assert snap["integrity"] == "ok"
        assert snap["sessions"] == SMALL.sessions + 1  # plus the writer's own session
        assert integrity(Path(snap["path"])) == "ok"
        listed = ctl_process("snapshots", "--json")
        listed.check_returncode()
        assert len(json.loads(listed.stdout)["snapshots"]) == 3

    def test_a_damaged_file_gives_no_snapshot(
        self, config: Path, phantom: tuple[Path, list[str]]
    ) -> None:
        """``snapshots take`` on a damaged file fails its check (exit 1, no traceback) and keeps no
        copy."""
        db, _ = phantom
        r = ctl_process("snapshots", "take", "--db", str(db))
        assert r.returncode == 1
        assert "the snapshot failed its check (base damage" in r.stderr
        assert "Traceback" not in r.stderr
        state = Path(os.environ["XDG_STATE_HOME"]) / "statewarden" / "snapshots"
        assert [p.name for p in state.iterdir()] == [".lock"]  # no copy kept


def test_a_holder_that_ignores_sigterm_is_killed(
    short_grace: Path, phantom: tuple[Path, list[str]]
) -> None:
    """SIGTERM ignored: SIGKILL after maintenance.stop_grace, and the run goes on."""
    db, distinct = phantom
    holder = subprocess.Popen(["sh", "-c", f'trap "" TERM; exec 3<"{db}"; exec sleep 300'])
    try:
        deadline = time.monotonic() + WAIT_S
        while holder.pid not in {h.pid for h in HolderScanner([db]).scan()[0].holders}:
            assert time.monotonic() < deadline, "the holder never showed up"
            time.sleep(0.05)
        proc = ctl("--db", str(db), "--yes", "--force", "--json")
    finally:
        if holder.poll() is None:
            holder.kill()
        code = holder.wait()
    assert proc.returncode == 0, proc.stderr
    rep = report_of(proc)
    assert rep["outcome"] == "repaired"
    assert code == -signal.SIGKILL
    assert [p["pid"] for p in rep["start_again"]] == [holder.pid]
    assert set(distinct) <= set(session_ids(db))


# ------------------------------------------------------------------ field defects


def _work_folder_with_lock(folder: Path) -> bool:
    return any(
        n.startswith(".statewarden-work-") and os.path.exists(folder / n / ".lock")
        for n in os.listdir(folder)
    )


class TestLeftovers:
    @pytest.mark.parametrize("step", ["prebuild", "catch-up"])
    def test_work_folder_of_a_killed_step_is_removed_by_resume(
        self, step: str, config: Path, phantom: tuple[Path, list[str]], fake_bin: Path
    ) -> None:
        """kill -9 while a step's work folder (a whole copy of the database) is next to
        it: the pre-build's ``.statewarden-work-*`` or the catch-up's
        ``.statewarden-catch-up-*``. Neither ``--resume`` nor a later run used to remove
        them; now ``--resume`` does, and says so."""
        db, distinct = phantom
        w = FakeHermes(fake_bin, db.parent, "dashboard", write_every=0.1)
        try:
            env = dict(os.environ)
            if step == "catch-up":
                env["STATEWARDEN_CRASH_AT"] = "catch-up-copied"
            run = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "statewarden.cli.ctl",
                    "maintenance",
                    "--db",
                    str(db),
                    "--yes",
                ],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if step == "prebuild":
                while run.poll() is None and not _work_folder_with_lock(db.parent):
                    pass
                run.kill()
            assert run.wait(timeout=300) == -signal.SIGKILL
            left = sorted(n for n in os.listdir(db.parent) if n.startswith(".statewarden-"))
            prefix = ".statewarden-work-" if step == "prebuild" else ".statewarden-catch-up-"
            assert any(n.startswith(prefix) for n in left), left
            resumed = ctl("--db", str(db), "--resume", "--json")
        finally:
            w.stop()
        rep = report_of(resumed)
        assert rep["outcome"] == "rolled back: the database is unchanged", resumed.stderr
        assert [n for n in os.listdir(db.parent) if n.startswith(".statewarden-")] == []
        removed = [n for n in rep["notes"] if n.startswith("removed the work folder")]
        assert any(prefix in n for n in removed), rep["notes"]
        assert set(distinct) <= set(session_ids(db))


STUBBORN = """
import os, signal, sys, time
log, db = sys.argv[1], sys.argv[2]
held = os.open(db, os.O_RDONLY)
def on_term(*_):
    # Ignore SIGTERM; note it, then note once the other one got its SIGTERM too.
    with open(log, "a") as f:
        f.write(f"term {os.getpid()}\\n")
    while open(log).read().count("term ") < 2:
        time.sleep(0.01)
    with open(log, "a") as f:
        f.write(f"saw-both {os.getpid()}\\n")
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def test_holders_that_ignore_sigterm_are_stopped_together(tmp_path: Path) -> None:
    """Two holders that ignore SIGTERM used to be waited for one after the other (two
    grace periods): the first was SIGKILLed before the second got its SIGTERM. Now both
    get SIGTERM, one grace period, then SIGKILL; each process saw the other's SIGTERM
    before it was killed (told by the processes themselves, not by timing)."""
    from statewarden.maintenance.quiesce import Settler

    db = make_home(tmp_path / "home", TINY) / "state.db"
    log = tmp_path / "signals.log"
    argv = [sys.executable, "-c", STUBBORN, str(log), str(db)]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    signalled: list[int] = []
    scanner = HolderScanner([db], exempt_comms=exempt_comms())
    try:
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready"
        result = Settler(
            scanner=scanner,
            settle_s=0.3,
            timeout_s=60,
            respawn_limit=2,
            grace_s=1.0,  # the shortest maintenance.stop_grace; waited out whole
            force=True,
            stop_interactive=True,
            on_signal=lambda d: signalled.append(d.pid),
            on_unit=lambda u: None,
            unit_timeout_s=5,
            address="unix:path=/nonexistent",
        ).run()
    finally:
        scanner.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()
    assert result.ok, result.reason
    assert sorted(signalled) == sorted(p.pid for p in procs)
    assert [p.returncode for p in procs] == [-signal.SIGKILL] * 2
    assert sorted(log.read_text().splitlines()) == sorted(
        [f"saw-both {p.pid}" for p in procs] + [f"term {p.pid}" for p in procs]
    )


@pytest.mark.parametrize("how", [(), ("--resume",), ("--dry-run",)], ids=" ".join)
def test_a_racing_run_is_named_by_its_pid(
    config: Path, tmp_path: Path, how: tuple[str, ...]
) -> None:
    """Two runs racing: the second used to say "pid ?" when the first had its lock but
    had not written its pid yet. The kernel's lock table names it. Refused, exit 5, as
    the help says of a run in progress (it was 1), for a run, a resume and a dry run."""
    import fcntl

    from statewarden.atomic import private_dir

    db = make_home(tmp_path / "home", TINY) / "state.db"
    folder = private_dir(run_dir(Path(os.environ["XDG_STATE_HOME"]) / "statewarden", db))
    fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # locked, no pid written yet
        proc = ctl("--db", str(db), "--yes", *how)
    finally:
        os.close(fd)
    assert proc.returncode == 5, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "statewardenctl: error: another maintenance run is in progress on this database"
        f" (pid {os.getpid()}) (wait for it to finish)"
    ]


def test_maintenance_folders_are_0700(config: Path, tmp_path: Path) -> None:
    """The README says 0700; ``<state dir>/maintenance`` was made 0755 (only the run
    folder inside it was 0700). Both are 0700 now, and an older 0755 one is tightened."""
    db = make_home(tmp_path / "home", TINY) / "state.db"
    state = Path(os.environ["XDG_STATE_HOME"]) / "statewarden"
    for older in (False, True):
        if older:
            shutil.rmtree(state)
            (state / "maintenance").mkdir(parents=True)
            (state / "maintenance").chmod(0o755)
        proc = ctl("--db", str(db), "--action", "check")
        assert proc.returncode == 0, proc.stderr
        assert stat.S_IMODE((state / "maintenance").stat().st_mode) == 0o700
        assert stat.S_IMODE(run_dir(state, db).stat().st_mode) == 0o700


def test_a_resumed_vacuum_is_told_as_a_swap(config: Path, tmp_path: Path) -> None:
    """A ``vacuum`` killed during the swap and rolled forward by ``--resume`` used to be
    reported as "repaired" (the resume took the default action for the outcome)."""
    db = make_home(tmp_path / "home", SMALL) / "state.db"
    env = {**os.environ, "STATEWARDEN_CRASH_AT": "swap"}
    crashed = ctl("--db", str(db), "--action", "vacuum", "--yes", env=env)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    resumed = ctl("--db", str(db), "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    rep = report_of(resumed)
    assert (rep["action"], rep["outcome"]) == ("vacuum", "swapped")


def test_the_next_run_removes_catch_up_folders_left_by_killed_runs(
    config: Path, tmp_path: Path
) -> None:
    """A catch-up folder an older version left (``mkdtemp``'s random name) and one of this
    database's runs are removed by the next run; another database's is left alone. So
    are work folders of a run killed while it set them up (found by the fault suite:
    kill -9 between the folder and its lock), empty or with a lock nobody holds; one
    whose lock is held (being set up now) stays."""
    import fcntl

    from statewarden.maintenance.ledger import db_digest

    db = make_home(tmp_path / "home", TINY) / "state.db"
    old = db.parent / ".statewarden-catch-up-k3j4h5g6"
    mine = db.parent / f".statewarden-catch-up-{db_digest(db)}-20261201T000000Z-abcdef"
    other = db.parent / f".statewarden-catch-up-{db_digest(db.parent / 'x.db')}-20261201T0Z-1"
    for folder in (old, mine, other):
        folder.mkdir(mode=0o700)
        (folder / "state.db").write_bytes(db.read_bytes())
    empty, unheld, held = (db.parent / f".statewarden-work-{n}" for n in ("a1", "b2", "c3"))
    for folder in (empty, unheld, held):
        folder.mkdir(mode=0o700)
    (unheld / ".lock.new").touch()
    fd = os.open(held / ".lock.new", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        proc = ctl("--db", str(db), "--action", "check", "--json")
    finally:
        os.close(fd)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in db.parent.glob(".statewarden-*")) == [other.name, held.name]
    notes = report_of(proc)["notes"]
    for folder in (old, mine, empty, unheld):
        assert f"removed the work folder of a killed run: {folder}" in notes, notes


def test_a_run_stops_holders_that_ignore_sigterm_together(
    short_grace: Path, tmp_path: Path
) -> None:
    """The run's own stop of the planned holders (before the settle): two that ignore
    SIGTERM each saw the other's SIGTERM before either was killed."""
    db = make_home(tmp_path / "home", TINY) / "state.db"
    log = tmp_path / "signals.log"
    argv = [sys.executable, "-c", STUBBORN, str(log), str(db)]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready"
        proc = ctl("--db", str(db), "--action", "checkpoint", "--yes", "--force", "--json")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            if p.stdout is not None:
                p.stdout.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report_of(proc)["outcome"] == "checkpointed"
    assert [p.returncode for p in procs] == [-signal.SIGKILL] * 2
    assert sorted(log.read_text().splitlines()) == sorted(
        [f"saw-both {p.pid}" for p in procs] + [f"term {p.pid}" for p in procs]
    )
