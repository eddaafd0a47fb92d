"""The run ledger: each maintenance step, written and fsynced before the step starts.

One folder per database under ``<state dir>/maintenance/<key>/``: ``lock`` (one run at
a time per database: an exclusive ``flock``, released by the kernel when the process
dies, even by ``kill -9``) and ``run.jsonl`` (the ledger of the current or last run,
one JSON object per line). A line is appended, flushed and fsynced before the step it
names begins, so after a crash the ledger says how far the run may have gone; the
last line of a finished run is ``{"step": "finished", ...}``. A half-written last line
(a crash inside ``write``) is ignored. A finished ledger is kept as ``last-run.jsonl``
when the next run starts.

:func:`in_progress` tells another process (the daemon) whether a run is in progress on
a database right now: its ledger is unfinished **and** its lock is held, as the
kernel's lock table (``/proc/locks``) says, read without touching the lock (trying it
would make a run starting at that instant fail). A run killed with ``kill -9`` leaves
an unfinished ledger but no lock: it is not in progress (it waits for ``--resume``).

Files are created with ``O_NOFOLLOW | O_EXCL`` (or opened with ``O_NOFOLLOW``) in a
folder of mode 0700 owned by the user (``atomic.private_dir``, the maintenance folder
above it too), so a planted symlink cannot redirect them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statewarden.atomic import fsync_dir
from statewarden.errors import RunLocked, StatewardenError

LEDGER_NAME = "run.jsonl"
LAST_LEDGER_NAME = "last-run.jsonl"
LOCK_NAME = "lock"
PROC_LOCKS = "/proc/locks"
FINISHED = "finished"
BEGIN = "begin"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def db_digest(db: Path) -> str:
    """12 hex digits of the SHA-256 of the database's absolute path: its name in folders."""
    return hashlib.sha256(os.path.abspath(db).encode()).hexdigest()[:12]


def run_dir(state_dir: Path, db: Path) -> Path:
    """``<state dir>/maintenance/<name>-<hash of the db path>``: one per database."""
    real = os.path.abspath(db)
    name = _SAFE.sub("_", Path(real).parent.name or "root")[:40]
    return state_dir / "maintenance" / f"{name}-{db_digest(db)}"


@dataclass
class LedgerRecord:
    """A ledger as read back: its lines, and whether the run finished."""

    path: Path
    entries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def began(self) -> bool:
        """Whether the run's begin line is durable. A run does nothing before it (the
        line is written and synced first), so a ledger without it, a run killed between
        creating the file and writing its first line, records a run that did nothing."""
        return bool(self.entries) and self.entries[0].get("step") == BEGIN

    @property
    def finished(self) -> bool:
        """Nothing is left to finish or roll back: the run recorded its end, or it never
        began (:attr:`began`)."""
        return not self.began or self.entries[-1].get("step") == FINISHED

    @property
    def begin(self) -> dict[str, Any]:
        return self.entries[0] if self.entries else {}

    @property
    def run_id(self) -> str:
        return str(self.begin.get("run_id", ""))

    def steps(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.entries if e.get("step") == name]

    def has(self, name: str) -> bool:
        return any(e.get("step") == name for e in self.entries)

    def last(self, name: str) -> dict[str, Any] | None:
        found = self.steps(name)
        return found[-1] if found else None


def read_ledger(path: Path) -> LedgerRecord | None:
    """The ledger at ``path``, or None if there is none. A torn last line is dropped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StatewardenError(f"{path}: cannot read the run ledger: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    record = LedgerRecord(path)
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            break  # a line torn by a crash: nothing after it was written
        if isinstance(entry, dict):
            record.entries.append(entry)
    return record


class Ledger:
    """The open ledger of one run: :meth:`step` appends a line and fsyncs it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / LEDGER_NAME
        self._fd: int | None = None

    def create(self, begin: dict[str, Any]) -> None:
        """Start a new ledger (the previous one, finished, becomes ``last-run.jsonl``)."""
        old = read_ledger(self.path)
        if old is not None and not old.finished:
            raise StatewardenError(f"{self.path}: an unfinished run is recorded here")
        try:
            if old is not None and old.began:
                os.replace(self.path, self.folder / LAST_LEDGER_NAME)
            elif old is not None:
                os.unlink(self.path)  # a run killed before its first line: it did nothing
            self._fd = os.open(
                self.path,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND,
                0o600,
            )
            fsync_dir(self.folder)
        except OSError as exc:
            raise self._unwritable(exc) from None
        self.step(BEGIN, **begin)

    def reopen(self) -> LedgerRecord:
        """Continue an existing ledger (``--resume``); returns what it says so far."""
        record = read_ledger(self.path)
        if record is None:
            raise StatewardenError(f"{self.path}: no run ledger to resume")
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
            # A torn last line would glue onto the next one: start on a fresh line.
            os.write(self._fd, b"\n")
        except OSError as exc:
            raise self._unwritable(exc) from None
        return record

    def _unwritable(self, exc: OSError) -> StatewardenError:
        """A ledger line that cannot be made durable: the step it names must not start."""
        return StatewardenError(
            f"{self.path}: cannot write the run ledger: {exc.strerror or exc}; the run stops"
            " here, as the ledger last recorded it",
            hint=f"free space in {self.folder.parent.parent}, then statewardenctl maintenance"
            " --resume",
        )

    def step(self, name: str, **data: Any) -> None:
        """Record that step ``name`` is about to start; durable when this returns."""
        if self._fd is None:
            raise StatewardenError("the run ledger is not open")
        if "step" in data or "at" in data:  # they would overwrite the step's own name, time
            raise ValueError(f"ledger step {name}: 'step' and 'at' are the ledger's own keys")
        line = json.dumps({"step": name, "at": round(time.time(), 3), **data}, default=str)
        try:
            os.write(self._fd, line.encode() + b"\n")
            os.fsync(self._fd)
        except OSError as exc:
            raise self._unwritable(exc) from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lock_holder(folder: Path) -> int | None:
    """The pid holding ``folder``'s run lock, from ``/proc/locks``; None if nobody does."""
    try:
        st = os.lstat(folder / LOCK_NAME)
        with open(PROC_LOCKS, encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        return None
    for line in table.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 4411 00:2f:1234 0 EOF"; a waiter's line has "->".
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        ino = fields[5].rsplit(":", 1)[-1]
        if ino.isdigit() and int(ino) == st.st_ino:
            # The inode alone could be another filesystem's: the pid the run wrote into
            # the lock file must be the one the kernel names.
            try:
                fd = os.open(folder / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                return None
            try:
                written = os.pread(fd, 64, 0)
            finally:
                os.close(fd)
            pid = fields[4]
            if written.decode(errors="replace").strip() == pid and pid.isdigit():
                return int(pid)
    return None


def in_progress(state_dir: Path, db: Path) -> LedgerRecord | None:
    """The ledger of the run in progress on ``db`` now (any process's), or None."""
    folder = run_dir(state_dir, db)
    try:
        os.lstat(folder / LEDGER_NAME)
    except OSError:
        return None
    record = read_ledger(folder / LEDGER_NAME)
    if record is None or record.finished or lock_holder(folder) is None:
        return None
    return record


def _flock_pid(st: os.stat_result) -> int | None:
    """The pid the kernel names as holding a ``flock`` on the file ``st``."""
    try:
        with open(PROC_LOCKS, encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
            continue
        if fields[5] == dev and fields[4].isdigit():
            return int(fields[4])
    return None


def _other_run(fd: int) -> str:
    """``pid 4411`` for the run holding the lock open as ``fd``: the kernel's lock table
    says who holds it even before that run has written its pid into the file."""
    pid = _flock_pid(os.fstat(fd))
    if pid is None:
        written = os.pread(fd, 64, 0).decode(errors="replace").strip()
        pid = int(written) if written.isdigit() else None
    return f"pid {pid}" if pid is not None else "its pid could not be read"


@contextlib.contextmanager
def run_lock(folder: Path) -> Iterator[None]:
    """Hold this database's maintenance lock; :class:`RunLocked` if another run has it."""
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunLocked(
                f"another maintenance run is in progress on this database ({_other_run(fd)})",
                hint="wait for it to finish",
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            raise StatewardenError(
                f"{folder / LOCK_NAME}: cannot write the run lock: {exc.strerror or exc}",
                hint=f"free space in {folder.parent.parent}, then retry",
            ) from None
        yield
    finally:
        os.close(fd)


def unfinished(state_dir: Path, db: Path) -> bool:
    """Whether ``db`` has a run ledger that did not finish (for the daemon's start-up)."""
    record = read_ledger(run_dir(state_dir, Path(os.path.abspath(db))) / LEDGER_NAME)
    return record is not None and not record.finished
