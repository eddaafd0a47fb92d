"""Verification on a schedule: the daemon checks each watched database on its own.

Damage that no Hermes process trips over (a ``sessions`` row stored twice, planted while
Hermes was stopped) raises no log line: only a check finds it. So each database is
verified with exactly what ``statewardenctl check`` runs (``recovery.check``: a private
copy, the source only read, no lock taken, no checkpoint), so the daemon finds what
check finds:

- **when**: every ``watch.verify_interval`` (default once a day; the last verification
  of each database is kept in ``verified.json`` in the state folder, so a restart does not
  start the day again), when a database is first seen with no verification on record, and
  soon after Hermes reported a ``self_repair`` or a unit a ``crash_loop``, and when the
  file is not the one last verified (a new device/inode: replaced, restored). A
  maintenance run's post-check of the file it swapped in is that file's verification
  (:meth:`Verifications.post_checked`): ``status`` never shows the old file's verdict. Never while a
  maintenance run is in progress on the database (its run lock, held from the run's plan
  on, and its ledger, ``maintenance.ledger.in_progress``, as for the alert muting): it
  waits for the run to end, and a result from a verification a run overlapped (or whose
  file was swapped meanwhile) is thrown away. One at a time; while a database's
  verification waits for its turn or runs, its old record makes it due for nothing
  (the one under way settles it), so it is not verified twice in a row.
- **a busy writer**: a raw copy of the bundle during which every attempt saw a commit
  (``DatabaseChanged``) is replaced by a consistent copy through SQLite's backup API
  from a read-only connection (as a snapshot is taken), checked the same way; the
  result says which copy was checked (``copy``). That copy holds what SQLite reads, so
  damage only in the WAL's frames that SQLite does not replay is not seen there.
- **how**: in a thread of its own (never a pool thread, which would keep the priority)
  that first lowers itself to nice 19 and the idle I/O class (``setpriority`` and
  ``ioprio_set`` on its native thread id: Linux keeps both per thread). A thread, not a
  subprocess: the copy must hold :attr:`WatchedDatabases.source_reads` like every other
  raw read of the daemon (docs/safety.md rule 2), which only this process can take.
  The private copies are never synced (read once, then removed: none of them need
  reach the disk): Hermes commits with an fsync, and the fsync of a whole copy (and
  the removal of one that was written out) held those commits up on ext4.
- **bounded**: the check's progress steps are where it stops; past ``watch.verify_timeout``
  it is given up (the private copy removed), recorded as ``failed`` and tried again after
  ``RETRY_FAILED_S`` (or the interval, if shorter); one given up for a shutdown is not
  recorded.
- **what it gives**: damage opens (or updates) the database's ``corruption`` incident,
  with the damage class, the findings as evidence and the next step; a healthy result is
  recorded (``status`` shows it, the timeline has a ``verified`` observation).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from statewarden.atomic import private_dir, write_atomic
from statewarden.config import Config, WatchConfig
from statewarden.daemon.databases import WatchedDatabases
from statewarden.errors import DatabaseChanged, StatewardenError
from statewarden.incidents import Found, Observation, Signal
from statewarden.json_text import LATEST_TIME, typed_record
from statewarden.kinds import KINDS, Severity
from statewarden.maintenance import backup_copy, in_progress, lock_holder, run_dir
from statewarden.priority import IDLE_NICE, IOPRIO_CLASS_IDLE, idle_priority, io_class_of
from statewarden.progress import ProgressFn
from statewarden.recovery import Diagnosis, check_database
from statewarden.targets import Target

__all__ = [
    "IDLE_NICE",
    "IOPRIO_CLASS_IDLE",
    "Verifications",
    "give_back",
    "idle_priority",
    "in_idle_thread",
    "io_class_of",
]

T = TypeVar("T")

VERIFIED_FILE = "verified.json"
# Kinds after which a database is verified soon (Hermes repaired itself; a unit loops).
VERIFY_AFTER = frozenset(n for n, k in KINDS.items() if k.verified_soon_after)
HEALTHY = "none"
FAILED = "failed"
RETRY_FAILED_S = 600.0  # a verification that could not finish is tried again this soon
TICK_EVERY_S = 1.0  # what is due is looked at no more often (it reads /proc/locks)
EVIDENCE_FINDINGS = 20  # findings kept as evidence in the incident


class GivenUp(BaseException):
    """Raised from the check's progress callback to stop it (time limit, shutdown).

    A ``BaseException``, so that no ``except Exception`` on the way (SQLite error
    handling in the check) takes it for a finding."""


@dataclass
class Verified:
    """The last verification of one database."""

    db: str
    at: float
    result: str  # the damage class ("none", "derived", "base", "unreadable") or "failed"
    reason: str  # "scheduled", "first", "self_repair", "crash_loop", "requested", ...
    took_s: float = 0.0
    cpu_s: float = 0.0
    findings: list[str] = field(default_factory=list)
    error: str | None = None
    priority: str = ""  # what the worker thread ran at ("nice 19, idle I/O")
    copy: str = ""  # how the private copy was made: "raw" (the bundle) or "backup API"
    file: str = ""  # the identity ("<device>:<inode>") of the file verified; "" unknown
    # The rows the check counted in it (full scans), for ``daemon/vanished.py``: None
    # when the check could not count them (or an older verified.json).
    sessions: int | None = None
    messages: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_trim: Any = None


def give_back() -> bool:
    """Hand the heap's free pages back to the system; False where it cannot be done.

    A verification (or a ``check`` request) reads the whole file through SQLite in
    threads of its own and frees several MiB when it ends; glibc keeps freed heap for
    the next allocation, so an idle daemon went on holding ~9 MiB it would use again
    only at the next verification, a day later. ``malloc_trim(0)`` returns the free
    pages of every arena (a few milliseconds); musl has none, and nothing is done.
    """
    global _trim  # noqa: PLW0603 - looked up once, on the first call
    if _trim is None:
        try:
            _trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _trim = False
        else:
            _trim.argtypes = [ctypes.c_size_t]
            _trim.restype = ctypes.c_int
    if _trim is False:
        return False
    _trim(0)
    return True


async def in_idle_thread(fn: Callable[[], T]) -> tuple[T, str, float]:
    """``fn()`` in a new thread at idle priority: (its result, the priority, its CPU s)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[tuple[T, str, float]] = loop.create_future()

    def deliver(ok: bool, value: Any) -> None:
        if fut.done():
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def body() -> None:
        try:
            priority = idle_priority()
            cpu0 = time.thread_time()
            result = fn()
            value: Any = (result, priority, time.thread_time() - cpu0)
            ok = True
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            value, ok = exc, False
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(deliver, ok, value)

    threading.Thread(target=body, name="statewarden-verify", daemon=True).start()
    return await fut


class Verifications:
    """Which database is due, the one verification running, and the last results."""

    def __init__(
        self,
        *,
        config: Config,
        state_dir: Path,
        databases: WatchedDatabases,
        handle: Callable[[Found], None],
        ran_since: Callable[[str, float], bool],
        last_check: dict[str, tuple[float, str]],
        log: Any,
    ) -> None:
        """``handle`` takes what a verification finds; ``ran_since(db, t)`` says whether a
        maintenance run on ``db`` ended since ``t``; ``last_check`` is shared with the
        metrics and the ``check`` request."""
        self.watch = config.watch
        self.state_dir = state_dir
        self.databases = databases
        self.handle = handle
        self.ran_since = ran_since
        self.last_check = last_check
        self.log = log
        self.path = state_dir / VERIFIED_FILE
        self.last: dict[str, Verified] = self._load()
        self.due: dict[str, str] = {}  # db -> why it is due now
        self.running: str | None = None
        self.task: asyncio.Task[None] | None = None
        self.task_db: str | None = None  # the database ``task`` verifies
        self._one = asyncio.Lock()
        self._stop = threading.Event()
        self._ticked = 0.0

    def reconfigure(self, config: Config) -> None:
        self.watch = config.watch

    # -------------------------------------------------------------- state

    def _load(self) -> dict[str, Verified]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}  # none yet, or unreadable: every database is verified again
        if not isinstance(data, dict):
            return {}
        records = {db: recorded(v) for db, v in data.items()}
        return {db: v for db, v in records.items() if v is not None}

    def _save(self) -> None:
        try:
            text = json.dumps({db: v.to_json() for db, v in self.last.items()}, indent=1)
            write_atomic(self.path, text + "\n")
        except OSError as exc:
            self.log.warning("cannot save the verification results", error=str(exc))

    def status_of(self, db: str) -> dict[str, Any] | None:
        v = self.last.get(db)
        out = v.to_json() if v is not None else None
        if self.running == db:
            out = {**(out or {}), "running": True}
        return out

    # -------------------------------------------------------------- schedule

    def notice(self, found: Found) -> None:
        """A self-repair or a restart loop makes its database due now."""
        if (
            isinstance(found, Signal)
            and found.kind in VERIFY_AFTER
            and not found.clears
            and found.db in self.databases.monitors
        ):
            self.due.setdefault(found.db, found.kind)

    def _maintenance_on(self, db: Path) -> bool:
        return maintenance_on(self.state_dir, db)

    def tick(self, now: float) -> None:
        """From the main loop: start the next due verification, if none is running."""
        if now - self._ticked < TICK_EVERY_S:
            return
        self._ticked = now
        interval = self.watch.verify_interval
        for key in self.databases.monitors:
            if self._verifying(key):
                # Its record is the one under way: what the old record says is settled by
                # it. (Read meanwhile, it made the database due again at once, and a
                # self-repair noticed after that was verified as "first".)
                continue
            last = self.last.get(key)
            if last is None:
                self.due.setdefault(key, "first")
            elif last.file != file_identity(Path(key)) and os.path.exists(key):
                self.due.setdefault(key, "new file")
            elif last.result == FAILED and now - last.at >= min(interval, RETRY_FAILED_S):
                self.due.setdefault(key, "retry")
            elif now - last.at >= interval:
                self.due.setdefault(key, "scheduled")
        for key in list(self.due):
            if key not in self.databases.monitors:
                del self.due[key]
        if self.task is not None and not self.task.done():
            return
        for key, why in list(self.due.items()):
            target = self.databases.monitors[key].target
            if not target.db.exists() or self._maintenance_on(target.db):
                continue  # nothing to verify yet, or a run is on it: after the run
            del self.due[key]
            self.task = asyncio.create_task(self._scheduled(target, why))
            self.task_db = key
            return

    def _verifying(self, key: str) -> bool:
        """A verification of ``key`` is running, or started and waiting for its turn."""
        started = self.task is not None and not self.task.done() and self.task_db == key
        return started or self.running == key

    # -------------------------------------------------------------- one verification

    async def _scheduled(self, target: Target, reason: str) -> None:
        try:
            await self.verify(target, reason)
        except StatewardenError:  # a run began meanwhile: after the run
            self.due.setdefault(str(target.db), reason)

    async def verify(self, target: Target, reason: str) -> Verified:
        """Verify ``target`` now (one at a time), record the result and report it."""
        async with self._one:
            return await self._verify(target, reason)

    async def _verify(self, target: Target, reason: str) -> Verified:
        key = str(target.db)
        if self._maintenance_on(target.db):
            raise StatewardenError(
                f"{key}: a maintenance run is in progress; it is verified after the run"
            )
        deadline = time.monotonic() + self.watch.verify_timeout
        stop = self._stop

        def progress(_phase: str, _done: int, _total: int) -> None:
            if stop.is_set():
                raise GivenUp("the daemon is stopping")
            if time.monotonic() > deadline:
                raise GivenUp(f"not finished within watch.verify_timeout ({_timeout(self.watch)})")

        def run() -> tuple[Diagnosis, str]:
            parent = private_dir(self.state_dir / "work")
            return check_live(target.db, parent, progress, self.databases.source_reads)

        self.running = key
        inode = _inode(target.db)
        identity = file_identity(target.db)
        started, t0 = time.time(), time.monotonic()
        self.log.info("verifying database", db=key, reason=reason)
        try:
            (diagnosis, copied), priority, cpu_s = await in_idle_thread(run)
        except GivenUp as exc:
            v = Verified(key, started, FAILED, reason, error=str(exc))
        except StatewardenError as exc:
            # An unreadable database is a verdict; anything else (no space for the copy,
            # the file gone) is a verification that could not be made.
            unreadable = type(exc).__name__ == "DatabaseUnreadable"
            v = Verified(
                key,
                started,
                "unreadable" if unreadable else FAILED,
                reason,
                findings=[str(exc)] if unreadable else [],
                error=None if unreadable else str(exc),
            )
        except Exception as exc:  # noqa: BLE001 - a failed verification is recorded, not fatal
            v = Verified(key, started, FAILED, reason, error=f"{type(exc).__name__}: {exc}")
        else:
            v = Verified(
                key,
                started,
                diagnosis.damage,
                reason,
                cpu_s=round(cpu_s + diagnosis.helper_cpu_s, 3),
                findings=diagnosis_first(diagnosis),
                priority=priority,
                copy=copied,
                sessions=_rows(diagnosis, "sessions"),
                messages=_rows(diagnosis, "messages"),
            )
        finally:
            self.running = None
            give_back()  # what the check freed: the daemon idles until the next one
        v.took_s = round(time.monotonic() - t0, 3)
        v.file = identity
        if stop.is_set():
            return v  # given up for the shutdown: not a result, verified after the start
        swapped = _inode(target.db) != inode
        if swapped or self._maintenance_on(target.db) or self.ran_since(key, started):
            # A run overlapped: what was verified may be the file before the swap.
            self.log.info("verification overlapped a maintenance run; result dropped", db=key)
            self.due.setdefault(key, "after maintenance")
            return v
        self.last[key] = v
        if v.result != FAILED:
            self.last_check[key] = (v.at, v.result)  # the metrics' last check
        self._save()
        self._report(target, v)
        return v

    def _report(self, target: Target, v: Verified) -> None:
        key = str(target.db)
        if v.result == FAILED:
            self.log.warning("verification failed", db=key, error=v.error)
            self.handle(
                Observation(
                    "verified",
                    key,
                    f"verification failed: {v.error}",
                    v.at,
                    {"result": v.result, "reason": v.reason},
                )
            )
            return
        if v.result == HEALTHY:
            self.log.info("database verified healthy", db=key, took_s=v.took_s)
            text = f"verified healthy ({v.reason}, {v.took_s:.1f} s)"
            self.handle(Observation("verified", key, text, v.at, {"result": v.result}))
            return
        next_step = f"statewardenctl maintenance --profile {target.name}"
        summary = (
            f"verification found {v.result} damage in state.db: "
            f"{'; '.join(v.findings[:3]) or 'see the evidence'}; "
            f"next step: {next_step}"
        )
        evidence = (*v.findings[:EVIDENCE_FINDINGS], f"next step: {next_step}")
        self.log.error("verification found damage", db=key, damage=v.result)
        fields = {"damage": v.result, "next_step": next_step, "reason": v.reason}
        severity: Severity = "error" if v.result == "derived" else "critical"
        self.handle(
            Signal(
                "corruption",
                key,
                summary,
                v.at,
                source="verify",
                evidence=evidence,
                severity=severity,
                fields=fields,
            )
        )

    def post_checked(self, db: str, run_id: str, post_check: dict[str, Any]) -> None:
        """A maintenance run swapped a new file in and checked it (its post-check): that
        is the database's last verification now, of the new file, not the old file's
        verdict. An integrity check that passed is healthy; one that did not is a
        verification to make again (``failed``), at once."""
        if db not in self.databases.monitors or "integrity" not in post_check:
            return
        ok = post_check.get("integrity") == "ok"
        v = Verified(
            db,
            time.time(),
            HEALTHY if ok else FAILED,
            f"post-check of maintenance run {run_id}",
            error=None if ok else f"the post-check found: {post_check.get('integrity')}",
            copy="post-check",
            file=file_identity(Path(db)),
        )
        self.last[db] = v
        if ok:
            self.last_check[db] = (v.at, v.result)
            if self.due.get(db) in ("first", "new file", "after maintenance"):
                del self.due[db]  # due for want of a verdict on this file: this is one
        else:
            self.due.setdefault(db, "after maintenance")
        self._save()

    # -------------------------------------------------------------- life cycle

    def close(self) -> list[asyncio.Task[Any]]:
        """Give up a verification in flight; its task, for the shutdown to await."""
        self._stop.set()
        return [self.task] if self.task is not None else []


def check_live(
    db: Path, parent: Path, progress: ProgressFn | None, guard: AbstractContextManager[Any]
) -> tuple[Diagnosis, str]:
    """``check`` of a live database, and how its private copy was made: ``raw`` (the
    bundle, holding ``guard`` while copying) or, when a writer is too busy for a
    consistent raw copy (every attempt saw a commit), ``backup API``: a consistent copy
    through SQLite's backup API from a read-only connection (no checkpoint, no writer
    blocked), checked the same way. The file checked is ``db``'s real path: SQLite
    names the sidecars after it, so a symlinked state.db has its -wal beside the file
    it points to, and the copy must take that one along."""
    real = Path(os.path.realpath(db))
    try:
        diagnosis = check_database(real, parent, progress=progress, copy_guard=guard)
        copied = "raw"
    except DatabaseChanged:
        with guard:
            copy = snapshot_copy(real, parent)
        try:
            diagnosis = check_database(copy, copy.parent, progress=progress)
        finally:
            shutil.rmtree(copy.parent, ignore_errors=True)
        copied = "backup API"
    diagnosis.path = str(db)
    return diagnosis, copied


def snapshot_copy(db: Path, parent: Path) -> Path:
    """A consistent copy of ``db`` through SQLite's backup API, in a new private folder
    under ``parent`` (the caller removes ``copy.parent``): one read transaction on a
    read-only connection (the source is never written, checkpointed or reset), ended
    before this returns; taken as a snapshot is (``maintenance.backup_copy``: the bundle
    looked at raw first, never a copy of another file, no sidecar created beside it).

    Never synced: the copy is read once and removed, so none of it need reach the disk,
    and the fsync of a file this size holds up every other fsync on the file system
    meanwhile: Hermes commits with one (``synchronous=FULL``)."""
    return backup_copy(db, parent, synced=False)


def maintenance_on(state_dir: Path, db: Path) -> bool:
    """A run holds the database's run lock (from its plan on), or its ledger says it is
    in progress."""
    real = Path(os.path.abspath(db))
    try:
        if lock_holder(run_dir(state_dir, real)) is not None:
            return True
        return in_progress(state_dir, real) is not None
    except (OSError, StatewardenError):
        return False


def diagnosis_first(diagnosis: Diagnosis) -> list[str]:
    """The findings with the diagnosis first ("sessions: ... 1 phantom duplicate, rowid
    150", the line ``check`` leads with) and the index error counts after it: an alert
    shows its first three."""
    found = diagnosis.findings()
    counts = len(diagnosis.groups)  # findings() starts with one line per error group
    return found[counts:] + found[:counts]


def _rows(diagnosis: Diagnosis, table: str) -> int | None:
    """The distinct rows of ``table`` the check's full scan read; None if it has none."""
    for t in diagnosis.tables:
        if t.name == table:
            return t.distinct_keys
    return None


# The JSON types of each field of a recorded verification (verified.json).
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "db": (str,),
    "at": (int, float),
    "result": (str,),
    "reason": (str,),
    "took_s": (int, float),
    "cpu_s": (int, float),
    "findings": (list,),
    "error": (str, type(None)),
    "priority": (str,),
    "copy": (str,),
    "file": (str,),
    "sessions": (int, type(None)),
    "messages": (int, type(None)),
}
VERDICTS = frozenset({HEALTHY, "derived", "base", "unreadable", FAILED})


def recorded(v: object) -> Verified | None:
    """A verification as ``verified.json`` holds it, or None when the record is not one
    (a field of the wrong type, an unknown result, a time that is no date, NaN): such a
    database is verified again ("first"), never left unverified for good (a NaN time
    made it due never) nor shown with a verdict no check gave."""
    out = typed_record(Verified, v, _RECORD_TYPES)
    if out is None or out.result not in VERDICTS or not 0 <= out.at <= LATEST_TIME:
        return None
    if not all(isinstance(f, str) for f in out.findings):
        return None
    return out


def file_identity(path: Path) -> str:
    """``<device>:<inode>`` of the file at ``path`` now; "" when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    return f"{st.st_dev}:{st.st_ino}"


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _timeout(watch: WatchConfig) -> str:
    return f"{watch.verify_timeout:.0f} s"
