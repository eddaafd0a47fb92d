"""The two ways ``statewardenctl`` reads a command, run as whole processes: the quick
entry point (:mod:`statewarden.cli.quick`, what the installed launcher runs) and the
click group. Shared by the tests that hold them equal (``tests/cli/test_quick*.py``)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.repo import REPO

QUICK = [sys.executable, "-c", "from statewarden.cli.quick import main; main()"]
CLICK = [sys.executable, "-m", "statewarden.cli.ctl"]
# The modules a run loaded, printed at exit to stderr (after the command's own output):
# at the interpreter's exit, or at the quick path's own end (os._exit, no teardown).
# Space-separated, not JSON: the probe must not load json (and re) itself.
PROBE = (
    "import atexit, os, sys\n"
    "def modules(): print('MODULES ' + ' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    "atexit.register(modules)\n"
    "ending = os._exit\n"
    "def end(code):\n"
    "    modules()\n"
    "    sys.stderr.flush()\n"
    "    ending(code)\n"
    "os._exit = end\n"
    "from statewarden.cli.quick import main\n"
    "main()\n"
)
PROBED = [sys.executable, "-c", PROBE]


def loaded(stderr: str) -> list[str]:
    """The modules the probe printed."""
    return stderr.rsplit("MODULES ", 1)[1].split()


def run(
    base: list[str], *args: str, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``base ARGS`` to its end, output kept. argv[0] is the program's name in click's
    messages: the same for both ways."""
    return subprocess.run(
        [*base, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=False,
        timeout=timeout,
    )


def both_ways(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``ARGS`` (a command and its options) through the quick path and through click;
    they must agree on stdout, stderr and the exit code. Returns the quick run."""
    quick = run(QUICK, *args, env=env)
    slow = run(CLICK, *args, env=env)
    assert (quick.returncode, quick.stdout, quick.stderr) == (
        slow.returncode,
        slow.stdout,
        slow.stderr,
    ), args
    return quick
