"""Verified snapshots: a last known good copy of each database, kept in the state dir.

A snapshot is taken with SQLite's backup API from a read-only connection to the live
file (one read transaction: a consistent copy while Hermes keeps writing, and no write
to the source, not even a checkpoint), into a new file of ours
(``<state dir>/snapshots/<profile>-<stamp>.db``), which then passes a full
``integrity_check`` before it counts. A copy that fails the check is not kept: the
live file has damage, which the report says. Each kept snapshot has a ``.json`` next to
it (source, time, size, SHA-256, integrity ``ok``, session count). Retention keeps the
newest ``maintenance.snapshots_keep`` per profile.

The daemon takes one in each maintenance window (as a ``statewardenctl snapshots take``
subprocess, so its own reads of the file never overlap); ``statewardenctl snapshots``
lists them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import apsw

from statewarden.atomic import private_dir, write_atomic
from statewarden.errors import DatabaseError
from statewarden.maintenance.prebuild import file_sha256
from statewarden.sqlite import classify_error, open_readonly, wal_sidecars_absent

SNAPSHOTS_DIR = "snapshots"
INTEGRITY_MAX_ERRORS = 100


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def snapshots_dir(state_dir: Path) -> Path:
    return state_dir / SNAPSHOTS_DIR


def take_snapshot(db: Path, state_dir: Path, profile: str, keep: int) -> Snapshot:
    """Copy ``db`` with the backup API, verify the copy, keep it (or say why not)."""
    started = time.monotonic()
    folder = private_dir(snapshots_dir(state_dir))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    dest = folder / f"{profile}-{stamp}.db"
    # Created by us, O_EXCL and no symlink followed; SQLite then writes into it.
    os.close(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    try:
        _backup(db, dest)
        integrity, sessions = _verify(dest)
        if integrity != "ok":
            raise DatabaseError(
                f"{db}: the snapshot failed its integrity check ({integrity});"
                " the live file is damaged, not kept as a known good copy",
                hint="statewardenctl check, then statewardenctl maintenance",
            )
        snap = Snapshot(
            path=str(dest), source=str(db), profile=profile, taken_at=time.time(),
            bytes=dest.stat().st_size, sha256=file_sha256(dest), integrity=integrity,
            sessions=sessions, seconds=round(time.monotonic() - started, 3),
        )  # fmt: skip
        write_atomic(dest.with_suffix(".json"), json.dumps(snap.to_json(), indent=2) + "\n")
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    prune_snapshots(state_dir, profile, keep)
    return snap


def _backup(db: Path, dest: Path) -> None:
    src = open_readonly(db, busy_timeout_ms=1000, immutable=wal_sidecars_absent(db))
    try:
        out = apsw.Connection(str(dest))
        try:
            with out.backup("main", src, "main") as backup:
                backup.step(-1)
            out.execute("PRAGMA journal_mode=DELETE")
        finally:
            out.close()
    except apsw.Error as exc:
        raise classify_error(db, exc) from None
    finally:
        src.close()


def _verify(dest: Path) -> tuple[str, int | None]:
    conn = apsw.Connection(str(dest), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = conn.execute(f"PRAGMA integrity_check({INTEGRITY_MAX_ERRORS})").fetchall()
        integrity = "ok" if rows == [("ok",)] else str(rows[0][0])
        sessions: int | None = None
        try:
            row = conn.execute("SELECT count(*) FROM sessions NOT INDEXED").fetchone()
            sessions = int(row[0]) if row else None
        except apsw.Error:
            pass  # not a Hermes database (no sessions table): the count is just not shown
        return integrity, sessions
    except apsw.Error as exc:
        return f"unreadable: {exc}", None
    finally:
        conn.close()


def list_snapshots(state_dir: Path) -> list[Snapshot]:
    """Every kept snapshot, newest first."""
    folder = snapshots_dir(state_dir)
    out: list[Snapshot] = []
    if not folder.is_dir():
        return out
    for meta in folder.glob("*.json"):
        try:
            data = json.loads(meta.read_text())
            snap = Snapshot(**data)
        except (OSError, ValueError, TypeError):
            continue
        if Path(snap.path).is_file():
            out.append(snap)
    return sorted(out, key=lambda s: s.taken_at, reverse=True)


def prune_snapshots(state_dir: Path, profile: str, keep: int) -> list[str]:
    """Remove the snapshots of ``profile`` beyond the newest ``keep`` (at least one)."""
    mine = [s for s in list_snapshots(state_dir) if s.profile == profile]
    removed = []
    for snap in mine[max(keep, 1) :]:
        Path(snap.path).unlink(missing_ok=True)
        Path(snap.path).with_suffix(".json").unlink(missing_ok=True)
        removed.append(snap.path)
    return removed
