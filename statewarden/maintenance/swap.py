"""The swap: the new file takes state.db's name; the original goes to quarantine.

Order (each step safe to repeat after a crash, so a resumed run can finish it):

1. ``-wal``, ``-shm``, ``-journal`` of the old file move into the quarantine folder
   (``<state dir>/quarantine/<profile>-<timestamp>/``). Nobody holds them (the settle
   scans said so), and they must go before the new file arrives: SQLite would replay
   an old ``-wal`` into the new file.
2. ``state.db`` is hard-linked into the quarantine (copied when the state dir is on
   another filesystem), so the original keeps a name there while it still has its own.
3. The new file gets the original's owner and mode, is fsynced, and is renamed over
   ``state.db``; the folder is fsynced. ``rename`` replaces the name in one step:
   ``state.db`` exists at every instant, the original or the new one (rule 5).
4. The quarantined original gets its mode back (the fence set 000), and a
   ``manifest.json`` records every file with its SHA-256.

Nothing here deletes an original: retention (``prune``) removes whole quarantine
folders past ``maintenance.quarantine_keep`` / ``quarantine_max_age``, never the newest.
Files are created with ``O_EXCL | O_NOFOLLOW`` in a folder of ours (rule 12).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statewarden.atomic import fsync_dir, write_atomic
from statewarden.errors import FenceError
from statewarden.maintenance import fence
from statewarden.maintenance.ledger import private_dir
from statewarden.sidecars import SIDECAR_SUFFIXES, sidecar

MANIFEST = "manifest.json"
_CHUNK = 8 * 1024 * 1024
_LAST_TIME = 2**33  # the year 2242: any later swap time in a manifest is damage


def quarantine_root(state_dir: Path) -> Path:
    return state_dir / "quarantine"


def quarantine_dir(state_dir: Path, profile: str, run_id: str) -> Path:
    return quarantine_root(state_dir) / f"{profile}-{run_id}"


@dataclass
class SwapResult:
    quarantine: Path
    files: dict[str, str] = field(default_factory=dict)  # name -> sha256
    copied: bool = False  # the state dir is on another filesystem
    swap_s: float = 0.0


def _copy_excl(src: Path, dest: Path) -> None:
    """Copy ``src`` to the new name ``dest``, which appears only once the copy is whole:
    written under ``dest.tmp`` (``O_EXCL | O_NOFOLLOW``), fsynced, then linked. A full
    disk or a kill leaves no partial file under ``dest`` (a partial ``-wal`` there would
    count as moved, and the original's would stay beside the new file)."""
    tmp = dest.with_name(dest.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # left by a run killed while copying; ours, in our private folder
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with open(src, "rb") as s, os.fdopen(fd, "wb") as d:
            shutil.copyfileobj(s, d, _CHUNK)
            d.flush()
            os.fsync(d.fileno())
        os.link(tmp, dest, follow_symlinks=False)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _move(src: Path, dest: Path) -> bool:
    """Rename ``src`` to ``dest`` (copy + unlink across filesystems); True if copied."""
    try:
        os.rename(src, dest)
        return False
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    _copy_excl(src, dest)
    os.unlink(src)
    return True


def _same_inode(path: Path, ino: int, dev: int) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return (st.st_ino, st.st_dev) == (ino, dev)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def swap(
    db: Path,
    new: Path,
    qdir: Path,
    orig: fence.Original,
    run_id: str,
    *,
    after: Callable[[str], None] | None = None,
) -> SwapResult:
    """Swap ``new`` in at ``db``; the original and its sidecars end in ``qdir``.

    ``after(stage)`` is called once the sidecars are moved (``sidecars-moved``) and once
    the original has its name in quarantine (``original-kept``).
    """
    started = time.monotonic()
    private_dir(qdir.parent)
    private_dir(qdir)
    result = SwapResult(qdir)
    if not _same_inode(db, orig.ino, orig.dev):
        # Already swapped by an earlier attempt of this run (resume), or replaced by
        # someone else: in both cases the original is no longer ours to move.
        if not (qdir / db.name).exists():
            raise FenceError(f"{db}: no longer the file this run fenced; not swapped")
        result.swap_s = time.monotonic() - started
        return _finish(db, qdir, orig, run_id, result)
    for sfx in SIDECAR_SUFFIXES:
        side = sidecar(db, sfx)
        kept_side = qdir / side.name
        if os.path.lexists(side) and not os.path.lexists(kept_side):
            result.copied |= _move(side, kept_side)
        elif os.path.lexists(side):
            # Copied whole by an earlier attempt (only a whole copy gets the name), then
            # interrupted before the unlink: the one beside the database must go, or the
            # new file would be read with the original's -wal.
            if os.lstat(side).st_size != os.lstat(kept_side).st_size:
                raise FenceError(f"{side}: differs from its copy in quarantine; not swapped")
            os.unlink(side)
    if after is not None:
        after("sidecars-moved")
    kept = qdir / db.name
    if not _same_inode(kept, orig.ino, orig.dev) and not os.path.lexists(kept):
        try:
            os.link(db, kept, follow_symlinks=False)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            fence.read_only(db, orig)
            _copy_excl(db, kept)
            fence.put_up(db, orig)
            result.copied = True
    fsync_dir(qdir)
    if after is not None:
        after("original-kept")
    if not os.path.lexists(new):
        raise FenceError(f"{new}: the new file is missing; the original stays in place")
    if os.geteuid() == 0 or orig.uid == os.geteuid():
        # Not root: a file we create is ours, which is the original's owner already.
        with contextlib.suppress(PermissionError):
            os.chown(new, orig.uid, orig.gid, follow_symlinks=False)
    os.chmod(new, orig.mode, follow_symlinks=True)
    fd = os.open(new, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(new, db)
    fsync_dir(db.parent)
    result.swap_s = time.monotonic() - started
    return _finish(db, qdir, orig, run_id, result)


def put_back(db: Path, qdir: Path, orig: fence.Original) -> None:
    """Undo a swap that failed before the new file took the name (a full disk in the
    quarantine): each sidecar moved to quarantine goes back beside the original, and
    what this run left in ``qdir`` is removed. The original never left ``db``."""
    if not _same_inode(db, orig.ino, orig.dev):
        raise FenceError(f"{db}: no longer the original; the swap cannot be undone")
    for sfx in SIDECAR_SUFFIXES:
        side = sidecar(db, sfx)
        kept_side = qdir / side.name
        if not os.path.lexists(kept_side):
            continue
        if os.path.lexists(side):
            os.unlink(kept_side)  # a whole copy whose source was never unlinked
        else:
            _move(kept_side, side)
    kept = qdir / db.name
    if os.path.lexists(kept):
        os.unlink(kept)  # a second link to the original, or a copy of it
    fsync_dir(db.parent)
    with contextlib.suppress(OSError):
        os.rmdir(qdir)


def _finish(
    db: Path, qdir: Path, orig: fence.Original, run_id: str, result: SwapResult
) -> SwapResult:
    kept = qdir / db.name
    if kept.is_file() and not kept.is_symlink():
        # The fence (mode 000) comes down. Another name of the original (a hard link
        # elsewhere) sees the mode: then it gets back exactly its own; the quarantine
        # folder (0700) keeps it private either way.
        shared = os.lstat(kept).st_nlink > 1
        os.chmod(kept, orig.mode if shared else orig.mode & 0o700 or 0o600)
    for name in sorted(os.listdir(qdir)):
        if name == MANIFEST or name.endswith(".tmp"):
            continue
        path = qdir / name
        if path.is_file() and not path.is_symlink():
            result.files[name] = sha256(path)
    manifest: dict[str, Any] = {
        "run_id": run_id,
        "db": str(db),
        "original_mode": oct(orig.mode),
        "original_uid": orig.uid,
        "original_gid": orig.gid,
        "swapped_at": time.time(),
        "files": result.files,
    }
    write_atomic(qdir / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return result


def prune(state_dir: Path, profile: str, keep: int, max_age_s: float) -> list[Path]:
    """Remove quarantine folders of ``profile`` beyond ``keep`` or older than ``max_age_s``;
    the newest is always kept. Returns what was removed."""
    root = quarantine_root(state_dir)
    if not root.is_dir():
        return []
    mine = sorted(
        (p for p in root.iterdir() if p.name.startswith(f"{profile}-") and p.is_dir()
         and not p.is_symlink() and (p / MANIFEST).exists()),
        key=lambda p: p.stat().st_mtime, reverse=True,
    )  # fmt: skip
    removed = []
    now = time.time()
    for i, path in enumerate(mine):
        if i == 0:
            continue
        if i >= max(keep, 1) or now - path.stat().st_mtime > max_age_s:
            shutil.rmtree(path)
            removed.append(path)
    return removed


@dataclass
class QuarantineEntry:
    name: str
    path: Path
    db: str
    run_id: str
    swapped_at: float
    files: dict[str, int]  # name -> bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "path": str(self.path), "db": self.db, "run_id": self.run_id,
            "swapped_at": self.swapped_at, "files": self.files,
        }  # fmt: skip


def list_quarantine(state_dir: Path) -> list[QuarantineEntry]:
    """Every quarantine folder with a manifest, newest first."""
    root = quarantine_root(state_dir)
    out: list[QuarantineEntry] = []
    if not root.is_dir():
        return out
    for folder in root.iterdir():
        manifest = folder / MANIFEST
        if folder.is_symlink() or not manifest.is_file():
            continue
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            out.append(_entry(folder, data))
    return sorted(out, key=lambda e: e.swapped_at, reverse=True)


def _entry(folder: Path, data: dict[str, Any]) -> QuarantineEntry:
    """One folder's entry from its manifest; a field of the wrong shape (a damaged or
    edited manifest) reads as absent, and only plain names inside the folder count."""
    names = data.get("files")
    files = {
        n: (folder / n).stat().st_size
        for n in (names if isinstance(names, dict) else {})
        if isinstance(n, str) and n not in ("", ".", "..") and "/" not in n
        and (folder / n).is_file() and not (folder / n).is_symlink()
    }  # fmt: skip
    when = data.get("swapped_at")
    if not isinstance(when, int | float) or not 0 <= when < _LAST_TIME:
        when = folder.stat().st_mtime
    db = data.get("db")
    run_id = data.get("run_id")
    return QuarantineEntry(
        folder.name, folder, db if isinstance(db, str) and os.path.isabs(db) else "",
        run_id if isinstance(run_id, str) else "", float(when), files,
    )  # fmt: skip
