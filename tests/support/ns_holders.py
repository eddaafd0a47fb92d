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

from lab.hermes_fixtures import holding


def main() -> None:
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
