"""All of statewarden's SQLite access, through apsw (its bundled SQLite, never the system's).

Two ways in, and they never overlap for one file in this process (docs/safety.md rule 2:
closing any descriptor of a file drops every POSIX lock this process holds on it, so a
raw read while a SQLite connection is open could strip that connection's locks):

- :func:`read_header` reads the 100-byte header with a plain ``open``/``close`` and no
  connection open;
- :func:`open_readonly` opens a SQLite connection that cannot write: ``mode=ro`` in the
  URI, ``SQLITE_OPEN_READONLY`` and ``PRAGMA query_only``. A read-only connection never
  checkpoints (a checkpoint is a write) and never deletes ``-wal``/``-shm``.

Only apsw is used here (docs/safety.md rule 6): the stdlib ``sqlite3`` links the system's SQLite,
which on Debian 12 is 3.40.1, older than the WAL-reset fix of 3.51.3.
"""

from __future__ import annotations

import base64
import os
import stat
import struct
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import apsw

from statewarden.errors import DatabaseError, DatabaseUnreadable
from statewarden.sidecars import SHM_SUFFIX, WAL_SUFFIX, sidecar

SQLITE_MAGIC = b"SQLite format 3\x00"
HEADER_SIZE = 100
# A reader waits at most this long for a lock; it must never make a Hermes writer wait,
# and Hermes' own busy timeout is 1 s, so ours is far below it.
READ_BUSY_TIMEOUT_MS = 200

TEXT_ENCODINGS = {1: "utf-8", 2: "utf-16le", 3: "utf-16be"}
# SQLite's SQLITE_ERROR text for a schema format number above the one it knows.
UNSUPPORTED_FORMAT = "unsupported file format"


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


def json_value(v: Any) -> Any:
    """A column value as JSON: a blob as ``{"base64": ...}``."""
    if isinstance(v, bytes):
        return {"base64": base64.b64encode(v).decode()}
    return v


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


def open_regular(path: Path | str) -> BinaryIO:
    """Open ``path`` for raw reading only if it is a regular file (symlinks followed).

    Opened non-blocking, then checked on the descriptor itself: a FIFO would block the
    open or the reads forever and a device such as ``/dev/zero`` never ends, so either
    is refused with :class:`DatabaseUnreadable` before a byte is read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise DatabaseUnreadable(f"{path}: is {kind}, not a database")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_header(path: Path) -> HeaderFacts:
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


def uri_for(path: Path, **params: str) -> str:
    quoted = urllib.parse.quote(os.path.abspath(path))
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"file:{quoted}?{query}" if query else f"file:{quoted}"


def wal_sidecars_absent(path: Path) -> bool:
    """True when neither ``-wal`` nor ``-shm`` exists next to ``path``.

    A WAL database that anyone has open always has both, so their absence means the
    file is closed and fully checkpointed: the main file alone is the database.
    """
    return not any(os.path.lexists(sidecar(path, s)) for s in (WAL_SUFFIX, SHM_SUFFIX))


def open_readonly(
    path: Path, *, busy_timeout_ms: int = READ_BUSY_TIMEOUT_MS, immutable: bool = False
) -> apsw.Connection:
    """A connection that cannot change the database (no writes, no checkpoints).

    ``immutable`` is for a WAL database whose sidecars are absent (see
    :func:`wal_sidecars_absent`): a plain read-only open would create an empty
    ``-wal`` and a ``-shm`` and leave them behind, since only a writer may delete them.
    """
    if not path.exists():
        raise DatabaseError(f"{path}: no such file")
    flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    params = {"mode": "ro", **({"immutable": "1"} if immutable else {})}
    try:
        conn = apsw.Connection(uri_for(path, **params), flags=flags)
        conn.set_busy_timeout(busy_timeout_ms)
        conn.execute("PRAGMA query_only=1")
    except apsw.Error as exc:
        raise classify_error(path, exc) from None
    return conn


@contextmanager
def readonly(
    path: Path, *, busy_timeout_ms: int = READ_BUSY_TIMEOUT_MS, immutable: bool = False
) -> Iterator[apsw.Connection]:
    conn = open_readonly(path, busy_timeout_ms=busy_timeout_ms, immutable=immutable)
    try:
        yield conn
    finally:
        conn.close()


def classify_error(path: Path, exc: BaseException) -> DatabaseError:
    """Turn an apsw exception into a one-line statewarden error."""
    text = str(exc).split("\n", 1)[0]
    if isinstance(exc, apsw.NotADBError):
        return DatabaseUnreadable(f"{path}: not a SQLite database ({text})")
    if isinstance(exc, apsw.CorruptError):
        return DatabaseUnreadable(f"{path}: database disk image is malformed ({text})")
    if isinstance(exc, apsw.BusyError | apsw.LockedError):
        return DatabaseError(f"{path}: busy, a writer holds a lock ({text})")
    if isinstance(exc, apsw.CantOpenError):
        return DatabaseError(f"{path}: cannot open ({text})")
    if isinstance(exc, apsw.SQLError) and text.startswith(UNSUPPORTED_FORMAT):
        # The header names a schema format (or file format) this SQLite does not know:
        # the file cannot be read as it is, which is damage, not a failed command.
        return DatabaseUnreadable(f"{path}: {text} (a header field SQLite does not know)")
    return DatabaseError(f"{path}: {text}")


def quote_ident(name: str) -> str:
    """Quote an identifier for SQL text (doubling embedded quotes)."""
    return '"' + name.replace('"', '""') + '"'


def pragma_int(conn: apsw.Connection, name: str) -> int:
    row = conn.execute(f"PRAGMA {name}").fetchone()
    if row is None:
        raise DatabaseError(f"PRAGMA {name} returned nothing")
    return int(row[0])


def hermes_schema_version(conn: apsw.Connection) -> int | None:
    """Hermes' own ``schema_version`` table (22 in 0.19.0); ``None`` if there is none."""
    try:
        row = conn.execute("SELECT version FROM schema_version LIMIT 1").fetchone()
    except apsw.SQLError:
        return None
    if row is None or row[0] is None:
        return None
    return int(row[0])


def sqlite_library_version() -> str:
    return str(apsw.sqlite_lib_version())
