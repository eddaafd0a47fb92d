"""The one maintenance configuration the tests that run real maintenance share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from statewarden.holders.scan import HolderScanner

REPO = Path(__file__).resolve().parents[2]


def exempt_comms() -> list[str]:
    """Processes of this machine that nobody may inspect (a sandbox's init): exempt them,
    as a user would in holders.exempt_comms, so scans of our own processes can complete."""
    scan = HolderScanner([Path("/nonexistent/state.db")], watch_opens=False).scan()[0]
    return sorted({u["comm"] for u in scan.uninspectable})


def maintenance_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config with short settle and grace times, made the one the CLI reads."""
    path = tmp_path / "config.yaml"
    path.write_text(
        json.dumps(
            {
                "holders": {"exempt_comms": exempt_comms()},
                "maintenance": {
                    "settle": "0.5s",
                    "stop_grace": "3s",
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
    *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``statewardenctl maintenance ARGS`` as a whole process (stopping units and
    holders is what it does: never in the test's own process), with ``env`` as its
    environment (this process's when None), no stdin, five minutes at most."""
    return subprocess.run(
        [sys.executable, "-m", "statewarden.cli.ctl", "maintenance", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(env) if env is not None else dict(os.environ),
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
