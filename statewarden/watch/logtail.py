"""The log tailer: new records from a Hermes home's ``logs/*.log``, nothing twice.

``LogTailer.poll()`` reads only the bytes written since the last poll and returns the
complete records (a line plus its traceback lines, see ``records.parse_record``). There is
no background loop inside: a test (or the daemon) calls ``poll()`` when it wants, as
Litestream's tests drive ``sync()``. The daemon polls when ``watch/events.py`` sees a
change in the logs directory (inotify), and on a slow ticker as a safety net.

Following the files:

- ``RotatingFileHandler`` renames ``x.log`` to ``x.log.1`` and creates a new ``x.log``.
  The tailer keeps the old file open, so it reads the old inode to its end first, then
  any younger ``x.log.N`` it skipped (rotated twice between polls), then the new file.
  logrotate's ``create`` mode looks the same.
- Rotated files never seen before (a burst that rotated ``x.log`` several times before
  a poll) are read too, oldest first; which ones were seen is persisted.
- copytruncate: the same inode got shorter than what was read -> start again at 0.
- Rewritten in place (truncated and written again to the same size or more between two
  polls, so neither the inode nor the size tells): the last ``MARK_BYTES`` bytes before
  the offset are kept and compared with what the file holds there now at each poll; when
  they differ the file is read again from 0. Those bytes are the very ones the offset
  relies on (a file whose bytes before the offset are unchanged is correctly read on from
  there, whatever happened elsewhere), it costs one small ``pread`` per poll, and a log
  line carries a millisecond timestamp, so a rewrite that matches them is one that holds
  the same lines.
- A file that appears later is read from its start; a deleted one is read to its end.
- A log path that became a directory (or anything not a regular file) is reported in
  ``notices``; the tailer goes on with the other files.

Offsets are persisted per file as (device, inode, offset, digests of the first bytes and
of the bytes before the offset) in a JSON file (``offsets.py``), written
atomically (tmp + fsync + rename), so a restart neither re-reads old lines nor misses
lines written while it was down (a file rotated while it was down is found again by its
inode among ``x.log.N``). The saved offset is the start of the first record not yet
returned, so a record still being written is read again whole after a restart, never
half. On a first start (no offsets file), existing logs are read from their end:
history is not news (``start_at_end``).

Copies: agent.log is Hermes' catch-all; errors.log (WARNING+), gateway.log and gui.log
get the same records in the same format. A record returned from one log is not
returned again as another log's copy (``dedupe``), so one Hermes warning is one record,
not three.

Bounds: a line longer than ``max_line_bytes`` is cut (the rest is skipped and counted,
and the line says so); a record keeps at most ``max_record_chars``; each poll reads at
most ``max_poll_bytes`` per file. Bytes are decoded as UTF-8 with replacement, NUL
bytes (the hole a copytruncate leaves under a writer without O_APPEND) are dropped.

The parts: ``log_reader`` cuts one open file into records, ``rotation`` follows one log
across the files it has been, ``replays`` drops copies and history, ``offsets`` keeps
the offsets file; the tailer polls them and saves the offsets.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from statewarden.atomic import StateUnwritable
from statewarden.targets import Target
from statewarden.watch.log_reader import DEFAULT_READ_CHUNK_BYTES, ReadLimits, TailStats
from statewarden.watch.offsets import Offset, OffsetsFile
from statewarden.watch.records import LogRecord
from statewarden.watch.replays import (
    DEDUPE_RECORDS_REMEMBERED,
    HISTORY_SLACK_S,
    Copies,
    drop_history,
)
from statewarden.watch.rotation import FollowContext, FollowedLog, Notice, file_kind

__all__ = [
    "DEDUPE_RECORDS_REMEMBERED",
    "DEFAULT_IDLE_FLUSH_S",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_POLL_BYTES",
    "DEFAULT_MAX_RECORD_CHARS",
    "DEFAULT_READ_CHUNK_BYTES",
    "DEFAULT_SAVE_INTERVAL_S",
    "HISTORY_SLACK_S",
    "LOG_NAMES",
    "LogTailer",
    "Notice",
    "TailStats",
    "file_kind",
]

LOG_NAMES = ("agent.log", "errors.log", "gateway.log", "gui.log")
DEFAULT_MAX_LINE_BYTES = 64 * 1024
DEFAULT_MAX_RECORD_CHARS = 256 * 1024
DEFAULT_MAX_POLL_BYTES = 16 * 1024 * 1024
DEFAULT_IDLE_FLUSH_S = 0.5  # a record with no line after it for this long is complete
# Offsets are saved by every poll that moved them (0) or at most this often: each save
# is two fsyncs. A crash re-reads at most this much; close() always saves.
DEFAULT_SAVE_INTERVAL_S = 0.0


class LogTailer:
    """New records from the log files of one Hermes home (see the module doc)."""

    def __init__(
        self,
        logs_dir: Path,
        offsets_path: Path,
        *,
        names: Iterable[str] = LOG_NAMES,
        start_at_end: bool = True,
        idle_flush_s: float = DEFAULT_IDLE_FLUSH_S,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_record_chars: int = DEFAULT_MAX_RECORD_CHARS,
        max_poll_bytes: int = DEFAULT_MAX_POLL_BYTES,
        dedupe: bool = True,
        save_interval_s: float = DEFAULT_SAVE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logs_dir = Path(logs_dir)
        self.offsets_path = Path(offsets_path)
        self.dedupe = dedupe
        self.save_interval_s = save_interval_s
        self._last_save = float("-inf")
        self.clock = clock
        self.stats = TailStats()
        self._copies = Copies(self.stats)
        self._offsets_file = OffsetsFile(self.offsets_path)
        saved = self._offsets_file.load()
        self._ctx = FollowContext(
            limits=ReadLimits(
                max_line_bytes, max_record_chars, idle_flush_s, DEFAULT_READ_CHUNK_BYTES
            ),
            stats=self.stats,
            clock=clock,
            max_poll_bytes=max_poll_bytes,
            first_start=saved.files is None and start_at_end,
        )
        self._tails = [FollowedLog(n, self.logs_dir / n, self._ctx) for n in names]
        for tail in self._tails:
            if saved.files and tail.name in saved.files:
                tail.resume = saved.files[tail.name]
            tail.resume_rotated = saved.rotated.get(tail.name, [])
            if tail.name in saved.known:
                tail.known = saved.known[tail.name]
            tail.newest = saved.newest.get(tail.name)
        self.write_error: StateUnwritable | None = None  # the last offsets save that failed

    @property
    def behind(self) -> bool:
        """The last poll stopped at ``max_poll_bytes``: poll again soon."""
        return self._ctx.behind

    @property
    def max_poll_bytes(self) -> int:
        return self._ctx.max_poll_bytes

    @classmethod
    def for_target(cls, target: Target, state_dir: Path, **kw: Any) -> LogTailer:
        """A tailer for ``target``'s logs, offsets in ``<state_dir>/logtail-<name>.json``."""
        return cls(target.logs_dir, Path(state_dir) / f"logtail-{target.name}.json", **kw)

    # -- polling -------------------------------------------------------------------

    def poll(self) -> list[LogRecord]:
        """Complete records written since the last poll, oldest first per file, each
        once even when Hermes wrote it to several logs (see ``dedupe``)."""
        now = self.clock()
        out: list[LogRecord] = []
        self._ctx.behind = False
        for tail in self._tails:
            got: list[LogRecord] = []
            tail.poll(got, now)
            out += self._dedupe(tail.name, drop_history(tail, got))
            if not self._ctx.behind:
                tail.replaying = False  # caught up with the file that replaced the old one
        self._autosave()
        return out

    def flush(self) -> list[LogRecord]:
        """Return the records still waiting for a next line (as at the idle delay)."""
        out: list[LogRecord] = []
        for tail in self._tails:
            got: list[LogRecord] = []
            for r in tail.readers():
                r.emit(got)
            out += self._dedupe(tail.name, got)
        self._autosave()
        return out

    def _dedupe(self, name: str, records: list[LogRecord]) -> list[LogRecord]:
        """Drop the copies (``replays.Copies``), unless ``dedupe`` is off."""
        return self._copies.drop(name, records) if self.dedupe else records

    def next_flush_in(self) -> float | None:
        """Seconds until a waiting record becomes complete by the idle delay, or None."""
        waits = [
            r.last_line_at + self._ctx.limits.idle_flush_s - self.clock()
            for t in self._tails
            for r in t.readers()
            if r.lines
        ]
        return max(0.0, min(waits)) if waits else None

    def drain_notices(self) -> list[Notice]:
        out = list(self._ctx.notices)
        self._ctx.notices.clear()
        return out

    @property
    def problems(self) -> dict[str, str]:
        """The log files that cannot be followed now, with why."""
        return {t.name: t.problem for t in self._tails if t.problem}

    def problem_kind(self, name: str) -> str:
        """The kind of problem ``problems[name]`` is: "not_a_file" or "unreadable"."""
        return next((t.problem_what for t in self._tails if t.name == name), "")

    def close(self) -> None:
        """Save offsets and close every file (records still waiting are read again later)."""
        with contextlib.suppress(StateUnwritable):
            self.save()
        for tail in self._tails:
            tail.close()

    # -- offsets -------------------------------------------------------------------

    def _offsets(self) -> dict[str, Offset]:
        out: dict[str, Offset] = {}
        for t in self._tails:
            saved = t.reader.saved() if t.reader is not None else t.resume
            if saved is not None:
                out[t.name] = saved
        return out

    def _rotated_offsets(self) -> dict[str, list[Offset]]:
        out: dict[str, list[Offset]] = {}
        for t in self._tails:
            saved = [r.saved() for r in t.rotated] or t.resume_rotated
            if saved:
                out[t.name] = saved
        return out

    def offsets(self) -> dict[str, dict[str, int | str]]:
        """What the offsets file holds now: per log name, device, inode, offset and a
        digest of the file's first bytes (``"<length>:<sha256 prefix>"``)."""
        return {name: o.to_json() for name, o in self._offsets().items()}

    def rotated_offsets(self) -> dict[str, list[dict[str, int | str]]]:
        """The rotated files still followed, per log name, as ``offsets()`` gives them."""
        return {name: [o.to_json() for o in offs] for name, offs in self._rotated_offsets().items()}

    def _autosave(self) -> None:
        now = self.clock()
        if now - self._last_save >= self.save_interval_s:
            self._last_save = now
            try:
                self.save()
            except StateUnwritable as exc:
                # Reading goes on; the offsets are written again at the next save.
                self.write_error = exc
            else:
                self.write_error = None

    def save(self) -> None:
        """Write the offsets file if it changed (``offsets.OffsetsFile``)."""
        known = {t.name: t.known for t in self._tails if t.known}
        newest = {t.name: t.newest for t in self._tails if t.newest is not None}
        self._offsets_file.save(self._offsets(), self._rotated_offsets(), known, newest)
