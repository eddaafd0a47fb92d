"""``statewardenctl status``: the facts about each watched database, read without harm.

Nothing here writes, checkpoints or takes a write lock. The header is read raw first,
with no connection open (docs/safety.md rule 2); then one short read-only connection asks
for the page count, the freelist and Hermes' ``schema_version``. In WAL mode a reader
never blocks a writer; the connection lives for a few milliseconds. No connection opens
when a sidecar (named after the file's real path, as SQLite names them) is a symlink or
not a regular file (a FIFO ``-journal`` would hang the open): the problem says so. A
``-wal`` with no ``-shm`` (nobody has the file open) is not read through SQLite, which
would create a ``-shm`` beside it: the file alone is read, immutable, and a problem
line says so.

The recovery files newer Hermes keeps beside the database (retired WAL captures, the
``pending_messages/`` spool, pre-update backups) are listed with their sizes
(``recovery_files.scan``: stats and listings only).

Hermes' ``schema_version`` is named, and one newer than ``NEWEST_KNOWN_SCHEMA`` is said to
be so, with what is then not verified (``DatabaseStatus.schema_note``).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statewarden import sqlite
from statewarden.errors import DatabaseError
from statewarden.mounts import Mount, mount_for, read_mounts
from statewarden.recovery_files import RecoveryFile
from statewarden.recovery_files import scan as scan_recovery_files
from statewarden.sidecars import (
    JOURNAL_SUFFIX,
    SHM_SUFFIX,
    SIDECAR_SUFFIXES,
    WAL_SUFFIX,
    SidecarFiles,
)
from statewarden.targets import Target

# The newest Hermes ``schema_version`` statewarden knows: its log rules, check, recover and
# maintenance are tested on files the Hermes of that schema wrote (0.22.2.post1, schema 31;
# ``tests/watch/test_status_schema.py`` holds it to what that Hermes writes).
NEWEST_KNOWN_SCHEMA = 31


def newer_schema_note(version: int | None) -> str | None:
    """What is not verified on a schema newer than statewarden knows (None: known)."""
    if version is None or version <= NEWEST_KNOWN_SCHEMA:
        return None
    return (
        f"newer than statewarden knows ({NEWEST_KNOWN_SCHEMA}): its log rules, check, recover "
        "and maintenance are not verified on it"
    )


@dataclass
class FilesystemFacts:
    type: str
    mount_point: str
    source: str
    unsafe_for_wal: bool


@dataclass
class DatabaseStatus:
    profile: str
    home: str
    path: str
    gateway_unit: str
    exists: bool | None  # None: not known (a folder this user may not search)
    size_bytes: int | None = None
    page_size: int | None = None
    page_count: int | None = None
    freelist_count: int | None = None
    journal_mode: str | None = None
    wal_bytes: int | None = None
    shm_bytes: int | None = None
    journal_bytes: int | None = None
    schema_version: int | None = None
    # Set when schema_version is newer than NEWEST_KNOWN_SCHEMA: what is not verified on it.
    schema_note: str | None = None
    sqlite_user_version: int | None = None
    filesystem: FilesystemFacts | None = None
    recovery_files: list[RecoveryFile] = field(default_factory=list)
    recovery_files_bytes: int = 0
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _size(path: Path, *, follow: bool = True) -> int | None:
    try:
        return os.stat(path, follow_symlinks=follow).st_size
    except OSError:
        return None


def _filesystem(path: Path, mounts: list[Mount]) -> FilesystemFacts | None:
    m = mount_for(path, mounts)
    if m is None:
        return None
    return FilesystemFacts(m.fstype, m.mount_point, m.source, m.unsafe_for_wal)


def database_status(target: Target, mounts: list[Mount] | None = None) -> DatabaseStatus:
    """Everything ``status`` reports about one target; problems are listed, not raised."""
    mounts = read_mounts() if mounts is None else mounts
    try:
        os.stat(target.db)
    except FileNotFoundError:
        pass  # said below, with what else is known
    except OSError as exc:  # a folder this user may not search: nothing can be looked at
        st = DatabaseStatus(
            profile=target.name,
            home=str(target.home),
            path=str(target.db),
            gateway_unit=target.gateway_unit,
            exists=None,
        )
        st.problems.append(f"{target.db}: cannot be looked at: {exc.strerror or exc}")
        return st
    st = DatabaseStatus(
        profile=target.name,
        home=str(target.home),
        path=str(target.db),
        gateway_unit=target.gateway_unit,
        exists=target.db.exists(),
        filesystem=_filesystem(target.db, mounts),
    )
    # SQLite names the sidecars after the file's real path (a symlinked state.db has
    # them beside the file it points to), never through a symlink: lstat, not stat.
    real = os.path.realpath(target.db)
    st.wal_bytes = _size(Path(real + WAL_SUFFIX), follow=False)
    st.shm_bytes = _size(Path(real + SHM_SUFFIX), follow=False)
    st.journal_bytes = _size(Path(real + JOURNAL_SUFFIX), follow=False)
    kept = scan_recovery_files(target.db, target.home)
    st.recovery_files, st.recovery_files_bytes = kept.items, kept.total_bytes
    if not st.exists:
        st.problems.append("state.db does not exist (yet)")
        return st
    st.size_bytes = _size(target.db)
    try:
        header = sqlite.read_header(target.db)
    except DatabaseError as exc:
        st.problems.append(str(exc))
        return st
    st.page_size = header.page_size
    st.page_count = header.page_count if header.page_count_valid else None
    st.freelist_count = header.freelist_count
    st.journal_mode = header.journal_mode
    st.sqlite_user_version = header.user_version
    if st.filesystem and st.filesystem.unsafe_for_wal and header.journal_mode == "wal":
        st.problems.append(
            f"WAL database on {st.filesystem.type}: locks are not coherent there, "
            "WAL can corrupt silently"
        )
    # The header is closed; now (and only now) a SQLite connection may open.
    trouble = _sidecar_trouble(real)
    if trouble is not None:
        st.problems.append(trouble)
        return st
    present = {sfx for sfx in SIDECAR_SUFFIXES if os.path.lexists(real + sfx)}
    # No -wal: the main file alone is the database (nobody has it open in WAL mode); a
    # -wal with no -shm: nobody has it open, and a reader would create a -shm beside it.
    alone = WAL_SUFFIX not in present or SHM_SUFFIX not in present
    if WAL_SUFFIX in present and SHM_SUFFIX not in present:
        st.problems.append(
            f"{real}-wal with no -shm: nobody has the database open and its -wal is not"
            " checkpointed; not read through SQLite (a reader would create a -shm beside"
            " it): pages and schema_version are the file's alone"
        )
    try:
        wal_mode = header.journal_mode == "wal" or WAL_SUFFIX in present
        closed = wal_mode and JOURNAL_SUFFIX not in present and alone
        with sqlite.readonly(target.db, immutable=closed) as conn:
            # The live view includes commits still in the WAL, which the header lacks.
            st.page_count = sqlite.pragma_int(conn, "page_count")
            st.freelist_count = sqlite.pragma_int(conn, "freelist_count")
            st.schema_version = sqlite.hermes_schema_version(conn)
        st.schema_note = newer_schema_note(st.schema_version)
    except DatabaseError as exc:
        st.problems.append(str(exc))
    except Exception as exc:  # noqa: BLE001 - any SQLite failure is a fact to report
        st.problems.append(str(sqlite.classify_error(target.db, exc)))
    return st


def _sidecar_trouble(real: str) -> str | None:
    """Why SQLite must not be let near the sidecars of the file ``real``
    (``SidecarFiles.trouble``); None when each present is a regular file."""
    trouble = SidecarFiles(real).trouble()
    return None if trouble is None else f"{trouble}; not read through SQLite"


def status_all(targets: list[Target]) -> list[DatabaseStatus]:
    mounts = read_mounts()
    return [database_status(t, mounts) for t in targets]
