"""Sessions that vanish: Hermes moved state.db aside and started an empty one, or state.db
was replaced by a file holding far fewer sessions.

Hermes 0.22 moves a state.db it finds empty or damaged aside (``moved_aside.py``) and
starts a fresh, empty database; to the user every session has vanished, and nothing
reads the old file back. Per database the daemon remembers the file (device and inode)
and the sessions and messages it held: those of the last verification of that file
(``verified.json``, ``daemon/verify.py``) or, for a file with none on record, a cheap
count (a full scan of ``sessions`` and ``messages``, read-only, in a worker thread,
holding the daemon's source-read lock). Each poll is a stat and a folder listing:

- a **moved-aside file** (``state.db.zeroed-*.bak`` / ``state.db.notadb-*.bak``) that
  was not there at the last poll, or, at start-up, one that is the file last verified
  (its inode: the daemon was down when Hermes moved it), is a vanishing;
- a **new file** (device or inode) with far fewer sessions than the file before it is
  one too: fewer than half of them (:data:`VANISHED_FRACTION`) and at least
  :data:`VANISHED_MIN` fewer, so a test home emptied by hand or a profile with three
  sessions is no alarm, and a repair that kept every row is none either.

Each is one critical ``sessions_vanished`` signal with the key of Hermes' own log line
(``fresh_db``) and the new file's identity, so the log line and the file fold into one
incident per vanishing. It names the old file (the moved-aside path, when there is one),
its size and the sessions it holds: counted read-only (``immutable``, the old file never
written) when it can be read, else those remembered of it (Hermes moves a file aside
because its first page is unreadable), and an empty (0-byte) file as holding nothing.
Never while a maintenance run is in progress on the database (it swaps the file
itself): after the run, the new file is counted and becomes what is remembered.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statewarden.daemon.databases import WatchedDatabases
from statewarden.daemon.verify import Verified, file_identity, maintenance_on
from statewarden.errors import StatewardenError
from statewarden.incidents import Found, Signal
from statewarden.kinds import Severity
from statewarden.moved_aside import Held, count_held, moved_aside_in
from statewarden.sqlite import SQLITE_MAGIC, open_regular
from statewarden.targets import Target

KIND = "sessions_vanished"
# The key of Hermes' own log line for the same event (``watch/rules.py``): one incident.
KEY = "fresh_db"
# A new file holding fewer than this share of the sessions the old one held, and at
# least VANISHED_MIN fewer, is a vanishing.
VANISHED_FRACTION = 0.5
VANISHED_MIN = 5
RETRY_S = 30.0  # a file that could not be counted is counted again this much later


@dataclass(frozen=True)
class Known:
    """What one database file was found to hold, and when."""

    file: str  # "<device>:<inode>"
    sessions: int
    messages: int | None
    at: float
    how: str  # "verified" or "counted"


@dataclass
class _Watched:
    known: Known | None = None
    names: set[str] | None = None  # the moved-aside files at the last poll
    task: asyncio.Task[None] | None = None
    # What is known is to be taken afresh, without a signal: a maintenance run swapped
    # the file, or a count of a new file failed.
    rebase: bool = False
    retry_at: float = 0.0  # a count that failed is tried again from then on
    reported: set[str] = field(default_factory=set)  # moved-aside names told already


def vanished(old: int, new: int) -> bool:
    """Whether a file holding ``new`` sessions after one holding ``old`` is a vanishing."""
    return new < old * VANISHED_FRACTION and old - new >= VANISHED_MIN


class VanishWatch:
    """The remembered files and counts of every watched database, and their vanishings."""

    def __init__(
        self,
        *,
        databases: WatchedDatabases,
        verified: dict[str, Verified],
        state_dir: Path,
        handle: Callable[[Found], None],
        log: Any,
    ) -> None:
        """``verified`` is the verifications' last result per database (read, never
        written here); ``handle`` takes the signals."""
        self.databases = databases
        self.verified = verified
        self.state_dir = state_dir
        self.handle = handle
        self.log = log
        self.watched: dict[str, _Watched] = {}

    # -------------------------------------------------------------- poll

    def poll(self, now: float) -> None:
        """From the daemon's poll: a stat and a listing per database; counting (and
        reading an old file) in a task of its own."""
        for key in list(self.watched):
            if key not in self.databases.monitors:
                del self.watched[key]
        for key, monitor in list(self.databases.monitors.items()):
            w = self.watched.setdefault(key, _Watched())
            if w.task is not None and not w.task.done():
                continue
            self._poll_one(monitor.target, w, now)

    def _poll_one(self, target: Target, w: _Watched, now: float) -> None:
        key = str(target.db)
        names = set(moved_aside_in(target.db.parent, target.db.name))
        ident = file_identity(target.db)
        first = w.names is None
        if ident:
            self._from_verification(key, w, ident)
        settled = w.known is not None and w.known.file == ident
        if not first and names == w.names and (settled or not ident or now < w.retry_at):
            return  # nothing new (most polls: no /proc/locks read for the run lock)
        if maintenance_on(self.state_dir, target.db):
            w.names, w.rebase = names, True  # the run swaps the file: counted after it
            return
        if first:
            new = self._at_start(key, target, w, names, ident)
        else:
            new = sorted(names - (w.names or set()) - w.reported)
        w.names = names
        if new:
            # Told at once, before Hermes' own log line is read (one incident, and its
            # first notification names the file and its sessions), even before Hermes has
            # made the fresh file.
            w.reported.update(new)
            self._moved_aside(target, w, new[-1], ident, now)
        elif not ident:
            return
        elif w.known is None or (w.rebase and w.known.file != ident):
            w.task = _spawn(self._count_now(target, w, ident))
        elif w.known.file != ident:
            w.task = _spawn(self._replaced(target, w, w.known, ident, now))

    def _from_verification(self, key: str, w: _Watched, ident: str) -> None:
        """A verification of the current file that counted its rows is what is known."""
        v = self.verified.get(key)
        if v is None or v.sessions is None or not v.file or v.file != ident:
            return
        if w.known is None or w.known.file != ident or w.known.at < v.at:
            w.known = Known(v.file, v.sessions, v.messages, v.at, "verified")
            w.rebase = False

    def _at_start(
        self, key: str, target: Target, w: _Watched, names: set[str], ident: str
    ) -> list[str]:
        """At the first poll: when state.db is another file than the one last verified,
        that file is what is known (it changed while the daemon was down), and a
        moved-aside file that is it is a vanishing to tell (the others are history)."""
        v = self.verified.get(key)
        if v is None or not v.file or v.file == ident or v.sessions is None:
            return []
        w.known = Known(v.file, v.sessions, v.messages, v.at, "verified")
        return [n for n in sorted(names) if file_identity(target.db.parent / n) == v.file][-1:]

    # -------------------------------------------------------------- counting

    async def _count(self, path: Path, *, live: bool) -> Held:
        """``count_held`` in a worker thread, holding the daemon's source-read lock."""

        def read() -> Held:
            with self.databases.source_reads:
                return count_held(path, live=live)

        return await asyncio.to_thread(read)

    async def _count_now(self, target: Target, w: _Watched, ident: str) -> None:
        """Remember what the current file holds (no verification of it on record)."""
        held = await self._count(target.db, live=True)
        if held.sessions is not None and file_identity(target.db) == ident:
            w.known = Known(ident, held.sessions, held.messages, time.time(), "counted")
            w.rebase = False
        else:
            w.retry_at = time.time() + RETRY_S

    # -------------------------------------------------------------- vanishings

    def _moved_aside(self, target: Target, w: _Watched, name: str, ident: str, now: float) -> None:
        """Tell the file Hermes moved aside: what it holds when it can be read as it is
        (in a worker thread), else its size and what was counted in it before (at once:
        a file whose first bytes are not SQLite's opens nowhere)."""
        path = target.db.parent / name
        try:
            st = os.stat(path)
        except OSError:
            return  # gone already
        old = f"{st.st_dev}:{st.st_ino}"
        known = w.known if w.known is not None and w.known.file == old else None
        w.rebase = True  # the fresh file is counted at the next poll, without a signal
        if st.st_size == 0:
            held = Held(0, 0, 0)
        elif not _sqlite_header(path):
            why = "its first bytes are not SQLite's, which is why Hermes moved it aside"
            held = Held(st.st_size, None, None, why)
        else:
            w.task = _spawn(self._read_then_tell(target, path, known, ident, now))
            return
        self._tell_moved_aside(target, path, held, known, ident=ident, now=now)

    async def _read_then_tell(
        self, target: Target, path: Path, known: Known | None, ident: str, now: float
    ) -> None:
        held = await self._count(path, live=False)
        self._tell_moved_aside(target, path, held, known, ident=ident, now=now)

    def _tell_moved_aside(
        self,
        target: Target,
        path: Path,
        held: Held,
        known: Known | None,
        *,
        ident: str,
        now: float,
    ) -> None:
        what = _held_text(held, known)
        step = f"statewardenctl maintenance --profile {target.name} --merge-from {path}"
        summary = (
            f"Hermes moved state.db aside to {path} ({what}) and started a fresh, empty session "
            f"database: every earlier session has vanished from Hermes. Bring them back: {step}"
        )
        read = held.sessions is not None
        fields: dict[str, Any] = {
            "moved_aside": str(path),
            "old_bytes": held.size,
            "old_sessions": held.sessions if read or known is None else known.sessions,
            "old_messages": held.messages if read or known is None else known.messages,
            "old_counted": "read-only" if read else (known.how if known else None),
            "next_step": step,
        }
        if known is not None:
            fields["old_counted_at"] = known.at
            fields["old_sessions_remembered"] = known.sessions
            fields["old_messages_remembered"] = known.messages
        nothing = held.empty and (known is None or known.sessions == 0)
        self._signal(
            target,
            summary,
            ident=ident,
            now=now,
            fields=fields,
            severity="warning" if nothing else "critical",
            evidence=(f"old file: {path}", what, f"next step: {step}"),
        )

    async def _replaced(
        self, target: Target, w: _Watched, old: Known, ident: str, now: float
    ) -> None:
        fresh = await self._count(target.db, live=True)
        if fresh.sessions is None or file_identity(target.db) != ident:
            w.retry_at = time.time() + RETRY_S
            return  # unreadable now, or replaced again: looked at again
        w.known = Known(ident, fresh.sessions, fresh.messages, time.time(), "counted")
        if not vanished(old.sessions, fresh.sessions):
            return
        when = _when(old.at)
        summary = (
            f"state.db was replaced by another file (inode {old.file} -> {ident}) holding "
            f"{fresh.sessions} sessions; the file before it held {old.sessions} when "
            f"{old.how} ({when}): {old.sessions - fresh.sessions} sessions vanished from "
            "Hermes. If the old file still exists, statewardenctl maintenance --profile "
            f"{target.name} --merge-from PATH brings its sessions back"
        )
        fields = {
            "old_file": old.file,
            "old_sessions": old.sessions,
            "old_messages": old.messages,
            "old_counted": old.how,
            "old_counted_at": old.at,
            "new_sessions": fresh.sessions,
            "new_messages": fresh.messages,
        }
        evidence = (f"old file {old.file}: {old.sessions} sessions ({old.how} {when})",)
        self._signal(
            target,
            summary,
            ident=ident,
            now=now,
            fields=fields,
            severity="critical",
            evidence=evidence,
        )

    def _signal(
        self,
        target: Target,
        summary: str,
        *,
        ident: str,
        now: float,
        fields: dict[str, Any],
        severity: Severity,
        evidence: tuple[str, ...],
    ) -> None:
        self.log.error("sessions vanished", db=str(target.db), summary=summary)
        self.handle(
            Signal(
                KIND,
                str(target.db),
                summary,
                now,
                key=KEY,
                evidence=evidence,
                source="vanished",
                severity=severity,
                fields=fields,
                file=ident,
            )
        )

    # -------------------------------------------------------------- life cycle

    def close(self) -> list[asyncio.Task[None]]:
        """The counts in flight, for the shutdown to cancel and await."""
        return [w.task for w in self.watched.values() if w.task is not None and not w.task.done()]


def _held_text(held: Held, known: Known | None) -> str:
    """What the old file holds, in words: read, remembered, empty or unknown."""
    if held.empty:
        text = "0 bytes: an empty file, it holds nothing"
        if known is not None and known.sessions:
            text += (
                f"; the {known.sessions} sessions {known.how} in it ({_when(known.at)}) are "
                "not in it any more"
            )
        return text
    if held.sessions is not None:
        return f"{held.size} bytes, {held.sessions} sessions and {held.messages} messages"
    if known is not None:
        messages = f" and {known.messages} messages" if known.messages is not None else ""
        return (
            f"{held.size} bytes, {known.sessions} sessions{messages} when {known.how} "
            f"({_when(known.at)}); it cannot be read as it is ({held.why})"
        )
    return f"{held.size} bytes; it cannot be read as it is ({held.why}) and was never counted"


def _sqlite_header(path: Path) -> bool:
    """Whether the file starts as a SQLite database does (a raw read of 16 bytes: the
    daemon has no connection to a moved-aside file, docs/safety.md rule 2)."""
    try:
        with open_regular(path) as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except (OSError, StatewardenError):
        return False


def _spawn(work: Any) -> asyncio.Task[None]:
    task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
    return task


def _when(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
