"""The one maintenance configuration the tests that run real maintenance share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statewarden.holders.scan import HolderScanner


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
