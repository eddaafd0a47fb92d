"""Hermes' moved-aside state.db files, and the sessions a database file holds.

Hermes 0.22 moves a state.db whose first bytes are not SQLite's (a zeroed first page,
garbage) aside, with its ``-wal`` and ``-shm``, and starts a fresh, empty database:
``state.db.zeroed-<ts>-<pid>.bak`` or ``state.db.notadb-<ts>-<pid>.bak`` (``-<n>`` before
``.bak`` when the name is taken). The old file keeps its inode (a rename).

:func:`count_held` counts the sessions and messages of a file read-only (full scans,
``NOT INDEXED``: docs/safety.md rule 7), without ever writing it or its sidecars: a file
nobody has open is opened ``immutable`` (no ``-wal`` or ``-shm`` created next to it), one
with a ``-wal`` or ``-shm`` beside it not at all (a read there writes the ``-shm``), the
live database read-only (``immutable`` too when it is a WAL database nobody has open). A moved-aside
file usually cannot be read as it is (its header is what made Hermes move it):
:class:`Held` then says why, and the sessions stay unknown.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import apsw

from statewarden.errors import DatabaseError
from statewarden.sidecars import SHM_SUFFIX, SIDECAR_SUFFIXES, WAL_SUFFIX
from statewarden.sqlite import is_hot_journal_error, no_sidecars, read_live, readonly

# After "state.db.": what Hermes found (a zeroed header, or not a database), then its time
# stamp and pid (``unknown`` when it had no clock), ``.bak`` last.
_MOVED_ASIDE_RE = re.compile(r"(?:zeroed|notadb)-.+\.bak")


def is_moved_aside(name: str, db_name: str = "state.db") -> bool:
    """Whether ``name`` (a file name in the database's folder) is a database Hermes moved
    aside from ``db_name`` (not its ``-wal`` / ``-shm``)."""
    if not name.startswith(db_name + ".") or name.endswith(SIDECAR_SUFFIXES):
        return False
    return _MOVED_ASIDE_RE.fullmatch(name[len(db_name) + 1 :]) is not None


def not_moved_aside_from(path: Path, db: Path) -> str | None:
    """Why the file ``path`` names is not one Hermes moved aside from ``db`` (None when it
    is): the file itself, wherever it is named from, must be a regular file in ``db``'s
    folder under a name Hermes gives only to the file it renames away from ``db``, with
    that one name (a rename leaves one). A symlink planted under such a name points at
    some other file, and a second name (a hard link) of another database proves nothing."""
    real = Path(os.path.realpath(path))
    if not is_moved_aside(real.name, db.name):
        return "it is not under a name Hermes gives a file it moves aside"
    try:
        st = os.lstat(real)
        here = os.path.samefile(real.parent, db.parent)
    except OSError as exc:
        return f"it cannot be looked at: {exc.strerror or exc}"
    if not here:
        return f"it is not in the folder of {db}"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if st.st_nlink != 1:
        return f"it has {st.st_nlink} names (a file Hermes renamed aside has one)"
    return None


def moved_aside_in(folder: Path, db_name: str = "state.db") -> list[str]:
    """The moved-aside files of ``db_name`` in ``folder``, by name (none if it cannot be listed)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(n for n in names if is_moved_aside(n, db_name))


# Why a file beside a hot -journal is not counted: only a writer may roll it back, and
# its half-written pages are no database anyone reads.
HOT_JOURNAL = (
    "a writer died in the middle of a transaction (a hot -journal beside it): not counted;"
    " SQLite rolls it back when the file is next opened for writing"
)


# Why a file that is not the live one, with a -wal or -shm beside it, is not counted: a
# read-only connection there writes its -shm (creates it when it is missing), and a read
# never writes. A merge reads it, -wal and all, on a private copy.
WAL_BESIDE = (
    "a -wal or -shm lies beside it: not read in place (SQLite would write its -shm);"
    " maintenance --merge-from reads it on a private copy"
)


@dataclass(frozen=True)
class Held:
    """What one database file holds, as far as it can be read as it is."""

    size: int  # bytes of the main file
    sessions: int | None  # None: it could not be read
    messages: int | None
    why: str = ""  # why it could not be read ("" when it was)

    @property
    def empty(self) -> bool:
        return self.size == 0


def count_held(path: Path, *, live: bool = False) -> Held:
    """The sessions and messages ``path`` holds, read-only; never raises for a file that
    cannot be read (``why`` says what stopped it). ``live``: the database Hermes has open
    (a plain read-only connection that sees its WAL); otherwise the file is read
    ``immutable`` when it has no ``-wal``, ``-shm`` or ``-journal``, read-only beside a
    ``-journal`` (SQLite's own reader then honours it; a hot journal is a read that
    failed), and not at all beside a ``-wal`` or ``-shm`` (``WAL_BESIDE``: a read-only
    connection would write the ``-shm``)."""
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        return Held(0, None, None, f"{exc.strerror or exc}")
    if size == 0:
        return Held(0, 0, 0)
    if not live and any(os.path.lexists(f"{path}{s}") for s in (WAL_SUFFIX, SHM_SUFFIX)):
        return Held(size, None, None, WAL_BESIDE)

    def counts(conn: apsw.Connection) -> Held:
        return Held(size, _count(conn, "sessions"), _count(conn, "messages"))

    try:
        if live:  # a writer may open it during the read (read_live)
            return read_live(path, counts)
        with readonly(path, immutable=no_sidecars(path)) as conn:
            return counts(conn)
    except DatabaseError as exc:
        return Held(size, None, None, exc.message)
    except apsw.Error as exc:
        if is_hot_journal_error(exc):
            return Held(size, None, None, HOT_JOURNAL)
        return Held(size, None, None, str(exc).split("\n", 1)[0])


def _count(conn: apsw.Connection, table: str) -> int:
    """Rows of ``table`` by a full scan; 0 when the table does not exist (yet: a fresh
    file Hermes is creating)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    if exists is None:
        return 0
    row = conn.execute(f'SELECT count(*) FROM "{table}" NOT INDEXED').fetchone()
    return int(row[0]) if row else 0
