"""Facts about test processes read from ``/proc``."""

from __future__ import annotations


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is neither a zombie nor dead."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
