"""Verified snapshots: a last known good copy of each database, kept in the state dir.

A snapshot is taken online with SQLite's backup API from a read-only connection to the
live file: one read transaction, so the copy is consistent while Hermes keeps writing
(in WAL mode a reader never blocks a writer), and nothing is written to the source,
not even a checkpoint (a read-only connection neither checkpoints nor resets the WAL,
also when it closes). The copy goes into a new file of ours
(``<state dir>/snapshots/<profile>-<stamp>.db``, created ``O_EXCL | O_NOFOLLOW``) and
then passes ``statewardenctl check`` (``recovery.check``: integrity, row scans, FTS,
indexes) before it counts. A copy that fails the check is removed and the error says
why (the live file has damage): only a snapshot with its ``.json`` (source, time, size,
SHA-256, the check's verdict, session count) is listed, and only a listed one with the
verdict ``none`` is used by ``recover --extra-source``.

Retention, per profile, after each snapshot kept: the newest
``maintenance.snapshots_keep``, and none older than ``maintenance.snapshots_max_age``;
the newest is always kept (an old known good copy is better than none).

Who takes them: the daemon, every ``maintenance.snapshot_interval``
(``maintenance.auto``, as a ``statewardenctl snapshots take`` subprocess at idle
priority, so its own reads of the file never overlap), a maintenance run right before
it stops anything (``maintenance.run``), and the user (``statewardenctl snapshots
take``). One at a time: the folder's ``.lock``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import apsw

from statewarden.atomic import private_dir, write_atomic
from statewarden.errors import CopyFailed, DatabaseError, DatabaseUnreadable, StatewardenError
from statewarden.maintenance.prebuild import file_sha256
from statewarden.progress import ProgressFn
from statewarden.recovery import check_database
from statewarden.sidecars import JOURNAL_SUFFIX, SHM_SUFFIX, WAL_SUFFIX
from statewarden.sqlite import classify_error, closed_wal, open_readonly

SNAPSHOTS_DIR = "snapshots"
LOCK_NAME = ".lock"
LOCK_WAIT_S = 60.0  # another snapshot being taken: wait this long for it
HEALTHY = "none"  # the check's verdict for a snapshot that counts
BACKUP_PREFIX = ".statewarden-backup-"
COPY_SIDECARS = (JOURNAL_SUFFIX, WAL_SUFFIX, SHM_SUFFIX)


@dataclass
class Snapshot:
    path: str
    source: str
    profile: str
    taken_at: float
    bytes: int
    sha256: str
    integrity: str
    sessions: int | None
    seconds: float
    check: str = HEALTHY  # the damage class `check` found: only "none" is kept

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def verified(self) -> bool:
        return self.integrity == "ok" and self.check == HEALTHY


def snapshots_dir(state_dir: Path) -> Path:
    return state_dir / SNAPSHOTS_DIR


@contextlib.contextmanager
def _one_at_a_time(folder: Path) -> Iterator[None]:
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StatewardenError(
                        f"{folder}: another snapshot is being taken; try again later"
                    ) from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)


def take_snapshot(
    db: Path,
    state_dir: Path,
    profile: str,
    keep: int,
    max_age_s: float | None = None,
    *,
    progress: ProgressFn | None = None,
) -> Snapshot:
    """Copy ``db`` with the backup API, check the copy, keep it (or say why not)."""
    started = time.monotonic()
    folder = private_dir(snapshots_dir(state_dir))
    with _one_at_a_time(folder):
        _remove_strays(folder)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
        dest = folder / f"{profile}-{stamp}.db"
        # Created by us, O_EXCL and no symlink followed; SQLite then writes into it.
        os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        try:
            taken_at = time.time()
            _backup(db, dest)
            verdict, findings = _check(dest, state_dir, progress)
            if verdict != HEALTHY:
                raise DatabaseError(
                    f"{db}: the snapshot failed its check ({verdict} damage: "
                    f"{'; '.join(findings[:2]) or 'see statewardenctl check'});"
                    " the live file is damaged, the copy was removed and is never used",
                    hint="statewardenctl check, then statewardenctl maintenance",
                )
            sessions = _sessions(dest)
            snap = Snapshot(
                path=str(dest),
                source=str(db),
                profile=profile,
                taken_at=taken_at,
                bytes=dest.stat().st_size,
                sha256=file_sha256(dest),
                integrity="ok",
                sessions=sessions,
                seconds=round(time.monotonic() - started, 3),
                check=verdict,
            )
            write_atomic(dest.with_suffix(".json"), json.dumps(snap.to_json(), indent=2) + "\n")
        except BaseException:
            _remove_copy(dest)
            raise
        prune_snapshots(state_dir, profile, keep, max_age_s)
    return snap


def backup_copy(db: Path, folder: Path) -> Path:
    """A consistent copy of ``db`` through the backup API (as a snapshot is taken) in a
    new private folder under ``folder``: for a check while a writer is too busy for a
    raw copy of the bundle. The caller removes the folder (``copy.parent``)."""
    work = Path(tempfile.mkdtemp(prefix=BACKUP_PREFIX, dir=private_dir(folder)))
    dest = work / db.name
    os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    try:
        _backup(db, dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return dest


def _backup(db: Path, dest: Path) -> None:
    # Read-only (and immutable when no sidecar exists, else SQLite would leave an empty
    # -wal and -shm behind): the source is never written, checkpointed or reset.
    src = open_readonly(db, busy_timeout_ms=1000, immutable=closed_wal(db))
    try:
        out = apsw.Connection(str(dest))
        try:
            # One step: one read transaction on the source, so a writer's commits meanwhile
            # neither restart the copy nor get into it half-way.
            with out.backup("main", src, "main") as backup:
                backup.step(-1)
            out.execute("PRAGMA journal_mode=DELETE")
        finally:
            out.close()
    except apsw.FullError as exc:
        # A write of the copy failed: the snapshot's folder, not the live file.
        raise CopyFailed(
            f"{dest.parent}: no space left to write the snapshot of {db}: disk is full ({exc})",
            hint="free some space there",
        ) from None
    except apsw.Error as exc:
        raise classify_error(db, exc) from None
    finally:
        src.close()


def _check(dest: Path, state_dir: Path, progress: ProgressFn | None) -> tuple[str, list[str]]:
    """What ``statewardenctl check`` says of the copy: (damage class, findings). Only a
    copy SQLite cannot read is a verdict ("unreadable"); a check that could not run (no
    room for its work copy, a failed write) judged nothing and is raised as such."""
    try:
        diagnosis = check_database(dest, private_dir(state_dir / "work"), progress=progress)
    except DatabaseUnreadable as exc:
        return "unreadable", [str(exc)]
    except StatewardenError as exc:
        raise StatewardenError(
            f"{dest}: the snapshot could not be checked (nothing judged): {exc.message}",
            hint=exc.hint,
        ) from None
    return diagnosis.damage, diagnosis.findings()


def _sessions(dest: Path) -> int | None:
    conn = apsw.Connection(str(dest), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        row = conn.execute("SELECT count(*) FROM sessions NOT INDEXED").fetchone()
        return int(row[0]) if row else None
    except apsw.Error:
        return None  # not a Hermes database (no sessions table): the count is just not shown
    finally:
        conn.close()


def _remove_copy(dest: Path) -> None:
    """A copy not kept, with what SQLite may have left beside it (a full disk leaves
    the backup's rollback journal)."""
    for path in (dest, *(Path(f"{dest}{sfx}") for sfx in COPY_SIDECARS)):
        path.unlink(missing_ok=True)


def _remove_strays(folder: Path) -> None:
    """A copy with no ``.json`` was never kept (a take killed half-way): removed, with
    its sidecars. Called under the folder's lock, so no take is writing it."""
    for db in folder.glob("*.db"):
        if not db.with_suffix(".json").exists():
            _remove_copy(db)
    for sfx in COPY_SIDECARS:
        for side in folder.glob(f"*.db{sfx}"):
            if not Path(str(side)[: -len(sfx)]).exists():
                side.unlink(missing_ok=True)


def list_snapshots(state_dir: Path) -> list[Snapshot]:
    """Every kept snapshot, newest first."""
    folder = snapshots_dir(state_dir)
    out: list[Snapshot] = []
    if not folder.is_dir():
        return out
    known = {f.name for f in fields(Snapshot)}
    for meta in folder.glob("*.json"):
        try:
            data = json.loads(meta.read_text())
            snap = Snapshot(**{k: v for k, v in data.items() if k in known})
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        if Path(snap.path).is_file():
            out.append(snap)
    return sorted(out, key=lambda s: s.taken_at, reverse=True)


def prune_snapshots(
    state_dir: Path,
    profile: str,
    keep: int,
    max_age_s: float | None = None,
    now: float | None = None,
) -> list[str]:
    """Remove the snapshots of ``profile`` beyond the newest ``keep`` or older than
    ``max_age_s``; the newest one always stays."""
    now = time.time() if now is None else now
    mine = [s for s in list_snapshots(state_dir) if s.profile == profile]
    removed = []
    for i, snap in enumerate(mine):
        too_many = i >= max(keep, 1)
        too_old = i > 0 and max_age_s is not None and now - snap.taken_at > max_age_s
        if too_many or too_old:
            Path(snap.path).unlink(missing_ok=True)
            Path(snap.path).with_suffix(".json").unlink(missing_ok=True)
            removed.append(snap.path)
    return removed


def newest_of(state_dir: Path, db: Path) -> Snapshot | None:
    """The newest verified snapshot of ``db`` (by its real path), or None."""
    real = os.path.realpath(db)
    for s in list_snapshots(state_dir):
        if s.verified and os.path.realpath(s.source) == real:
            return s
    return None
