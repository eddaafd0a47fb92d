"""Litestream holding state.db: a known companion, not an unexpected holder, and
maintenance stops and restarts its unit like Hermes' own.

Litestream is not packaged for Debian 12, so a stand-in (``tests/support/fake_litestream.py``)
runs as ``litestream replicate DB URL`` and holds the database the way Litestream does
(a WAL connection with a long-lived read transaction, its ``_litestream_*`` tables).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lab.corruption import phantom_row
from lab.hermes_fixtures import SMALL
from statewarden.config import Config
from statewarden.holders.scan import HolderScanner
from statewarden.incidents.signals import Signal
from statewarden.maintenance.plan import SIGNAL, STOP_UNIT, decide
from statewarden.watch.holders import HolderWatcher
from tests.support.cli import run_ctl
from tests.support.fake_hermes import install_fake_hermes
from tests.support.fake_litestream import install_fake_litestream
from tests.support.maintenance import exempt_comms, integrity, run_maintenance, session_ids
from tests.support.systemd_harness import UserSystemd, unavailable_reason, user_systemd

WAIT_S = 60.0
GATEWAY = "hermes-gateway.service"
LITESTREAM = "litestream.service"


def wait_for(cond: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def holder_pids(db: Path) -> set[int]:
    return {h.pid for h in HolderScanner([db], watch_opens=False).scan()[0].holders}


@pytest.fixture
def replicating(tmp_path: Path, hermes_home: Path) -> Iterator[subprocess.Popen[str]]:
    """The stand-in ``litestream replicate`` holding hermes_home's state.db (no unit)."""
    exe = install_fake_litestream(tmp_path / "bin")
    db = hermes_home / "state.db"
    proc = subprocess.Popen(
        [str(exe), "replicate", str(db), f"file://{tmp_path / 'replica'}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=WAIT_S)
        proc.stdout.close()


class TestAKnownHolder:
    def test_holders_names_it_litestream(
        self, hermes_home: Path, replicating: subprocess.Popen[str]
    ) -> None:
        """`holders --json` lists the replicating process as kind `litestream`."""
        r = run_ctl("holders", "--db", str(hermes_home / "state.db"), "--json")
        assert r.exit_code in (0, 1), r.stderr
        (db,) = json.loads(r.stdout)["databases"]
        kinds = {h["pid"]: h["kind"] for h in db["holders"]}
        assert kinds[replicating.pid] == "litestream"

    def test_it_is_not_an_unexpected_holder_by_default(
        self, hermes_home: Path, replicating: subprocess.Popen[str]
    ) -> None:
        """With the default holders.expected_kinds, a litestream holder opens no
        unexpected_holder incident (a kind left out of the list still does)."""
        db = hermes_home / "state.db"
        default = Config().holders.expected_kinds
        assert "litestream" in default
        w = HolderWatcher([db], max_writers=8, expected_kinds=default)
        w.diff(w.scan(), now=1.0)
        signals = [f for f in w.diff(w.scan(), now=2.0) if isinstance(f, Signal)]
        assert "unexpected_holder" not in {f.kind for f in signals}
        without = HolderWatcher(
            [db], max_writers=8, expected_kinds=tuple(k for k in default if k != "litestream")
        )
        found = [f for f in without.diff(without.scan(), now=1.0) if isinstance(f, Signal)]
        unexpected = [(f.kind, f.key) for f in found if f.kind == "unexpected_holder"]
        assert unexpected == [("unexpected_holder", str(replicating.pid))]

    def test_maintenance_stops_it_without_force(
        self, hermes_home: Path, replicating: subprocess.Popen[str]
    ) -> None:
        """The plan stops a litestream holder (SIGTERM, or its unit) without --force,
        as it does Hermes' own processes; a sqlite3 shell still needs --force."""
        scan = HolderScanner([hermes_home / "state.db"], watch_opens=False).scan()[0]
        (holder,) = [h for h in scan.holders if h.pid == replicating.pid]
        d = decide(holder, force=False, stop_interactive=False, systemd_ok=True)
        assert d.action == SIGNAL, d.reason
        in_unit = copy.copy(holder)
        in_unit.unit = LITESTREAM
        d = decide(in_unit, force=False, stop_interactive=False, systemd_ok=True)
        assert (d.action, d.reason) == (STOP_UNIT, f"litestream in {LITESTREAM}")
        shell = copy.copy(holder)
        shell.kind = "sqlite3"
        assert decide(shell, force=False, stop_interactive=False, systemd_ok=True).action == (
            "refuse"
        )


# -- a real user manager -----------------------------------------------------------------

UNIT = """\
[Unit]
Description={what} (statewarden litestream test)

[Service]
Environment=HERMES_HOME={home}
Environment=FAKE_HERMES_WRITE_EVERY=0.2
Environment=FAKE_LITESTREAM_SYNC_EVERY=0.3
ExecStart={command}
Restart=always
RestartSec=1
"""


def main_pid(manager: UserSystemd, unit: str) -> int:
    r = manager.systemctl("show", "-p", "MainPID", "--value", unit)
    return int(r.stdout.strip() or 0)


@pytest.mark.systemd
def test_maintenance_stops_and_restarts_the_litestream_unit(tmp_path: Path) -> None:
    """A damaged state.db held by hermes-gateway.service and litestream.service: plain
    `maintenance --yes` (no --force) stops both units, repairs and swaps, starts both
    again, and the new Litestream process replicates the new file."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    case = phantom_row(tmp_path / "hermes", SMALL)
    db = case.db
    distinct = set(session_ids(db))
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    install_fake_litestream(bin_dir)
    replica = tmp_path / "replica"
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps({"holders": {"exempt_comms": exempt_comms()}, "maintenance": {"settle": "0.5s"}})
    )
    with user_systemd(tmp_path / "manager") as manager:
        manager.write_unit(
            GATEWAY,
            UNIT.format(
                what="Hermes gateway", home=db.parent, command=f"{bin_dir}/hermes gateway run"
            ),
        )
        manager.write_unit(
            LITESTREAM,
            UNIT.format(
                what="Litestream",
                home=db.parent,
                command=f"{bin_dir}/litestream replicate {db} file://{replica}",
            ),
        )
        manager.daemon_reload()
        for unit in (GATEWAY, LITESTREAM):
            r = manager.systemctl("start", unit)
            assert r.returncode == 0, r.stderr
        wait_for(
            lambda: (
                {main_pid(manager, u) for u in (GATEWAY, LITESTREAM)} - {0} <= holder_pids(db)
                and 0 not in {main_pid(manager, u) for u in (GATEWAY, LITESTREAM)}
            ),
            "both units to hold the database",
        )
        before = {u: main_pid(manager, u) for u in (GATEWAY, LITESTREAM)}
        env = {
            **os.environ,
            "STATEWARDEN_CONFIG": str(config),
            "DBUS_SESSION_BUS_ADDRESS": manager.bus_address,
        }
        proc = run_maintenance("--db", str(db), "--yes", "--json", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        rep = json.loads(proc.stdout)
        assert rep["outcome"] == "repaired"
        assert sorted(rep["units_stopped"]) == sorted([GATEWAY, LITESTREAM])
        assert [u["result"] for u in rep["units_started"]] == ["done", "done"]
        assert rep["start_again"] == []
        after = {u: main_pid(manager, u) for u in (GATEWAY, LITESTREAM)}
        assert 0 not in after.values()
        assert not set(after.values()) & set(before.values())
        new_ino = db.stat().st_ino
        wait_for(lambda: set(after.values()) <= holder_pids(db), "the new processes to hold it")
        scan = HolderScanner([db], watch_opens=False).scan()[0]
        assert not any(h.stale for h in scan.holders)
        # The restarted Litestream syncs the new file (its inode), not the quarantined one.
        wait_for(
            lambda: (
                (replica / "syncs").exists()
                and (replica / "syncs").read_text().split()[2] == str(new_ino)
            ),
            "litestream to sync the new file",
        )
    ids = session_ids(db)
    assert len(ids) == len(set(ids))
    assert distinct <= set(ids)
    assert integrity(db) == "ok"
