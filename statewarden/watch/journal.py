"""The journal follower: the Hermes units' own journal, where their stdout goes.

The gateway *prints* ``[gateway] Warning: SQLite session store unavailable, falling back
to JSONL: ...`` to stdout, which only the journal of its unit has (docs/hermes.md). So
statewarden follows that journal with ``journalctl -f -o json`` as a subprocess:

- as a normal user: ``journalctl --user -u <unit> ...``;
- as root (a root daemon, or tests): ``journalctl _SYSTEMD_USER_UNIT=<unit> ...``, since
  ``--user-unit`` filters on the caller's own uid.

The cursor of the last entry handled is saved (atomically, at most once a second) and
passed back with ``--after-cursor`` on restart, so nothing is handled twice or missed
while the daemon was down. On first start it begins at the moment the follower was
made (``--since=@<epoch>``): history is not alerted on, and a line logged while
journalctl starts up is not lost. If journalctl is missing or dies, it is restarted with capped
exponential backoff (from the shortest wait again once it hands over an entry) and the
reason is kept in ``status`` (never a crash).

A journal this user may not read is a ``problem`` (the daemon makes it a
``watcher_failed`` incident): on a host whose journald keeps only volatile storage
(no ``/var/log/journal``) a normal user reads no journal at all, and journalctl says
"No journal files were opened due to insufficient permissions". The problem clears
once journalctl has kept running for ``FOLLOWING_AFTER_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statewarden.atomic import StateUnwritable, write_atomic
from statewarden.backoff import Backoff

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 300.0
CURSOR_SAVE_EVERY_S = 1.0
MAX_ENTRY_BYTES = 1 << 20
FOLLOWING_AFTER_S = 2.0  # journalctl still running after this long: it can read the journal
_DENIED_MARKERS = ("insufficient permissions", "permission denied")
JOURNAL_REMEDY = (
    "make journald keep persistent storage (mkdir -p /var/log/journal, then "
    "systemctl restart systemd-journald: each user can then read their own units' "
    "journal), or add this user to the systemd-journal group "
    "(usermod -aG systemd-journal $USER, then log in again)"
)


def journalctl_command(
    units: list[str],
    cursor: str | None,
    *,
    as_root: bool,
    since: float | None = None,
    journalctl: str = "journalctl",
) -> list[str]:
    cmd = [journalctl, "-f", "-o", "json", "--no-pager"]
    if as_root:
        cmd += [f"_SYSTEMD_USER_UNIT={u}" for u in units]
    else:
        cmd.append("--user")
        for u in units:
            cmd += ["-u", u]
    if cursor:
        cmd.append(f"--after-cursor={cursor}")
    elif since is not None:
        # From when the follower was made, not from when journalctl got going: a line
        # logged while journalctl starts up is not history.
        cmd += ["-n", "all", f"--since=@{int(since)}"]
    else:
        cmd += ["-n", "0"]
    return cmd


class JournalFollower:
    def __init__(
        self,
        units: list[str],
        cursor_path: Path,
        on_entry: Callable[[dict[str, Any]], None],
        *,
        as_root: bool | None = None,
        journalctl: str | None = None,
    ) -> None:
        self.units = units
        self.cursor_path = cursor_path
        self.on_entry = on_entry
        self.as_root = os.geteuid() == 0 if as_root is None else as_root
        self.journalctl = journalctl or shutil.which("journalctl") or "journalctl"
        self.status = "starting"
        self.backoff = Backoff(BACKOFF_START_S, BACKOFF_MAX_S)
        self._cursor: str | None = self._load_cursor()
        self._cursor_saved_at = 0.0
        self.write_error: StateUnwritable | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self.entries_seen = 0
        self.started_at = time.time()
        # Why the journal cannot be read by this user, "" when it can (or is not known).
        self.problem = ""

    @property
    def errors(self) -> int:
        """journalctl failures in a row, since it last handed over an entry."""
        return self.backoff.failures

    def _load_cursor(self) -> str | None:
        try:
            value = self.cursor_path.read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return value or None

    def save_cursor(self) -> None:
        """Write the cursor now (a retry after ``write_error``); never raises."""
        self._save_cursor(force=True)

    def _save_cursor(self, force: bool = False) -> None:
        if self._cursor is None:
            return
        now = time.monotonic()
        if not force and now - self._cursor_saved_at < CURSOR_SAVE_EVERY_S:
            return
        self._cursor_saved_at = now
        try:
            write_atomic(self.cursor_path, self._cursor)
        except StateUnwritable as exc:
            self.write_error = exc  # retried at the next entry
        else:
            self.write_error = None

    async def _follow_once(self) -> None:
        cmd = journalctl_command(
            self.units,
            self._cursor,
            as_root=self.as_root,
            since=self.started_at,
            journalctl=self.journalctl,
        )
        self._proc = await asyncio.create_subprocess_exec(
            *cmd,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=MAX_ENTRY_BYTES,
        )
        assert self._proc.stdout is not None
        self.status = f"following {', '.join(self.units)}"
        proc = self._proc

        def still_running() -> None:
            if proc.returncode is None:
                self.problem = ""

        asyncio.get_running_loop().call_later(FOLLOWING_AFTER_S, still_running)
        while True:
            try:
                line = await self._proc.stdout.readline()
            except ValueError:  # an entry over the limit: skip to the next line
                continue
            if not line:
                break
            try:
                entry = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if not isinstance(entry, dict):
                continue
            self.entries_seen += 1
            self.backoff.succeeded()  # following again: the next failure waits the least
            cursor = entry.get("__CURSOR")
            if isinstance(cursor, str):
                self._cursor = cursor
            self.on_entry(entry)
            self._save_cursor()
        code = await self._proc.wait()
        err = b""
        if self._proc.stderr is not None:
            with contextlib.suppress(Exception):
                err = await asyncio.wait_for(self._proc.stderr.read(4096), timeout=1)
        text = err.decode(errors="replace").strip().splitlines()
        if any(m in line.lower() for line in text for m in _DENIED_MARKERS):
            self.problem = next(x for x in text if any(m in x.lower() for m in _DENIED_MARKERS))
        raise RuntimeError(f"journalctl exited with {code}" + (f": {text[-1]}" if text else ""))

    async def run(self) -> None:
        """Follow until cancelled; restart journalctl with backoff when it fails."""
        try:
            while True:
                why = "journalctl stopped"
                try:
                    await self._follow_once()
                except FileNotFoundError:
                    why = ""
                except (OSError, RuntimeError) as exc:
                    why = str(exc)
                delay = self.backoff.failed()
                if why:
                    self.status = f"journal not followed: {why}; retrying in {delay:.0f} s"
                else:
                    self.status = f"journal not followed: {self.journalctl} not found"
                self._save_cursor(force=True)
                await asyncio.sleep(delay)
        finally:
            self._save_cursor(force=True)
            if self._proc is not None and self._proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self._proc.kill()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._proc.wait(), timeout=2)
