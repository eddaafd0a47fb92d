"""The daemon verifies each database on its own (``daemon_verify``), and on request.

Real daemons on real Hermes-written databases; the damage is real bytes (a ``sessions``
row stored twice, planted with the file closed), found only by a check.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from statewarden.config_loading import parse_config
from statewarden.daemon.databases import WatchedDatabases
from statewarden.daemon.verify import (
    FAILED,
    HEALTHY,
    IDLE_NICE,
    IOPRIO_CLASS_IDLE,
    VERIFIED_FILE,
    Verifications,
    Verified,
    file_identity,
    in_idle_thread,
    io_class_of,
)
from statewarden.errors import EXIT_BASE_DAMAGE, EXIT_FAILED, EXIT_NO_DAEMON
from statewarden.incidents import Signal
from statewarden.logs import get_logger
from tests.support.cli import run_ctl
from tests.support.daemon import DaemonProc, configured, phantom_home


def test_the_worker_thread_runs_at_idle_cpu_and_io_priority() -> None:
    """The verification thread alone is lowered; the loop's thread keeps its priority."""
    me = threading.get_native_id()
    before = (os.getpriority(os.PRIO_PROCESS, me), io_class_of(me))

    def inside() -> tuple[int, int, int | None]:
        tid = threading.get_native_id()
        return tid, os.getpriority(os.PRIO_PROCESS, tid), io_class_of(tid)

    (tid, nice, io_class), priority, cpu_s = asyncio.run(in_idle_thread(inside))
    assert tid != me
    assert (nice, io_class) == (IDLE_NICE, IOPRIO_CLASS_IDLE)
    assert priority == "nice 19, idle I/O"
    assert cpu_s >= 0.0
    assert (os.getpriority(os.PRIO_PROCESS, me), io_class_of(me)) == before


def test_a_phantom_row_opens_a_corruption_incident_on_its_own(tmp_path: Path) -> None:
    """No log line, no request: the first verification finds the row stored twice."""
    home, rowid = phantom_home(tmp_path)
    d = DaemonProc(configured(tmp_path, home, verify_interval="1h"))
    try:
        d.wait_for_line("verification found damage")
        (inc,) = d.incidents_of("corruption")
        assert inc["severity"] == "critical"
        assert "verification found base damage" in inc["summary"]
        # The diagnosis first (what check leads with), the index error counts after it.
        assert inc["summary"].startswith("verification found base damage in state.db: sessions:")
        assert f"1 phantom duplicate, rowid {rowid}" in inc["summary"]
        assert f"1 phantom duplicate, rowid {rowid}" in inc["evidence"][0]
        assert "next step: statewardenctl maintenance --profile default" in inc["summary"]
        assert inc["evidence"][-1] == "next step: statewardenctl maintenance --profile default"
        (db,) = d.ctl("status")["databases"]
        assert db["verified"]["result"] == "base"
        assert db["verified"]["reason"] == "first"
        text = run_ctl("status", env=d.env).stdout
        assert "last verified" in text
        assert "base damage (first)" in text
        # Asked again: the same incident is updated, not a second one opened.
        r = run_ctl("verify", "--profile", "default", env=d.env)
        assert r.exit_code == EXIT_BASE_DAMAGE, r.stderr
        assert "result    base damage" in r.stdout
        assert [i["id"] for i in d.incidents_of("corruption")] == [inc["id"]]
    finally:
        d.stop()


def test_a_healthy_database_is_recorded_and_kept_across_a_restart(
    tmp_path: Path, hermes_home: Path
) -> None:
    """A healthy database is verified at start and on request; the record survives a restart within
    the interval (no new verification) and status shows it with no daemon running."""
    env = configured(tmp_path, hermes_home, verify_interval="1h")
    d = DaemonProc(env)
    try:
        d.wait_for_line("database verified healthy")
        (db,) = d.ctl("status")["databases"]
        first = db["verified"]
        assert (first["result"], first["reason"]) == ("none", "first")
        assert d.incidents_of("corruption") == []
        r = run_ctl("verify", "--json", env=env)
        assert r.exit_code == 0, r.stderr
        (again,) = json.loads(r.stdout)["databases"]
        assert (again["result"], again["reason"]) == ("none", "requested")
    finally:
        d.stop()
    # A restart within the interval does not verify again: the record is kept.
    d = DaemonProc(env)
    try:
        d.wait_for_line("statewarden ready")
        (db,) = d.ctl("status")["databases"]
        assert db["verified"]["reason"] == "requested"
        assert db["verified"]["at"] == again["at"]
    finally:
        d.stop()
    assert not any("verifying database" in line for line in d.output())
    # With no daemon running, status still shows the last verification on record.
    r = run_ctl("status", env=env)
    assert r.exit_code == 0, r.stderr
    assert "last verified" in r.stdout
    assert "healthy (requested)" in r.stdout
    (local,) = json.loads(run_ctl("status", "--json", env=env).stdout)["databases"]
    assert local["verified"]["at"] == again["at"]


def test_a_self_repair_makes_the_database_due(tmp_path: Path, hermes_home: Path) -> None:
    """A self-repair backup appearing next to the database makes it due for a verification at once,
    with the reason self_repair."""
    env = configured(tmp_path, hermes_home, verify_interval="1h")
    d = DaemonProc(env)
    try:
        d.wait_for_line("database verified healthy")
        (hermes_home / "state.db.malformed-backup-20260101_000000").write_bytes(b"x")
        line = d.wait_for_line("verifying database")
        assert "reason=self_repair" in line
        d.wait_for_line("database verified healthy")
    finally:
        d.stop()


def on_record(state: Path, key: str, record: str, now: float) -> None:
    """``verified.json`` holding what makes ``key`` due for ``record``: nothing (first), a
    healthy verification past the interval (scheduled), a failed one past the retry
    (retry), a recent one of another file (new file)."""
    if record == "first":
        return
    v = Verified(
        key,
        now - (60 if record == "new file" else 7200),
        FAILED if record == "retry" else HEALTHY,
        "scheduled",
        file="0:0" if record == "new file" else file_identity(Path(key)),
    )
    (state / VERIFIED_FILE).write_text(json.dumps({key: v.to_json()}))


async def ticks_through_one_verification(state: Path, record: str) -> dict[str, Any]:
    """The daemon's verification schedule on the real database: ticks (a few seconds
    apart) before the verification starts, while it waits for its turn and while it is
    under way (held at its copy by the lock every raw read of the daemon takes), after
    it, and after a self-repair. Returns what was due meanwhile and after, and the
    reasons of the verifications made, in order (each awaited: none is left running)."""
    config = parse_config(json.dumps({"watch": {"verify_interval": "1h"}}))
    databases = WatchedDatabases(config, lambda _found: None)
    databases.rescan()
    (key,) = databases.monitors
    now = time.time()
    on_record(state, key, record, now)
    v = Verifications(
        config=config,
        state_dir=state,
        databases=databases,
        handle=lambda _found: None,
        ran_since=lambda _db, _t: False,
        last_check={},
        log=get_logger(),
    )
    reasons = []

    async def finished() -> None:
        assert v.task is not None
        await v.task
        reasons.append(v.last[key].reason)

    with databases.source_reads:
        v.tick(now)
        assert v.task is not None
        v.tick(now + 2)  # started, not yet running
        while v.running != key and not v.task.done():
            await asyncio.sleep(0.01)
        v.tick(now + 4)  # running, held at its copy
        due_while_under_way = dict(v.due)
    await finished()
    v.tick(now + 6)
    due_after = dict(v.due)
    if not v.task.done():  # made again at once
        await finished()
    v.notice(Signal("self_repair", key, "Hermes repaired state.db", now + 7))
    v.tick(now + 8)
    await finished()
    return {"due while under way": due_while_under_way, "due after": due_after, "made": reasons}


@pytest.mark.parametrize("record", ["first", "scheduled", "retry", "new file"])
def test_a_verification_under_way_settles_what_made_the_database_due(
    tmp_path: Path, hermes_home: Path, record: str
) -> None:
    """A database is due (no verification on record, one past the interval, a failed one
    past the retry, one of another file) and its verification starts: the ticks made
    while it waits for its turn and while it runs see the old record, and do not make
    the database due again for it. After it the database is due for nothing; a
    self-repair then makes it due, and that verification's reason is self_repair.
    (Reading the old record, every verification longer than a tick was made twice, the
    second at once: a self-repair after a slow first verification was verified as
    "first".)"""
    state = tmp_path / "state"
    state.mkdir()
    assert asyncio.run(ticks_through_one_verification(state, record)) == {
        "due while under way": {},
        "due after": {},
        "made": [record, "self_repair"],
    }


def test_a_verification_past_its_time_limit_is_given_up(tmp_path: Path, hermes_home: Path) -> None:
    """A verification past watch.verify_timeout is given up: verify fails saying so, no corruption
    incident is opened and no work file is left."""
    env = configured(tmp_path, hermes_home, verify_interval="1h", verify_timeout="1ms")
    d = DaemonProc(env)
    try:
        d.wait_for_line("verification failed")
        r = run_ctl("verify", env=env)
        assert r.exit_code == EXIT_FAILED
        assert "failed: not finished within watch.verify_timeout" in r.stdout
        assert d.incidents_of("corruption") == []
        assert list((Path(env["XDG_STATE_HOME"]) / "statewarden" / "work").iterdir()) == []
    finally:
        d.stop()


def test_verify_without_a_daemon_is_one_line_and_exit_6(env: dict[str, str]) -> None:
    """verify with no daemon running is one error line and exit 6."""
    r = run_ctl("verify", env=env)
    assert r.exit_code == EXIT_NO_DAEMON
    assert r.stderr.count("\n") == 1
    assert "verify asks the daemon, and none runs" in r.stderr


def test_verify_names_what_it_cannot_find(daemon: DaemonProc) -> None:
    """verify --profile naming no watched database fails with one line listing the watched ones."""
    r = run_ctl("verify", "--profile", "nope", env=daemon.env)
    assert r.exit_code == EXIT_FAILED  # the daemon's answer: the message says why
    assert r.stderr.count("\n") == 1
    assert "no watched database 'nope' (watched: default" in r.stderr


def test_a_writer_too_busy_for_a_raw_copy_is_verified_through_the_backup_api(
    tmp_path: Path,
) -> None:
    """A real SessionDB writer commits every half millisecond on a 10 MB database and
    folds each commit into the file (a passive checkpoint; frames only appended to the
    -wal leave a raw copy consistent): a raw copy of the bundle is hardly ever
    consistent, so the verification checks a
    consistent copy taken through the backup API instead: a verdict (healthy), not a
    failed verification; the writer commits on throughout, and its -wal is not
    checkpointed by the daemon. A writer starved on a loaded machine can leave a raw copy
    consistent (ten verifications in a row were once raw under a full parallel suite), so
    verifications run until one is made through the backup API, for up to two minutes: each
    gives a verdict. The writer's errors go to a file, not a pipe nobody reads until the end
    (a full pipe would stop the writer, and with it the commits the test counts on)."""
    from lab.hermes_fixtures import SMALL, make_home
    from tests.support.fake_hermes import (
        CHECKPOINT_ENV,
        LOG_ENV,
        WRITE_EVERY_ENV,
        install_fake_hermes,
    )

    home = make_home(tmp_path / "hermes", SMALL)
    (home / "logs").mkdir(exist_ok=True)
    install_fake_hermes(tmp_path / "bin")
    log = tmp_path / "commits.log"
    env = configured(tmp_path, home, verify_interval="1h")
    errors = (tmp_path / "writer.err").open("w")
    writer = subprocess.Popen(
        [str(tmp_path / "bin" / "hermes"), "dashboard"],
        env={**env, WRITE_EVERY_ENV: "0.0005", LOG_ENV: str(log), CHECKPOINT_ENV: "1"},
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    d = DaemonProc(env)
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        d.wait_for_line("statewarden ready")
        before = len(log.read_text().splitlines()) if log.exists() else 0
        verdicts, commits = [], []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            r = run_ctl("verify", "--json", env=env)
            assert r.exit_code == 0, r.stderr
            (v,) = json.loads(r.stdout)["databases"]
            verdicts.append(v)
            commits.append(len(log.read_text().splitlines()))
            if v["copy"] == "backup API":
                break
        after = len(log.read_text().splitlines())
        assert writer.poll() is None
    finally:
        d.stop()
        writer.terminate()
        writer.communicate(timeout=30)
        errors.close()
    assert [v["result"] for v in verdicts] == ["none"] * len(verdicts)
    assert verdicts[-1]["copy"] == "backup API", (len(verdicts), before, commits)
    assert after > before
    assert (tmp_path / "writer.err").read_text() == ""
