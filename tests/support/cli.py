"""Running ``statewardenctl`` in-process, as a user would type it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from click.testing import CliRunner

from statewarden.cli.ctl import main as ctl
from tests.support.repo import REPO

if TYPE_CHECKING:
    from subprocess import CompletedProcess


class CtlRun(NamedTuple):
    """One command's outcome: ``code, out, err = run_ctl(...)`` or by name."""

    exit_code: int
    stdout: str
    stderr: str


def run_ctl(*args: str, env: Mapping[str, str | None] | None = None) -> CtlRun:
    """``statewardenctl ARGS`` with ``env`` added to the environment; stdout and stderr
    are kept apart."""
    result = CliRunner(env=env).invoke(ctl, list(args))
    return CtlRun(result.exit_code, result.stdout, result.stderr)


def run_installed(
    *args: str, env: Mapping[str, str], timeout_s: float = 180, uid: int | None = None
) -> CtlRun:
    """The installed ``statewardenctl`` script as a whole process (what a unit or a shell
    runs), with exactly ``env`` as its environment; as ``uid`` (its own group, no other)
    through ``setpriv`` when given (root only)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "statewardenctl"
    who = () if uid is None else ("setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups")
    r = subprocess.run(
        [*who, str(script), *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return CtlRun(r.returncode, r.stdout, r.stderr)


def ctl_process(
    *args: str, env: Mapping[str, str] | None = None, prefix: Sequence[str] = ()
) -> CompletedProcess[str]:
    """``statewardenctl ARGS`` as a process of this interpreter, from the repository, its
    stdin closed: for a command that might hang (a FIFO beside a database), which 120 s
    end. ``env`` replaces the environment when given; ``prefix`` runs it through another
    command (``setpriv`` to another uid, ``nsenter`` into a namespace)."""
    import subprocess
    import sys

    return subprocess.run(
        [*prefix, sys.executable, "-m", "statewarden.cli.ctl", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=120,
        env=None if env is None else dict(env),
    )


def installed_ctl_imports(
    *args: str, env: Mapping[str, str]
) -> tuple[CompletedProcess[str], set[str]]:
    """The installed ``statewardenctl ARGS`` as a whole process with exactly ``env``
    (from the repository), and the modules it imported (``PYTHONPROFILEIMPORTTIME``)."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.run(
        [str(Path(sys.executable).with_name("statewardenctl")), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        env={**env, "PYTHONPROFILEIMPORTTIME": "1"},
    )
    modules = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    return proc, modules
