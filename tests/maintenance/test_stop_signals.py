"""Invariant: what is stopped is started again, whatever ends the command but SIGKILL.
A ``statewardenctl maintenance`` that gets SIGTERM (a ``kill``) or SIGHUP (its terminal
or SSH session closed) after it stopped Hermes cancels as Ctrl-C does: the run rolls
back (exit 1), the fence comes down (state.db's mode as it was), its ledger is finished
(the next run is not refused), the report names what it stopped, and no row is lost.
Before, either signal ended the process at once: no word, Hermes stopped, state.db left
at mode 000, every later run refused until ``--resume``. Real processes: the run, and
a writer through Hermes' own SessionDB."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.corruption import phantom_row
from lab.hermes_fixtures import SMALL
from statewarden.maintenance.run import PAST_THE_SWAP
from tests.support.fake_hermes import install_fake_hermes
from tests.support.maintenance import (
    FakeHermes,
    maintenance_config,
    rows,
    run_maintenance,
)
from tests.support.repo import REPO

pytestmark = pytest.mark.process

CTL = [sys.executable, "-m", "statewarden.cli.ctl"]


def _run_until_settle(db: Path, err: Path) -> subprocess.Popen[str]:
    """The run as a process of its own, its JSON events in ``err``; returned once it
    has stopped the holder and begun to settle (its ``settle`` step, written to the
    ledger before the event)."""
    with err.open("w") as errors:
        proc = subprocess.Popen(
            [*CTL, "maintenance", "--db", str(db), "--yes", "--json", "--here"],
            stdout=subprocess.PIPE,
            stderr=errors,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=REPO,
        )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for line in err.read_text().splitlines():
            if line.startswith("{") and json.loads(line).get("step") == "settle":
                return proc
        assert proc.poll() is None, err.read_text()
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("the run never reached its settle step")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_after_the_stop_rolls_the_run_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals
) -> None:
    """The signal lands while the run settles, Hermes stopped and state.db fenced: exit
    1, rolled back and said so, the process it stopped named, state.db's mode and rows
    as before, and a new run on the database is not refused."""
    maintenance_config(tmp_path, monkeypatch)
    case = phantom_row(tmp_path / "home", SMALL)
    db = case.db
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    mode = db.stat().st_mode & 0o777
    writer = FakeHermes(bin_dir, db.parent, "dashboard", write_every=0.1)
    try:
        proc = _run_until_settle(db, tmp_path / "events.txt")
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)
    finally:
        writer.stop()
    assert proc.returncode == 1, out + (tmp_path / "events.txt").read_text()
    report = json.loads(out)
    assert "rolled back" in json.dumps(report)
    assert [p["pid"] for p in report["start_again"]] == [writer.pid]
    assert db.stat().st_mode & 0o777 == mode
    assert rows(db, "SELECT count(*) FROM sessions")[0][0] > 0
    again = run_maintenance("--db", str(db), "--dry-run", "--here")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "did not finish" not in again.stderr
    assert os.path.exists(db)


def test_an_answer_nobody_can_read_does_not_keep_the_ledger_open(tmp_path: Path) -> None:
    """A cancel asked past the swap (a SIGHUP as an SSH session closes) is answered on
    the run's output, which cannot be written any more (a closed terminal: EIO; a full
    disk under a redirect: ENOSPC). The run goes on unheard and finishes its ledger: the
    next run is not refused (the failed write once kept the ``finished`` line out)."""
    from statewarden.maintenance.journal import Journal
    from statewarden.maintenance.ledger import Ledger, read_ledger
    from statewarden.maintenance.report import RunReport

    heard: list[dict[str, object]] = []

    def terminal(event: dict[str, object]) -> None:
        if event["event"] == "cancel":
            raise OSError(errno.EIO, "Input/output error")
        heard.append(event)

    ledger = Ledger(tmp_path)
    journal = Journal(tmp_path / "state.db", ledger, RunReport("state.db", "repair"), terminal)
    ledger.create({"run_id": "r", "db": "state.db"})
    journal.step("swap")
    journal.commit()
    assert journal.cancel() == (False, PAST_THE_SWAP)
    journal.step("post-check")
    report = journal.finish("repaired", 0)
    record = read_ledger(ledger.path)
    assert record is not None
    assert record.finished
    assert report.exit_code == 0
    assert [e["event"] for e in heard] == ["step"]  # unheard from the failed write on
