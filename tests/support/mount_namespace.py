"""Shell scripts run in a private mount namespace, as root: what they mount (a tiny tmpfs
for a full disk, a bind mount) is gone with the namespace and never seen by the machine."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

from tests.support.repo import REPO


def sh_in_private_mounts(
    script: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``sh -c script`` in a mount namespace of its own (``unshare -m --propagation
    private``) from the repository's root, reading nothing; ``args`` are its ``$0 $1 ...``,
    its output is captured as text and its exit code left to the caller."""
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, *args],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
