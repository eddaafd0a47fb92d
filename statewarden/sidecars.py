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


class SidecarFiles:
    """The sidecars SQLite would open for a database, as they stand: named after its
    real path (SQLite follows a symlinked database and names the sidecars after the
    file), each looked at with ``lstat`` (nothing opened, so a FIFO cannot hang it)."""

    def __init__(self, db: str | os.PathLike[str]) -> None:
        import stat  # noqa: PLC0415 - see the module docstring

        self.real = os.path.realpath(db)
        self.present: set[str] = set()
        self.symlink: str | None = None  # the first that is a symlink (SQLite makes none)
        self.irregular: str | None = None  # the first that is no regular file (FIFO, folder)
        self.error: tuple[str, str] | None = None  # (name, why) of one that cannot be looked at
        for sfx in SIDECAR_SUFFIXES:
            name = self.real + sfx
            try:
                mode = os.lstat(name).st_mode
            except FileNotFoundError:
                continue
            except OSError as exc:
                self.error = self.error or (name, exc.strerror or str(exc))
                continue
            if stat.S_ISLNK(mode):
                self.symlink = self.symlink or name
            elif not stat.S_ISREG(mode):
                self.irregular = self.irregular or name
            else:
                self.present.add(sfx)

    def trouble(self) -> str | None:
        """Why SQLite must not be let near them, in words; None when every one present
        is a regular file (a FIFO ``-journal`` hangs the open, a folder fails it, a
        symlink is none SQLite made or opens)."""
        if self.symlink:
            return f"{self.symlink}: is a symlink, which SQLite never makes"
        if self.irregular:
            return f"{self.irregular}: is not a regular file (a FIFO, a folder?)"
        return None
