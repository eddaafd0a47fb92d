"""The pre-build: the new file, made while Hermes still runs, and the source identity.

The recovery engine takes a consistent private copy of the live bundle (fingerprinted
before and after, retried while a writer is active), classifies it and builds a
verified new file, all before anything is stopped, so downtime does not grow with
the file's size. The new file is built next to state.db (same filesystem, so the swap
is one ``rename``) under a name of its own that must not exist beforehand.

The **source identity** is taken before the copy: the header's change counter, the
size, mtime and inode of state.db, and the size, mtime and salts of ``-wal``. After
the holders are stopped it is taken again; any difference means the source may have
changed since the copy, and the run recovers again offline (the catch-up). The ctime
is left out on purpose: the fence changes it.
"""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import apsw

from statewarden.errors import DatabaseError, DatabaseUnreadable, StatewardenError
from statewarden.progress import ProgressFn
from statewarden.recovery import Report, make_work_copy
from statewarden.sidecars import WAL_SUFFIX, sidecar
from statewarden.sqlite import HEADER_SIZE, open_regular, parse_header

NEW_PREFIX = ".statewarden-new-"
# The folded copy, recover's own copy of it, and the new file, side by side.
PREBUILD_SPACE_FACTOR = 3
_HASH_CHUNK = 8 * 1024 * 1024
_WAL_HEADER_BYTES = 32


@dataclass(frozen=True)
class SourceIdentity:
    change_counter: int | None
    db_size: int
    db_mtime_ns: int
    db_ino: int
    wal_size: int | None
    wal_mtime_ns: int | None
    wal_salts: tuple[int, int] | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SourceIdentity:
        salts = data.get("wal_salts")
        return cls(**{**data, "wal_salts": tuple(salts) if salts else None})

    def same_content(self, other: SourceIdentity) -> bool:
        """Equal in everything that a write changes (the change counter is read only when
        the file is readable, so it is compared only when both have it)."""
        a, b = self.to_json(), other.to_json()
        if a["change_counter"] is None or b["change_counter"] is None:
            a.pop("change_counter")
            b.pop("change_counter")
        return a == b

    @property
    def wal_empty(self) -> bool:
        return not self.wal_size or self.wal_size <= _WAL_HEADER_BYTES


def identity(db: Path) -> SourceIdentity:
    """The source's identity now; raw reads of headers only, no SQLite connection."""
    st = os.stat(db)
    counter = None
    try:
        with open_regular(db) as f:
            counter = parse_header(f.read(HEADER_SIZE), str(db)).change_counter
    except (OSError, StatewardenError):
        counter = None  # fenced (mode 000) or unreadable: the stat facts still tell
    wal = sidecar(db, WAL_SUFFIX)
    try:
        wst = os.stat(wal)
    except FileNotFoundError:
        return SourceIdentity(counter, st.st_size, st.st_mtime_ns, st.st_ino, None, None, None)
    salts = None
    try:
        with open_regular(wal) as f:
            head = f.read(_WAL_HEADER_BYTES)
        if len(head) == _WAL_HEADER_BYTES:
            salts = struct.unpack(">2I", head[16:24])
    except (OSError, StatewardenError):
        salts = None
    return SourceIdentity(
        counter,
        st.st_size,
        st.st_mtime_ns,
        st.st_ino,
        wst.st_size,
        wst.st_mtime_ns,
        (int(salts[0]), int(salts[1])) if salts else None,
    )


def new_file_path(db: Path, run_id: str) -> Path:
    return db.with_name(f"{NEW_PREFIX}{run_id}.db")


@dataclass
class Prebuilt:
    """The new file's recover report, and the SHA-256 of the folded copy it came from."""

    report: Report
    folded_sha256: str


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def build_new_file(
    db: Path,
    output: Path,
    progress: ProgressFn | None = None,
    *,
    hash_folded: bool = True,
    extra_sources: list[Path] | None = None,
) -> Prebuilt:
    """Recover ``db`` into ``output`` (which must not exist); errors are one line.

    The consistent copy of the bundle is folded (its WAL checkpointed into it) and
    hashed before it is recovered: if Hermes only checkpoints the same WAL into state.db
    when it stops, state.db then has exactly these bytes, and the run needs no catch-up.
    The catch-up itself (``hash_folded=False``) recovers straight from state.db: it runs
    while Hermes is stopped, so every second saved there is downtime.
    """
    from statewarden.recovery import recover  # noqa: PLC0415 - the engine, only when a run builds

    try:
        if not hash_folded:
            return Prebuilt(
                recover.recover(db, output, progress=progress, extra_sources=extra_sources), ""
            )
        work = make_work_copy(
            db, output.parent, space_factor=PREBUILD_SPACE_FACTOR, progress=progress
        )
        try:
            folded = file_sha256(work.db)
            # Other copies are read only when they are the database's owner's, not the
            # work copy's (ours).
            owner = os.stat(db).st_uid
            report = recover.recover(
                work.db, output, progress=progress, extra_sources=extra_sources, owner=owner
            )
        except DatabaseUnreadable as exc:
            exc.message = exc.message.replace(str(work.db), str(db))
            raise
        except StatewardenError as exc:
            # The copy was readable: what failed is writing the new file (space, inodes).
            text = exc.message.replace(str(work.db), str(db))
            raise DatabaseError(
                f"{db}: the new file could not be built next to it: {text}",
                hint=_retry_hint(text),
            ) from None
        finally:
            work.cleanup()
        report.source = str(db)
        return Prebuilt(report, folded)
    except StatewardenError:
        raise
    except (OSError, apsw.Error) as exc:
        # A disk that fills up while the copy or the new file is written, for example.
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise DatabaseError(
            f"{db}: the new file could not be built next to it: {reason}",
            hint=_retry_hint(reason),
        ) from None


def _retry_hint(reason: str) -> str:
    """What to do before trying again: room for a full disk, access for a refusal (the
    words of ``strerror`` for EACCES, EPERM and EROFS)."""
    refused = ("Permission denied", "Operation not permitted", "Read-only file system")
    if any(words in reason for words in refused):
        return "nothing was stopped or changed; let this user write there, then retry"
    return "nothing was stopped or changed; free some space and retry"


def build_copy_as_is(
    db: Path, output: Path, journal_mode: str | None, progress: ProgressFn | None = None
) -> None:
    """For ``vacuum`` and ``journal-mode=``: a compacted copy through ``VACUUM INTO``,
    read from a consistent private copy, with the journal mode asked for."""
    if os.path.lexists(output):
        raise DatabaseError(f"{output}: already exists; refusing to overwrite it")
    try:
        work = make_work_copy(db, output.parent, space_factor=2, progress=progress)
    except (OSError, apsw.Error) as exc:
        raise DatabaseError(f"{db}: could not be copied: {exc}") from None
    built = work.work_dir / "output.db"
    try:
        conn = apsw.Connection(str(work.db))
        try:
            conn.execute("VACUUM INTO ?", (str(built),))
        finally:
            conn.close()
        mode = journal_mode or work.source_header.journal_mode
        conn = apsw.Connection(str(built))
        try:
            conn.execute(f"PRAGMA journal_mode={'WAL' if mode == 'wal' else 'DELETE'}")
            ok = conn.execute("PRAGMA integrity_check").fetchall()
        finally:
            conn.close()
        if ok != [("ok",)]:
            raise DatabaseError(f"{db}: the compacted copy failed its integrity check")
        with open(built, "rb+") as f:
            os.fsync(f.fileno())
        os.link(built, output)
    except (OSError, apsw.Error) as exc:
        raise DatabaseError(f"{db}: the new file could not be built next to it: {exc}") from None
    finally:
        work.cleanup()


def build_restored(original: Path, output: Path, progress: ProgressFn | None = None) -> None:
    """For ``quarantine restore``: the quarantined original as it was, damage and all,
    with its own ``-wal`` replayed into it (one self-contained file at ``output``)."""
    if os.path.lexists(output):
        raise DatabaseError(f"{output}: already exists; refusing to overwrite it")
    try:
        work = make_work_copy(original, output.parent, space_factor=2, progress=progress)
    except (OSError, apsw.Error) as exc:
        raise DatabaseError(f"{original}: could not be copied: {exc}") from None
    try:
        with open(work.db, "rb+") as f:
            os.fsync(f.fileno())
        os.link(work.db, output)
    except OSError as exc:
        raise DatabaseError(f"{original}: could not be put next to the database: {exc}") from None
    finally:
        work.cleanup()
