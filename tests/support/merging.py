"""What the merge tests share: homes whose state.db Hermes 0.22 moved aside and started
fresh (``Vanished``), a real Hermes 0.22 writer (``Writer``), the original a run
quarantined, and a run's JSON report."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lab.hermes_fixtures import (
    NEWEST,
    NEWEST_HERMES,
    Spec,
    hermes_python,
    make_home,
    writer_env,
)
from statewarden.maintenance.swap import list_quarantine
from tests.support.fake_hermes import LOG_ENV, WRITE_EVERY_ENV, install_fake_hermes
from tests.support.vanishing import damage, hermes_starts_fresh


class Vanished:
    """Homes whose NEWEST state.db (12 sessions, 60 messages) Hermes 0.22 moved aside,
    then wrote 5 sessions and 20 messages into a fresh file. Hermes 0.22 does that once
    per damage and seed in a module (a second each); each test gets a copy of that home,
    the moved-aside file beside state.db under the name Hermes gave it."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.made: dict[tuple[str, int], tuple[Path, str]] = {}

    def __call__(self, tmp_path: Path, how: str = "zeroed", *, seed: int = 2) -> tuple[Path, Path]:
        """A copy of the home in ``tmp_path``: (state.db, the old file)."""
        if (how, seed) not in self.made:
            home = make_home(self.base / f"{how}-{seed}" / "hermes", NEWEST)
            damage(home / "state.db", how)
            old = hermes_starts_fresh(home, sessions=5, messages=20, seed=seed)
            self.made[how, seed] = (home, old.name)
        home, old_name = self.made[how, seed]
        copy = Path(shutil.copytree(home, tmp_path / "hermes", symlinks=True))
        return copy / "state.db", copy / old_name


class Writer:
    """Hermes 0.22's own SessionDB in a real process (``hermes dashboard``), appending a
    message every ``every`` seconds and logging each one once it is committed."""

    def __init__(self, tmp_path: Path, home: Path, every: float = 0.1) -> None:
        bin_dir = tmp_path / "bin"
        install_fake_hermes(bin_dir, python=hermes_python(NEWEST_HERMES))
        self.log = tmp_path / "committed.log"
        env = writer_env(home)
        env[WRITE_EVERY_ENV] = str(every)
        env[LOG_ENV] = str(self.log)
        self.proc = subprocess.Popen(
            [str(bin_dir / "hermes"), "dashboard"], env=env, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def committed(self) -> list[str]:
        """The texts of every message it committed."""
        if not self.log.exists():
            return []
        return [line.split("\t", 1)[1] for line in self.log.read_text().splitlines()]

    def stop(self) -> int | None:
        code = self.proc.poll()
        if code is None:
            self.proc.kill()
        self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return code


def quarantined(tmp_path: Path) -> Path:
    """The original the last run quarantined: the fresh file as it was at the swap."""
    entry = list_quarantine(tmp_path / "xdg-state" / "statewarden")[0]
    return entry.path / "state.db"


def report_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        return dict(json.loads(proc.stdout))
    except ValueError:
        raise AssertionError(f"no JSON report: rc {proc.returncode}: {proc.stderr}") from None


def other_home_db(base: Path) -> Path:
    """Another Hermes home's state.db under ``base``: other sessions, another
    ``store_instance_id``."""
    return make_home(base / "hermes", Spec(hermes=NEWEST_HERMES, seed=5)) / "state.db"


@pytest.fixture(scope="module")
def vanished(tmp_path_factory: pytest.TempPathFactory) -> Vanished:
    """The maker of homes whose state.db Hermes moved aside (``Vanished``), one a test module."""
    return Vanished(tmp_path_factory.mktemp("vanished"))


@pytest.fixture(scope="module")
def other_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another Hermes home's state.db, once per test module."""
    return other_home_db(tmp_path_factory.mktemp("other"))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
