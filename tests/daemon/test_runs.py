"""Maintenance runs joined to the alerts, on real parts: a real daemon, a local Bot API
server, real maintenance runs on a real Hermes database with a real holder that is
stopped, a run killed with kill -9 mid-run.

- While a run is in progress (the daemon's own or a shell's), holder and unit alerts on
  its database are muted; a run killed with kill -9 mutes nothing once it is gone.
- Each run's outcome (repaired, rolled back, refused) reaches Telegram, once.
- A repaired database's open corruption incident resolves with the run id.
"""

from __future__ import annotations

import html
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.bot_api import BotApi
from lab.hermes_fixtures import TINY, make_home
from statewarden.alerts.message import plain_text
from statewarden.alerts.outbox import Outbox
from statewarden.alerts.router import Route, Router
from statewarden.atomic import private_dir
from statewarden.config import AlertsConfig, Config, state_dir
from statewarden.daemon.verify import file_identity
from statewarden.incidents.book import Incident, Update
from statewarden.logs import get_logger
from statewarden.maintenance import outcomes
from statewarden.maintenance.auto import QUIET_AFTER_S, AutoMaintenance
from statewarden.maintenance.ledger import (
    Ledger,
    in_progress,
    lock_holder,
    run_dir,
    run_lock,
)
from statewarden.targets import Target
from tests.support.daemon import DaemonProc
from tests.support.hermes_logs import hermes_logger, malformed
from tests.support.maintenance import (
    FakeHermes,
    exempt_comms,
    integrity,
    phantom_home_for_the_daemon,
    session_ids,
)
from tests.support.mount_namespace import sh_in_private_mounts
from tests.support.repo import REPO
from tests.support.waiting import wait_for

TOKEN = "123456789:AAHfakeTokenForTestsOnly_abcdefghijk"
WAIT_S = 120.0
# The quiet period after a run these daemons keep (30 s in the product): the tests prove
# what is muted and sent in which order, which a shorter period keeps.
QUIET_S = 3.0


@pytest.fixture
def api() -> Iterator[BotApi]:
    server = BotApi()
    yield server
    server.stop()


def setup(tmp_path: Path, api: BotApi, **maintenance: object) -> tuple[Path, dict[str, str]]:
    """A Hermes home with a phantom row, and a daemon environment whose alerts go to
    the local Bot API server."""
    db, env = phantom_home_for_the_daemon(
        tmp_path,
        {
            "maintenance": {"settle": "0.5s", "stop_grace": "3s", **maintenance},
            "alerts": {
                "retry_max": "500ms",
                "group_wait": "300ms",
                "journald": {"enabled": True},
                "telegram": {
                    "enabled": True,
                    "chat_id": "123456789",
                    "api_base": api.url,
                    "min_interval": "50ms",
                    "timeout": "2s",
                },
            },
        },
    )
    env["STATEWARDEN_TELEGRAM_TOKEN"] = TOKEN
    return db, env


def ctl(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "statewarden.cli.ctl", *args],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def messages(api: BotApi, headline: str) -> list[str]:
    """The Telegram messages whose first line has ``headline``, HTML entities undone."""
    return [html.unescape(r.text) for r in api.accepted if headline in r.text.split("\n", 1)[0]]


def muted(d: DaemonProc) -> list[str]:
    return list(d.ctl("alerts")["maintenance"])


def all_incidents(d: DaemonProc, kind: str) -> list[dict[str, Any]]:
    return [i for i in d.ctl("incidents", "--all")["incidents"] if i["kind"] == kind]


def task_died_line(home: Path) -> None:
    """What a gateway logs when a stop kills one of its tasks (a kind a run mutes)."""
    hermes_logger(home / "logs", "gateway.run").error(
        "Supervised task %s died: RuntimeError('stopped')", "cron_ticker"
    )


class TestDaemonRun:
    def test_window_run_mutes_tells_and_resolves(
        self, tmp_path: Path, api: BotApi, fake_bin: Path
    ) -> None:
        """A corruption line -> the daemon's own repair run stops a real Hermes holder;
        a task_died line during the run stays muted; Telegram gets the repaired outcome
        (downtime, rows kept, no loss, the quarantine); the corruption incident resolves
        with the run id, and a RESOLVED message says so; nothing is sent twice."""
        db, env = setup(tmp_path, api, auto_repair="immediately", settle="4s")
        holder = FakeHermes(fake_bin, db.parent, "serve")
        d = DaemonProc(env, quiet_after_s=QUIET_S)
        try:
            d.wait_for_line("statewarden ready")
            malformed(hermes_logger(db.parent / "logs", "gateway.session"))
            wait_for(
                lambda: messages(api, "CRITICAL corruption"),
                timeout_s=WAIT_S,
                what="the corruption message",
            )
            # The run is in progress: its database is muted, and what it causes is held.
            wait_for(lambda: muted(d) == [str(db)], timeout_s=WAIT_S, what="the mute")
            task_died_line(db.parent)
            (died,) = wait_for(lambda: d.incidents_of("task_died"), what="task_died")
            assert wait_for(
                lambda: (
                    d.incidents_of("task_died")[0]["notification"]["state"] == "muted: maintenance"
                )
            )
            d.wait_for_line("maintenance repair finished", timeout_s=WAIT_S)
            holder.proc.wait(timeout=30)  # stopped by the run (SIGTERM)
            try:
                (text,) = wait_for(
                    lambda: messages(api, "maintenance_repaired"),
                    timeout_s=WAIT_S,
                    what="the repaired outcome",
                )
            except AssertionError as exc:
                # What was sent instead, and how the run ended: the reason a run failed.
                sent = [r.text.split("\n", 1)[0] for r in api.accepted]
                raise AssertionError(
                    f"{exc}; sent: {sent}; runs: {d.ctl_raw('maintenance')}"
                ) from None
            run = d.ctl_raw("maintenance")["last"][str(db)]
            assert run["outcome"] == "repaired"
            assert f"run {run['run_id']}: repair, repaired" in text
            assert "downtime " in text
            assert "(first stop -> last unit active)" in text
            assert "(1 duplicate(s) dropped)" in text
            assert "no loss" in text
            assert f"original kept in {run['quarantine']}" in text
            assert "post-check: integrity ok" in text
            assert f"(was pid {holder.pid})" in text
            assert "start again yourself: " in text
            # The post-check of the file swapped in is its verification now, not the
            # damaged file's verdict.
            (st,) = d.ctl("status")["databases"]
            assert st["verified"]["reason"] == f"post-check of maintenance run {run['run_id']}"
            assert (st["verified"]["result"], st["verified"]["file"]) == ("none", file_identity(db))
            # The corruption incident is resolved by the run, and says so.
            (inc,) = all_incidents(d, "corruption")
            assert inc["state"] == "resolved"
            assert inc["resolution"] == f"repaired by maintenance run {run['run_id']}"
            (resolved,) = wait_for(
                lambda: messages(api, "RESOLVED corruption"), what="the resolved message"
            )
            assert f"repaired by maintenance run {run['run_id']}" in resolved
            # Still muted just after the run; unmuted once the quiet period is over, and
            # the task_died incident (still open) is sent then, once.
            wait_for(lambda: muted(d) == [], timeout_s=WAIT_S, what="the end of the mute")
            held = f"#{died['id']} task_died"
            wait_for(
                lambda: [t for t in messages(api, "") if held in t],
                what=f"the held task_died in {[t[:80] for t in messages(api, '')]}",
            )
            time.sleep(1.0)  # anything sent twice would arrive now
            assert len(messages(api, "maintenance_repaired")) == 1
            assert len([t for t in messages(api, "") if held in t]) == 1
            assert len(messages(api, "RESOLVED corruption")) == 1
            assert not list(
                outcomes.folder(Path(env["XDG_STATE_HOME"]) / "statewarden").glob("*.json")
            )
        finally:
            holder.stop()
            d.stop()
        ids = session_ids(db)
        assert len(ids) == len(set(ids))
        assert integrity(db) == "ok"


class TestShellRuns:
    def test_refused_and_killed_and_rolled_back(
        self, tmp_path: Path, api: BotApi, fake_bin: Path
    ) -> None:
        """Shell runs (``--here``) with the daemon up: one refused (an interactive Hermes, no --force)
        is told with its reason; one killed with kill -9 mid-settle mutes the database
        only while it lives; its --resume rolls back and is told as rolled back."""
        db, env = setup(tmp_path, api, auto_repair="never", settle="30s", settle_timeout="60s")
        d = DaemonProc(env, quiet_after_s=QUIET_S)
        chat = FakeHermes(fake_bin, db.parent, "chat")
        try:
            d.wait_for_line("statewarden ready")
            refused = ctl(env, "maintenance", "--here", "--db", str(db), "--yes", "--json")
            out, err = refused.communicate(timeout=WAIT_S)
            assert refused.returncode == 5, err
            (text,) = wait_for(
                lambda: messages(api, "maintenance_refused"),
                timeout_s=WAIT_S,
                what="the refused outcome",
            )
            assert "maintenance repair refused; nothing was stopped" in text
            assert json.loads(out)["message"] in text
            assert muted(d) == []  # a refused run never got as far as a ledger
            chat.stop()

            run = ctl(env, "maintenance", "--here", "--db", str(db), "--yes", "--json")
            try:
                wait_for(lambda: muted(d) == [str(db)], timeout_s=WAIT_S, what="the mute")
                state = Path(env["XDG_STATE_HOME"]) / "statewarden"
                wait_for(
                    lambda: (rec := in_progress(state, db)) is not None and rec.has("settle"),
                    timeout_s=WAIT_S,
                    what="the settle",
                )
                os.kill(run.pid, signal.SIGKILL)
            finally:
                run.communicate(timeout=30)
            assert run.returncode == -signal.SIGKILL
            assert in_progress(state, db) is None  # an unfinished ledger, but no lock
            d.wait_for_line("maintenance run ended", timeout_s=WAIT_S)
            wait_for(lambda: muted(d) == [], timeout_s=WAIT_S, what="the end of the mute")
            assert len(messages(api, "maintenance_")) == 1  # the killed run told nothing

            resume = ctl(env, "maintenance", "--here", "--db", str(db), "--resume", "--json")
            out, err = resume.communicate(timeout=WAIT_S)
            assert resume.returncode == 1, err
            (text,) = wait_for(
                lambda: messages(api, "maintenance_rolled_back"),
                timeout_s=WAIT_S,
                what="the rolled-back outcome",
            )
            assert "aborted and rolled back: resumed after an interruption before the swap" in (
                text
            )
            assert f"run {json.loads(out)['run_id']}: repair" in text
        finally:
            chat.stop()
            d.stop()
        assert integrity(db) != "ok"  # rolled back: the damaged file is unchanged
        assert os.stat(db).st_mode & 0o777 == 0o644


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    from tests.support.fake_hermes import install_fake_hermes

    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    return bin_dir


class TestInProgress:
    def test_lock_and_ledger_of_another_process(self, tmp_path: Path) -> None:
        """A run in another process: in progress while it holds the lock with an
        unfinished ledger; after kill -9 the ledger stays unfinished but nothing is in
        progress; a finished ledger under a held lock is not in progress either."""
        state = tmp_path / "state"
        db = tmp_path / "home" / "state.db"
        code = (
            "import sys, time\n"
            "from pathlib import Path\n"
            "from statewarden.atomic import private_dir\n"
            "from statewarden.maintenance.ledger import Ledger, run_dir, run_lock\n"
            f"folder = private_dir(run_dir(Path({str(state)!r}), Path({str(db)!r})))\n"
            "with run_lock(folder):\n"
            "    led = Ledger(folder)\n"
            "    led.create({'run_id': 'r1', 'pid': 0})\n"
            "    print('ready', flush=True)\n"
            "    time.sleep(600)\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            record = in_progress(state, db)
            assert record is not None
            assert record.run_id == "r1"
            assert lock_holder(run_dir(state, db)) == proc.pid
        finally:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        assert in_progress(state, db) is None
        # A finished run whose lock is still held (the outcome being written): not in
        # progress.
        folder = run_dir(state, db)
        with run_lock(folder):
            led = Ledger(folder)
            led.reopen()
            led.step("finished", outcome="rolled back")
            led.close()
            assert lock_holder(folder) == os.getpid()
            assert in_progress(state, db) is None
        assert lock_holder(folder) is None

    def test_no_state_and_a_planted_symlink(self, tmp_path: Path) -> None:
        """No folder at all: not in progress. A lock file planted as a symlink to a file
        that someone holds a lock on: not mistaken for a run."""
        state = tmp_path / "state"
        db = tmp_path / "state.db"
        assert in_progress(state, db) is None
        folder = private_dir(run_dir(state, db))
        other = tmp_path / "other-lock"
        with run_lock(private_dir(tmp_path / "o")):
            pass
        (tmp_path / "o" / "lock").rename(other)
        (folder / "lock").symlink_to(other)
        (folder / "run.jsonl").write_text('{"step": "begin", "run_id": "x"}\n')
        import fcntl

        fd = os.open(other, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            assert in_progress(state, db) is None
        finally:
            os.close(fd)


class TestOutcomes:
    def test_each_kind_and_what_tells_nothing(self, tmp_path: Path) -> None:
        """Outcomes that changed nothing leave no notification; each other outcome is told once as
        maintenance_repaired, _rolled_back or _refused, keyed by run, without "#0"."""
        state = tmp_path / "state"
        base = {"db": "/h/state.db", "action": "repair", "run_id": "R", "exit_code": 0}
        for outcome in (
            "dry run: nothing done",
            "healthy: nothing to repair",
            "damage none",
            "checkpointed",
            "not confirmed: nothing done",
            "nothing to resume",
        ):
            assert outcomes.record(state, {**base, "outcome": outcome}, "p", 0.0) is None
        assert outcomes.pending(state) == []
        kinds = []
        for outcome in (
            "repaired",
            "rolled back: the database is unchanged",
            "refused: nothing done",
            "failed before stopping anything",
            "stopped: the repair would lose rows",
            "swapped",
        ):
            assert outcomes.record(state, {**base, "outcome": outcome}, "p", 1.0) is not None
        for path, data in outcomes.pending(state):
            n = outcomes.notification(data, host="h")
            kinds.append(n.items[0].kind)
            assert n.key == f"{n.items[0].kind}:R"
            assert "#0" not in plain_text(n)
            outcomes.done(path)
        assert kinds == [
            "maintenance_repaired",
            "maintenance_rolled_back",
            "maintenance_refused",
            "maintenance_refused",
            "maintenance_refused",
            "maintenance_repaired",
        ]
        assert outcomes.pending(state) == []

    def test_bounded_and_hostile_files(self, tmp_path: Path) -> None:
        """Only the newest KEEP wait; a damaged or foreign file is dropped, not sent."""
        state = tmp_path / "state"
        for i in range(outcomes.KEEP + 5):
            outcomes.record(state, {"outcome": "repaired", "run_id": f"r{i}"}, "p", 0.0)
        folder = outcomes.folder(state)
        (folder / "99999999999999999998-torn.json").write_text('{"outcome": "rep')
        (folder / "99999999999999999999-list.json").write_text("[1, 2]")
        (folder / "99999999999999999997-link.json").symlink_to("/etc/passwd")
        got = outcomes.pending(state)
        assert [d["run_id"] for _, d in got] == [f"r{i}" for i in range(5, outcomes.KEEP + 5)]
        assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p, _ in got)

    def test_a_planted_folder_symlink_is_not_followed(self, tmp_path: Path) -> None:
        """outcomes/ replaced by a symlink to another folder: nothing there is read or
        removed."""
        state = tmp_path / "state"
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        victim = elsewhere / "00000000000000000001-r.json"
        victim.write_text(json.dumps({"outcome": "repaired", "run_id": "r"}))
        outcomes.folder(state).parent.mkdir(parents=True)
        outcomes.folder(state).symlink_to(elsewhere)
        assert outcomes.pending(state) == []
        assert victim.exists()

    def test_loss_and_a_unit_that_did_not_start_are_errors(self) -> None:
        """A repair that lost rows is an error-severity notification saying how many were recovered,
        lost and set aside, and LOSS."""
        data = {
            "outcome": "repaired",
            "exit_code": 3,
            "run_id": "R",
            "profile": "p",
            "recover": {
                "loss_detected": True,
                "tables": {"sessions": {"recovered": 9, "lost_keys_sample": ["a"], "set_aside": 0}},
            },
        }
        n = outcomes.notification(data)
        assert n.items[0].severity == "error"
        assert "sessions 9 (1 lost, 0 set aside)" in plain_text(n)
        assert "LOSS (see the recover report)" in plain_text(n)


def incident(i: int, kind: str, db: str = "/h/state.db") -> Incident:
    now = time.time()
    return Incident(
        id=i,
        kind=kind,
        db=db,
        key="",
        severity="error",
        summary=kind,
        first_seen=now,
        last_seen=now,
    )


class TestMuting:
    def test_cleared_during_the_mute_is_never_sent(self, tmp_path: Path) -> None:
        """What a run's stops cause and that clears before the mute ends is never sent;
        what is still open when it ends is sent then."""
        outbox = Outbox(tmp_path / "outbox", max_entries=100)
        cfg = AlertsConfig(group_wait=0.0)
        router = Router(cfg, outbox, {"journald": Route()}, state_path=None, host="h")
        router.set_maintenance("/h/state.db", True)
        gone, stays = incident(1, "crash_loop"), incident(2, "task_died")
        router.submit(Update("opened", gone))
        router.submit(Update("opened", stays))
        assert router.tick() == []
        gone.state = "resolved"
        router.submit(Update("resolved", gone))
        assert router.tick() == []
        router.set_maintenance("/h/state.db", False)
        (sent,) = router.tick()
        assert [i.incident for i in sent.items] == [2]
        assert router.tick() == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (unshare -m, a tmpfs)")
def test_a_full_state_dir_costs_the_outcome_not_the_run(tmp_path: Path, fake_bin: Path) -> None:
    """The state folder on a full tmpfs: a refused run still ends with its report, one
    note saying its outcome could not be left for the alerts, no traceback."""
    home = make_home(tmp_path / "home", TINY)
    db = home / "state.db"
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"holders": {"exempt_comms": exempt_comms()}}))
    state = tmp_path / "state"
    state.mkdir()
    prepare = (
        "from pathlib import Path\n"
        "from statewarden.atomic import private_dir\n"
        "from statewarden.maintenance.ledger import run_dir, run_lock\n"
        f"with run_lock(private_dir(run_dir(Path({str(state / 'statewarden')!r}),"
        f" Path({str(db)!r})))):\n"
        "    pass\n"
    )
    script = (
        f"mount -t tmpfs -o size=64k tmpfs {state} && "
        f'{sys.executable} -c "$PREPARE" && '
        f"(dd if=/dev/zero of={state}/fill bs=4k 2>/dev/null; true) && "
        f"{sys.executable} -m statewarden.cli.ctl maintenance --db {db} --yes --json;"
        " echo rc=$?"
    )
    env = {
        **os.environ,
        "XDG_STATE_HOME": str(state),
        "STATEWARDEN_CONFIG": str(config),
        "PREPARE": prepare,
    }
    chat = FakeHermes(fake_bin, home, "chat")
    try:
        proc = sh_in_private_mounts(script, env=env)
    finally:
        chat.stop()
    assert "Traceback" not in proc.stderr
    assert "rc=5" in proc.stdout, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.split("rc=5")[0])
    assert report["outcome"] == "refused: nothing done"
    (note,) = [n for n in report["notes"] if "outcome could not be left" in n]
    assert "No space left on device" in note


def test_a_run_mutes_its_database_until_the_quiet_period_after_it_is_over(
    tmp_path: Path,
) -> None:
    """The length the daemons above shorten, with the product's QUIET_AFTER_S: a database
    is muted while its run's ledger is in progress, still a moment before QUIET_AFTER_S
    after the run was seen to end, and no longer at QUIET_AFTER_S."""
    db = make_home(tmp_path / "hermes", TINY) / "state.db"
    target = Target("default", db.parent, db, db.parent / "logs")
    auto = AutoMaintenance(Config(), get_logger())
    folder = private_dir(run_dir(state_dir(Config()), db))
    ended = 1_000_000.0
    with run_lock(folder):
        led = Ledger(folder)
        led.create({"run_id": "r1", "pid": os.getpid()})
        assert auto.muted([target], now=ended - 5) == {str(db)}
        led.step("finished", outcome="repaired")
        led.close()
    assert auto.muted([target], now=ended) == {str(db)}  # seen to end now
    assert auto.muted([target], now=ended + QUIET_AFTER_S - 0.5) == {str(db)}
    assert auto.muted([target], now=ended + QUIET_AFTER_S) == set()
    assert auto.muted([target], now=ended + QUIET_AFTER_S + 1) == set()
