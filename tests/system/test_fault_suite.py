"""A standing fault suite: maintenance killed with ``kill -9`` at random moments, then
``--resume``, with real Hermes writers committing rows all along.

Each trial starts a writer (Hermes' own ``SessionDB``, through ``tests/fake_hermes.py``)
that appends a message every 50 ms and, once each is committed, logs it; then runs
``statewardenctl maintenance --action vacuum`` (which goes through every step: pre-build,
signal, fence, settle, catch-up, swap, restart, post-check) and kills it with SIGKILL,
either right after a step chosen at random is in the ledger
(``$STATEWARDEN_CRASH_AT``) or after a random delay. ``--resume`` then rolls the run
back or forward. After every trial: state.db is whole, has its mode, nothing of ours is
left next to it, the ledger is finished, and every row any writer logged as committed
is in it exactly once. The trials are drawn from a fixed seed (``$STATEWARDEN_FAULT_SEED``
picks another), so a failure names the trial that reproduces it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from lab.corruption import phantom_row
from lab.hermes_fixtures import SMALL, make_home, writer_env
from statewarden.maintenance.ledger import read_ledger, run_dir
from tests.support.fake_hermes import LOG_ENV, WRITE_EVERY_ENV, install_fake_hermes
from tests.support.maintenance import exempt_comms, integrity, rows
from tests.support.repo import REPO

TRIALS = 10
SEED = int(os.environ.get("STATEWARDEN_FAULT_SEED", "20261201"))
STEPS = [
    "prebuild",
    "signal",
    "fence",
    "settle",
    "verify-source",
    "catch-up",
    "catch-up-copied",
    "swap",
    "sidecars-moved",
    "original-kept",
    "renamed",
    "swapped",
    "post-check",
]
MAX_DELAY_S = 2.0  # a run of this database takes 1.5 to 3 s here


def maintenance(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "statewarden.cli.ctl", "maintenance", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def committed(log: Path) -> list[str]:
    if not log.exists():
        return []
    return [line.split("\t", 1)[1] for line in log.read_text().splitlines() if "\t" in line]


@pytest.mark.skipif(os.geteuid() != 0, reason="maintenance as root, as CI runs it")
def test_kill_9_at_random_moments_loses_no_committed_row(tmp_path: Path) -> None:
    """Maintenance killed with SIGKILL or crashed at seeded random moments while a writer commits,
    then resumed: every committed row is there exactly once, the file is intact with its mode, no
    work file or unfinished run is left."""
    home = make_home(tmp_path / "home", SMALL)
    db = home / "state.db"
    mode = stat.S_IMODE(db.stat().st_mode)
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    log = tmp_path / "committed.log"
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "holders": {"exempt_comms": exempt_comms()},
                "maintenance": {"settle": "0.3s", "stop_grace": "3s", "settle_timeout": "30s"},
            }
        )
    )
    env = {**os.environ, "STATEWARDEN_CONFIG": str(config)}
    state = Path(env["XDG_STATE_HOME"]) / "statewarden"
    rng = random.Random(SEED)
    writer: subprocess.Popen[str] | None = None
    seen: list[str] = []
    killed = 0
    try:
        for trial in range(TRIALS):
            if writer is None or writer.poll() is not None:
                if writer is not None and writer.stdout is not None:
                    writer.stdout.close()  # stopped by the run: the next writer starts
                wenv = {**writer_env(home), WRITE_EVERY_ENV: "0.05", LOG_ENV: str(log)}
                writer = subprocess.Popen(
                    [str(bin_dir / "hermes"), "dashboard"],
                    env=wenv,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert writer.stdout is not None
                assert writer.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.0, 0.5))  # some rows before the run
            if rng.random() < 0.5:
                how = f"crash at {rng.choice(STEPS)}"
                run = maintenance(
                    "--db",
                    str(db),
                    "--action",
                    "vacuum",
                    "--yes",
                    env={**env, "STATEWARDEN_CRASH_AT": how.rsplit(maxsplit=1)[-1]},
                )
            else:
                delay = rng.uniform(0.0, MAX_DELAY_S)
                how = f"kill -9 after {delay:.2f} s"
                run = maintenance("--db", str(db), "--action", "vacuum", "--yes", env=env)
                try:
                    run.wait(timeout=delay)
                except subprocess.TimeoutExpired:
                    run.send_signal(signal.SIGKILL)
            out, err = run.communicate(timeout=300)
            what = f"trial {trial} (seed {SEED}): {how}, exit {run.returncode}"
            assert run.returncode in (0, -signal.SIGKILL), f"{what}: {out}{err}"
            killed += run.returncode == -signal.SIGKILL
            resumed = maintenance("--db", str(db), "--resume", "--json", env=env)
            rout, rerr = resumed.communicate(timeout=300)
            assert resumed.returncode in (0, 1), f"{what}; resume: {rout}{rerr}"
            assert rout.strip(), (
                f"{what}; resume (exit {resumed.returncode}) printed no report: {rerr}"
            )
            outcome = json.loads(rout)["outcome"]
            assert outcome in (
                "nothing to resume",
                "swapped",
                "rolled back: the database is unchanged",
            ), f"{what}: {outcome}"
            # While the writer may still be running: what it logged so far must be there.
            want = committed(log)
            assert len(want) > len(seen), f"{what}: no row committed since the last trial"
            seen = want
            got = Counter(r[0] for r in rows(db, "SELECT content FROM messages NOT INDEXED"))
            missing = [t for t in want if got[t] != 1]
            assert not missing, f"{what}: {len(missing)} committed rows not there exactly once"
            assert integrity(db) == "ok", what
            assert stat.S_IMODE(db.stat().st_mode) == mode, what
            assert not list(db.parent.glob(".statewarden-*")), what
            record = read_ledger(run_dir(state, db) / "run.jsonl")
            assert record is None or record.finished, what
    finally:
        if writer is not None:
            if writer.poll() is None:
                writer.send_signal(signal.SIGTERM)
            writer.wait(timeout=60)
            if writer.stdout is not None:
                writer.stdout.close()
    assert killed >= TRIALS // 4, f"only {killed} of {TRIALS} runs were killed mid-way"
    # The last writer's final rows, committed before it closed.
    want = committed(log)
    got = Counter(r[0] for r in rows(db, "SELECT content FROM messages NOT INDEXED"))
    assert [t for t in want if got[t] != 1] == []


IMPORT_TRIALS = 3
GOOD_LINES = 20000


@pytest.mark.skipif(os.geteuid() != 0, reason="maintenance as root, as CI runs it")
def test_kill_9_during_the_import_of_bad_lines_imports_each_good_line_once(
    tmp_path: Path,
) -> None:
    """A repair whose diverted transcript holds thousands of good lines among bad ones (a
    year-1 time, a lone surrogate, an integer over 2**63, bytes that are not UTF-8) is
    killed with SIGKILL at a seeded moment of its import, then resumed: every good line is
    in the file exactly once, no bad one cancelled them, the ledger is finished."""
    rng = random.Random(SEED + 1)
    lines = [json.dumps({"role": "user", "content": f"line {i}"}) for i in range(GOOD_LINES)]
    bad = [
        json.dumps({"role": "user", "content": "year one", "timestamp": "0001-01-01T00:00:00"}),
        '{"role": "user", "content": "\\ud83d"}',
        json.dumps({"role": "user", "content": 2**63 + 1}),
    ]
    for i, line in enumerate(bad):
        lines.insert(1 + i * 997, line)
    body = ("\n".join(lines) + "\n").encode() + b'{"role": "user", "content": "\xff"}\n'
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"holders": {"exempt_comms": exempt_comms()}}))
    env = {**os.environ, "STATEWARDEN_CONFIG": str(config)}
    state = Path(env["XDG_STATE_HOME"]) / "statewarden"
    killed = 0
    for trial in range(IMPORT_TRIALS):
        db = phantom_row(tmp_path / f"home-{trial}", SMALL).db
        (db.parent / "sessions").mkdir()
        (db.parent / "sessions" / "20261130_220000_abcdef.jsonl").write_bytes(body)
        ledger = run_dir(state, db) / "run.jsonl"
        run = maintenance("--db", str(db), "--yes", env=env)
        deadline = time.monotonic() + 120
        while run.poll() is None and time.monotonic() < deadline:
            if ledger.exists() and '"step": "import"' in ledger.read_text():
                time.sleep(rng.uniform(0.0, 0.3))
                run.send_signal(signal.SIGKILL)
                break
            time.sleep(0.01)
        out, err = run.communicate(timeout=300)
        what = f"trial {trial} (seed {SEED + 1}), exit {run.returncode}"
        assert run.returncode in (0, -signal.SIGKILL), f"{what}: {out}{err}"
        killed += run.returncode == -signal.SIGKILL
        resumed = maintenance("--db", str(db), "--resume", "--json", env=env)
        rout, rerr = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, f"{what}; resume: {rout}{rerr}"
        got = Counter(r[0] for r in rows(db, "SELECT content FROM messages NOT INDEXED"))
        wrong = [i for i in range(GOOD_LINES) if got[f"line {i}"] != 1]
        assert wrong == [], f"{what}: {len(wrong)} good lines not there exactly once"
        assert got["year one"] == 1, what
        assert integrity(db) == "ok", what
        record = read_ledger(ledger)
        assert record is None or record.finished, what
    assert killed >= 1, "no run was killed during its import"
