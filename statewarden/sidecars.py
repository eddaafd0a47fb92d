"""A database's sidecars: the files SQLite keeps next to it, named by suffix.

For a database ``x``, SQLite writes ``x-wal`` (the write-ahead log) and ``x-shm`` (its
shared-memory index) in WAL mode, and ``x-journal`` (the rollback journal) in the other
journal modes. Together with ``x`` itself they are the database's *bundle*: what holds
the database's content, what a holder may have open, what a copy must take along.
No dependency, so every part can name these files cheaply: not even pathlib, which
costs ``statewardenctl holders`` a quarter of its CPU time next to ``fuser``
(:func:`sidecar_name` is what its path takes).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

WAL_SUFFIX = "-wal"
SHM_SUFFIX = "-shm"
JOURNAL_SUFFIX = "-journal"
SIDECAR_SUFFIXES = (WAL_SUFFIX, SHM_SUFFIX, JOURNAL_SUFFIX)
# The database file itself ("") and its sidecars, in this order everywhere.
BUNDLE_SUFFIXES = ("", *SIDECAR_SUFFIXES)


def sidecar(db: str | os.PathLike[str], suffix: str) -> Path:
    """The file next to ``db`` with ``suffix`` (``""``: the database file itself)."""
    from pathlib import Path  # noqa: PLC0415 - see the module docstring

    return Path(sidecar_name(db, suffix))


def sidecar_name(db: str | os.PathLike[str], suffix: str) -> str:
    """:func:`sidecar` as a string."""
    return os.fspath(db) + suffix
