"""``maintenance --all-profiles``: every profile's database in one stop. In a real user
manager, one gateway unit holds three real Hermes homes' databases (the root home and
two profiles, found as Hermes lays them out): two damaged (a phantom row), one healthy.
The unit is stopped once and started once (its start count says so), each damaged
database is repaired, the healthy one left as is and said so; a failure on one
profile's database rolls back that one only, names it, and Hermes runs again. A
profile without a database yet is passed over (no user manager needed there)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lab.corruption import phantom_row
from lab.hermes_fixtures import SMALL, make_home
from tests.support.cli import run_ctl
from tests.support.daemon import DaemonProc
from tests.support.fake_hermes import install_fake_hermes
from tests.support.maintenance import (
    exempt_comms,
    maintenance_config,
    report_of,
    run_maintenance,
)
from tests.support.systemd_harness import UserSystemd, unavailable_reason, user_systemd
from tests.support.units import holders, main_pid
from tests.support.waiting import wait_for

GATEWAY = "hermes-gateway.service"
# One gateway for every profile: the root home and profile "play" are damaged, "work"
# is healthy; only "play" is written to while the unit runs (its run catches up).
UNIT = """\
[Unit]
Description=One Hermes gateway for every profile (statewarden test)

[Service]
ExecStartPre=/bin/sh -c 'echo started >> {starts}'
ExecStart=/bin/sh -c '\
FAKE_HERMES_WRITE_EVERY=0 HERMES_HOME={root} {bin}/hermes gateway run & \
FAKE_HERMES_WRITE_EVERY=0.2 HERMES_HOME={play} {bin}/hermes gateway run & \
FAKE_HERMES_WRITE_EVERY=0 HERMES_HOME={work} {bin}/hermes gateway run & wait'
Restart=no
KillMode=mixed
"""


class Profiles:
    """Three Hermes homes as Hermes lays them out, served by one gateway unit."""

    def __init__(self, tmp_path: Path, manager: UserSystemd) -> None:
        self.root = make_home(tmp_path / "hermes", SMALL, profiles=("play", "work"))
        phantom_row(self.root)
        phantom_row(self.root / "profiles" / "play")
        self.dbs = {
            "default": self.root / "state.db",
            "play": self.root / "profiles" / "play" / "state.db",
            "work": self.root / "profiles" / "work" / "state.db",
        }
        self.starts = tmp_path / "starts.log"
        bin_dir = tmp_path / "bin"
        install_fake_hermes(bin_dir)
        config = tmp_path / "config.yaml"
        config.write_text(
            json.dumps(
                {"holders": {"exempt_comms": exempt_comms()}, "maintenance": {"settle": "0.5s"}}
            )
        )
        self.manager = manager
        unit = UNIT.format(
            starts=self.starts,
            root=self.root,
            play=self.dbs["play"].parent,
            work=self.dbs["work"].parent,
            bin=bin_dir,
        )
        manager.write_unit(GATEWAY, unit)
        manager.daemon_reload()
        assert manager.systemctl("start", GATEWAY).returncode == 0
        self.wait_held()
        self.env = {
            **os.environ,
            "STATEWARDEN_CONFIG": str(config),
            "HERMES_HOME": str(self.root),
            "DBUS_SESSION_BUS_ADDRESS": manager.bus_address,
        }

    def wait_held(self) -> None:
        wait_for(
            lambda: main_pid(self.manager, GATEWAY) and all(holders(d) for d in self.dbs.values()),
            "the gateway to hold every profile's database",
        )

    def maintenance(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_maintenance("--all-profiles", *args, env=self.env)

    def check(self, profile: str) -> int:
        return run_ctl("check", "--db", str(self.dbs[profile])).exit_code

    def started(self) -> int:
        return len(self.starts.read_text().splitlines())


def by_profile(rep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["profile"]: p for p in rep["profiles"]}


@pytest.fixture
def manager(tmp_path: Path) -> Any:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with user_systemd(tmp_path / "manager") as m:
        yield m


@pytest.mark.systemd
def test_every_profile_is_repaired_in_one_stop(tmp_path: Path, manager: UserSystemd) -> None:
    """The dry run plans every profile; the run stops the one gateway once and starts it
    once (two starts in all, with the first), repairs both damaged databases (check
    clean), leaves the healthy one as it was and says so, and the gateway holds all
    three again."""
    p = Profiles(tmp_path, manager)
    dry = p.maintenance("--dry-run")
    assert dry.returncode == 0, dry.stderr
    for db in p.dbs.values():
        assert f"maintenance plan for {db} (action repair)" in dry.stderr
    work_before = p.dbs["work"].stat().st_ino
    proc = p.maintenance("--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    rep = report_of(proc)
    assert rep["outcome"] == "every profile done"
    runs = by_profile(rep)
    assert set(runs) == {"default", "play", "work"}
    assert (runs["default"]["outcome"], runs["play"]["outcome"]) == ("repaired", "repaired")
    assert runs["work"]["outcome"] == "healthy: nothing to repair"
    assert runs["work"]["units_stopped"] == []
    assert GATEWAY in runs["default"]["units_stopped"]
    assert p.started() == 2
    assert (p.check("default"), p.check("play"), p.check("work")) == (0, 0, 0)
    assert p.dbs["work"].stat().st_ino == work_before
    assert manager.systemctl("is-active", GATEWAY).stdout.strip() == "active"
    p.wait_held()


@pytest.mark.systemd
def test_a_failure_on_one_profile_leaves_it_untouched_and_hermes_running(
    tmp_path: Path, manager: UserSystemd
) -> None:
    """A fault in profile play's catch-up (only its database is written while the
    gateway runs, so only its run catches up): play is rolled back and named (its file
    as it was: still damaged), the root home is repaired all the same, work left as is;
    the gateway was started again once and runs; the exit code is 1, the partial
    run's."""
    p = Profiles(tmp_path, manager)
    play_before = p.dbs["play"].stat().st_ino
    env = {**p.env, "STATEWARDEN_FAIL_AT": "catch-up"}
    proc = run_maintenance("--all-profiles", "--yes", "--json", env=env)
    assert proc.returncode == 1, proc.stderr
    rep = report_of(proc)
    assert rep["outcome"] == "partial: not done for play"
    runs = by_profile(rep)
    assert runs["default"]["outcome"] == "repaired"
    assert runs["play"]["outcome"] == "rolled back: the database is unchanged"
    assert "a fault injected at catch-up" in runs["play"]["message"]
    assert runs["work"]["outcome"] == "healthy: nothing to repair"
    assert p.started() == 2
    assert manager.systemctl("is-active", GATEWAY).stdout.strip() == "active"
    assert (p.check("default"), p.check("play")) == (0, 3)
    assert p.dbs["play"].stat().st_ino == play_before
    p.wait_held()


def test_all_profiles_with_one_database_named_is_a_usage_error(tmp_path: Path) -> None:
    """--all-profiles with --db, --profile, --action, --merge-from or --apply-captures:
    exit 2, one line, nothing done."""
    root = make_home(tmp_path / "hermes", SMALL, profiles=("work",))
    env = {**os.environ, "HERMES_HOME": str(root)}
    db = str(root / "state.db")
    for extra in (
        ["--db", db],
        ["--profile", "work"],
        ["--action", "vacuum"],
        ["--merge-from", db],
        ["--apply-captures"],
    ):
        proc = run_maintenance("--all-profiles", *extra, env=env)
        assert proc.returncode == 2, (extra, proc.stderr)
        (line,) = proc.stderr.strip().splitlines()
        assert "--all-profiles repairs every profile's database" in line


@pytest.mark.systemd
@pytest.mark.parametrize("step", ["settle", "swapped"])
def test_a_killed_run_is_resumed_for_every_profile_and_hermes_runs(
    tmp_path: Path, manager: UserSystemd, step: str
) -> None:
    """kill -9 of the run at the first damaged profile's step: the gateway stays
    stopped, and ``--all-profiles --resume`` takes up every unfinished run (the root
    home rolled forward from its swap, or back before it; profile play, pre-built but
    not stopped for, rolled back), starts the gateway again, and the run after that
    repairs what is left: both damaged databases end repaired, each once."""
    p = Profiles(tmp_path, manager)
    env = {**p.env, "STATEWARDEN_CRASH_AT": step}
    crashed = run_maintenance("--all-profiles", "--yes", env=env)
    assert crashed.returncode == -9, crashed.stderr
    resumed = p.maintenance("--resume", "--json")
    rep = report_of(resumed)
    runs = by_profile(rep)
    forward = step == "swapped"
    assert runs["default"]["outcome"] == (
        "repaired" if forward else "rolled back: the database is unchanged"
    )
    assert runs["play"]["outcome"] == "rolled back: the database is unchanged"
    assert runs["work"]["outcome"] == "nothing to resume"
    assert resumed.returncode == 1, resumed.stderr
    assert manager.systemctl("is-active", GATEWAY).stdout.strip() == "active"
    assert p.started() == 2
    assert p.check("default") == (0 if forward else 3)
    assert p.check("play") == 3
    p.wait_held()
    again = p.maintenance("--yes", "--json")
    assert again.returncode == 0, again.stderr
    runs = by_profile(report_of(again))
    assert runs["default"]["outcome"] == ("healthy: nothing to repair" if forward else "repaired")
    assert runs["play"]["outcome"] == "repaired"
    assert (p.check("default"), p.check("play"), p.check("work")) == (0, 0, 0)
    assert manager.systemctl("is-active", GATEWAY).stdout.strip() == "active"


@pytest.mark.systemd
def test_the_daemon_takes_up_every_profile_s_killed_run_in_one_stop(
    tmp_path: Path, manager: UserSystemd
) -> None:
    """kill -9 of an ``--all-profiles`` run once the root home's swap is done: the
    daemon's start finds two unfinished runs and resumes them together (one
    ``--all-profiles --resume``), so the gateway is started once, after the root home is
    rolled forward and profile play rolled back, never while one of them is half done;
    the daemon records each profile's outcome. (It resumed each on its own before,
    starting the shared gateway after the first.)"""
    p = Profiles(tmp_path, manager)
    env = {**p.env, "XDG_RUNTIME_DIR": str(tmp_path / "rt")}
    crashed = run_maintenance(
        "--all-profiles", "--yes", env={**env, "STATEWARDEN_CRASH_AT": "swapped"}
    )
    assert crashed.returncode == -9, crashed.stderr
    assert manager.systemctl("is-active", GATEWAY).stdout.strip() != "active"
    d = DaemonProc(env)
    try:
        d.wait_for_line("several profiles in one stop", timeout_s=120)
        d.wait_for_line("maintenance resume finished", timeout_s=300)
        last = d.ctl_raw("maintenance")["last"]
        assert last[str(p.dbs["default"])]["outcome"] == "repaired"
        assert last[str(p.dbs["play"])]["outcome"] == "rolled back: the database is unchanged"
    finally:
        d.stop()
    assert manager.systemctl("is-active", GATEWAY).stdout.strip() == "active"
    assert p.started() == 2
    assert (p.check("default"), p.check("play"), p.check("work")) == (0, 3, 0)


@pytest.mark.systemd
def test_a_profile_refused_before_the_stop_does_not_hold_back_the_others(
    tmp_path: Path, manager: UserSystemd
) -> None:
    """The user's interactive Hermes (``hermes chat``, not a unit) holds profile work's
    database: that profile is refused (nothing done for it, named), the two damaged
    ones are repaired in the one stop, the chat is left running, and the exit code is
    the refusal's (5)."""
    p = Profiles(tmp_path, manager)
    chat = subprocess.Popen(
        [str(tmp_path / "bin" / "hermes"), "chat"],
        env={**os.environ, "HERMES_HOME": str(p.dbs["work"].parent)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert chat.stdout is not None
        assert chat.stdout.readline().strip() == "ready"
        proc = p.maintenance("--yes", "--json")
        assert chat.poll() is None
    finally:
        chat.terminate()
        chat.wait(timeout=30)
        if chat.stdout is not None:
            chat.stdout.close()
    assert proc.returncode == 5, proc.stderr
    runs = by_profile(report_of(proc))
    assert runs["work"]["outcome"] == "refused: nothing done"
    assert "interactive Hermes" in runs["work"]["message"]
    assert (runs["default"]["outcome"], runs["play"]["outcome"]) == ("repaired", "repaired")
    assert p.started() == 2
    assert (p.check("default"), p.check("play")) == (0, 0)
    assert manager.systemctl("is-active", GATEWAY).stdout.strip() == "active"


def test_a_profile_without_a_database_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No process holds anything: the root home's damaged database is repaired, a
    profile Hermes has made but not written to yet (no state.db) is named as having
    nothing to do, and the run ends 0."""
    maintenance_config(tmp_path, monkeypatch)
    root = make_home(tmp_path / "hermes", SMALL)
    phantom_row(root)
    (root / "profiles" / "fresh").mkdir(parents=True)
    env = {**os.environ, "HERMES_HOME": str(root)}
    proc = run_maintenance("--all-profiles", "--yes", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    runs = by_profile(report_of(proc))
    assert runs["default"]["outcome"] == "repaired"
    assert runs["fresh"]["outcome"] == "no state.db: nothing to do"
    assert not (root / "profiles" / "fresh" / "state.db").exists()
    assert run_ctl("check", "--db", str(root / "state.db")).exit_code == 0
