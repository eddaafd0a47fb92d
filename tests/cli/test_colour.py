"""Colour only on a terminal and never with ``NO_COLOR`` set (no-color.org): the CLI's
progress bar (rich) and the daemon's console log (structlog), each a real process, on a
pseudo-terminal for the TTY case."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

SGR = re.compile(rb"\x1b\[[0-9;]*m")  # a colour or style escape
CTL = Path(sys.executable).parent / "statewardenctl"
LOG = (
    "from statewarden.logs import configure, get_logger;"
    " configure('info', 'console'); get_logger().warning('hello', k=1)"
)


def in_pty(argv: list[str], env: dict[str, str]) -> tuple[int, bytes]:
    """``argv`` with stdin, stdout and stderr on a new pseudo-terminal; all it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return proc.wait(timeout=120), out


def piped(argv: list[str], env: dict[str, str]) -> tuple[int, bytes]:
    r = subprocess.run(argv, env=env, capture_output=True, timeout=120, check=False)
    return r.returncode, r.stdout + r.stderr


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm-256color"
    return env


@pytest.mark.parametrize(
    ("no_color", "runner", "coloured"),
    [(None, in_pty, True), ("1", in_pty, False), ("", in_pty, True), (None, piped, False)],
)
def test_console_log(no_color: str | None, runner: object, coloured: bool) -> None:
    """The console log is coloured on a terminal, unless NO_COLOR is set to something, and never
    when piped."""
    env = base_env() | ({} if no_color is None else {"NO_COLOR": no_color})
    code, out = runner([sys.executable, "-c", LOG], env)  # type: ignore[operator]
    assert code == 0, out
    assert b"hello" in out
    assert bool(SGR.search(out)) is coloured, out


@pytest.mark.parametrize(
    ("no_color", "runner", "coloured"),
    [(None, in_pty, True), ("yes", in_pty, False), (None, piped, False)],
)
def test_progress_bar(
    hermes_home: Path, no_color: str | None, runner: object, coloured: bool
) -> None:
    """check's progress bar is drawn and coloured on a terminal, not with NO_COLOR set, and
    uncoloured when piped."""
    env = base_env() | ({} if no_color is None else {"NO_COLOR": no_color})
    argv = [str(CTL), "check", "--db", str(hermes_home / "state.db"), "--progress", "bar"]
    code, out = runner(argv, env)  # type: ignore[operator]
    assert code == 0, out
    if runner is in_pty:
        assert b"copy" in out  # the bar was drawn (rich draws no live bar off a terminal)
    assert bool(SGR.search(out)) is coloured, out
