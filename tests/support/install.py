"""statewarden installed with `statewardenctl install` into a private systemd --user manager."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from statewarden.cli import install as inst
from tests.support.cli import CtlRun
from tests.support.systemd_harness import UserSystemd


class Installed:
    def __init__(self, manager: UserSystemd, env: dict[str, str]) -> None:
        self.manager = manager
        self.env = env

    def ctl(self, *args: str) -> CtlRun:
        """The installed statewardenctl, run as the manager's user."""
        script = str(Path(sys.executable).parent / "statewardenctl")
        r = subprocess.run(
            self.manager.as_user([script, *args]),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        return CtlRun(r.returncode, r.stdout, r.stderr)

    def show(self, *props: str) -> dict[str, str]:
        r = self.manager.systemctl("show", inst.UNIT, *(f"-p{p}" for p in props))
        return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)

    def wait_running(self, timeout_s: float = 60.0, other_than: str = "") -> dict[str, str]:
        deadline = time.monotonic() + timeout_s
        props: dict[str, str] = {}
        while time.monotonic() < deadline:
            props = self.show("ActiveState", "SubState", "MainPID", "StatusText", "NRestarts")
            if (
                props.get("ActiveState") == "active"
                and props.get("SubState") == "running"
                and props.get("StatusText")
                and props.get("MainPID") not in ("0", other_than)
            ):
                return props
            time.sleep(0.1)
        raise AssertionError(f"statewarden.service not running: {props}")
