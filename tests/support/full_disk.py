"""A full disk, for real: a tiny tmpfs mounted on a folder and filled to the last byte.

Call only in a private mount namespace (``unshare -m --propagation private``, or the
systemd harness's), as root: the mount is then gone with the namespace.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

FULL_DISK_SIZE = "64k"


def mount_full_tmpfs(folder: Path, size: str = FULL_DISK_SIZE) -> None:
    """Mount a ``size`` tmpfs on ``folder`` and fill it: the next write there fails with
    ENOSPC (No space left on device)."""
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]
    subprocess.run(mount, check=True)
    fill(folder)


def fill(folder: Path) -> None:
    """Write ``folder/fill`` until the filesystem under ``folder`` has no byte left."""
    try:
        with open(folder / "fill", "wb") as f:
            while True:
                f.write(b"x" * 4096)
                f.flush()
    except OSError:
        pass
