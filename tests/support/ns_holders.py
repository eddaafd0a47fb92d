"""Run ``statewardenctl holders`` inside a private PID namespace, next to one real holder.

``unshare --pid --fork --mount-proc python -m tests.support.ns_holders HOME [CLI ARGS...]``
(root only). Inside the namespace this driver is PID 1 and every process is ours, so
a scan can be complete: the machine's own uninspectable processes are out of sight.
Prints one JSON object: the holder's pid (as seen inside), the CLI's exit code,
stdout and stderr.

With ``NS_HIDEPID=N`` the namespace's /proc is remounted ``hidepid=N`` first (more
options may follow: ``2,gid=G``) (the
namespace needs its own mount namespace too: ``unshare -m``); with ``NS_UID=U`` the
CLI runs as uid U (``setpriv``; in the groups of ``NS_GROUPS=G,...`` if given), so the
root holder is another user's process; with
``NS_NO_HOLDER=1`` no holder is started inside.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from lab.hermes_fixtures import holding
from tests.support.repo import REPO


def holders_in_a_private_pid_namespace(
    home: Path,
    *cli_args: str,
    own_mounts: bool = False,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run this driver in a fresh PID namespace and return what it printed.

    Under ``sh``, so the driver is not the namespace's PID 1 (whose children would have
    PPID 1 and count as orphans). ``own_mounts`` gives the namespace its own mount
    namespace as well, which a ``NS_HIDEPID`` remount needs; ``env`` replaces the
    environment (the ``NS_*`` settings go there). The ``unshare`` itself must succeed.
    """
    unshare = ["unshare", *(["-m", "-p"] if own_mounts else ["--pid"]), "--fork", "--mount-proc"]
    driver = [sys.executable, "-m", "tests.support.ns_holders", str(home), *cli_args]
    proc = subprocess.run(
        [*unshare, "sh", "-c", '"$@"; exit $?', "sh", *driver],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def main() -> None:
    """Start the holder (unless told not to), run the CLI, print one JSON object."""
    home = Path(sys.argv[1])
    args = sys.argv[2:]
    hidepid = os.environ.get("NS_HIDEPID")
    if hidepid:
        subprocess.run(["mount", "-o", f"remount,hidepid={hidepid}", "/proc"], check=True)
    cmd = [sys.executable, "-m", "statewarden.cli.ctl", "holders", *args]
    uid = os.environ.get("NS_UID")
    if uid:
        groups = os.environ.get("NS_GROUPS")
        group_args = ["--groups", groups] if groups else ["--clear-groups"]
        cmd = ["setpriv", "--reuid", uid, "--regid", uid, *group_args, *cmd]
    with contextlib.ExitStack() as stack:
        pid = None
        if not os.environ.get("NS_NO_HOLDER"):
            pid = stack.enter_context(holding(home)).pid
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        print(
            json.dumps(
                {"holder": pid, "rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
            )
        )


if __name__ == "__main__":
    main()
