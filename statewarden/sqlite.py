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

import os
import time

import apsw

from statewarden.errors import DatabaseError, DatabaseUnreadable
from statewarden.sidecars import JOURNAL_SUFFIX, SHM_SUFFIX, WAL_SUFFIX, sidecar_name

# The header, read without a connection, lives in sqlite_header.py and is named here too;
# it is imported when first used (a read-only query needs no dataclasses nor struct).
_HEADER_NAMES = frozenset(
    {
        "HEADER_SIZE",
        "SQLITE_MAGIC",
        "TEXT_ENCODINGS",
        "HeaderFacts",
        "open_regular",
        "parse_header",
        "read_header",
    }
)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType
    from typing import Any, TypeVar

    T = TypeVar("T")

    from statewarden.sqlite_header import HEADER_SIZE as HEADER_SIZE  # noqa: PLC0414
    from statewarden.sqlite_header import SQLITE_MAGIC as SQLITE_MAGIC  # noqa: PLC0414
    from statewarden.sqlite_header import TEXT_ENCODINGS as TEXT_ENCODINGS  # noqa: PLC0414
    from statewarden.sqlite_header import HeaderFacts as HeaderFacts  # noqa: PLC0414
    from statewarden.sqlite_header import open_regular as open_regular  # noqa: PLC0414
    from statewarden.sqlite_header import parse_header as parse_header  # noqa: PLC0414
    from statewarden.sqlite_header import read_header as read_header  # noqa: PLC0414
else:

    def __getattr__(name: str) -> object:
        if name not in _HEADER_NAMES:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from statewarden import sqlite_header  # noqa: PLC0415

        return getattr(sqlite_header, name)


# A reader waits at most this long for a lock; it must never make a Hermes writer wait,
# and Hermes' own busy timeout is 1 s, so ours is far below it.
READ_BUSY_TIMEOUT_MS = 200
LIVE_READ_ATTEMPTS = 3  # reads of a live file a writer came into (or kept busy)
LIVE_READ_PAUSE_S = 0.1

# SQLite's SQLITE_ERROR text for a schema format number above the one it knows.
UNSUPPORTED_FORMAT = "unsupported file format"


def json_value(v: Any) -> Any:
    """A column value as JSON: a blob as ``{"base64": ...}``."""
    if isinstance(v, bytes):
        import base64  # noqa: PLC0415 - only blobs need it

        return {"base64": base64.b64encode(v).decode()}
    return v


# The bytes a file: URI may hold as they are (RFC 3986's unreserved, and "/"); any other
# byte of the path is written %XX, which SQLite reads back as that byte.
_URI_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~/")


def uri_for(path: str | os.PathLike[str], **params: str) -> str:
    """A ``file:`` URI for ``path`` with ``params``, for ``SQLITE_OPEN_URI``.

    The path's bytes are quoted as they are on disk: a name that is not UTF-8 works too.
    (No urllib: ``statewardenctl holders`` reads Hermes' heartbeats through here, and
    urllib.parse imports re and ipaddress.)
    """
    quoted = "".join(
        chr(b) if b in _URI_SAFE else f"%{b:02X}" for b in os.fsencode(os.path.abspath(path))
    )
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"file:{quoted}?{query}" if query else f"file:{quoted}"


def wal_sidecars_absent(path: str | os.PathLike[str]) -> bool:
    """True when neither ``-wal`` nor ``-shm`` exists next to ``path``.

    A WAL database that anyone has open always has both, so their absence means the
    file is closed and fully checkpointed: the main file alone is the database.
    """
    real = os.path.realpath(path)  # SQLite names the sidecars after the real file
    return not any(os.path.lexists(sidecar_name(real, s)) for s in (WAL_SUFFIX, SHM_SUFFIX))


def no_sidecars(path: str | os.PathLike[str]) -> bool:
    """No ``-wal``, ``-shm`` or ``-journal`` beside ``path``: no writer is in the middle
    of a transaction on it (in WAL mode nobody has it open, in rollback mode no write
    transaction has begun changing the file). A reader that must not load the header
    (``holders``' heartbeats) reads such a file immutable, and takes a failed read as
    nothing read; :func:`closed_wal` is the test for everything else."""
    real = os.path.realpath(path)  # SQLite names the sidecars after the real file
    return wal_sidecars_absent(real) and not os.path.lexists(sidecar_name(real, JOURNAL_SUFFIX))


def closed_wal(path: str | os.PathLike[str]) -> bool:
    """A WAL database nobody has open: its header says WAL and no ``-wal``, ``-shm`` or
    ``-journal`` lies beside it, so the main file alone is the database and nobody
    writes it. Read it ``immutable``: a read-only connection would leave an empty
    ``-wal`` and ``-shm`` behind. Any other file is read with a plain read-only
    connection, which takes SQLite's shared lock against a writer: above all one in
    rollback (DELETE) mode, whose writer changes the main file in place (an immutable
    reader would see its half-written pages) and leaves a hot ``-journal`` when it dies
    (which the plain reader meets as an error, :func:`is_hot_journal_error`). The header
    is read raw: call it with no connection open to ``path``."""
    if not no_sidecars(path):
        return False
    from statewarden.sqlite_header import read_header  # noqa: PLC0415 - see the names above

    try:
        return read_header(path).journal_mode == "wal"
    except DatabaseError:
        return False


def open_readonly(
    path: str | os.PathLike[str],
    *,
    busy_timeout_ms: int = READ_BUSY_TIMEOUT_MS,
    immutable: bool = False,
) -> apsw.Connection:
    """A connection that cannot change the database (no writes, no checkpoints).

    ``immutable`` is for a WAL database whose sidecars are absent (see
    :func:`wal_sidecars_absent`): a plain read-only open would create an empty
    ``-wal`` and a ``-shm`` and leave them behind, since only a writer may delete them.
    """
    if not os.path.exists(path):
        raise DatabaseError(f"{os.fspath(path)}: no such file")
    flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    params = {"mode": "ro", **({"immutable": "1"} if immutable else {})}
    try:
        conn = apsw.Connection(uri_for(path, **params), flags=flags)
        conn.set_busy_timeout(busy_timeout_ms)
        conn.execute("PRAGMA query_only=1")
    except apsw.Error as exc:
        raise classify_error(path, exc) from None
    return conn


class readonly:
    """``with readonly(path) as conn``: :func:`open_readonly`, closed at the end of the
    block. (A class, not a ``contextlib`` generator: ``statewardenctl holders`` reads
    Hermes' heartbeats through it without importing contextlib.)"""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout_ms: int = READ_BUSY_TIMEOUT_MS,
        immutable: bool = False,
    ) -> None:
        self.conn = open_readonly(path, busy_timeout_ms=busy_timeout_ms, immutable=immutable)

    def __enter__(self) -> apsw.Connection:
        return self.conn

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.conn.close()


def read_live(
    path: str | os.PathLike[str],
    read: Callable[[apsw.Connection], T],
    *,
    busy_timeout_ms: int = READ_BUSY_TIMEOUT_MS,
) -> T:
    """``read`` over a file a writer may open at any moment (Hermes' live database), as
    SQLite presents it, never written. A WAL file nobody has open (:func:`closed_wal`)
    is read ``immutable`` (a plain read-only open would leave an empty ``-wal`` and
    ``-shm`` behind), but an immutable reader takes no lock: a writer that opens the
    file meanwhile and checkpoints changes pages under it, and the read may see a file
    that never existed (a maintenance run's post-check once called a healthy file
    damaged that way). So an immutable read counts only if, once it is done, still no
    sidecar lies beside the file and the file is the same (inode, size, mtime, ctime);
    otherwise it is read again: immutable if the writer has gone again, else through a
    plain read-only connection, which takes SQLite's locks and sees the writer's
    ``-wal``. Errors of an immutable read are raised only when the file did not change."""
    for _ in range(LIVE_READ_ATTEMPTS):
        if not closed_wal(path):
            break
        before = _identity(path)
        try:
            with readonly(path, busy_timeout_ms=busy_timeout_ms, immutable=True) as conn:
                result = read(conn)
        except (apsw.Error, DatabaseError):
            if _untouched(path, before):
                raise
            continue
        if _untouched(path, before):
            return result
    for attempt in range(LIVE_READ_ATTEMPTS):
        try:
            with readonly(path, busy_timeout_ms=busy_timeout_ms) as conn:
                return read(conn)
        except (apsw.BusyError, apsw.SchemaChangeError):
            # A writer's lock held past the timeout, or its VACUUM or schema change
            # under the read: nothing the file holds, so it is read again.
            if attempt == LIVE_READ_ATTEMPTS - 1:
                raise
            time.sleep(LIVE_READ_PAUSE_S)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def require_database(path: str | os.PathLike[str], *, hint: str | None = None) -> None:
    """``path`` reads as a SQLite database: its header, then, when no sidecar lies
    beside it, its schema (:func:`read_live`: nothing written, not even a ``-shm``);
    else :class:`DatabaseUnreadable` in one line, with ``hint``. A file with sidecars
    is read by the caller's own reads (a reader would rebuild the ``-shm`` a killed
    writer left, which a run quarantines as it found it); an error that is not the
    file's (a writer's lock held on, a hot journal) is left to them too."""
    from statewarden.sqlite_header import read_header  # noqa: PLC0415 - its one caller here

    try:
        read_header(path)
    except DatabaseUnreadable as exc:
        raise DatabaseUnreadable(exc.message, hint=hint) from None
    if not no_sidecars(path):
        return
    error: DatabaseError | None = None
    try:
        read_live(path, lambda conn: conn.execute("SELECT count(*) FROM sqlite_schema").get)
    except apsw.Error as exc:
        error = classify_error(path, exc)
    except DatabaseError as exc:
        error = exc
    if isinstance(error, DatabaseUnreadable):
        raise DatabaseUnreadable(error.message, hint=hint) from None


def _untouched(path: str | os.PathLike[str], before: tuple[int, int, int, int] | None) -> bool:
    """Still no sidecar beside ``path``, and the file as it was ``before``."""
    return before is not None and no_sidecars(path) and _identity(path) == before


def _identity(path: str | os.PathLike[str]) -> tuple[int, int, int, int] | None:
    """What changes when a writer touches the main file: inode, size, mtime, ctime."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def classify_error(path: str | os.PathLike[str], exc: BaseException) -> DatabaseError:
    """Turn an apsw exception into a one-line statewarden error."""
    text = str(exc).split("\n", 1)[0]
    if isinstance(exc, apsw.NotADBError):
        return DatabaseUnreadable(f"{path}: not a SQLite database ({text})")
    if isinstance(exc, apsw.CorruptError):
        said = "database disk image is malformed"
        return DatabaseUnreadable(f"{path}: {said}" + (f" ({text})" if text != said else ""))
    if isinstance(exc, apsw.BusyError | apsw.LockedError):
        return DatabaseError(f"{path}: busy, a writer holds a lock ({text})")
    if is_hot_journal_error(exc):
        return DatabaseError(
            f"{path}: a hot -journal beside it (a writer died in the middle of a"
            " transaction): a read-only reader may not roll it back; the next process that"
            " opens it for writing (Hermes) does"
        )
    if isinstance(exc, apsw.CantOpenError):
        return DatabaseError(f"{path}: cannot open ({text})")
    if isinstance(exc, apsw.SQLError) and text.startswith(UNSUPPORTED_FORMAT):
        # The header names a schema format (or file format) this SQLite does not know:
        # the file cannot be read as it is, which is damage, not a failed command.
        return DatabaseUnreadable(f"{path}: {text} (a header field SQLite does not know)")
    return DatabaseError(f"{path}: {text}")


def is_hot_journal_error(exc: BaseException) -> bool:
    """A read-only connection met a hot ``-journal`` (its writer died mid-transaction),
    which only a connection that may write can roll back (``SQLITE_READONLY_ROLLBACK``)."""
    return (
        isinstance(exc, apsw.ReadOnlyError)
        and getattr(exc, "extendedresult", None) == apsw.SQLITE_READONLY_ROLLBACK
    )


def raise_if_interrupted(exc: BaseException) -> None:
    """Raise ``exc`` again when it is an interrupt (``apsw.InterruptError``: the run was
    stopped), which says nothing of the file; any other error of a read is damage, and
    the caller goes on past it."""
    if isinstance(exc, apsw.InterruptError):
        raise exc


# Errors of the machine, not of the file read: they end the run, never a reading.
MACHINE_ERRORS = (
    apsw.InterruptError,
    apsw.FullError,
    apsw.IOError,
    apsw.CantOpenError,
    apsw.NoMemError,
)


def raise_if_machine(exc: BaseException) -> None:
    """Raise ``exc`` again when it is an error of the machine (``MACHINE_ERRORS``: a full
    disk, an I/O error, no memory, an interrupt), which says nothing of the file or the
    row at hand: the run ends."""
    if isinstance(exc, MACHINE_ERRORS):
        raise exc


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
