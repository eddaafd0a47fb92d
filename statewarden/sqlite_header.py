"""The 100-byte SQLite database header, read with a plain ``open``/``read``, no connection.

Part of statewarden's SQLite access (:mod:`statewarden.sqlite`, which names everything
here too): call :func:`read_header` only with no SQLite connection open to the file
(docs/safety.md rule 2).
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass

from statewarden.errors import DatabaseError, DatabaseUnreadable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import BinaryIO

SQLITE_MAGIC = b"SQLite format 3\x00"
HEADER_SIZE = 100
TEXT_ENCODINGS = {1: "utf-8", 2: "utf-16le", 3: "utf-16be"}


@dataclass(frozen=True)
class HeaderFacts:
    """What the 100-byte database header says (sqlite.org/fileformat.html, section 1.3)."""

    page_size: int
    write_version: int
    read_version: int
    change_counter: int
    page_count: int
    page_count_valid: bool
    freelist_trunk: int
    freelist_count: int
    schema_cookie: int
    schema_format: int
    text_encoding: str
    user_version: int
    application_id: int
    sqlite_version_number: int

    @property
    def journal_mode(self) -> str:
        """``wal`` when the header's file format versions are 2 (WAL), else ``rollback``.

        The header cannot tell DELETE from TRUNCATE or PERSIST: those are per
        connection; all it records is whether the file is in WAL mode.
        """
        if self.write_version == 2 and self.read_version == 2:
            return "wal"
        return "rollback"


def parse_header(data: bytes, source: str = "database") -> HeaderFacts:
    """Decode a database header; raise :class:`DatabaseUnreadable` if it is not one."""
    if len(data) == 0:
        raise DatabaseUnreadable(f"{source}: the file is empty (0 bytes), not a SQLite database")
    if len(data) < HEADER_SIZE or not data.startswith(SQLITE_MAGIC):
        if data.strip(b"\x00") == b"":
            raise DatabaseUnreadable(
                f"{source}: the database header is zeroed; the file is unreadable as SQLite"
            )
        if len(data) < HEADER_SIZE and data.startswith(SQLITE_MAGIC[: len(data)]):
            raise DatabaseUnreadable(f"{source}: truncated inside the 100-byte header")
        raise DatabaseUnreadable(f"{source}: not a SQLite database (no SQLite header)")
    (raw_page_size,) = struct.unpack(">H", data[16:18])
    page_size = 65536 if raw_page_size == 1 else raw_page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise DatabaseUnreadable(f"{source}: damaged header (page size {raw_page_size})")
    change_counter, page_count, trunk, free_count, cookie, schema_format = struct.unpack(
        ">6I", data[24:48]
    )
    encoding, user_version = struct.unpack(">2I", data[56:64])
    (application_id,) = struct.unpack(">I", data[68:72])
    valid_for, version_number = struct.unpack(">2I", data[92:100])
    return HeaderFacts(
        page_size=page_size,
        write_version=data[18],
        read_version=data[19],
        change_counter=change_counter,
        page_count=page_count,
        page_count_valid=page_count > 0 and valid_for == change_counter,
        freelist_trunk=trunk,
        freelist_count=free_count,
        schema_cookie=cookie,
        schema_format=schema_format,
        text_encoding=TEXT_ENCODINGS.get(encoding, f"unknown({encoding})"),
        user_version=user_version,
        application_id=application_id,
        sqlite_version_number=version_number,
    )


_FILE_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


def not_a_database(path: object, mode: int) -> DatabaseUnreadable:
    """The one line for a path whose file (of ``mode``) is no regular file: what it is."""
    kind = _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")
    return DatabaseUnreadable(f"{path}: is {kind}, not a database")


def _mode_or_zero(path: Path | str | os.PathLike[str]) -> int:
    try:
        return os.stat(path).st_mode
    except OSError:
        return 0


def open_regular(path: Path | str | os.PathLike[str]) -> BinaryIO:
    """Open ``path`` for raw reading only if it is a regular file (symlinks followed).

    Opened non-blocking, then checked on the descriptor itself: a FIFO would block the
    open or the reads forever and a device such as ``/dev/zero`` never ends, so either
    is refused with :class:`DatabaseUnreadable` before a byte is read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        # A socket cannot be opened at all (ENXIO, "no such device or address"): say
        # what it is, as of any other file that is no database.
        if stat.S_ISSOCK(mode := _mode_or_zero(path)):
            raise not_a_database(path, mode) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise not_a_database(path, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_header(path: Path | str | os.PathLike[str]) -> HeaderFacts:
    """Read the header with a raw read. Call only with no SQLite connection open to ``path``."""
    try:
        with open_regular(path) as f:
            data = f.read(HEADER_SIZE)
    except FileNotFoundError:
        raise DatabaseError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DatabaseUnreadable(f"{path}: is a directory, not a database") from None
    except PermissionError:
        raise DatabaseError(f"{path}: permission denied") from None
    return parse_header(data, str(path))
