"""The fence: make the old state.db impossible to open before the last holder scan.

Once every holder is stopped, the old file's mode is set to 000. A process of the same
(non-root) uid that comes back, like the desktop app's respawned ``hermes serve
--isolated``, then fails to open it instead of racing the swap (HERMES.md stories 5
and 6). Root ignores file modes, so for root's own processes the fence is only the
repeated holder scans. The run keeps reading the original through a descriptor it
opened before the fence went up, so the fence is never lowered while a run is on.
The mode is changed on the inode found at plan time and only if the path still names
it; a symlink is never followed (a run refuses a state.db that
is a symlink before anything is stopped).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from statewarden.errors import FenceError

FENCE_MODE = 0o000
# While a catch-up copy reads the fenced file: the owner may read, nobody may write.
READ_ONLY_MODE = 0o400


@dataclass(frozen=True)
class Original:
    """The old state.db as found before the run touched it."""

    ino: int
    dev: int
    mode: int  # permission bits
    uid: int
    gid: int


def original(db: Path) -> Original:
    """Facts of the old file; refuses a symlink or anything but a regular file."""
    try:
        st = os.lstat(db)
    except FileNotFoundError:
        raise FenceError(f"{db}: no such file") from None
    if stat.S_ISLNK(st.st_mode):
        raise FenceError(
            f"{db}: is a symlink; refusing to fence, quarantine or replace through it",
            hint="point the config at the real file",
        )
    if not stat.S_ISREG(st.st_mode):
        raise FenceError(f"{db}: not a regular file")
    return Original(st.st_ino, st.st_dev, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)


def _set_mode(db: Path, orig: Original, mode: int) -> bool:
    """chmod the file only while ``db`` still names the original inode; True if done."""
    try:
        st = os.lstat(db)
    except FileNotFoundError:
        return False
    if (st.st_dev, st.st_ino) != (orig.dev, orig.ino) or not stat.S_ISREG(st.st_mode):
        return False
    fd = os.open(db, os.O_PATH | os.O_NOFOLLOW)
    try:
        fst = os.fstat(fd)
        if (fst.st_dev, fst.st_ino) != (orig.dev, orig.ino):
            return False
        # chmod through the descriptor's /proc link: the inode we checked, not a new name.
        os.chmod(f"/proc/self/fd/{fd}", mode)
    finally:
        os.close(fd)
    return True


def put_up(db: Path, orig: Original) -> None:
    if not _set_mode(db, orig, FENCE_MODE):
        raise FenceError(f"{db}: was replaced before it could be fenced")


def read_only(db: Path, orig: Original) -> None:
    """Let the owner read the fenced file (for a catch-up copy); still nobody writes."""
    _set_mode(db, orig, READ_ONLY_MODE)


def take_down(db: Path, orig: Original) -> bool:
    """Restore the original mode if ``db`` is still the original; True if it was."""
    return _set_mode(db, orig, orig.mode)


def effective(orig: Original) -> bool:
    """Whether mode 000 stops a process of our uid from opening the file (not for root)."""
    return os.geteuid() != 0 and orig.uid == os.geteuid()


_CHUNK = 8 * 1024 * 1024


def hold_open(db: Path, orig: Original) -> int:
    """A read-only descriptor on the original, opened before the fence goes up, so the
    run can still read it (catch-up, content check) without ever lowering the fence.

    This process has no SQLite connection to the file (rule 2), so the descriptor
    costs no locks; it is closed before the swap, so no scan sees this process on an
    old inode afterwards.
    """
    fd = os.open(db, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (orig.dev, orig.ino):
        os.close(fd)
        raise FenceError(f"{db}: was replaced before it could be fenced")
    return fd


def read_chunks(fd: int) -> Iterator[bytes]:
    offset = 0
    while chunk := os.pread(fd, _CHUNK, offset):
        offset += len(chunk)
        yield chunk


def sha256_of(fd: int) -> str:
    h = hashlib.sha256()
    for chunk in read_chunks(fd):
        h.update(chunk)
    return h.hexdigest()


def copy_out(fd: int, dest: Path) -> None:
    """Copy the held original to ``dest`` (a new file, never through a symlink)."""
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        for chunk in read_chunks(fd):
            os.write(out, chunk)
        os.fsync(out)
    finally:
        os.close(out)


class Fence:
    """The fence of one run: the original's facts, whether the fence is up, and the
    descriptor the run reads the original through while it is.

    ``MaintenanceRun`` asks it, and nothing else, to put the fence up, take it down,
    and read or copy the fenced original.
    """

    def __init__(self, db: Path, orig: Original, *, up: bool = False) -> None:
        self.db = db
        self.orig = orig
        self.up = up  # put up (or, on a resume, the ledger says it was)
        self._fd: int | None = None  # the original, held open from before the fence

    @classmethod
    def of(cls, db: Path) -> Fence:
        """The fence of ``db`` as found now (refuses a symlink: :func:`original`)."""
        return cls(db, original(db))

    def put_up(self) -> None:
        """Hold the original open for reading, then set its mode to 000."""
        self._fd = hold_open(self.db, self.orig)
        put_up(self.db, self.orig)
        self.up = True

    @property
    def effective(self) -> bool:
        """Whether mode 000 keeps the original's holders out (not root's processes)."""
        return effective(self.orig)

    def take_down(self) -> None:
        """Give the original its mode back, if the fence was put up."""
        if self.up:
            take_down(self.db, self.orig)

    def let_go(self) -> None:
        """Close the descriptor held on the original (before the swap)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _held(self) -> int:
        if self._fd is None:
            raise FenceError(f"{self.db}: the original is not held open")
        return self._fd

    def sha256(self) -> str:
        """The digest of the original, read through the held descriptor."""
        return sha256_of(self._held())

    def copy_out(self, dest: Path) -> None:
        """Copy the original, read through the held descriptor, to the new file ``dest``."""
        copy_out(self._held(), dest)
