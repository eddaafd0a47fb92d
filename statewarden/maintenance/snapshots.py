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

Before any connection opens, the live bundle is looked at raw: a state.db that is no
SQLite file (a FIFO, a folder, a device, empty, a torn header) is refused as ``check``
refuses it (exit 4), and so is a sidecar that is not a regular file; a sidecar that is
a symlink is refused too (SQLite neither makes nor opens one). A ``-wal`` with no
``-shm`` (nobody has the file open, and any SQLite reader would create a ``-shm``
beside it) is copied raw into a folder of ours and read there. A copy whose schema
cookie is older than the live file's header says is of another database (a ``-wal``
written for another file, which SQLite replays all the same) and is not kept.

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
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import apsw

from statewarden.atomic import copy_bytes, private_dir, write_atomic
from statewarden.errors import (
    CopyFailed,
    DatabaseChanged,
    DatabaseError,
    DatabaseUnreadable,
    StatewardenError,
    copy_failed,
)
from statewarden.json_text import LATEST_TIME, parse_json, typed_record
from statewarden.maintenance.prebuild import file_sha256
from statewarden.progress import ProgressFn
from statewarden.recovery import check_database
from statewarden.sidecars import (
    JOURNAL_SUFFIX,
    SHM_SUFFIX,
    WAL_SUFFIX,
    SidecarFiles,
)
from statewarden.sqlite import (
    HeaderFacts,
    classify_error,
    no_sidecars,
    open_readonly,
    pragma_int,
    read_header,
)

SNAPSHOTS_DIR = "snapshots"
ALONE_ATTEMPTS = 3  # copies of a file alone before "a writer opened it meanwhile" is final
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
    # Absolute: the .json is read from any folder (the daemon's, a later shell's).
    db, state_dir = Path(os.path.abspath(db)), Path(os.path.abspath(state_dir))
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


def backup_copy(db: Path, folder: Path, *, synced: bool = True) -> Path:
    """A consistent copy of ``db`` through the backup API (as a snapshot is taken) in a
    new private folder under ``folder``: for a check while a writer is too busy for a
    raw copy of the bundle. The caller removes the folder (``copy.parent``).
    ``synced=False``: the copy is never fsynced (read once and removed)."""
    work = Path(tempfile.mkdtemp(prefix=BACKUP_PREFIX, dir=private_dir(folder)))
    dest = work / db.name
    os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    try:
        _backup(db, dest, synced=synced)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return dest


def _backup(db: Path, dest: Path, *, synced: bool = True, attempts: int = ALONE_ATTEMPTS) -> None:
    """Copy ``db`` as SQLite presents it into ``dest``, or raise: never a copy of another
    file, and nothing written beside the live file (see :func:`_look`). A copy read
    ``immutable`` (the file alone) counts only if no writer opened the file meanwhile
    (an immutable reader takes no lock, and a writer's checkpoint would change pages
    under it): else it is taken again, now through SQLite's locks and the writer's
    ``-wal``, up to ``attempts`` times."""
    header, identity, present = _look(db)
    work: Path | None = None
    try:
        if WAL_SUFFIX in present and SHM_SUFFIX not in present:
            # A -wal with no -shm: nobody has the database open (a connection always has
            # both), and any SQLite reader would create a -shm beside it. Its bundle is
            # copied raw into a folder of ours and read there.
            work = Path(tempfile.mkdtemp(prefix=BACKUP_PREFIX, dir=dest.parent))
            cookie = _backup_from(_copy_closed(db, work), dest, db, immutable=False, synced=synced)
        else:
            # WAL with no -wal nor -journal: the main file alone is the database, read
            # immutable (a read-only connection would leave an empty -wal and -shm).
            alone = header.journal_mode == "wal" and not present & {WAL_SUFFIX, JOURNAL_SUFFIX}
            real = os.path.realpath(db)
            before = _fingerprint(real)
            cookie = _backup_from(db, dest, db, immutable=alone, synced=synced)
            if alone and (not no_sidecars(real) or _fingerprint(real) != before):
                if attempts <= 1:
                    raise DatabaseChanged(
                        f"{db}: a writer opened it while it was copied; nothing kept, try again"
                    )
                _backup(db, dest, synced=synced, attempts=attempts - 1)
                return
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    if _identity(db) != identity:
        raise DatabaseChanged(
            f"{db}: replaced while it was copied (a restore or a swap); nothing kept, try again"
        )
    if cookie < header.schema_cookie:
        # The schema cookie only grows within one database: SQLite replayed a -wal
        # written for another one over this file (nothing in a WAL names its database).
        raise DatabaseUnreadable(
            f"{db}-wal: belongs to another database (SQLite's view has schema cookie"
            f" {cookie}, older than the file's {header.schema_cookie});"
            " nothing kept",
            hint="move the -wal aside to read the database file alone",
        )


def _look(db: Path) -> tuple[HeaderFacts, tuple[int, int], set[str]]:
    """Raw checks of the live bundle, with no connection open to it: the database file
    is a regular file with a SQLite header (else :class:`DatabaseUnreadable`, as
    ``check`` says), and each sidecar SQLite would open (named after the file's real
    path, as SQLite names them) is a regular file: a FIFO would hang the read, and a
    symlink or a folder is never one SQLite made (it opens none through a symlink).
    Returns the header, the file's identity and the sidecars present."""
    header = read_header(db)
    identity = _identity(db)
    files = SidecarFiles(db)
    if files.error is not None:
        raise DatabaseError(f"{files.error[0]}: {files.error[1]}; nothing copied")
    if files.symlink is not None:
        raise DatabaseError(
            f"{files.symlink}: is a symlink, which SQLite never makes nor reads a sidecar"
            " through; nothing copied",
            hint="move it aside",
        )
    if files.irregular is not None:
        raise DatabaseUnreadable(f"{files.irregular}: is not a regular file (a FIFO, a folder?)")
    return header, identity, files.present


def _identity(db: Path) -> tuple[int, int]:
    try:
        st = os.stat(db)
    except OSError as exc:
        raise DatabaseError(f"{db}: {exc.strerror}; nothing kept") from None
    return st.st_dev, st.st_ino


def _copy_closed(db: Path, work: Path) -> Path:
    """A raw copy of the closed bundle ``db`` + ``-wal`` (+ ``-journal``, when there is
    one: SQLite then meets it in the copy) in ``work``; refused with
    :class:`DatabaseChanged` when any of them changed meanwhile or a -shm appeared (a
    writer opened it)."""
    real = os.path.realpath(db)
    files = [
        (real + sfx, work / f"{db.name}{sfx}")
        for sfx in ("", WAL_SUFFIX, JOURNAL_SUFFIX)
        if sfx != JOURNAL_SUFFIX or os.path.lexists(real + sfx)
    ]
    before = [_fingerprint(src) for src, _ in files]
    for src, dst in files:
        try:
            fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise DatabaseUnreadable(f"{src}: is not a regular file")
                out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                try:
                    for _ in copy_bytes(fd, out):
                        pass
                finally:
                    os.close(out)
            finally:
                os.close(fd)
        except OSError as exc:
            raise copy_failed(src, work, exc) from None
    after = [_fingerprint(src) for src, _ in files]
    if after != before or os.path.lexists(real + SHM_SUFFIX):
        raise DatabaseChanged(f"{db}: a writer opened it while it was copied; try again")
    return files[0][1]


def _fingerprint(path: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _backup_from(
    src_path: Path, dest: Path, db: Path, *, immutable: bool, synced: bool = True
) -> int:
    """The backup API from ``src_path`` (read-only) into ``dest``; errors name ``db``.
    Returns the schema cookie SQLite presents for the source (the copy's own is
    bumped by the backup)."""
    src = open_readonly(src_path, busy_timeout_ms=1000, immutable=immutable)
    try:
        out = apsw.Connection(str(dest))
        try:
            if not synced:
                out.execute("PRAGMA synchronous=OFF")
            # One step: one read transaction on the source, so a writer's commits meanwhile
            # neither restart the copy nor get into it half-way.
            with out.backup("main", src, "main") as backup:
                backup.step(-1)
            out.execute("PRAGMA journal_mode=DELETE")
        finally:
            out.close()
        return pragma_int(src, "schema_version")
    except apsw.FullError:
        # A write of the copy failed: the snapshot's folder, not the live file.
        raise CopyFailed(
            f"{dest.parent}: no space left to write the copy of {db}: disk is full",
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
    for work in folder.glob(f"{BACKUP_PREFIX}*"):
        shutil.rmtree(work, ignore_errors=True)  # a raw copy of a closed bundle, left


def list_snapshots(state_dir: Path) -> list[Snapshot]:
    """Every kept snapshot, newest first."""
    folder = snapshots_dir(state_dir)
    out: list[Snapshot] = []
    if not folder.is_dir():
        return out
    for meta in folder.glob("*.json"):
        snap = _read_meta(meta)
        if snap is not None and Path(snap.path).is_file():
            out.append(snap)
    return sorted(out, key=lambda s: s.taken_at, reverse=True)


# Each field of a snapshot's .json and the JSON types it may have.
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "path": (str,),
    "source": (str,),
    "profile": (str,),
    "taken_at": (int, float),
    "bytes": (int,),
    "sha256": (str,),
    "integrity": (str,),
    "sessions": (int, type(None)),
    "seconds": (int, float),
    "check": (str,),
}
META_MAX_BYTES = 64 * 1024


def _read_meta(meta: Path) -> Snapshot | None:
    """The snapshot ``meta`` describes, or None when it describes none: not a regular
    file, not JSON, a field of the wrong type, a time that is no time (NaN, out of any
    date's range), or a copy other than the ``.db`` beside it (a .json naming another
    file is never listed, so never pruned: pruning removes the file it names)."""
    try:
        fd = os.open(meta, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            data = parse_json(f.read(META_MAX_BYTES))
    except (OSError, ValueError):
        return None
    snap = typed_record(Snapshot, data, _FIELD_TYPES)
    if snap is None or not 0 <= snap.taken_at <= LATEST_TIME:  # NaN fails both
        return None
    own = meta.with_suffix(".db")
    if os.path.realpath(snap.path) != os.path.realpath(own):
        return None
    return snap


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
