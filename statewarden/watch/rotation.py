"""Following one log file across rotation, truncation, rewrites and restarts.

A :class:`FollowedLog` is one of a Hermes home's logs (``agent.log``, ...) and the files
it has been: the file now, the rotated files still followed (``x.log.N``: other Hermes
processes keep writing to the inode they opened until they rotate themselves), and the
rotated files already read (``known``), so that a poll reads every byte once, whichever
file holds it now. The module doc of ``logtail.py`` tells each case. What it has to say
to the user (rotated, truncated, rewritten, a gap, a path that is not a log file) goes
into the shared :class:`FollowContext`'s notices.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from statewarden.watch.log_reader import LogReader, ReadLimits, TailStats
from statewarden.watch.offsets import Offset, is_saved_file, open_log
from statewarden.watch.records import LogRecord

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
class FollowContext:
    """What every log of one tailer shares: limits, counts, clock, and what a poll says."""

    limits: ReadLimits
    stats: TailStats
    clock: Callable[[], float]
    max_poll_bytes: int
    first_start: bool  # no offsets file: existing logs are read from their end
    notices: list[Notice] = field(default_factory=list)
    behind: bool = False  # a poll stopped at max_poll_bytes: poll again soon


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
class FollowedLog:
    """One log file and the rotated files it has been (see the module doc)."""

    name: str
    path: Path
    ctx: FollowContext
    reader: LogReader | None = None
    resume: Offset | None = None  # where the last run stopped, from the offsets file
    # Rotated files (x.log.N) still followed: other Hermes processes keep writing to
    # the inode they opened until they rotate themselves.
    rotated: list[LogReader] = field(default_factory=list)
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

    def poll(self, out: list[LogRecord], now: float) -> None:
        """Read what was written since the last poll, whichever file holds it now; a file
        that cannot be read is a problem, said once."""
        self.problem_now = False
        try:
            self._poll_file(out, now)
        except OSError as exc:  # EACCES, EIO, ESTALE: report, keep going
            why = exc.strerror or str(exc)
            self._problem("unreadable", f"{self.path}: cannot read: {why}")
        if not self.problem_now:
            self.problem = ""
        self.seen = True

    def readers(self) -> list[LogReader]:
        """Every file open for this log: the rotated ones still followed, then the log."""
        return [r for r in [*self.rotated, self.reader] if r is not None]

    def close(self) -> None:
        """Close every file (records still waiting are read again later)."""
        for r in self.readers():
            r.close()
        self.reader = None
        self.rotated = []

    def _reader(self, fd: int, st: os.stat_result, path: Path, pos: int) -> LogReader:
        return LogReader(fd, str(path), st.st_dev, st.st_ino, pos, self.ctx.limits, self.ctx.stats)

    def _poll_rotated(self, out: list[LogRecord], now: float) -> None:
        if self.resume_rotated:
            chain = self._chain()
            for saved in self.resume_rotated:
                for path, st in chain:
                    if (st.st_dev, st.st_ino) == (saved.dev, saved.ino) and is_saved_file(
                        path, saved
                    ):
                        self._follow_rotated(path, (saved.dev, saved.ino), saved.offset, out)
            self.resume_rotated = []
        for r in list(self.rotated):
            self.ctx.behind |= r.read(out, now, self.ctx.max_poll_bytes)
            if os.fstat(r.fd).st_nlink == 0:  # rotated past backupCount: deleted
                r.read(out, now, None)
                r.finish(out, now)
                r.close()
                self.rotated.remove(r)
            else:
                r.idle(out, now)

    def _open_ident(
        self, path: Path, ident: tuple[int, int]
    ) -> tuple[int, os.stat_result, Path] | None:
        """Open the rotated file ``ident``, at ``path`` or wherever rotation moved it
        since (writers rename x.log.N to N+1 while we read): never another file."""
        candidates = [path] + [
            self.path.with_name(f"{self.name}.{n}") for n in range(1, MAX_ROTATED_LOOKED_AT + 1)
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
        self, path: Path, ident: tuple[int, int], offset: int, out: list[LogRecord]
    ) -> LogReader | None:
        opened = self._open_ident(path, ident)
        if opened is None:
            return None
        fd, st, path = opened
        r = self._reader(fd, st, path, min(offset, st.st_size))
        self._keep_rotated(r, out)
        return r

    def _keep_rotated(self, r: LogReader, out: list[LogRecord]) -> None:
        self.rotated.append(r)
        while len(self.rotated) > MAX_ROTATED_FOLLOWED:
            oldest = self.rotated.pop(0)
            oldest.finish(out, self.ctx.clock())
            oldest.close()

    def _poll_file(self, out: list[LogRecord], now: float) -> None:
        self._poll_rotated(out, now)
        # A writer can rotate between our stat and our open; then look again, so the file
        # that was rotated away in between is found among the unseen rotated files.
        for _attempt in range(MAX_RACE_RETRIES):
            if self._poll_once(out, now):
                return

    def _poll_once(self, out: list[LogRecord], now: float) -> bool:
        """One look at this log; False when the file changed under it (look again)."""
        st = self._stat_log()
        r = self.reader
        if r is not None and st is not None and _ident(st) == (r.dev, r.ino):
            self._read_on(r, st, out, now)
            return True
        # The file is new, or was rotated, replaced or deleted since the last poll.
        self.replaying = True
        chain = self._chain()
        if self.known is None:
            self.known = self._initial_known(chain)
        known = self.known
        if r is not None:
            self._let_go(r, known, out, now)
        elif self.resume is not None:
            saved, self.resume = self.resume, None
            if st is not None and is_saved_file(self.path, saved):
                return self._resume_here(saved, _ident(st), out, now, chain=chain)
            self._resume_rotated(saved, out, now, chain=chain, known=known)
        self._read_unseen(chain, known, out, now)
        if st is None:
            return True
        at_end = self.ctx.first_start and not self.seen
        return self._start(_ident(st), None if at_end else 0, out, now)

    def _stat_log(self) -> os.stat_result | None:
        """The log file's stat, or None when it is missing or not a regular file (a problem
        reported once)."""
        try:
            st: os.stat_result | None = os.stat(self.path)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            self._problem(
                "not_a_file", f"{self.path} is {file_kind(self.path, st)}, not a log file"
            )
            return None
        return st

    def _read_on(self, r: LogReader, st: os.stat_result, out: list[LogRecord], now: float) -> None:
        """The same file as last time: read what was added (from the start if truncated
        or rewritten in place)."""
        shorter = st.st_size < r.pos
        if shorter or r.rewritten():
            r.finish(out, now)
            r.seek(0)
            self.replaying = True
            # copytruncate: the copy (x.log.1) holds what was read already.
            self.known = {_ident(s) for _p, s in self._chain()}
            what, how = (
                ("truncated", "truncated") if shorter else ("rewritten", "rewritten in place")
            )
            self._notice(what, f"{self.name} was {how}; reading it from the start")
        self.ctx.behind |= r.read(out, now, self.ctx.max_poll_bytes)
        r.idle(out, now)

    def _let_go(
        self,
        r: LogReader,
        known: set[tuple[int, int]],
        out: list[LogRecord],
        now: float,
    ) -> None:
        """The file read so far is no longer the log: read the old inode's tail first
        (other processes may keep writing there), then follow it as rotated or close it."""
        self.reader = None
        r.read(out, now, None)
        if os.fstat(r.fd).st_nlink == 0:
            r.finish(out, now)
            r.close()
        else:
            r.idle(out, now)
            self._keep_rotated(r, out)
        known.add((r.dev, r.ino))

    def _resume_here(
        self,
        saved: Offset,
        ident: tuple[int, int],
        out: list[LogRecord],
        now: float,
        *,
        chain: list[tuple[Path, os.stat_result]],
    ) -> bool:
        """After a restart the log is still the file reading stopped in: go on from the
        saved offset. False when it was rotated meanwhile (look again)."""
        if not self._start(ident, saved.offset, out, now, truncated_ok=True):
            self.resume = saved
            return False
        self.known = {_ident(s) for _p, s in chain}
        return True

    def _resume_rotated(
        self,
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
            resumed = self._follow_rotated(found[0], (saved.dev, saved.ino), saved.offset, out)
            if resumed is not None:
                self.ctx.behind |= resumed.read(out, now, self.ctx.max_poll_bytes)
                resumed.idle(out, now)
            known.add((saved.dev, saved.ino))
            self._notice(
                "rotated",
                f"{self.name} was rotated while statewarden "
                "was not running; reading on where it stopped",
            )
        else:
            self._notice(
                "gap",
                f"{self.name} was rotated away while statewarden was "
                "not running; lines in between were not read",
            )

    def _read_unseen(
        self,
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
                "rotated",
                f"{self.name} was rotated; read {len(unseen)} rotated file(s) not seen before",
            )
        for path, ident in unseen:
            opened = self._open_ident(path, ident)
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
            known &= {_ident(s) for _p, s in chain} | {(r.dev, r.ino) for r in self.rotated}

    def _initial_known(self, chain: list[tuple[Path, os.stat_result]]) -> set[tuple[int, int]]:
        """Rotated files that hold nothing new, when the offsets file does not say."""
        if self.resume is not None:
            # Those at and older than the file reading stopped in (all, if it is gone).
            ident = (self.resume.dev, self.resume.ino)
            idents = [_ident(s) for _p, s in chain]
            return set(idents[idents.index(ident) :] if ident in idents else idents)
        if self.ctx.first_start and not self.seen:
            return {_ident(s) for _p, s in chain}  # history
        return set()

    def _start(
        self,
        ident: tuple[int, int],
        offset: int | None,
        out: list[LogRecord],
        now: float,
        *,
        truncated_ok: bool = False,
    ) -> bool:
        """Open ``self.path``, read from ``offset`` (None: from its end). False when the
        path is no longer the file ``ident`` (rotated meanwhile): nothing was opened."""
        opened = open_log(self.path)
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
                    "truncated",
                    f"{self.name} was truncated while statewarden "
                    "was not running; reading it from the start",
                )
            pos = 0
        self.reader = self._reader(fd, st, self.path, pos)
        self.ctx.behind |= self.reader.read(out, now, self.ctx.max_poll_bytes)
        self.reader.idle(out, now)
        return True

    def _chain(self) -> list[tuple[Path, os.stat_result]]:
        """The rotated files ``x.log.1``, ``x.log.2``, ... that exist, youngest first."""
        chain: list[tuple[Path, os.stat_result]] = []
        missing = 0
        for n in range(1, MAX_ROTATED_LOOKED_AT + 1):
            p = self.path.with_name(f"{self.name}.{n}")
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

    def _notice(self, what: str, text: str) -> None:
        self.ctx.notices.append(Notice(self.name, what, text))

    def _problem(self, what: str, text: str) -> None:
        self.problem_now = True
        if self.problem != text:  # reported once, not on every poll
            self.problem = text
            self.problem_what = what
            self._notice(what, text)
