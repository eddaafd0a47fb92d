"""Run ``statewardenctl holders`` inside a private PID namespace, next to one real holder.

``unshare --pid --fork --mount-proc python -m tests.ns_holders HOME [CLI ARGS...]``
(root only). Inside the namespace this driver is PID 1 and every process is ours, so
a scan can be complete: the machine's own uninspectable processes are out of sight.
Prints one JSON object: the holder's pid (as seen inside), the CLI's exit code,
stdout and stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lab.hermes_fixtures import holding


def main() -> None:
    home = Path(sys.argv[1])
    args = sys.argv[2:]
    with holding(home) as h:
        proc = subprocess.run(
            [sys.executable, "-m", "statewarden.cli.ctl", "holders", *args],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        print(json.dumps({"holder": h.pid, "rc": proc.returncode,
                          "stdout": proc.stdout, "stderr": proc.stderr}))  # fmt: skip


if __name__ == "__main__":
    main()
