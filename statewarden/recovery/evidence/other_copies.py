"""Other copies of the database that can prove a lost row: ``recover --extra-source``.

Three kinds, told apart by their names (``recovery_files.py``):

- a **retired WAL capture** (``state.db.retired-wal-<ts>-<pid>/``, a folder with
  ``manifest.json``): its main image and the WAL it held are copied side by side into
  the work folder and opened there, so SQLite replays exactly the committed frames;
- a **pre-update backup** (``state.db.pre-update-emergency-<ts>.bak``, with its
  ``-wal`` when there is one, copied the same way);
- anything else is a **snapshot** (``statewardenctl snapshots``: its ``.json`` beside
  it gives the time it was taken).

Every file of a copy is opened as the maintenance swap opens a name in a folder its owner
may write (docs/safety.md rule 12): relative to a descriptor of its folder, with
``O_NOFOLLOW`` (a symlink at the copy's name, at a capture's folder or at a file in it is
refused, never followed), proven on the descriptor (a regular file, or a folder, owned by
the database's owner), and copied from that descriptor. Never by path after a check: the
user who owns a capture can swap a name there between a file and a symlink, and root
would then copy a file only root may read into an output given back to that user.

Each copy must pass the check a snapshot passes (``PRAGMA integrity_check``) before one
row of it is used; a copy that fails, or cannot be opened, is left out with a note.
Copies are read on private copies in the work folder (never the originals: opening a
database with a ``-wal`` beside it may write the ``-shm``).

A copy is then of this database only when it proves it (``foreign``, docs/safety.md
rule 15): the identity Hermes records (``state_meta``'s ``db_file_generation`` and
``store_instance_id`` and the header's ``application_id``, written by Hermes 0.22; 0.19.0
writes none) matches wherever both files have it, and the rows both files hold in a table
keyed by its rowid are the same rows (the same parent: the columns of the table's foreign
keys, a message's ``session_id``). A copy with no identity in common and no such row
proves nothing and is refused too. A row is taken from a copy that proved itself only
when it agrees with every witness this file still has of it: the entries its intact
indexes hold for its rowid (``index_disagreement``) and the text its FTS copies hold
(``fts_disagreement``). Which lost rows are looked for at all is the rule in
``salvage_inserts.SalvageInserts.add_from_other_copies`` (docs/safety.md, "Rows from other copies").
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import stat
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from statewarden.atomic import copy_bytes, create_new
from statewarden.errors import UsageError, path_error
from statewarden.json_text import parse_json
from statewarden.recovery.decoding.schema import SchemaObject
from statewarden.recovery.evidence.copies import Feed
from statewarden.recovery.evidence.index_witnesses import Witnesses
from statewarden.recovery_files import (
    MANIFEST_MAX_BYTES,
    PRE_UPDATE_INFIX,
    RETIRED_WAL_INFIX,
    RETIRED_WAL_MANIFEST,
)
from statewarden.sidecars import WAL_SUFFIX, sidecar
from statewarden.sqlite import quote_ident, raise_if_machine

INTEGRITY_MAX_ERRORS = 100


@dataclass
class OtherCopy:
    """One verified copy, opened read-only on its private copy in the work folder."""

    kind: str  # "snapshot", "retired WAL capture", "pre-update backup"
    name: str  # its file or folder name
    taken_at: float  # when it was taken (epoch seconds)
    path: Path  # the private copy read

    @property
    def taken(self) -> str:
        return dt.datetime.fromtimestamp(self.taken_at, dt.UTC).strftime("%Y-%m-%dT%H:%MZ")

    @property
    def label(self) -> str:
        """``snapshot 2026-11-30T22:00Z``, ``retired WAL capture <name>``, ..."""
        if self.kind == "snapshot":
            return f"snapshot {self.taken}"
        return f"{self.kind} {self.name}"

    def rows(self, obj: SchemaObject) -> list[tuple[int, list[Any]]] | None:
        """Every row of ``obj`` in this copy, in rowid order, with the columns the
        output has (None when the copy lacks the table or one of its columns)."""
        cols = [c.name for c in obj.stored_columns]
        conn = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            have = {str(r[1]) for r in conn.execute(f"PRAGMA table_info({quote_ident(obj.name)})")}
            if not cols or not set(cols) <= have:
                return None
            sel = ", ".join(quote_ident(c) for c in cols)
            return [
                (int(r[0]), list(r[1:]))
                for r in conn.execute(
                    f"SELECT rowid, {sel} FROM {quote_ident(obj.name)} NOT INDEXED ORDER BY rowid"
                )
            ]
        except apsw.Error:
            return None
        finally:
            conn.close()


def kind_of(path: Path) -> str:
    """What ``path`` holds, from its own name and entry (a symlink is not followed: it
    is then refused when opened)."""
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            return "retired WAL capture"
    if RETIRED_WAL_INFIX in path.name:
        return "retired WAL capture"
    if PRE_UPDATE_INFIX in path.name:
        return "pre-update backup"
    return "snapshot"


def check_sources(paths: list[Path]) -> None:
    """Fail with one line (exit 2) for a path that is neither a file nor a capture."""
    for p in paths:
        try:
            mode = os.stat(p).st_mode
        except FileNotFoundError:
            raise UsageError(f"{p}: no such file for --extra-source") from None
        except OSError as exc:
            raise path_error(p, exc, option="--extra-source") from None
        if stat.S_ISDIR(mode):
            if not (p / RETIRED_WAL_MANIFEST).is_file():
                raise UsageError(f"{p}: a folder without {RETIRED_WAL_MANIFEST} for --extra-source")
        elif not stat.S_ISREG(mode):
            raise UsageError(f"{p}: not a regular file (a FIFO, a device?) for --extra-source")


@dataclass(frozen=True)
class ExtraSources:
    """The copies ``recover --extra-source`` names, and whose files they must be."""

    paths: list[Path]
    owner: int | None = None  # the database's owner; None: the source file's

    def __bool__(self) -> bool:
        return bool(self.paths)


def open_copies(
    extras: ExtraSources,
    work_dir: Path,
    notes: list[str],
    *,
    database: Path,
    left_out: dict[Path, str] | None = None,
) -> list[OtherCopy]:
    """The copies of ``extras`` that pass the check, newest first; one note per copy
    left out (and in ``left_out``, by path, why). Only files of the database's owner are
    read (``extras.owner``, else the owner of ``database``)."""
    why: dict[Path, str] = {} if left_out is None else left_out
    owner = extras.owner
    if owner is None:
        try:
            owner = os.stat(database).st_uid
        except OSError as exc:
            notes.append(f"other copies: none used, {database} cannot be read ({exc.strerror})")
            return []
    out = []
    for i, p in enumerate(extras.paths):
        kind = kind_of(p)
        try:
            copy = _private_copy(p, kind, work_dir / f"other-{i}", owner)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            why[p] = f"not used, it cannot be read ({exc})"
            notes.append(f"{kind} {p.name}: {why[p]}")
            continue
        verdict = _integrity(copy.path)
        if verdict != "ok":
            why[p] = f"not used, it fails its check ({verdict})"
            notes.append(f"{copy.kind} {copy.name}: {why[p]}")
            continue
        out.append(copy)
    return sorted(out, key=lambda c: c.taken_at, reverse=True)


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _plain_name(name: object) -> str:
    """A file the manifest names, only as a plain name inside its own folder: the manifest
    is the folder owner's text, and root may be the one reading it."""
    text = str(name)
    if text in ("", ".", "..") or os.path.basename(text) != text:
        raise ValueError(f"its manifest names {text!r}, not a file of the capture's own folder")
    return text


def _open_at(dir_fd: int, name: str, owner: int, *, folder: bool = False) -> int:
    """A descriptor of ``name`` in the folder ``dir_fd``, never through a symlink, proven
    on the descriptor itself: a regular file (a folder with ``folder``) owned by
    ``owner``. A FIFO or a device is refused before a byte is read (opened
    non-blocking)."""
    try:
        fd = os.open(name, _OPEN_FLAGS | (os.O_DIRECTORY if folder else 0), dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
                    raise ValueError(f"{name} is a symlink, not followed") from None
        raise
    st = os.fstat(fd)
    want, what = (stat.S_ISDIR, "a folder") if folder else (stat.S_ISREG, "a regular file")
    why = None
    if not want(st.st_mode):
        why = f"{name} is not {what}"
    elif st.st_uid != owner:
        why = f"{name} is owned by uid {st.st_uid}, not by the database's owner (uid {owner})"
    if why is not None:
        os.close(fd)
        raise ValueError(why)
    if not folder:
        os.set_blocking(fd, True)
    return fd


def _copy_at(dir_fd: int, name: str, owner: int, dest: Path) -> os.stat_result | None:
    """Copy ``name`` of the folder ``dir_fd`` (``_open_at``) to the new file ``dest``, from
    the descriptor proven; its stat, or None when there is no such file."""
    try:
        fd = _open_at(dir_fd, name, owner)
    except FileNotFoundError:
        return None
    try:
        out = create_new(dest)
        try:
            for _ in copy_bytes(fd, out):
                pass
        finally:
            os.close(out)
        return os.fstat(fd)
    finally:
        os.close(fd)


def _read_small(dir_fd: int, name: str, owner: int) -> bytes:
    """The text of a small file (a manifest, a snapshot's ``.json``) opened by ``_open_at``."""
    fd = _open_at(dir_fd, name, owner)
    try:
        data = os.read(fd, MANIFEST_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MANIFEST_MAX_BYTES:
        raise ValueError(f"{name} is too large")
    return data


def _private_copy(path: Path, kind: str, dest: Path, owner: int) -> OtherCopy:
    dest.mkdir(mode=0o700)
    db = dest / "copy.db"
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if kind == "retired WAL capture":
            folder = _open_at(parent, path.name, owner, folder=True)
            try:
                taken = _copy_capture(folder, owner, db)
            finally:
                os.close(folder)
            return OtherCopy(kind, path.name, taken, db)
        main = _copy_at(parent, path.name, owner, db)
        if main is None:
            raise ValueError(f"{path.name} is gone")
        _copy_at(parent, sidecar(path, WAL_SUFFIX).name, owner, sidecar(db, WAL_SUFFIX))
        taken = main.st_mtime
        if kind == "snapshot":
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                meta = _read_small(parent, path.with_suffix(".json").name, owner)
                taken = float(parse_json(meta)["taken_at"])
        return OtherCopy(kind, path.name, taken, db)
    finally:
        os.close(parent)


def _copy_capture(folder: int, owner: int, db: Path) -> float:
    """Copy a capture's main image and WAL, as its manifest names them, from the folder
    ``folder`` to ``db`` and its ``-wal``; when it was captured."""
    manifest = parse_json(_read_small(folder, RETIRED_WAL_MANIFEST, owner))
    main = manifest.get("main") if isinstance(manifest, dict) else None
    if not isinstance(main, dict) or main.get("mode") != "copied":
        raise ValueError("its main image was not copied (header only)")
    if _copy_at(folder, _plain_name(main.get("file") or "state.db"), owner, db) is None:
        raise ValueError("its main image is missing")
    wal = manifest.get("wal")
    if isinstance(wal, dict) and wal.get("file"):
        _copy_at(folder, _plain_name(wal["file"]), owner, sidecar(db, WAL_SUFFIX))
    return _parse_time(manifest.get("captured_at")) or os.fstat(folder).st_mtime


def _parse_time(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def _integrity(path: Path) -> str:
    """The check a snapshot passes before it counts (``maintenance/snapshots.py``).
    Opened read-write on the private copy so that its WAL is replayed."""
    try:
        conn = apsw.Connection(str(path))
    except apsw.Error as exc:
        return f"unreadable: {exc}"
    try:
        rows = conn.execute(f"PRAGMA integrity_check({INTEGRITY_MAX_ERRORS})").fetchall()
        return "ok" if rows == [("ok",)] else str(rows[0][0])
    except apsw.Error as exc:
        return f"unreadable: {exc}"
    finally:
        conn.close()


# What Hermes records of a file's identity in ``state_meta`` (0.22: the generation stamp
# minted once per file, ``hermes_state_errors._STATE_DB_GENERATION_KEY``, and the store's
# instance id); Hermes 0.19.0 records none.
IDENTITY_KEYS = ("db_file_generation", "store_instance_id")
# Rows both files hold compared per table, spread over the copy's rowids.
SHARED_ROWS_SAMPLE = 256


def foreign(
    copy: OtherCopy,
    src: apsw.Connection,
    application_id: int,
    damaged: Mapping[str, AbstractSet[int]],
) -> str | None:
    """Why ``copy`` is not a copy of this database (``src``, whose header has
    ``application_id``), or None when it proves it is (docs/safety.md rule 15): the
    identity Hermes records matches where both files have it, and the rows both hold
    in a table keyed by its rowid have the same parent (``_shared_rows``); a copy with
    neither proves nothing. The rows ``damaged`` names (per table: rowids the diagnosis
    found damaged in this file, ``salvage_inserts.damaged_rows``) are not compared."""
    conn = apsw.Connection(str(copy.path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        proven = False
        for key in IDENTITY_KEYS:
            mine, theirs = _meta(src, key), _meta(conn, key)
            if mine and theirs:
                if mine != theirs:
                    return f"its state_meta {key} is {theirs}, this file's {mine}"
                proven = True
        got = conn.execute("PRAGMA application_id").fetchone()
        theirs_id = int(got[0]) if got is not None else 0
        if application_id and theirs_id:
            if theirs_id != application_id:
                return f"its application_id is {theirs_id}, this file's {application_id}"
            proven = True
        shared = _shared_rows(conn, src, damaged)
        if isinstance(shared, str):
            return shared
        if not proven and not shared:
            return (
                "nothing shows it is of this database: no identity Hermes records in both"
                " files, no row both hold"
            )
        return None
    except apsw.Error as exc:
        raise_if_machine(exc)
        return f"it cannot be read ({exc})"
    finally:
        conn.close()


def _meta(conn: apsw.Connection, key: str) -> str | None:
    """``state_meta``'s value for ``key`` (a full scan), or None where the file has no
    single readable one."""
    try:
        found = {
            str(v)
            for (v,) in conn.execute(
                "SELECT value FROM state_meta NOT INDEXED WHERE key = ?", (key,)
            )
            if v not in (None, "")
        }
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_machine(exc)
        return None
    return found.pop() if len(found) == 1 else None


def _shared_rows(
    conn: apsw.Connection, src: apsw.Connection, damaged: Mapping[str, AbstractSet[int]]
) -> int | str:
    """How many rows both files hold were compared and found the same row, or why one
    is not: in each table keyed by its rowid that has a parent (foreign-key columns,
    which a row keeps for life: a message's ``session_id``), up to
    ``SHARED_ROWS_SAMPLE`` rowids spread over the copy's, each held against what this
    file reads at that rowid (a rowid it cannot read, or does not hold, is skipped)."""
    same = 0
    try:
        tables = src.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_machine(exc)
        return 0
    for (table,) in tables:
        parents = _parent_columns(src, str(table))
        if not parents:
            continue
        t = quote_ident(str(table))
        sel = ", ".join(quote_ident(c) for c in parents)
        for rowid, theirs in _sample(conn, t, sel):
            if rowid in damaged.get(str(table), ()):
                continue
            mine = _row_at(src, t, sel, rowid)
            if mine is None:
                continue
            if not all(_same_value(a, b) for a, b in zip(mine, theirs, strict=True)):
                shown = ", ".join(
                    f"{c} {b!r}, this file's {a!r}"
                    for c, a, b in zip(parents, mine, theirs, strict=True)
                    if not _same_value(a, b)
                )
                return f"its {table} rowid {rowid} is another row ({shown})"
            same += 1
    return same


def _parent_columns(src: apsw.Connection, table: str) -> list[str]:
    """The foreign-key columns of ``table`` when its rows are keyed by their rowid (an
    INTEGER PRIMARY KEY or none), else none: a table with a key of its own is matched
    by that key, and its rows may move between rowids."""
    t = quote_ident(table)
    try:
        info = src.execute(f"PRAGMA table_info({t})").fetchall()
        keys = [r for r in info if r[5]]
        if len(keys) > 1 or (keys and str(keys[0][2]).strip().upper() != "INTEGER"):
            return []
        return sorted({str(r[3]) for r in src.execute(f"PRAGMA foreign_key_list({t})")})
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_machine(exc)
        return []


def _sample(conn: apsw.Connection, t: str, sel: str) -> list[tuple[int, tuple[Any, ...]]]:
    """Up to ``SHARED_ROWS_SAMPLE`` rows of the copy's table ``t`` (rowid, ``sel``),
    spread over its rowids; none when the copy lacks the table or a column."""
    try:
        ends = conn.execute(f"SELECT min(rowid), max(rowid) FROM {t}").fetchone()
        if ends is None or ends[0] is None:
            return []
        lo, hi = int(ends[0]), int(ends[1])
        out: dict[int, tuple[Any, ...]] = {}
        for i in range(SHARED_ROWS_SAMPLE):
            at = lo + (hi - lo) * i // SHARED_ROWS_SAMPLE
            row = conn.execute(
                f"SELECT rowid, {sel} FROM {t} WHERE rowid >= ? ORDER BY rowid LIMIT 1", (at,)
            ).fetchone()
            if row is not None:
                out[int(row[0])] = tuple(row[1:])
        return sorted(out.items())
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_machine(exc)
        return []


def _row_at(src: apsw.Connection, t: str, sel: str, rowid: int) -> tuple[Any, ...] | None:
    try:
        row = src.execute(f"SELECT {sel} FROM {t} WHERE rowid = ?", (rowid,)).fetchone()
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise_if_machine(exc)
        return None
    return None if row is None else tuple(row)


def _same_value(a: Any, b: Any) -> bool:
    """The same SQLite value: the same type and the same bytes (1 is not 1.0)."""
    return type(a) is type(b) and a == b


def index_disagreement(row: Mapping[str, Any], entries: Witnesses) -> str | None:
    """Why a row taken from another copy (column -> value) contradicts the entries this
    file's intact indexes hold for its rowid (``index_witnesses.indexed_values_of``), or None."""
    for col, held in entries.items():
        if col not in row:
            continue
        for value, index in held:
            if not _same_value(row[col], value):
                return f"its {col} is not what index {index} holds"
    return None


def fts_disagreement(
    conns: tuple[apsw.Connection, apsw.Connection],
    fed: list[Feed],
    changed: Mapping[str, AbstractSet[int]],
    table: str,
    rowid: int,
) -> str | None:
    """Why row ``rowid`` of ``table`` as the output (``conns[0]``) now holds it, just
    taken from another copy, does not give the text this file (``conns[1]``) holds for
    it in the FTS tables ``fed`` by it, or None: it does, or no intact copy holds it
    (none at that id, one in ``changed``, a content table that cannot be read there)."""
    dst, src = conns
    t = quote_ident(table)
    for f in fed:
        if rowid in changed.get(f.fts, ()):
            continue
        cols = sorted({c for v in (f.columns, *f.also) for c in v})
        try:
            got = dst.execute(
                f"SELECT ({f.rowid_expr}) FROM main.{t} AS b WHERE b.rowid = ?", (rowid,)
            ).fetchone()
            held = src.execute(
                f"SELECT {', '.join(cols)} FROM {quote_ident(f.fts + '_content')} WHERE id = ?",
                (None if got is None else got[0],),
            ).fetchone()
        except (apsw.Error, UnicodeDecodeError) as exc:
            raise_if_machine(exc)
            continue
        if held is None:
            continue
        bound = ", ".join(f"? AS {c}" for c in cols)
        agrees = dst.execute(
            f"SELECT {f.copy_matches('c')} FROM main.{t} AS b, (SELECT {bound}) AS c"
            " WHERE b.rowid = ?",
            (*held, rowid),
        ).fetchone()
        if agrees is None or not agrees[0]:
            return f"its text is not what {f.fts} holds"
    return None
