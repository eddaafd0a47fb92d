"""The one maintenance configuration the tests that run real maintenance share."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import apsw
import pytest

from lab.corruption import Case, phantom_row
from lab.hermes_fixtures import SMALL, writer_env
from statewarden.holders.scan import HolderScanner
from tests.support.daemon import daemon_env
from tests.support.fake_hermes import WRITE_EVERY_ENV, install_fake_hermes
from tests.support.repo import REPO


def exempt_comms() -> list[str]:
    """Processes of this machine that nobody may inspect (a sandbox's init): exempt them,
    as a user would in holders.exempt_comms, so scans of our own processes can complete."""
    scan = HolderScanner([Path("/nonexistent/state.db")], watch_opens=False).scan()[0]
    return sorted({u["comm"] for u in scan.uninspectable})


def maintenance_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, stop_grace: str = "3s"
) -> Path:
    """A config with short settle and grace times, made the one the CLI reads. The 3 s
    ``stop_grace`` lets a loaded machine's Hermes writers exit on SIGTERM (tests assert
    they did, cleanly); a test whose holders ignore SIGTERM waits the whole grace out,
    and gives the shortest one the config takes (1 s)."""
    path = tmp_path / "config.yaml"
    path.write_text(
        json.dumps(
            {
                "holders": {"exempt_comms": exempt_comms()},
                "maintenance": {
                    "settle": "0.5s",
                    "stop_grace": stop_grace,
                    "respawn_limit": 2,
                    "settle_timeout": "20s",
                    "snapshots_keep": 3,
                },
            }
        )
    )
    monkeypatch.setenv("STATEWARDEN_CONFIG", str(path))
    return path


def run_maintenance(
    *args: str, env: Mapping[str, str] | None = None, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """``statewardenctl maintenance ARGS`` as a whole process (stopping units and
    holders is what it does: never in the test's own process), with ``env`` as its
    environment (this process's when None), no stdin, five minutes at most; through
    ``prefix`` when given (``setpriv`` to another uid)."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "statewarden.cli.ctl", "maintenance", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(env) if env is not None else dict(os.environ),
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )


def ctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_maintenance(*args, env=env)


def report_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        return dict(json.loads(proc.stdout))
    except ValueError:
        raise AssertionError(f"no JSON report: rc {proc.returncode}: {proc.stderr}") from None


def rows(db: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The rows as SQLite presents ``db`` to Hermes, read from a copy of its bundle (the
    file is never written): a writer killed mid-transaction in rollback mode (Hermes 0.22
    on this SQLite) leaves a hot ``-journal`` beside the file, a quarantined original keeps
    it, and SQLite rolls that transaction back, where an immutable read would see its
    half-written pages and a read-only one cannot open the file at all."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / db.name
        for suffix in ("", "-wal", "-journal"):
            if os.path.exists(f"{db}{suffix}"):
                shutil.copyfile(f"{db}{suffix}", f"{copy}{suffix}")
        conn = apsw.Connection(str(copy))
        try:
            return [tuple(r) for r in conn.execute(sql, args)]
        finally:
            conn.close()


def ledger_of(db: Path) -> list[dict[str, Any]]:
    """The lines of the run ledger of ``db`` (the state folder ``$XDG_STATE_HOME`` names)."""
    from statewarden.maintenance.ledger import read_ledger, run_dir

    state = Path(os.environ["XDG_STATE_HOME"]) / "statewarden"
    record = read_ledger(run_dir(state, db) / "run.jsonl")
    assert record is not None
    return record.entries


def session_ids(db: Path) -> list[str]:
    return [r[0] for r in rows(db, "SELECT id FROM sessions NOT INDEXED")]


def integrity(db: Path) -> str:
    return str(rows(db, "PRAGMA integrity_check")[0][0])


def phantom_home_for_the_daemon(
    tmp_path: Path, settings: dict[str, Any]
) -> tuple[Path, dict[str, str]]:
    """A Hermes home with a phantom row (and a logs folder) in ``tmp_path``, a config of
    ``settings`` that also exempts this machine's uninspectable processes, and a daemon
    environment that reads it. Returns the database and the environment."""
    case = phantom_row(tmp_path / "hermes", SMALL)
    (case.db.parent / "logs").mkdir(exist_ok=True)
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"holders": {"exempt_comms": exempt_comms()}, **settings}))
    env = daemon_env(tmp_path, case.db.parent)
    env["STATEWARDEN_CONFIG"] = str(config)
    return case.db, env


def phantom_home_for_nobody(base: Path, *, stop_grace: str) -> tuple[Case, dict[str, str]]:
    """Fill ``base`` for maintenance run by uid 65534 (nobody) from a shell script: a Hermes
    home with a phantom row, the ``hermes`` stand-in in ``bin``, a state folder and a config
    with a 1 s settle and ``stop_grace``, all owned by that uid. Returns the case and the
    environment the script reads (``BASE``, ``PY``, ``REPO``, ``STATEWARDEN_CONFIG``)."""
    base.chmod(0o755)
    case = phantom_row(base / "home", SMALL)
    install_fake_hermes(base / "bin")
    (base / "state").mkdir()
    (base / "config.yaml").write_text(
        json.dumps({"maintenance": {"settle": "1s", "stop_grace": stop_grace}})
    )
    subprocess.run(["chown", "-R", "65534:65534", str(base)], check=True)
    env = {
        **os.environ,
        "BASE": str(base),
        "PY": sys.executable,
        "REPO": str(REPO),
        "STATEWARDEN_CONFIG": str(base / "config.yaml"),
    }
    return case, env


class FakeHermes:
    """A real process running the `hermes` stand-in (Hermes' own SessionDB) on a home."""

    def __init__(self, bin_dir: Path, home: Path, *args: str, write_every: float = 0.2) -> None:
        env = writer_env(home)
        env[WRITE_EVERY_ENV] = str(write_every)
        self.proc = subprocess.Popen(
            [str(bin_dir / "hermes"), *args], env=env, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
