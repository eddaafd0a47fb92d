"""The swap: the new file takes state.db's name; the original goes to quarantine.

Order (each step safe to repeat after a crash, so a resumed run can finish it):

1. ``-wal``, ``-shm``, ``-journal`` of the old file move into the quarantine folder
   (``<state dir>/quarantine/<profile>-<timestamp>/``). Nobody holds them (the settle
   scans said so), and they must go before the new file arrives: SQLite would replay
   an old ``-wal`` into the new file.
2. ``state.db`` is hard-linked into the quarantine (copied when the state dir is on
   another filesystem), so the original keeps a name there while it still has its own.
3. The new file is proven to be the one statewarden wrote (device, inode, size and
   SHA-256 as sealed right after it was built), gets the original's owner and mode
   through its own descriptor, is fsynced, and is renamed over ``state.db``; the
   folder is fsynced. ``rename`` replaces the name in one step:
   ``state.db`` exists at every instant, the original or the new one (rule 5).
4. The quarantined original gets its mode back (the fence set 000), and a
   ``manifest.json`` records every file with its SHA-256.

Nothing here deletes an original: retention (``prune``) removes whole quarantine
folders past ``maintenance.quarantine_keep`` / ``quarantine_max_age``, never the newest.
Files are created with ``O_EXCL | O_NOFOLLOW`` in a folder of ours (rule 12). In the
database's folder, which another user (its owner) may write while root repairs it,
every operation goes through a descriptor of the folder and ``O_NOFOLLOW`` opens:
``fchmod``/``fchown`` on the new file's own descriptor, renames and unlinks relative
to the folder's descriptor, the original linked from its descriptor. A name swapped
for a symlink is never followed; a new file that is not the one sealed rolls back.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statewarden.atomic import private_dir, write_atomic
from statewarden.errors import FenceError, StatewardenError
from statewarden.json_text import parse_json
from statewarden.maintenance import fence
from statewarden.sidecars import JOURNAL_SUFFIX, SHM_SUFFIX, SIDECAR_SUFFIXES, WAL_SUFFIX, sidecar

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
    unfinished: str = ""  # why the manifest (or the original's mode) was not written


@dataclass(frozen=True)
class NewFile:
    """The new file as statewarden wrote it: proven again right before the rename."""

    dev: int
    ino: int
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NewFile:
        return cls(int(data["dev"]), int(data["ino"]), int(data["size"]), str(data["sha256"]))


def _open_dir(path: Path) -> int:
    """A descriptor of the folder ``path`` (never through a symlink at its last name)."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def _fd_sha256(fd: int) -> str:
    h = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, _CHUNK, offset):
        offset += len(chunk)
        h.update(chunk)
    return h.hexdigest()


def _open_ours(dir_fd: int, name: str, where: Path) -> int:
    """Open the file we wrote as ``name`` in ``dir_fd``: a regular file, owned by us,
    with no other name (another user cannot make a file ours, nor, with the kernel's
    ``protected_hardlinks``, link one of ours that they cannot write)."""
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd
        )
    except FileNotFoundError:
        raise FenceError(f"{where}: the new file is missing; the original stays in place") from None
    except OSError as exc:
        raise FenceError(
            f"{where}: is no longer the new file statewarden wrote ({exc.strerror}: replaced,"
            " a symlink?); nothing was written through it, the original stays in place"
        ) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
        os.close(fd)
        raise FenceError(
            f"{where}: is no longer the new file statewarden wrote (not a regular file of"
            " ours with one name); the original stays in place"
        )
    return fd


def seal(new: Path) -> NewFile:
    """The identity of the new file just built at ``new``: device, inode, size, SHA-256."""
    dfd = _open_dir(new.parent)
    try:
        fd = _open_ours(dfd, new.name, new)
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        return NewFile(st.st_dev, st.st_ino, st.st_size, _fd_sha256(fd))
    finally:
        os.close(fd)


def _open_proven(dir_fd: int, name: str, where: Path, sealed: NewFile) -> int:
    """A descriptor of the new file, proven to be the file sealed after it was built."""
    fd = _open_ours(dir_fd, name, where)
    try:
        st = os.fstat(fd)
        facts = (st.st_dev, st.st_ino, st.st_size)
        if facts != (sealed.dev, sealed.ino, sealed.size) or _fd_sha256(fd) != sealed.sha256:
            raise FenceError(
                f"{where}: is no longer the new file statewarden wrote (its device, inode,"
                " size or SHA-256 differ); the original stays in place"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None


def _is(dir_fd: int, name: str, ino: int, dev: int) -> bool:
    st = _lstat_at(dir_fd, name)
    return st is not None and (st.st_ino, st.st_dev) == (ino, dev)


def _copy_excl(src_fd: int, qfd: int, name: str) -> None:
    """Copy the open file ``src_fd`` to the new name ``name`` in the folder ``qfd``, which
    appears only once the copy is whole: written under ``name.tmp`` (``O_EXCL |
    O_NOFOLLOW``), fsynced, then linked. A full disk or a kill leaves no partial file
    under ``name`` (a partial ``-wal`` there would count as moved, and the original's
    would stay beside the new file)."""
    tmp = name + ".tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=qfd)  # left by a run killed while copying; ours, in our folder
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=qfd
    )
    try:
        with os.fdopen(fd, "wb") as d:
            offset = 0
            while chunk := os.pread(src_fd, _CHUNK, offset):
                offset += len(chunk)
                d.write(chunk)
            d.flush()
            os.fsync(d.fileno())
        os.link(tmp, name, src_dir_fd=qfd, dst_dir_fd=qfd, follow_symlinks=False)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=qfd)


def _move(src_fd: int, name: str, dst_fd: int) -> bool:
    """Rename ``name`` from folder ``src_fd`` to ``dst_fd`` (a copy of the regular file
    and an unlink across filesystems, never through a symlink); True if copied."""
    try:
        os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        return False
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=src_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FenceError(f"{name}: not a regular file; not moved")
        _copy_excl(fd, dst_fd, name)
    finally:
        os.close(fd)
    os.unlink(name, dir_fd=src_fd)
    return True


def sha256(path: Path) -> str:
    """The SHA-256 of the regular file ``path`` (never through a symlink: ``OSError``, as
    for a FIFO or a device, which is never opened for reading)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return _fd_sha256(fd)
    finally:
        os.close(fd)


def swap(
    db: Path,
    new: Path,
    qdir: Path,
    orig: fence.Original,
    run_id: str,
    *,
    sealed: NewFile,
    after: Callable[[str], None] | None = None,
    touched: list[str] | None = None,
) -> SwapResult:
    """Swap ``new`` in at ``db``; the original and its sidecars end in ``qdir``.

    Every operation in the database's folder (which its owner may write while root
    works there) is made relative to a descriptor of that folder, on names opened with
    ``O_NOFOLLOW``; the new file gets its owner and mode through its own descriptor,
    once proven to be ``sealed``. ``after(stage)`` is called once the sidecars are
    moved (``sidecars-moved``), once the original has its name in quarantine
    (``original-kept``) and once the new file has the database's (``renamed``). From
    there the swap is done: an error in what follows (the manifest, the original's mode)
    is :attr:`SwapResult.unfinished`, never raised. ``touched`` gets the name of each
    sidecar before it leaves the database's folder: when the swap fails, only those
    have to be put back (:func:`put_back`).
    """
    started = time.monotonic()
    private_dir(qdir.parent, what="quarantine")
    private_dir(qdir, what="quarantine")
    dfd = _open_dir(db.parent)
    try:
        qfd = _open_dir(qdir)
        try:
            result = _swap_at(
                dfd,
                qfd,
                db=db,
                new=new,
                qdir=qdir,
                orig=orig,
                sealed=sealed,
                after=after,
                touched=[] if touched is None else touched,
            )
        finally:
            os.close(qfd)
    finally:
        os.close(dfd)
    result.swap_s = time.monotonic() - started
    try:
        if after is not None:
            after("renamed")
        return _finish(db, qdir, orig, run_id, result)
    except Exception as exc:  # noqa: BLE001 - the new file has the name: the swap is done
        # Whatever the bookkeeping says: a full disk here once kept Hermes stopped,
        # "could not be undone", and every --resume failed.
        plain = isinstance(exc, OSError) and not isinstance(exc, StatewardenError)
        result.unfinished = (
            str(exc.strerror or exc) if isinstance(exc, OSError) and plain else str(exc)
        )
        return result


def _swap_at(
    dfd: int,
    qfd: int,
    *,
    db: Path,
    new: Path,
    qdir: Path,
    orig: fence.Original,
    sealed: NewFile,
    after: Callable[[str], None] | None,
    touched: list[str],
) -> SwapResult:
    result = SwapResult(qdir)
    name = db.name
    if not _is(dfd, name, orig.ino, orig.dev):
        # Already swapped by an earlier attempt of this run (resume), or replaced by
        # someone else: in both cases the original is no longer ours to move.
        if _lstat_at(qfd, name) is None:
            raise FenceError(f"{db}: no longer the file this run fenced; not swapped")
        return result
    # The new file gets its owner and mode and reaches the disk first: from the moment
    # the sidecars leave to the rename, a process that ignores the fence (root's) and
    # opens the database makes new sidecars beside it, which the new file would be read
    # with. That stretch is kept to a link and a rename, no fsync of a whole file.
    fd = _open_proven(dfd, new.name, new, sealed)
    try:
        if os.geteuid() == 0 or orig.uid == os.geteuid():
            # Not root: a file we create is ours, which is the original's owner already.
            with contextlib.suppress(PermissionError):
                os.fchown(fd, orig.uid, orig.gid)
        os.fchmod(fd, orig.mode)
        os.fsync(fd)
        result.copied |= _move_sidecars(dfd, qfd, db, touched)
        if after is not None:
            after("sidecars-moved")
        if not _is(qfd, name, orig.ino, orig.dev) and _lstat_at(qfd, name) is None:
            result.copied |= _keep_original(dfd, qfd, db, orig)
        os.fsync(qfd)
        if after is not None:
            after("original-kept")
        # The name must still be this file at the rename (the last look before it).
        if not _is(dfd, new.name, sealed.ino, sealed.dev):
            raise FenceError(f"{new}: replaced at the swap; the original stays in place")
        os.rename(new.name, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        os.close(fd)
    os.fsync(dfd)
    return result


def _move_sidecars(dfd: int, qfd: int, db: Path, touched: list[str]) -> bool:
    """Move the original's sidecars from the database's folder into quarantine (each
    named in ``touched`` first); True if one was copied across filesystems."""
    copied = False
    for sfx in SIDECAR_SUFFIXES:
        side = sidecar(db, sfx).name
        here, kept_side = _lstat_at(dfd, side), _lstat_at(qfd, side)
        if here is not None:
            touched.append(side)
        if here is not None and kept_side is None:
            copied |= _move(dfd, side, qfd)
        elif here is not None and kept_side is not None:
            # Copied whole by an earlier attempt (only a whole copy gets the name), then
            # interrupted before the unlink: the one beside the database must go, or the
            # new file would be read with the original's -wal.
            if here.st_size != kept_side.st_size:
                raise FenceError(
                    f"{db.parent / side}: differs from its copy in quarantine; not swapped"
                )
            os.unlink(side, dir_fd=dfd)
    return copied


def _keep_original(dfd: int, qfd: int, db: Path, orig: fence.Original) -> bool:
    """Give the original (the inode the run fenced, whatever its name names now) a name
    in quarantine: a hard link made from its descriptor, or a copy across filesystems.
    True if copied."""
    try:
        ofd = os.open(db.name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as exc:
        raise FenceError(f"{db}: cannot be opened to be kept: {exc.strerror}") from None
    try:
        st = os.fstat(ofd)
        if (st.st_ino, st.st_dev) != (orig.ino, orig.dev):
            raise FenceError(f"{db}: no longer the file this run fenced; not swapped")
        try:
            os.link(f"/proc/self/fd/{ofd}", db.name, dst_dir_fd=qfd, follow_symlinks=True)
            return False
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
        fence.read_only(db, orig)
        try:
            rfd = os.open(f"/proc/self/fd/{ofd}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                _copy_excl(rfd, qfd, db.name)
            finally:
                os.close(rfd)
        finally:
            fence.put_up(db, orig)
        return True
    finally:
        os.close(ofd)


def original_facts(db: Path, qdir: Path) -> dict[str, list[int]]:
    """Inode, size and mtime of the original and of its ``-wal`` and ``-journal``, wherever the
    swap has them (beside the database, else moved into ``qdir``). A resumed swap
    compares them with the ledger's: a process the fence does not stop (root's) may
    have written the original while the run was interrupted, and the new file lacks
    what it wrote."""
    facts: dict[str, list[int]] = {}
    for sfx in ("", WAL_SUFFIX, JOURNAL_SUFFIX):
        for folder in (db.parent, qdir):
            try:
                st = os.lstat(folder / f"{db.name}{sfx}")
            except OSError:
                continue
            facts[sfx or "db"] = [st.st_ino, st.st_size, st.st_mtime_ns]
            break
    return facts


def put_back(db: Path, qdir: Path, orig: fence.Original) -> list[str]:
    """Undo a swap that failed before the new file took the name (a full disk in the
    quarantine): each sidecar moved to quarantine goes back beside the original, and
    what this run left in ``qdir`` is removed. The original never left ``db``.

    A ``-wal`` or ``-journal`` in quarantine whose name is taken beside the database by
    a file of another size is not the same file (a process wrote the database while the
    run was interrupted, and made a new one): it stays in ``qdir``, never deleted, and
    its name is returned."""
    kept: list[str] = []
    dfd = _open_dir(db.parent)
    try:
        if not _is(dfd, db.name, orig.ino, orig.dev):
            raise FenceError(f"{db}: no longer the original; the swap cannot be undone")
        try:
            qfd = _open_dir(qdir)
        except FileNotFoundError:
            return kept
        except OSError as exc:
            raise FenceError(f"{qdir}: cannot be opened to undo the swap: {exc.strerror}") from None
        try:
            for sfx in SIDECAR_SUFFIXES:
                side = sidecar(db, sfx).name
                if _lstat_at(qfd, side) is None:
                    continue
                here = _lstat_at(dfd, side)
                if here is not None and sfx != SHM_SUFFIX and not _same_bytes(dfd, qfd, side):
                    kept.append(side)  # another file: it may hold commits nothing else has
                elif here is not None:
                    os.unlink(side, dir_fd=qfd)  # a whole copy whose source was never unlinked
                else:
                    _move(qfd, side, dfd)
            if _lstat_at(qfd, db.name) is not None:
                os.unlink(db.name, dir_fd=qfd)  # a second link to the original, or a copy
            os.fsync(dfd)
        finally:
            os.close(qfd)
    finally:
        os.close(dfd)
    with contextlib.suppress(OSError):
        os.rmdir(qdir)
    return kept


def _same_bytes(dfd: int, qfd: int, name: str) -> bool:
    """Whether ``name`` beside the database and ``name`` in quarantine hold the same
    bytes (never following a symlink); False when either cannot be read."""
    try:
        a = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        return False
    try:
        b = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=qfd)
    except OSError:
        os.close(a)
        return False
    try:
        while True:
            x, y = os.read(a, 1 << 20), os.read(b, 1 << 20)
            if x != y:
                return False
            if not x:
                return True
    except OSError:
        return False
    finally:
        os.close(a)
        os.close(b)


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
        (
            p
            for p in root.iterdir()
            if p.name.startswith(f"{profile}-")
            and p.is_dir()
            and not p.is_symlink()
            and (p / MANIFEST).exists()
        ),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
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
    sha256: dict[str, str] = field(default_factory=dict)  # name -> as the manifest records

    def not_as_kept(self) -> str | None:
        """Why the folder no longer holds the original as the swap kept it (None when it
        does): the database and its ``-wal`` / ``-journal`` as the manifest records them
        are there, each a regular file of its own (never a symlink) with the SHA-256
        recorded, and no ``-wal`` or ``-journal`` the manifest does not record lies
        beside it (SQLite would read it with the original). The ``-shm`` is left out:
        it holds no row, only the index of the ``-wal`` that the first connection
        rebuilds from it (the restore's private copy), and any reader in place writes
        it."""
        name = Path(self.db).name if self.db else "state.db"
        for part in (name, *(name + s for s in SIDECAR_SUFFIXES if s != SHM_SUFFIX)):
            path = self.path / part
            recorded = self.sha256.get(part)
            if recorded is None:
                if os.path.lexists(path):
                    return f"{path}: is not in its manifest (it was put there since)"
                if part == name:
                    return f"{path}: its manifest records no checksum of the original"
                continue
            try:
                got = sha256(path)
            except FileNotFoundError:
                return f"{path}: is missing"
            except OSError as exc:
                return f"{path}: cannot be read as a file of its own: {exc.strerror or exc}"
            if got != recorded:
                return f"{path}: differs from the SHA-256 its manifest records"
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path),
            "db": self.db,
            "run_id": self.run_id,
            "swapped_at": self.swapped_at,
            "files": self.files,
        }


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
            data = parse_json(manifest.read_text())
        except (OSError, ValueError):  # unreadable, not JSON, nested too deep
            continue
        if isinstance(data, dict):
            out.append(_entry(folder, data))
    return sorted(out, key=lambda e: e.swapped_at, reverse=True)


def _entry(folder: Path, data: dict[str, Any]) -> QuarantineEntry:
    """One folder's entry from its manifest; a field of the wrong shape (a damaged or
    edited manifest: a relative path, a NUL byte no path may hold) reads as absent, and
    only plain names inside the folder count."""
    names = data.get("files")
    files = {
        n: (folder / n).stat().st_size
        for n in (names if isinstance(names, dict) else {})
        if isinstance(n, str)
        and n not in ("", ".", "..")
        and "/" not in n
        and "\0" not in n
        and (folder / n).is_file()
        and not (folder / n).is_symlink()
    }
    sums = {
        n: v
        for n, v in (names if isinstance(names, dict) else {}).items()
        if isinstance(n, str) and isinstance(v, str)
    }
    when = data.get("swapped_at")
    if not isinstance(when, int | float) or not 0 <= when < _LAST_TIME:
        when = folder.stat().st_mtime
    db = data.get("db")
    run_id = data.get("run_id")
    return QuarantineEntry(
        folder.name,
        folder,
        db if isinstance(db, str) and os.path.isabs(db) and "\0" not in db else "",
        run_id if isinstance(run_id, str) else "",
        float(when),
        files,
        sums,
    )
