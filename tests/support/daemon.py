"""A real `statewarden run` subprocess for tests, with its stderr read line by line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypeVar

from lab.corruption import phantom_row
from lab.hermes_fixtures import TINY
from tests.support.cli import run_ctl

T = TypeVar("T")


# The daemon's entry point with the quiet period after a maintenance run (30 s) set to the
# seconds given as the first argument: for the tests that wait the period out, which prove
# the order (muted in the run and after it, then unmuted and the held alert sent once),
# not its length.
SHORT_QUIET = (
    "import sys\n"
    "import statewarden.maintenance.auto as auto\n"
    "auto.QUIET_AFTER_S = float(sys.argv.pop(1))\n"
    "from statewarden.cli.daemon_cmd import main\n"
    "main()\n"
)


class DaemonProc:
    def __init__(
        self,
        env: dict[str, str],
        *args: str,
        prefix: tuple[str, ...] = (),
        quiet_after_s: float | None = None,
    ) -> None:
        """``prefix`` runs the daemon under another command (e.g. nsenter);
        ``quiet_after_s`` shortens the quiet period after a maintenance run."""
        self.env = env
        entry = ["-m", "statewarden.cli.daemon_cmd"]
        if quiet_after_s is not None:
            entry = ["-c", SHORT_QUIET, str(quiet_after_s)]
        self.proc = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                *entry,
                "run",
                "--log-format",
                "plain",
                *args,
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        # What the daemon wrote after it was stopped, read before its pipe was closed.
        self._after_stop: list[str] = []

    def wait_for_line(self, text: str, timeout_s: float = 30) -> str:
        """Read stderr until a line contains ``text``; fail with what was seen."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self._next_line()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if text in line:
                return line
        raise AssertionError(f"never saw {text!r}; saw: {self.lines}")

    def _next_line(self) -> str:
        if self._after_stop:
            return self._after_stop.pop(0)
        if self.proc.stderr is None or self.proc.stderr.closed:
            return ""
        return self.proc.stderr.readline()

    def output(self) -> list[str]:
        """Every stderr line: those read so far and, once stopped, all the rest."""
        return self.lines + [line.rstrip("\n") for line in self._after_stop]

    def ctl(self, *args: str) -> Any:
        """Run `statewardenctl ARGS --json` against this daemon's environment."""
        r = run_ctl(*args, "--json", env=self.env)
        assert r.exit_code == 0, r.stderr
        return json.loads(r.stdout)

    def incidents_of(self, kind: str) -> list[dict[str, Any]]:
        """Open incidents of one kind, as `statewardenctl incidents --json` lists them."""
        return [i for i in self.ctl("incidents")["incidents"] if i["kind"] == kind]

    def ctl_raw(self, request: str, **args: Any) -> Any:
        """One request straight on this daemon's control socket."""
        from statewarden.daemon.control import request as send

        return send(
            Path(self.env["XDG_RUNTIME_DIR"]) / "statewarden" / "control.sock", request, **args
        )

    def stop(self, signum: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stderr is not None and not self.proc.stderr.closed:
                self._after_stop = self.proc.stderr.read().splitlines(keepends=True)
                self.proc.stderr.close()


def daemon_env(tmp_path: Path, home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HERMES_HOME=str(home),
        XDG_CONFIG_HOME=str(tmp_path / "xdg-config"),
        XDG_STATE_HOME=str(tmp_path / "xdg-state"),
        XDG_RUNTIME_DIR=str(tmp_path / "xdg-runtime"),
    )
    return env


def configured(tmp_path: Path, home: Path, **watch: object) -> dict[str, str]:
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"watch": watch}))
    env = daemon_env(tmp_path, home)
    env["STATEWARDEN_CONFIG"] = str(config)
    return env


def phantom_home(tmp_path: Path) -> tuple[Path, int]:
    case = phantom_row(tmp_path / "hermes", TINY, cell=2)
    (case.db.parent / "logs").mkdir(exist_ok=True)
    return case.db.parent, case.phantom["sessions"]
