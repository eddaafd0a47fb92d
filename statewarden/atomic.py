"""Every file statewarden writes, written so it cannot be redirected or left half done.

- A new file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and mode 0600: a name
  planted in advance (a symlink to the user's database, a hard link, a FIFO) makes the
  create fail instead of writing through it. Temporary names are random (``mkstemp``,
  which opens the same way), never a fixed ``<name>.tmp`` another process could
  pre-create or share.
- A replacement (:func:`write_atomic`) goes to such a temporary file, is fsynced,
  renamed over the old file (a rename replaces a planted symlink, never follows it),
  and the folder is fsynced so the rename survives a power cut.
- A file that must not replace anything (:func:`write_new`: a recovery report) is
  linked into place, which fails when the name exists.
- State and runtime folders (:func:`private_dir`) are made 0700 (missing parents too)
  and checked: a real folder (not a symlink), owned by the user and writable by no one
  else, as OpenSSH checks ``~/.ssh``; an older 0755 folder of the user's own is
  tightened to 0700.

A failure to write raises :class:`StateUnwritable` (a full disk, no descriptors left,
a read-only filesystem): callers that must keep running catch it and retry.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from statewarden.errors import StateUnwritable, UnsafePath

__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "StateUnwritable",
    "append_line",
    "check_owned_dir",
    "create_new",
    "fsync_dir",
    "fsync_file",
    "private_dir",
    "write_atomic",
    "write_new",
]

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def private_dir(path: Path, *, what: str = "state") -> Path:
    """Make ``path`` 0700 (and each missing parent, 0700 too), or check the one there;
    return it. The one check of every folder statewarden keeps files in.

    Refused with :class:`UnsafePath`: a symlink (even to a folder of ours), a folder
    owned by another uid, one that group or others may write, something that is not a
    folder, and a folder inside a folder that another user may write without the
    sticky bit (they could swap it). A folder of ours that others may only read (an
    older version's 0755) is tightened to 0700 through its descriptor.
    """
    path = Path(path)
    try:
        for missing in [*reversed(path.parents), path]:
            if not os.path.lexists(missing):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(missing, PRIVATE_DIR_MODE)
        st = os.lstat(path)
    except OSError as exc:
        raise UnsafePath(f"{path}: cannot use as the {what} folder: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(
            f"{path}: not a folder (a symlink?); statewarden refuses to keep its {what} there"
        )
    check_owned_dir(path, st, what=what)
    if stat.S_IMODE(st.st_mode) & 0o077:
        _tighten(path, st)
    for parent in path.parents:
        with contextlib.suppress(OSError):
            pst = os.stat(parent)
            if pst.st_mode & stat.S_IWOTH and not pst.st_mode & stat.S_ISVTX:
                raise UnsafePath(
                    f"{path}: inside {parent}, which any user may write (mode "
                    f"{stat.S_IMODE(pst.st_mode):04o}, no sticky bit); statewarden refuses to "
                    f"keep its {what} there",
                    hint="choose a folder under your home",
                )
    return path


def _tighten(path: Path, st: os.stat_result) -> None:
    """chmod 0700 the folder checked as ``st``, through a descriptor of that very folder."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise UnsafePath(f"{path}: cannot use as a folder: {exc.strerror}") from None
    try:
        fst = os.fstat(fd)
        if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            raise UnsafePath(f"{path}: replaced while it was checked; refusing to use it")
        os.fchmod(fd, PRIVATE_DIR_MODE)
    finally:
        os.close(fd)


def check_owned_dir(path: Path, st: os.stat_result, *, what: str = "state") -> None:
    """Refuse a folder not owned by the user or writable by group or others."""
    uid = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{path}: not a folder; statewarden keeps its {what} in a folder")
    if st.st_uid != uid:
        raise UnsafePath(
            f"{path}: owned by uid {st.st_uid}, not by you (uid {uid}); statewarden refuses "
            f"to keep its {what} there",
            hint="another user could redirect its writes onto your files",
        )
    if stat.S_IMODE(st.st_mode) & 0o022:
        raise UnsafePath(
            f"{path}: writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'} "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); statewarden refuses to keep its {what} there",
            hint=f"chmod 700 {path}",
        )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


# The most of a file's name its temporary name repeats: any name a folder takes then has
# a temporary one it takes too (a report's name of 242 to 255 bytes, past the room the
# temporary name's ends left, once failed at the end of a whole recovery).
TEMPORARY_NAME_KEEPS = 64


def _temporary(path: Path, data: bytes) -> Path:
    """A new, fsynced temporary file next to ``path`` holding ``data``."""
    kept = os.fsencode(path.name)[:TEMPORARY_NAME_KEEPS].decode("utf-8", "ignore")
    fd, name = tempfile.mkstemp(prefix=f".{kept}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    return tmp


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically and durably, mode 0600.

    A missing folder is made with :func:`private_dir`; raises :class:`StateUnwritable`
    (or :class:`UnsafePath` for a folder that fails its check).
    """
    path = Path(path)
    try:
        try:
            tmp = _temporary(path, text.encode("utf-8"))
        except FileNotFoundError:
            private_dir(path.parent)
            tmp = _temporary(path, text.encode("utf-8"))
        try:
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        fsync_dir(path.parent)
    except OSError as exc:
        raise StateUnwritable(path, exc) from None


def write_new(path: Path, text: str) -> None:
    """Create ``path`` with ``text``, never replacing or writing through what is there.

    Raises :class:`FileExistsError` when the name exists (even as a dangling symlink).
    """
    path = Path(path)
    tmp = _temporary(path, text.encode("utf-8"))
    try:
        os.link(tmp, path, follow_symlinks=False)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    fsync_dir(path.parent)


def append_line(path: Path, line: str) -> int:
    """Append ``line`` to ``path`` (created 0600 if missing, never through a symlink);
    return the file's size after it. Raises :class:`StateUnwritable`."""
    path = Path(path)
    try:
        try:
            fd = os.open(path, _APPEND_FLAGS, PRIVATE_FILE_MODE)
        except FileNotFoundError:
            private_dir(path.parent)
            fd = os.open(path, _APPEND_FLAGS, PRIVATE_FILE_MODE)
    except OSError as exc:
        raise StateUnwritable(path, exc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateUnwritable(path, OSError(0, "not a regular file"))
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, PRIVATE_FILE_MODE)  # written 0644 by an older version
        _write_all(fd, line.encode("utf-8"))
        return os.fstat(fd).st_size
    except OSError as exc:
        raise StateUnwritable(path, exc) from None
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """fsync a file appended to with :func:`append_line`; raises :class:`StateUnwritable`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StateUnwritable(path, exc) from None
    try:
        os.fsync(fd)
    except OSError as exc:
        raise StateUnwritable(path, exc) from None
    finally:
        os.close(fd)


def create_new(path: Path) -> int:
    """A descriptor for writing the new file ``path`` (``O_EXCL | O_NOFOLLOW``, 0600)."""
    return os.open(path, _CREATE_FLAGS, PRIVATE_FILE_MODE)


# The most one step of a copy moves (``copy_bytes``).
COPY_CHUNK_BYTES = 8 * 1024 * 1024


def copy_bytes(src: int, dst: int, limit: int | None = None) -> Iterator[int]:
    """Copy what is left of descriptor ``src`` to ``dst`` (at most ``limit`` bytes),
    yielding the bytes copied by each step (at most ``COPY_CHUNK_BYTES``).

    A regular file is copied only as far as it reached when the copy began: a file that
    grows meanwhile (a live writer appending) cannot keep a copy going for ever, and
    every caller refuses the copy of a file that changed while it was copied anyway.

    ``copy_file_range``: the kernel copies (or shares the blocks, on a filesystem with
    reflinks) without the bytes passing through this process. Where it is refused
    (another filesystem on an old kernel, a filesystem without it) the rest is read and
    written.
    """
    left = limit  # None: to the end (a pipe, a device)
    st = os.fstat(src)
    if stat.S_ISREG(st.st_mode):
        there = max(0, st.st_size - os.lseek(src, 0, os.SEEK_CUR))
        left = there if left is None else min(left, there)

    def step() -> int:
        return COPY_CHUNK_BYTES if left is None else min(left, COPY_CHUNK_BYTES)

    while left != 0:
        try:
            n = os.copy_file_range(src, dst, step())
        except OSError:
            # Refused here (or a real error, which the plain read or write raises again).
            break
        if n == 0:
            return
        left = None if left is None else left - n
        yield n
    while left != 0 and (chunk := os.read(src, step())):
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view) :]
        left = None if left is None else left - len(chunk)
        yield len(chunk)
