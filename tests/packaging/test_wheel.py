"""The wheel as pip installs it: the man pages land where man looks for the program,
wherever pip puts it (a virtualenv here: ``<venv>/share/man`` beside ``<venv>/bin``), so
``man statewarden`` works and ``systemd-analyze verify`` of the unit's
``Documentation=man:...`` finds every page, without ``statewardenctl install``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.repo import REPO

PAGES = ("statewarden", "statewardenctl", "statewarden.yaml")


@pytest.mark.skipif(shutil.which("man") is None, reason="man-db is not installed")
def test_man_finds_every_page_of_a_venv_install(tmp_path: Path) -> None:
    """A wheel built from the tree and installed into a fresh virtualenv (no dependencies:
    only its files matter here): with the venv's bin on PATH and nothing else of ours, man
    finds all three pages in the venv's share/man."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("statewarden-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # The venv's own pip: a pip of this environment given --prefix would take this
    # environment's statewarden away as an "upgrade".
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
    }
    for page in PAGES:
        r = subprocess.run(
            ["man", "-w", page], env=env, capture_output=True, text=True, check=False
        )
        assert r.returncode == 0, (page, r.stderr)
        assert Path(r.stdout.strip()).resolve().is_relative_to(venv.resolve()), r.stdout
    # And not found without the venv on PATH: the venv's copy is the one found above.
    bare = {**env, "PATH": "/usr/bin:/bin"}
    again = subprocess.run(
        ["man", "-w", "statewarden"], env=bare, capture_output=True, text=True, check=False
    )
    assert again.returncode != 0 or not again.stdout.startswith(str(venv))
