"""Other copies of the database that can prove a lost row: ``recover --extra-source``.

Three kinds, told apart by their names (``recovery_files.py``):

- a **retired WAL capture** (``state.db.retired-wal-<ts>-<pid>/``, a folder with
  ``manifest.json``): its main image and the WAL it held are copied side by side into
  the work folder and opened there, so SQLite replays exactly the committed frames;
- a **pre-update backup** (``state.db.pre-update-emergency-<ts>.bak``, with its
  ``-wal`` when there is one, copied the same way);
- anything else is a **snapshot** (``statewardenctl snapshots``: its ``.json`` beside
  it gives the time it was taken).

Each copy must pass the check a snapshot passes (``PRAGMA integrity_check``) before one
row of it is used; a copy that fails, or cannot be opened, is left out with a note.
Copies are read on private copies in the work folder (never the originals: opening a
database with a ``-wal`` beside it may write the ``-shm``). Which rows are taken is the
rule in ``rebuild.Rebuild._add_from_other_copies`` (docs/safety.md, "Rows from other
copies").
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from statewarden.errors import UsageError
from statewarden.recovery.schema import SchemaObject
from statewarden.recovery_files import PRE_UPDATE_INFIX, RETIRED_WAL_INFIX, RETIRED_WAL_MANIFEST
from statewarden.sidecars import WAL_SUFFIX, sidecar
from statewarden.sqlite import quote_ident

INTEGRITY_MAX_ERRORS = 100


@dataclass
class OtherCopy:
    """One verified copy, opened read-only on its private copy in the work folder."""

    kind: str  # "snapshot", "retired WAL capture", "pre-update backup"
    name: str  # its file or folder name
    taken_at: float  # when it was taken (epoch seconds)
    path: Path  # the private copy read

    @property
    def taken(self) -> str:
        return dt.datetime.fromtimestamp(self.taken_at, dt.UTC).strftime("%Y-%m-%dT%H:%MZ")

    @property
    def label(self) -> str:
        """``snapshot 2026-11-30T22:00Z``, ``retired WAL capture <name>``, ..."""
        if self.kind == "snapshot":
            return f"snapshot {self.taken}"
        return f"{self.kind} {self.name}"

    def rows(self, obj: SchemaObject) -> list[tuple[int, list[Any]]] | None:
        """Every row of ``obj`` in this copy, in rowid order, with the columns the
        output has (None when the copy lacks the table or one of its columns)."""
        cols = [c.name for c in obj.stored_columns]
        conn = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            have = {str(r[1]) for r in conn.execute(f"PRAGMA table_info({quote_ident(obj.name)})")}
            if not cols or not set(cols) <= have:
                return None
            sel = ", ".join(quote_ident(c) for c in cols)
            return [
                (int(r[0]), list(r[1:]))
                for r in conn.execute(
                    f"SELECT rowid, {sel} FROM {quote_ident(obj.name)} NOT INDEXED ORDER BY rowid"
                )
            ]
        except apsw.Error:
            return None
        finally:
            conn.close()


def kind_of(path: Path) -> str:
    if path.is_dir() or RETIRED_WAL_INFIX in path.name:
        return "retired WAL capture"
    if PRE_UPDATE_INFIX in path.name:
        return "pre-update backup"
    return "snapshot"


def check_sources(paths: list[Path]) -> None:
    """Fail with one line (exit 2) for a path that is neither a file nor a capture."""
    for p in paths:
        if p.is_dir():
            if not (p / RETIRED_WAL_MANIFEST).is_file():
                raise UsageError(f"{p}: a folder without {RETIRED_WAL_MANIFEST} for --extra-source")
        elif not p.is_file():
            raise UsageError(f"{p}: no such file for --extra-source")


def open_copies(paths: list[Path], work_dir: Path, notes: list[str]) -> list[OtherCopy]:
    """The copies at ``paths`` that pass the check, newest first; one note per copy
    left out."""
    out = []
    for i, p in enumerate(paths):
        kind = kind_of(p)
        try:
            copy = _private_copy(p, kind, work_dir / f"other-{i}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            notes.append(f"{kind} {p.name}: not used, it cannot be read ({exc})")
            continue
        verdict = _integrity(copy.path)
        if verdict != "ok":
            notes.append(f"{copy.kind} {copy.name}: not used, it fails its check ({verdict})")
            continue
        out.append(copy)
    return sorted(out, key=lambda c: c.taken_at, reverse=True)


def _inside(folder: Path, name: object) -> Path:
    """A file the manifest names, only as a plain name inside its own folder: the manifest
    is the folder owner's text, and root may be the one reading it."""
    text = str(name)
    if text in ("", ".", "..") or os.path.basename(text) != text:
        raise ValueError(f"its manifest names {text!r}, not a file of the capture's own folder")
    found = folder / text
    if found.is_symlink():
        raise ValueError(f"{found} is a symlink")
    return found


def _private_copy(path: Path, kind: str, dest: Path) -> OtherCopy:
    dest.mkdir(mode=0o700)
    db = dest / "copy.db"
    if kind == "retired WAL capture":
        manifest = json.loads((path / RETIRED_WAL_MANIFEST).read_text())
        main = manifest.get("main") or {}
        if main.get("mode") != "copied":
            raise ValueError("its main image was not copied (header only)")
        shutil.copyfile(_inside(path, main.get("file") or "state.db"), db)
        wal = (manifest.get("wal") or {}).get("file")
        if wal and _inside(path, wal).is_file():
            shutil.copyfile(_inside(path, wal), sidecar(db, WAL_SUFFIX))
        taken = _parse_time(manifest.get("captured_at")) or os.stat(path).st_mtime
        return OtherCopy(kind, path.name, taken, db)
    shutil.copyfile(path, db)
    wal = sidecar(path, WAL_SUFFIX)
    if wal.is_file():
        shutil.copyfile(wal, sidecar(db, WAL_SUFFIX))
    taken = os.stat(path).st_mtime
    meta = path.with_suffix(".json")
    if kind == "snapshot" and meta.is_file():
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            taken = float(json.loads(meta.read_text())["taken_at"])
    return OtherCopy(kind, path.name, taken, db)


def _parse_time(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def _integrity(path: Path) -> str:
    """The check a snapshot passes before it counts (``maintenance/snapshots.py``).
    Opened read-write on the private copy so that its WAL is replayed."""
    try:
        conn = apsw.Connection(str(path))
    except apsw.Error as exc:
        return f"unreadable: {exc}"
    try:
        rows = conn.execute(f"PRAGMA integrity_check({INTEGRITY_MAX_ERRORS})").fetchall()
        return "ok" if rows == [("ok",)] else str(rows[0][0])
    except apsw.Error as exc:
        return f"unreadable: {exc}"
    finally:
        conn.close()
