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
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statewarden.atomic import StateUnwritable
from statewarden.targets import Target
from statewarden.watch.offsets import (
    HEAD_BYTES,
    MARK_BYTES,
    Offset,
    OffsetsFile,
    head_digest,
    is_saved_file,
    mark_digest,
    open_log,
)
from statewarden.watch.records import RECORD_SPLIT_RE, LogRecord, parse_record, starts_record

LOG_NAMES = ("agent.log", "errors.log", "gateway.log", "gui.log")
DEFAULT_MAX_LINE_BYTES = 64 * 1024
DEFAULT_MAX_RECORD_CHARS = 256 * 1024
DEFAULT_MAX_POLL_BYTES = 16 * 1024 * 1024
DEFAULT_IDLE_FLUSH_S = 0.5  # a record with no line after it for this long is complete
DEFAULT_READ_CHUNK_BYTES = 64 * 1024
# Offsets are saved by every poll that moved them (0) or at most this often: each save
# is two fsyncs. A crash re-reads at most this much; close() always saves.
DEFAULT_SAVE_INTERVAL_S = 0.0
# Records remembered to recognise another log's copy of them (oldest forgotten first).
DEDUPE_RECORDS_REMEMBERED = 20_000
# Processes writing one log can be a little out of order; older than this is history.
HISTORY_SLACK_S = 60.0
# Looks at a log again when a writer rotated it between our stat and our open.
MAX_RACE_RETRIES = 4
# Rotated files still followed per log (each holds a descriptor), oldest dropped first.
MAX_ROTATED_FOLLOWED = 4
# RotatingFileHandler keeps x.log.1 .. x.log.<backupCount>; Hermes uses at most 5.
MAX_ROTATED_LOOKED_AT = 20


@dataclass(frozen=True)
class Notice:
    """Something about a log file the user may want to know (not a Hermes signal)."""

    file: str  # the log's name: "agent.log"
    # "rotated", "truncated", "rewritten", "gap", "not_a_file", "unreadable", "history"
    what: str
    text: str  # one line a person reads


@dataclass
class TailStats:
    bytes_read: int = 0
    lines: int = 0
    records: int = 0
    lines_cut: int = 0  # lines longer than max_line_bytes
    bytes_cut: int = 0  # bytes skipped from those lines and from over-long records
    duplicates: int = 0  # records dropped as another log file's copy of one returned
    history_skipped: int = 0  # records older than the newest this log gave (replaced log)


@dataclass
class _Limits:
    max_line_bytes: int
    max_record_chars: int
    idle_flush_s: float
    chunk: int


@dataclass
class _Reader:
    """One open log file, cut into lines and records."""

    fd: int
    label: str  # the path records say they come from
    dev: int
    ino: int
    pos: int  # next byte to read
    limits: _Limits
    stats: TailStats
    line_start: int = 0  # offset where the partial line starts
    partial: bytearray = field(default_factory=bytearray)
    partial_cut: int = 0
    lines: list[str] = field(default_factory=list)
    rec_start: int = 0
    rec_chars: int = 0
    rec_truncated: bool = False
    last_line_at: float = 0.0
    _head: str | None = None
    mark: bytes = b""  # the bytes just before ``pos`` as read (see ``rewritten``)

    def __post_init__(self) -> None:
        self.line_start = self.pos
        self._remember()

    def _remember(self) -> None:
        n = min(self.pos, MARK_BYTES)
        self.mark = os.pread(self.fd, n, self.pos - n) if n else b""

    def rewritten(self) -> bool:
        """True when the bytes before ``pos`` are no longer those read: the file was
        truncated and written again (to this size or more) since the last look."""
        n = len(self.mark)
        return n > 0 and os.pread(self.fd, n, self.pos - n) != self.mark

    @property
    def committed(self) -> int:
        """Where a restart must read from so that nothing is lost or returned twice."""
        return self.rec_start if self.lines else self.line_start

    def seek(self, offset: int) -> None:
        self.pos = self.line_start = offset
        self.partial.clear()
        self.partial_cut = 0
        self._remember()

    def read(self, out: list[LogRecord], now: float, budget: int | None) -> bool:
        """Read up to ``budget`` bytes (None: to the end); True when more is waiting."""
        done = 0
        while budget is None or done < budget:
            want = self.limits.chunk if budget is None else min(self.limits.chunk, budget - done)
            chunk = os.pread(self.fd, want, self.pos)
            if not chunk:
                return False
            self._feed(chunk, out, now)
            done += len(chunk)
            self.pos += len(chunk)
            self.stats.bytes_read += len(chunk)
            self.mark = (self.mark + chunk[-MARK_BYTES:])[-MARK_BYTES:]
        return True

    def _feed(self, chunk: bytes, out: list[LogRecord], now: float) -> None:
        start = 0
        nl = chunk.find(b"\n")
        if nl >= 0 and (self.partial or self.partial_cut):
            self._append_partial(chunk[:nl])
            self._line(self._take_partial(), self.partial_cut, out, now)
            self.partial_cut = 0
            self.line_start = self.pos + nl + 1
            start = nl + 1
        end = chunk.rfind(b"\n") + 1
        if end > start:
            # Complete lines of ordinary length need no copy into the partial buffer.
            block = chunk[start:end]
            if not self._feed_records(block, self.pos + start, out, now):
                self._feed_lines(block, self.pos + start, out, now)
            start = end
        self._append_partial(chunk[start:])

    def _feed_lines(self, block: bytes, offset: int, out: list[LogRecord], now: float) -> None:
        """Complete lines (``block`` ends with a newline) read from ``offset``, one by one."""
        limit = self.limits.max_line_bytes
        pieces = block.split(b"\n")
        pieces.pop()  # what follows the last newline: nothing
        for raw in pieces:
            offset += len(raw) + 1
            # NULs (a file extended over a hole after a crash) are dropped before the
            # cut, so the cut keeps the record's start, not the NULs.
            piece = raw.replace(b"\x00", b"") if len(raw) > limit and b"\x00" in raw else raw
            if len(piece) > limit:
                self._line(piece[:limit], len(piece) - limit, out, now)
            else:
                self._line(piece, 0, out, now)
            self.line_start = offset

    def _feed_records(self, block: bytes, offset: int, out: list[LogRecord], now: float) -> bool:
        """Complete lines read from ``offset``, cut into records a whole block at a time
        (what ``_feed_lines`` gives, without a Python step per line: a flood's cost).

        Only for plain text: ASCII (a character is a byte, so offsets are lengths), no
        NUL, no carriage return; False (nothing done) otherwise. A piece that does not
        start a record (the rest of the record being read, or text before any record),
        and a record that may hold a line over ``max_line_bytes`` or be cut to
        ``max_record_chars``, go line by line.
        """
        if not block.isascii() or b"\x00" in block or b"\r" in block:
            return False
        base = offset
        pieces = RECORD_SPLIT_RE.split(block[:-1].decode("ascii"))
        if not starts_record(pieces[0]):
            size = len(pieces[0]) + 1
            self._feed_lines(block[:size], offset, out, now)
            offset += size
            del pieces[0]
        if not pieces:
            return True
        limit = min(self.limits.max_line_bytes, self.limits.max_record_chars)
        stats = self.stats
        label = self.label
        last = len(pieces) - 1
        for i, piece in enumerate(pieces):
            size = len(piece) + 1
            self.line_start = offset
            if size > limit:  # cut and bounded as line by line does
                at = offset - base
                self._feed_lines(block[at : at + size], offset, out, now)
                offset += size
                continue
            if self.lines:
                self.emit(out)
            stats.lines += piece.count("\n") + 1
            if i < last:
                out.append(parse_record(_without_blank_tail(piece), label))
                stats.records += 1
            else:  # the record may go on in the next lines: wait for them
                self.lines = piece.split("\n")
                self.rec_start = offset
                self.rec_chars = size
                self.rec_truncated = False
            offset += size
        self.line_start = offset
        self.last_line_at = now
        return True

    def _append_partial(self, piece: bytes) -> None:
        if b"\x00" in piece:
            piece = piece.replace(b"\x00", b"")  # see _feed: the cut keeps text, not NULs
        room = self.limits.max_line_bytes - len(self.partial)
        if len(piece) > room:
            self.partial += piece[: max(room, 0)]
            self.partial_cut += len(piece) - max(room, 0)
        else:
            self.partial += piece

    def _take_partial(self) -> bytes:
        raw = bytes(self.partial)
        self.partial.clear()
        return raw

    def _line(self, raw: bytes, cut: int, out: list[LogRecord], now: float) -> None:
        if b"\x00" in raw:
            raw = raw.replace(b"\x00", b"")
        text = raw.decode("utf-8", errors="replace")
        if text.endswith("\r"):
            text = text.rstrip("\r")
        if cut:
            self.stats.lines_cut += 1
            self.stats.bytes_cut += cut
            text += f" …[line cut: {cut} more bytes not kept]"
        if (not text or text.isspace()) and not self.lines:
            return
        self.stats.lines += 1
        self.last_line_at = now
        if starts_record(text) or not self.lines:
            self.emit(out)
            self.rec_start = self.line_start
            self.rec_truncated = bool(cut)
            self.rec_chars = 0
        elif self.rec_chars + len(text) > self.limits.max_record_chars:
            self.rec_truncated = True
            self.stats.bytes_cut += len(text)
            return
        self.lines.append(text)
        self.rec_chars += len(text) + 1
        if cut:
            self.rec_truncated = True

    def emit(self, out: list[LogRecord]) -> None:
        while self.lines and (not self.lines[-1] or self.lines[-1].isspace()):
            self.lines.pop()  # blank lines between records belong to neither
        if self.lines:
            out.append(
                parse_record("\n".join(self.lines), self.label, truncated=self.rec_truncated)
            )
            self.stats.records += 1
            self.lines = []
            self.rec_chars = 0
            self.rec_truncated = False
            self.rec_start = self.line_start

    def finish(self, out: list[LogRecord], now: float) -> None:
        """The file ends here for good (rotated, truncated, deleted): emit everything."""
        if self.partial or self.partial_cut:
            self._line(self._take_partial(), self.partial_cut, out, now)
            self.partial_cut = 0
            self.line_start = self.pos
        self.emit(out)

    def idle(self, out: list[LogRecord], now: float) -> None:
        if self.lines and now - self.last_line_at >= self.limits.idle_flush_s:
            self.emit(out)

    def saved(self) -> Offset:
        """This file's position as the offsets file keeps it."""
        if self._head is None or int(self._head.partition(":")[0]) < HEAD_BYTES:
            self._head = head_digest(self.fd, HEAD_BYTES)  # cached once the file has that many
        offset = self.committed
        return Offset(self.dev, self.ino, offset, self._head, mark_digest(self.fd, offset))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _without_blank_tail(text: str) -> str:
    """``text`` without its last lines that are blank (they belong to no record)."""
    if "\n" not in text:
        return text
    lines = text.split("\n")
    while lines and (not lines[-1] or lines[-1].isspace()):
        lines.pop()
    return "\n".join(lines)


def file_kind(path: Path, st: os.stat_result) -> str:
    """What a path that is not a regular file is, in words: "a FIFO (named pipe)",
    "a character device (a link to /dev/zero)", ..."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        kind = "a directory"
    elif stat.S_ISFIFO(mode):
        kind = "a FIFO (named pipe)"
    elif stat.S_ISCHR(mode):
        kind = "a character device"
    elif stat.S_ISBLK(mode):
        kind = "a block device"
    elif stat.S_ISSOCK(mode):
        kind = "a socket"
    else:
        kind = "not a regular file"
    with contextlib.suppress(OSError):
        if os.path.islink(path):
            kind += f" (a link to {os.path.realpath(path)})"
    return kind


def _ident(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


@dataclass
class _Tail:
    name: str
    path: Path
    reader: _Reader | None = None
    resume: Offset | None = None  # where the last run stopped, from the offsets file
    # Rotated files (x.log.N) still followed: other Hermes processes keep writing to
    # the inode they opened until they rotate themselves.
    rotated: list[_Reader] = field(default_factory=list)
    resume_rotated: list[Offset] = field(default_factory=list)
    # Rotated files (dev, inode) whose lines were read or are history; None = not known yet.
    known: set[tuple[int, int]] | None = None
    seen: bool = False  # polled at least once
    problem: str = ""
    problem_what: str = ""  # the notice's ``what``: "not_a_file", "unreadable"
    problem_now: bool = False  # the problem was seen again in this poll
    # The time of the newest record returned from this log (persisted): a record older
    # than it by more than HISTORY_SLACK_S is history a replaced file brought back.
    newest: float | None = None
    # Reading a file from its start that replaced or rewrote the one read before: only
    # then can a record be history (a log appended to is news, even when the clock went
    # back an hour at the end of summer time).
    replaying: bool = False


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
        self.max_poll_bytes = max_poll_bytes
        self.dedupe = dedupe
        self.save_interval_s = save_interval_s
        self._last_save = float("-inf")
        # Record text hash -> the log that gave it, or how many times each log gave it.
        self._recent: OrderedDict[int, str | dict[str, int]] = OrderedDict()
        self.clock = clock
        self.stats = TailStats()
        self.behind = False  # the last poll stopped at max_poll_bytes: poll again soon
        self._limits = _Limits(
            max_line_bytes, max_record_chars, idle_flush_s, DEFAULT_READ_CHUNK_BYTES
        )
        self._tails = [_Tail(n, self.logs_dir / n) for n in names]
        self._notices: list[Notice] = []
        self._offsets_file = OffsetsFile(self.offsets_path)
        saved = self._offsets_file.load()
        self._first_start = saved.files is None and start_at_end
        for tail in self._tails:
            if saved.files and tail.name in saved.files:
                tail.resume = saved.files[tail.name]
            tail.resume_rotated = saved.rotated.get(tail.name, [])
            if tail.name in saved.known:
                tail.known = saved.known[tail.name]
            tail.newest = saved.newest.get(tail.name)
        self.write_error: StateUnwritable | None = None  # the last offsets save that failed

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
        self.behind = False
        for tail in self._tails:
            got: list[LogRecord] = []
            tail.problem_now = False
            try:
                self._poll_file(tail, got, now)
            except OSError as exc:  # EACCES, EIO, ESTALE: report, keep going
                why = exc.strerror or str(exc)
                self._problem(tail, "unreadable", f"{tail.path}: cannot read: {why}")
            if not tail.problem_now:
                tail.problem = ""
            tail.seen = True
            out += self._dedupe(tail.name, self._not_history(tail, got))
            if not self.behind:
                tail.replaying = False  # caught up with the file that replaced the old one
        self._autosave()
        return out

    def _not_history(self, tail: _Tail, records: list[LogRecord]) -> list[LogRecord]:
        """Drop the records older than what this log already gave (by more than
        :data:`HISTORY_SLACK_S`, which covers processes writing one log out of order):
        a log replaced by an older copy of itself (restored, copied back) is read again
        from its start, and its old lines are history, not news. Counted and noticed."""
        kept: list[LogRecord] = []
        old = 0
        for r in records:
            t, newest = r.timestamp, tail.newest
            if (
                tail.replaying
                and t is not None
                and newest is not None
                and (t < newest - HISTORY_SLACK_S)
            ):
                old += 1
                continue
            if t is not None:
                tail.newest = t if tail.newest is None else max(tail.newest, t)
            kept.append(r)
        if old:
            self.stats.history_skipped += old
            self._notice(
                tail,
                "history",
                f"{tail.path}: {old} record(s) older than the newest already read"
                " (a replaced or restored log) not read again",
            )
        return kept

    def flush(self) -> list[LogRecord]:
        """Return the records still waiting for a next line (as at the idle delay)."""
        out: list[LogRecord] = []
        for tail in self._tails:
            got: list[LogRecord] = []
            for r in [*tail.rotated, tail.reader]:
                if r is not None:
                    r.emit(got)
            out += self._dedupe(tail.name, got)
        self._autosave()
        return out

    def _dedupe(self, name: str, records: list[LogRecord]) -> list[LogRecord]:
        """Drop the copies: agent.log is Hermes' catch-all, and errors.log (WARNING+),
        gateway.log and gui.log get the same records, formatted the same way.

        A record (same text, to the millisecond) is a copy when some other log already
        gave it as many times as this log has now; the same text twice in one log is
        two events.
        """
        if not self.dedupe:
            return records
        kept = []
        for record in records:
            if record.at is None:  # no timestamp: nothing to tell copies apart by
                kept.append(record)
                continue
            key = hash(record.text)
            seen = self._recent.get(key)
            if seen is None:
                # The common case, kept cheap: first sighting, remembered as the log's name.
                self._recent[key] = name
                if len(self._recent) > DEDUPE_RECORDS_REMEMBERED:
                    self._recent.popitem(last=False)
                kept.append(record)
                continue
            if isinstance(seen, str):
                seen = self._recent[key] = {seen: 1}
            mine = seen[name] = seen.get(name, 0) + 1
            if len(seen) == 1:  # no other log gave it: this log's events, each kept
                kept.append(record)
                continue
            if mine <= max((n for other, n in seen.items() if other != name), default=0):
                self.stats.duplicates += 1
                continue
            kept.append(record)
        return kept

    def next_flush_in(self) -> float | None:
        """Seconds until a waiting record becomes complete by the idle delay, or None."""
        waits = [
            r.last_line_at + self._limits.idle_flush_s - self.clock()
            for t in self._tails
            for r in [*t.rotated, t.reader]
            if r is not None and r.lines
        ]
        return max(0.0, min(waits)) if waits else None

    def drain_notices(self) -> list[Notice]:
        out, self._notices = self._notices, []
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
            for r in [*tail.rotated, tail.reader]:
                if r is not None:
                    r.close()
            tail.reader = None
            tail.rotated = []

    def _reader(self, fd: int, st: os.stat_result, path: Path, pos: int) -> _Reader:
        return _Reader(fd, str(path), st.st_dev, st.st_ino, pos, self._limits, self.stats)

    def _poll_rotated(self, tail: _Tail, out: list[LogRecord], now: float) -> None:
        if tail.resume_rotated:
            chain = self._chain(tail)
            for saved in tail.resume_rotated:
                for path, st in chain:
                    if (st.st_dev, st.st_ino) == (saved.dev, saved.ino) and is_saved_file(
                        path, saved
                    ):
                        self._follow_rotated(tail, path, (saved.dev, saved.ino), saved.offset, out)
            tail.resume_rotated = []
        for r in list(tail.rotated):
            self.behind |= r.read(out, now, self.max_poll_bytes)
            if os.fstat(r.fd).st_nlink == 0:  # rotated past backupCount: deleted
                r.read(out, now, None)
                r.finish(out, now)
                r.close()
                tail.rotated.remove(r)
            else:
                r.idle(out, now)

    def _open_ident(
        self, tail: _Tail, path: Path, ident: tuple[int, int]
    ) -> tuple[int, os.stat_result, Path] | None:
        """Open the rotated file ``ident``, at ``path`` or wherever rotation moved it
        since (writers rename x.log.N to N+1 while we read): never another file."""
        candidates = [path] + [
            tail.path.with_name(f"{tail.name}.{n}") for n in range(1, MAX_ROTATED_LOOKED_AT + 1)
        ]
        for _attempt in range(MAX_RACE_RETRIES):
            for candidate in candidates:
                opened = open_log(candidate)
                if opened is None:
                    continue
                fd, st = opened
                if _ident(st) == ident:
                    return fd, st, candidate
                os.close(fd)
        return None

    def _follow_rotated(
        self, tail: _Tail, path: Path, ident: tuple[int, int], offset: int, out: list[LogRecord]
    ) -> _Reader | None:
        opened = self._open_ident(tail, path, ident)
        if opened is None:
            return None
        fd, st, path = opened
        r = self._reader(fd, st, path, min(offset, st.st_size))
        self._keep_rotated(tail, r, out)
        return r

    def _keep_rotated(self, tail: _Tail, r: _Reader, out: list[LogRecord]) -> None:
        tail.rotated.append(r)
        while len(tail.rotated) > MAX_ROTATED_FOLLOWED:
            oldest = tail.rotated.pop(0)
            oldest.finish(out, self.clock())
            oldest.close()

    def _poll_file(self, tail: _Tail, out: list[LogRecord], now: float) -> None:
        self._poll_rotated(tail, out, now)
        # A writer can rotate between our stat and our open; then look again, so the file
        # that was rotated away in between is found among the unseen rotated files.
        for _attempt in range(MAX_RACE_RETRIES):
            if self._poll_once(tail, out, now):
                return

    def _poll_once(self, tail: _Tail, out: list[LogRecord], now: float) -> bool:
        """One look at ``tail``; False when the file changed under it (look again)."""
        st = self._stat_log(tail)
        r = tail.reader
        if r is not None and st is not None and _ident(st) == (r.dev, r.ino):
            self._read_on(tail, r, st, out, now)
            return True
        # The file is new, or was rotated, replaced or deleted since the last poll.
        tail.replaying = True
        chain = self._chain(tail)
        if tail.known is None:
            tail.known = self._initial_known(tail, chain)
        known = tail.known
        if r is not None:
            self._let_go(tail, r, known, out, now)
        elif tail.resume is not None:
            saved, tail.resume = tail.resume, None
            if st is not None and is_saved_file(tail.path, saved):
                return self._resume_here(tail, saved, _ident(st), out, now, chain=chain)
            self._resume_rotated(tail, saved, out, now, chain=chain, known=known)
        self._read_unseen(tail, chain, known, out, now)
        if st is None:
            return True
        at_end = self._first_start and not tail.seen
        return self._start(tail, _ident(st), None if at_end else 0, out, now)

    def _stat_log(self, tail: _Tail) -> os.stat_result | None:
        """The log file's stat, or None when it is missing or not a regular file (a problem
        reported once)."""
        try:
            st: os.stat_result | None = os.stat(tail.path)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            self._problem(
                tail, "not_a_file", f"{tail.path} is {file_kind(tail.path, st)}, not a log file"
            )
            return None
        return st

    def _read_on(
        self, tail: _Tail, r: _Reader, st: os.stat_result, out: list[LogRecord], now: float
    ) -> None:
        """The same file as last time: read what was added (from the start if truncated
        or rewritten in place)."""
        shorter = st.st_size < r.pos
        if shorter or r.rewritten():
            r.finish(out, now)
            r.seek(0)
            tail.replaying = True
            # copytruncate: the copy (x.log.1) holds what was read already.
            tail.known = {_ident(s) for _p, s in self._chain(tail)}
            what, how = (
                ("truncated", "truncated") if shorter else ("rewritten", "rewritten in place")
            )
            self._notice(tail, what, f"{tail.name} was {how}; reading it from the start")
        self.behind |= r.read(out, now, self.max_poll_bytes)
        r.idle(out, now)

    def _let_go(
        self,
        tail: _Tail,
        r: _Reader,
        known: set[tuple[int, int]],
        out: list[LogRecord],
        now: float,
    ) -> None:
        """The file read so far is no longer the log: read the old inode's tail first
        (other processes may keep writing there), then follow it as rotated or close it."""
        tail.reader = None
        r.read(out, now, None)
        if os.fstat(r.fd).st_nlink == 0:
            r.finish(out, now)
            r.close()
        else:
            r.idle(out, now)
            self._keep_rotated(tail, r, out)
        known.add((r.dev, r.ino))

    def _resume_here(
        self,
        tail: _Tail,
        saved: Offset,
        ident: tuple[int, int],
        out: list[LogRecord],
        now: float,
        *,
        chain: list[tuple[Path, os.stat_result]],
    ) -> bool:
        """After a restart the log is still the file reading stopped in: go on from the
        saved offset. False when it was rotated meanwhile (look again)."""
        if not self._start(tail, ident, saved.offset, out, now, truncated_ok=True):
            tail.resume = saved
            return False
        tail.known = {_ident(s) for _p, s in chain}
        return True

    def _resume_rotated(
        self,
        tail: _Tail,
        saved: Offset,
        out: list[LogRecord],
        now: float,
        *,
        chain: list[tuple[Path, os.stat_result]],
        known: set[tuple[int, int]],
    ) -> None:
        """After a restart the file reading stopped in was rotated: go on in it where it is
        now, or say that lines were missed when it is gone."""
        found = [p for p, s in chain if _ident(s) == (saved.dev, saved.ino)]
        if found and is_saved_file(found[0], saved):
            resumed = self._follow_rotated(
                tail, found[0], (saved.dev, saved.ino), saved.offset, out
            )
            if resumed is not None:
                self.behind |= resumed.read(out, now, self.max_poll_bytes)
                resumed.idle(out, now)
            known.add((saved.dev, saved.ino))
            self._notice(
                tail,
                "rotated",
                f"{tail.name} was rotated while statewarden "
                "was not running; reading on where it stopped",
            )
        else:
            self._notice(
                tail,
                "gap",
                f"{tail.name} was rotated away while statewarden was "
                "not running; lines in between were not read",
            )

    def _read_unseen(
        self,
        tail: _Tail,
        chain: list[tuple[Path, os.stat_result]],
        known: set[tuple[int, int]],
        out: list[LogRecord],
        now: float,
    ) -> None:
        """Read the rotated files never seen before, oldest first: written (and rotated)
        since the last poll, e.g. a burst that rotated x.log several times before it was
        polled. Then remember the chain, forgetting files rotated out of reach."""
        unseen: list[tuple[Path, tuple[int, int]]] = []
        for p, s in reversed(chain):
            # A file renamed upwards during the scan can be listed twice: read it once.
            if _ident(s) not in known:
                known.add(_ident(s))
                unseen.append((p, _ident(s)))
        if unseen:
            self._notice(
                tail,
                "rotated",
                f"{tail.name} was rotated; read {len(unseen)} rotated file(s) not seen before",
            )
        for path, ident in unseen:
            opened = self._open_ident(tail, path, ident)
            if opened is None:
                continue
            fd, fst, where = opened
            reader = self._reader(fd, fst, where, 0)
            try:
                reader.read(out, now, None)
                reader.finish(out, now)
            finally:
                reader.close()
        known |= {_ident(s) for _p, s in chain}
        if len(known) > 2 * MAX_ROTATED_LOOKED_AT:
            # Forget files rotated out of reach (their inode numbers get reused).
            known &= {_ident(s) for _p, s in chain} | {(r.dev, r.ino) for r in tail.rotated}

    def _initial_known(
        self, tail: _Tail, chain: list[tuple[Path, os.stat_result]]
    ) -> set[tuple[int, int]]:
        """Rotated files that hold nothing new, when the offsets file does not say."""
        if tail.resume is not None:
            # Those at and older than the file reading stopped in (all, if it is gone).
            ident = (tail.resume.dev, tail.resume.ino)
            idents = [_ident(s) for _p, s in chain]
            return set(idents[idents.index(ident) :] if ident in idents else idents)
        if self._first_start and not tail.seen:
            return {_ident(s) for _p, s in chain}  # history
        return set()

    def _start(
        self,
        tail: _Tail,
        ident: tuple[int, int],
        offset: int | None,
        out: list[LogRecord],
        now: float,
        *,
        truncated_ok: bool = False,
    ) -> bool:
        """Open ``tail.path``, read from ``offset`` (None: from its end). False when the
        path is no longer the file ``ident`` (rotated meanwhile): nothing was opened."""
        opened = open_log(tail.path)
        if opened is None:
            return True  # gone or not a file now: the next poll sees it
        fd, st = opened
        if _ident(st) != ident:
            os.close(fd)
            return False
        pos = st.st_size if offset is None else offset
        if pos > st.st_size:
            if truncated_ok:
                self._notice(
                    tail,
                    "truncated",
                    f"{tail.name} was truncated while statewarden "
                    "was not running; reading it from the start",
                )
            pos = 0
        tail.reader = self._reader(fd, st, tail.path, pos)
        self.behind |= tail.reader.read(out, now, self.max_poll_bytes)
        tail.reader.idle(out, now)
        return True

    @staticmethod
    def _chain(tail: _Tail) -> list[tuple[Path, os.stat_result]]:
        """The rotated files ``x.log.1``, ``x.log.2``, ... that exist, youngest first."""
        chain: list[tuple[Path, os.stat_result]] = []
        missing = 0
        for n in range(1, MAX_ROTATED_LOOKED_AT + 1):
            p = tail.path.with_name(f"{tail.name}.{n}")
            try:
                chain.append((p, os.stat(p)))
                missing = 0
            except OSError:
                # doRollover renames x.log.N -> N+1 downwards, one at a time: mid-rotation
                # one number is missing for a moment. Stopping there would forget the
                # older files and read them again as unseen.
                missing += 1
                if missing > 1:
                    break
        return chain

    def _notice(self, tail: _Tail, what: str, text: str) -> None:
        self._notices.append(Notice(tail.name, what, text))

    def _problem(self, tail: _Tail, what: str, text: str) -> None:
        tail.problem_now = True
        if tail.problem != text:  # reported once, not on every poll
            tail.problem = text
            tail.problem_what = what
            self._notice(tail, what, text)

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
