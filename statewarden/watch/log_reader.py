"""One open log file, cut into lines and records as its bytes are read.

:class:`LogReader` reads a file from an offset with ``pread``, a chunk at a time, and
cuts what it reads into complete lines and records (a line plus its traceback lines,
``records.parse_record``); a record is complete at the next record's first line, at
the file's end for good (``finish``) or after ``idle_flush_s`` with no line after it.
Plain text is cut a whole block at a time; anything else line by line. It keeps the
bytes before its offset (``MARK_BYTES``) to see a file rewritten in place, and says
where a restart must read from (``committed``) so that nothing is lost or returned twice.

Bounds: a line longer than ``max_line_bytes`` is cut (the rest is skipped and counted,
and the line says so); a record keeps at most ``max_record_chars``. Bytes are decoded as
UTF-8 with replacement, NUL bytes (the hole a copytruncate leaves under a writer without
O_APPEND) are dropped.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from statewarden.watch.offsets import HEAD_BYTES, MARK_BYTES, Offset, head_digest, mark_digest
from statewarden.watch.records import RECORD_SPLIT_RE, LogRecord, parse_record, starts_record

DEFAULT_READ_CHUNK_BYTES = 64 * 1024


@dataclass
class TailStats:
    """What the tailer read, kept and dropped, counted since it started."""

    bytes_read: int = 0
    lines: int = 0
    records: int = 0
    lines_cut: int = 0  # lines longer than max_line_bytes
    bytes_cut: int = 0  # bytes skipped from those lines and from over-long records
    duplicates: int = 0  # records dropped as another log file's copy of one returned
    history_skipped: int = 0  # records older than the newest this log gave (replaced log)


@dataclass
class ReadLimits:
    """How much of a line and a record is kept, when a record is complete, how much is
    read at once."""

    max_line_bytes: int
    max_record_chars: int
    idle_flush_s: float
    chunk: int


@dataclass
class LogReader:
    """One open log file, cut into lines and records."""

    fd: int
    label: str  # the path records say they come from
    dev: int
    ino: int
    pos: int  # next byte to read
    limits: ReadLimits
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
