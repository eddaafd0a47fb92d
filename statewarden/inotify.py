"""When inotify cannot be had: which limit ran out, and what to raise.

inotify is per user: ``fs.inotify.max_user_instances`` (128 on Debian) descriptors from
``inotify_init``, ``fs.inotify.max_user_watches`` watches from ``inotify_add_watch``.
Editors, file syncers and containers of the same user use them up; then
``inotify_init`` fails with ``EMFILE`` and ``inotify_add_watch`` with ``ENOSPC``. The
watchers that use inotify (file events, the holder scanner's open watch) fall back to
polling and say so with ``unavailable``: one line naming the limit, its value now and
the ``sysctl`` that raises it (or, for ``EMFILE`` in a process at its own descriptor limit,
that limit).
"""

from __future__ import annotations

import errno as errnos
import os
import resource
from pathlib import Path

SYSCTL_DIR = Path("/proc/sys/fs/inotify")
INSTANCES = "max_user_instances"
WATCHES = "max_user_watches"
# What to suggest at least: the values systemd 256+ and most desktop distros ship.
SUGGESTED = {INSTANCES: 1024, WATCHES: 524288}


def limit(name: str) -> int | None:
    """The current value of ``fs.inotify.<name>``, or None when it cannot be read."""
    try:
        return int((SYSCTL_DIR / name).read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def raise_to(name: str) -> int:
    """The value to suggest for ``fs.inotify.<name>``: twice today's, at least SUGGESTED."""
    now = limit(name)
    return max(SUGGESTED[name], 2 * now if now else 0)


def _out_of_descriptors() -> bool:
    """True when this process is (nearly) at its soft RLIMIT_NOFILE."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        used = len(os.listdir("/proc/self/fd"))
    except (OSError, ValueError):
        return False
    return soft != resource.RLIM_INFINITY and used >= soft - 2


def unavailable(err: int | None, detail: str = "") -> str:
    """Why inotify is unavailable, in one line with the remedy, for errno ``err``."""
    tail = f" ({detail})" if detail else ""
    if err == errnos.EMFILE and _out_of_descriptors():
        # The same errno when this process, not the user, is at its limit.
        return f"this process has no file descriptors left (RLIMIT_NOFILE){tail}"
    if err == errnos.EMFILE:
        name = INSTANCES
        what = "this user's inotify instances are used up"
    elif err == errnos.ENOSPC:
        name = WATCHES
        what = "this user's inotify watches are used up"
    else:
        reason = errnos.errorcode.get(err or 0, "an error") if err else "an error"
        return f"inotify is unavailable ({reason}){tail}"
    now = limit(name)
    shown = f"fs.inotify.{name}={now}" if now is not None else f"fs.inotify.{name}"
    return f"{what} ({shown}){tail}; raise it: sudo sysctl fs.inotify.{name}={raise_to(name)}"
