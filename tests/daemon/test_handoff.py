"""``statewardenctl maintenance`` with a real daemon running: the run is handed to the
daemon over the control socket and streamed back; one run at a time per database;
Ctrl-C (a real SIGINT) cancels before the swap and is refused, with the reason, after
it. Without a daemon the CLI runs it itself, with the same Ctrl-C rules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from statewarden.config import load_config
from statewarden.maintenance.run import PAST_THE_SWAP, MaintenanceRun, Options
from statewarden.targets import Target
from tests.support.daemon import DaemonProc
from tests.support.maintenance import phantom_home_for_the_daemon, session_ids
from tests.support.repo import REPO

WAIT_S = 120.0


def setup(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A phantom-row home, a config with short times (stop_grace 3 s: a holder that
    ignores SIGTERM keeps a run busy that long), and a daemon environment for it."""
    db, env = phantom_home_for_the_daemon(
        tmp_path,
        {
            "maintenance": {
                "settle": "0.5s",
                "stop_grace": "3s",
                "auto_repair": "never",
                "settle_timeout": "20s",
            },
            "watch": {"verify_interval": "1d"},
        },
    )
    return db, env


def stubborn_holder(db: Path) -> subprocess.Popen[bytes]:
    """A process of ours that holds the database and ignores SIGTERM (killed after
    maintenance.stop_grace): it keeps a run between its stop and its swap for 3 s."""
    return subprocess.Popen(["sh", "-c", f'trap "" TERM; exec 3<"{db}"; exec sleep 300'])


def start_ctl(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "statewarden.cli.ctl", "maintenance", *args],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_until(proc: subprocess.Popen[str], text: str, seen: list[str]) -> str:
    """stderr lines of ``proc`` until one contains ``text``."""
    assert proc.stderr is not None
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line.rstrip("\n"))
        if text in line:
            return line
    raise AssertionError(f"never saw {text!r}; saw: {seen}")


def finish(proc: subprocess.Popen[str], seen: list[str]) -> tuple[int, str, list[str]]:
    out, err = proc.communicate(timeout=WAIT_S)
    return proc.returncode, out, seen + err.splitlines()


@pytest.fixture
def handed(tmp_path: Path) -> Any:
    db, env = setup(tmp_path)
    d = DaemonProc(env)
    d.wait_for_line("statewarden ready")
    d.wait_for_line("verification found damage", timeout_s=WAIT_S)  # its first one, done
    holder = stubborn_holder(db)
    yield db, env, d
    holder.kill()
    holder.wait()
    d.stop()


class TestHandedToTheDaemon:
    def test_the_daemon_runs_it_and_streams_it(self, handed: Any) -> None:
        """``--json``: the run is the daemon's (its log says so), every event arrives
        as a JSON line on stderr (the run's id, steps, progress), the report on stdout
        is the run's, and the phantom row is gone."""
        db, env, d = handed
        proc = start_ctl(env, "--db", str(db), "--yes", "--force", "--json")
        code, out, err = finish(proc, [])
        assert code == 0, err
        report = json.loads(out)
        assert report["outcome"] == "repaired"
        events = [json.loads(line) for line in err]
        kinds = [e["event"] for e in events]
        assert kinds[0] == "plan"
        assert kinds[1] == "started"
        assert events[1]["run_id"] == report["run_id"]
        assert "progress" in kinds
        assert all(e["schema_version"] == 1 for e in events)
        steps = [e["step"] for e in events if e["event"] == "step"]
        assert steps[:2] == ["prebuild", "signal"]
        assert "swap" in steps
        d.wait_for_line("maintenance run handed to the daemon finished")
        ids = session_ids(db)
        assert len(ids) == len(set(ids))

    def test_a_second_run_is_refused_with_the_running_runs_id(self, handed: Any) -> None:
        """While a handed run waits for its stubborn holder, a second request for the
        same database is refused (exit 5) naming the first run's id; the first ends
        normally."""
        db, env, _d = handed
        first = start_ctl(env, "--db", str(db), "--yes", "--force", "--json")
        seen: list[str] = []
        started = json.loads(read_until(first, '"started"', seen))
        second = start_ctl(env, "--db", str(db), "--yes", "--force")
        code2, _, err2 = finish(second, [])
        assert code2 == 5, err2
        assert err2[-1] == (
            f"statewardenctl: error: maintenance run {started['run_id']} is already in"
            f" progress on {db}; wait for it to finish"
        )
        code, out, err = finish(first, seen)
        assert code == 0, err
        assert json.loads(out)["outcome"] == "repaired"

    def test_ctrl_c_before_the_swap_cancels(self, handed: Any) -> None:
        """Ctrl-C (SIGINT to the watching CLI) while the run waits for its holder to
        stop: the CLI asks the daemon, the run rolls back, says so, and the database is
        unchanged (phantom row and all)."""
        db, env, _d = handed
        before = session_ids(db)
        proc = start_ctl(env, "--db", str(db), "--yes", "--force")
        seen: list[str] = []
        read_until(proc, "statewardenctl: maintenance: stopping pid", seen)
        proc.send_signal(signal.SIGINT)
        code, out, err = finish(proc, seen)
        assert code == 1, err
        assert (
            "statewardenctl: maintenance: Ctrl-C: cancel asked; the run stops at its next"
            " step before the swap"
        ) in err
        assert (
            "statewardenctl: maintenance: cancelling: the run stops before the swap and"
            " rolls back what it did"
        ) in err
        assert out.splitlines()[0] == (
            f"maintenance repair of {db}: cancelled and rolled back: the database is unchanged"
        )
        assert "  aborted and rolled back: cancelled by the user before the swap" in out
        assert "downtime" not in out
        assert session_ids(db) == before
        assert not list(db.parent.glob(".statewarden-*"))


class TestWithoutDaemon:
    def test_ctrl_c_before_the_swap_cancels_a_run_here(self, tmp_path: Path) -> None:
        """No daemon: the CLI runs it; a real SIGINT while it waits for the holder rolls
        it back (exit 1), database unchanged."""
        db, env = setup(tmp_path)
        before = session_ids(db)
        holder = stubborn_holder(db)
        try:
            proc = start_ctl(env, "--db", str(db), "--yes", "--force")
            seen: list[str] = []
            read_until(proc, "statewardenctl: maintenance: stopping pid", seen)
            proc.send_signal(signal.SIGINT)
            code, out, err = finish(proc, seen)
        finally:
            holder.kill()
            holder.wait()
        assert code == 1, err
        assert "handed to the daemon" not in "\n".join(err)
        assert out.splitlines()[0].endswith("cancelled and rolled back: the database is unchanged")
        assert session_ids(db) == before

    def test_ctrl_c_after_the_swap_is_refused_and_the_run_finishes(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A real SIGINT delivered the moment the swap step begins (through the CLI's
        Ctrl-C handler): refused with the reason, and the run finishes the repair."""
        from statewarden.cli.maintenance_cmd import signals_cancel

        db, env = setup(tmp_path)
        for name in ("XDG_STATE_HOME", "XDG_RUNTIME_DIR", "STATEWARDEN_CONFIG"):
            monkeypatch.setenv(name, env[name])
        config = load_config(Path(env["STATEWARDEN_CONFIG"]))
        events: list[dict[str, Any]] = []

        def emit(event: dict[str, Any]) -> None:
            events.append(event)
            if event.get("step") == "swap":
                os.kill(os.getpid(), signal.SIGINT)

        target = Target("default", db.parent, db, db.parent / "logs", "hermes-gateway.service")
        run = MaintenanceRun(target, config, Options(), emit=emit)
        with signals_cancel([run]):
            report = run.execute()
        assert report.outcome == "repaired"
        assert report.exit_code == 0
        (answer,) = [e for e in events if e["event"] == "cancel"]
        assert answer["accepted"] is False
        assert answer["reason"] == PAST_THE_SWAP
        steps = [e["step"] for e in events if e["event"] == "step"]
        assert steps.index("swap") < events.index(answer)
        ids = session_ids(db)
        assert len(ids) == len(set(ids))


class TestBadRequests:
    @pytest.mark.parametrize(
        ("args", "error"),
        [
            ({"db": "state.db"}, "db must be the absolute path of a state.db"),
            ({"db": ["/x"]}, "db must be the absolute path of a state.db"),
            ({}, "db must be the absolute path of a state.db"),
            (
                {"db": "/x/state.db", "action": ["repair"]},
                "action must be one of: repair, check, journal-mode=delete, journal-mode=wal,"
                " checkpoint, vacuum",
            ),
        ],
    )
    def test_a_bad_run_request_is_a_one_line_error(
        self, daemon: DaemonProc, args: dict[str, Any], error: str
    ) -> None:
        """Hostile or wrong arguments: a one-line usage error, nothing started, and the
        socket keeps serving."""
        from statewarden.errors import ControlError

        with pytest.raises(ControlError) as err:
            daemon.ctl_raw("maintenance_run", **args)
        assert str(err.value) == error
        assert daemon.ctl_raw("maintenance")["running"] == []

    def test_cancel_with_no_run_is_refused(self, daemon: DaemonProc, hermes_home: Path) -> None:
        """A cancel when no run was handed to the daemon: a one-line error naming the db."""
        from statewarden.errors import ControlError

        db = str(hermes_home / "state.db")
        with pytest.raises(ControlError) as err:
            daemon.ctl_raw("maintenance_cancel", db=db)
        assert str(err.value) == f"no maintenance run handed to the daemon is in progress on {db}"
