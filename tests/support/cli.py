"""Running ``statewardenctl`` in-process, as a user would type it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from click.testing import CliRunner

from statewarden.cli.ctl import main as ctl


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
