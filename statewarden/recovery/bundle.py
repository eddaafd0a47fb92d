"""A private, consistent copy of a database bundle (db, -wal, -journal) to work on.

The source is only ever read: each file is copied with plain reads while this process
has no SQLite connection to it (docs/safety.md rule 2), and the files' fingerprints (size,
mtime, ctime, inode of every bundle member) are taken before and after the copy; if
they differ, a writer was active and the copy is refused (docs/safety.md rule 4). ``-shm`` is never
copied: it is a cache of the WAL's index that SQLite rebuilds from the ``-wal`` itself,
and a copy taken from a live file would describe some other moment.

A hot ``-journal`` (a rollback-mode writer died mid-transaction) is rolled back into the
copy first, before any page is read, as SQLite does when it opens the file
(``journal.py``): the half-written file is no database anyone reads; a journal SQLite
would not apply is removed from the copy, one of another database is set aside.

The copied ``-wal`` is first read frame by frame (``wal.py``): a WAL SQLite would
ignore (bad magic, version, page size or header checksum) is removed from the copy, so
the file is read alone exactly as SQLite reads it, and the notes say so; a valid WAL
written for another database is refused. The copy is then opened once read-write (it
is ours) so SQLite replays the WAL or rolls back a hot journal, and checkpointed,
leaving one self-contained file whose pages can also be read raw (``pages.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shutil
import stat
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from statewarden.atomic import copy_bytes, create_new
from statewarden.errors import (
    CopyFailed,
    DatabaseChanged,
    DatabaseError,
    DatabaseUnreadable,
    UsageError,
    copy_failed,
    path_error,
)
from statewarden.progress import ProgressFn
from statewarden.recovery.decoding import journal
from statewarden.recovery.decoding.schema_root import (
    highest_reached_with,
    reached_past_size,
    rebuild_schema_root,
    schema_records,
    schema_rowid_gaps,
)
from statewarden.recovery.decoding.wal import (
    HEADER_BYTES,
    WalFacts,
    read_wal,
    rewrite_commit_size,
)
from statewarden.recovery.decoding.wal_index import (
    INDEX_HEADER_BYTES,
    CommittedLog,
    committed_log,
    names_a_commit,
)
from statewarden.recovery.evidence.lost_schema import LostSchema, rebuild_from_known_schema, reindex
from statewarden.recovery.evidence.schema_text import put_back_short_texts
from statewarden.recovery.header_fit import (
    fit_header_fields,
    fit_page_size,
    infer_header,
    trust_file_size,
)
from statewarden.sidecars import BUNDLE_SUFFIXES, JOURNAL_SUFFIX, SHM_SUFFIX, WAL_SUFFIX, sidecar
from statewarden.sqlite import (
    HEADER_SIZE,
    HeaderFacts,
    classify_error,
    open_regular,
    parse_header,
)

# -shm is not copied: SQLite rebuilds that index of the WAL from the -wal itself.
COPY_SUFFIXES = ("", WAL_SUFFIX, JOURNAL_SUFFIX)
# Ask for this much headroom on top of what the work needs, for SQLite's temp files.
FREE_SPACE_MARGIN_BYTES = 16 * 1024 * 1024
WORK_PREFIX = ".statewarden-work-"
WORK_LOCK = ".lock"

Fingerprint = tuple[tuple[str, int, int, int, int] | tuple[str], ...]


@dataclass
class WorkCopy:
    """A folded copy of the source bundle inside ``work_dir``."""

    work_dir: Path
    db: Path
    source: Path
    source_header: HeaderFacts
    # set when the file is shorter than its header says, or a database size (the
    # header's, a WAL commit's) is damaged
    truncated_note: str | None
    wal: WalFacts | None = None  # the source's -wal, frame by frame, if it had one
    schema_note: str | None = None  # set when page 1 had to be rebuilt to read the schema
    # rows of a rebuilt schema's tables that fit two tables alike, not recovered
    # (``LostSchema.left_out_json``)
    left_out: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # core tables of that schema no page of which was found: all their rows lost
    tables_lost: list[str] = dataclasses.field(default_factory=list)
    # the schema was rebuilt from Hermes' known schema: the old indexes' pages are left
    # in the copy, no schema naming them (``old_indexes.listed_by_old_indexes``)
    known_schema: bool = False
    # indexes filled from their tables in the copy (``LostSchema.rebuilt_indexes``):
    # they repeat what the tables hold, so they are no second copy of any column
    rebuilt_indexes: tuple[str, ...] = ()
    # the header was destroyed and rebuilt: where the freelist was is not known, so a
    # page no b-tree reaches may hold deleted rows
    freelist_unknown: bool = False

    @property
    def wal_name(self) -> str:
        """The source's ``-wal``, as notes name it."""
        return str(sidecar(self.source, WAL_SUFFIX))

    @property
    def notes(self) -> list[str]:
        """What the copy does not show as SQLite reads it: truncation, WAL findings."""
        out = [n for n in (self.truncated_note, self.schema_note) if n]
        if self.wal is not None:
            out.extend(self.wal.notes(self.wal_name))
        return out

    lock_fd: int | None = None  # held while the folder is in use (remove_abandoned)

    def cleanup(self) -> None:
        shutil.rmtree(self.work_dir, ignore_errors=True)
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


def fingerprint(db: Path) -> Fingerprint:
    """Cheap identity of every bundle member: any write changes size, mtime or ctime."""
    out: list[tuple[str, int, int, int, int] | tuple[str]] = []
    for suffix in BUNDLE_SUFFIXES:
        try:
            st = os.stat(f"{db}{suffix}")
        except FileNotFoundError:
            out.append((suffix,))
            continue
        out.append((suffix, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return tuple(out)


def bundle_bytes(db: Path) -> int:
    total = 0
    for suffix in COPY_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            total += os.stat(f"{db}{suffix}").st_size
    return total


# The files a work folder holds at most: the folder, its lock, the copy with its -wal,
# -shm and -journal (WORK_COPY_FILES); and per output written beside them, the output
# with its own three (OUTPUT_FILES). Each takes an inode of the folder's file system.
WORK_COPY_FILES = 6
OUTPUT_FILES = 4


def check_free_space(directory: Path, needed: int, *, outputs: int = 0) -> None:
    """Room under ``directory`` for ``needed`` bytes and the files of a work folder with
    ``outputs`` outputs beside its copy: one line saying what is short, else nothing.
    (A file system that counts no inodes, ``f_files`` 0, is not held to a count.)"""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    if free < needed + FREE_SPACE_MARGIN_BYTES:
        raise CopyFailed(
            f"{directory}: not enough free space: {free} bytes free,"
            f" {needed + FREE_SPACE_MARGIN_BYTES} needed",
            hint="free some space there or choose another folder",
        )
    files = WORK_COPY_FILES + OUTPUT_FILES * outputs
    if st.f_files and st.f_favail < files:
        raise CopyFailed(
            f"{directory}: not enough free inodes: {st.f_favail} files can still be"
            f" made there, {files} needed",
            hint="remove some files there or choose another folder",
        )


def _claim(work_dir: Path) -> int:
    """Lock a new work folder for as long as this process uses it: the lock file gets
    its name only once locked, so another run never sees it unlocked while in use."""
    tmp = work_dir / f"{WORK_LOCK}.new"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(tmp, work_dir / WORK_LOCK)
    return fd


def remove_abandoned(work_parent: Path) -> list[Path]:
    """Remove the work folders of runs that were killed (kill -9, a power cut) before
    they could remove their own: ours, with a lock no process holds. Each held a whole
    copy of a database. Folders of live runs and of other users are left alone."""
    removed = []
    for path in work_parent.glob(f"{WORK_PREFIX}*"):
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            fd = os.open(path / WORK_LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # no lock (being set up, or an older version's): not ours to judge
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live run holds it
        try:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


def check_work_parent(directory: Path) -> None:
    """Refuse a folder where another user could move the private work folder away and put
    a symlink in its place (docs/safety.md rule 12): writable by others without the
    sticky bit (``/tmp`` has it), or, unless we are root, owned by another user than us
    or root. Root works in the folders of the users whose databases it repairs."""
    st = os.stat(directory)
    if os.geteuid() != 0 and st.st_uid not in (os.geteuid(), 0):
        raise UsageError(
            f"{directory}: owned by uid {st.st_uid}, not by us; refusing to work in it",
            hint="choose a folder of your own",
        )
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise UsageError(
            f"{directory}: writable by others and not sticky; refusing to work in it",
            hint="choose a folder of your own",
        )


def _read_head(db: Path) -> bytes:
    """Raw checks of the source, with no connection open (exists, a regular file, its
    sidecars too); its first 100 bytes, the header ``parse_header`` reads."""
    try:
        with open_regular(db) as f:
            head = f.read(HEADER_SIZE)
        for suffix in COPY_SUFFIXES:
            if suffix and os.path.lexists(f"{db}{suffix}"):
                # A sidecar that is a FIFO or a device would hang or never end the copy.
                with contextlib.suppress(FileNotFoundError), open_regular(f"{db}{suffix}"):
                    pass
    except OSError as exc:
        # Not damage: a path that cannot be read as named (missing, a folder the user
        # cannot search, a file they may not read, a symlink loop) is the caller's.
        raise path_error(exc.filename or db, exc) from None
    return head


def make_work_copy(
    source: Path,
    work_parent: Path,
    *,
    space_factor: int = 1,
    attempts: int = 3,
    progress: ProgressFn | None = None,
) -> WorkCopy:
    """Copy the bundle into a new directory under ``work_parent`` and fold it into one file.

    ``space_factor`` is how many source-sized files the caller will write there (the
    copy itself, plus an output for a repair). A copy during which the source changed
    is retried up to ``attempts`` times, then refused with :class:`DatabaseChanged`.
    A symlink is followed once, here: SQLite names the sidecars after the real file,
    so the bundle copied is the real file's, its ``-wal`` and ``-journal`` included.
    """
    if os.path.islink(source):
        source = Path(os.path.realpath(source))
    head = _read_head(source)
    header_error: DatabaseUnreadable | None = None
    try:
        header: HeaderFacts | None = parse_header(head, str(source))
    except DatabaseUnreadable as exc:
        if len(head) < HEADER_SIZE:
            raise
        header, header_error = None, exc  # the pages may still tell the page size
    size = bundle_bytes(source)
    work_parent.mkdir(parents=True, exist_ok=True)
    work_parent = work_parent.resolve()
    check_work_parent(work_parent)
    check_free_space(work_parent, size * space_factor, outputs=space_factor - 1)
    remove_abandoned(work_parent)
    work_dir = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=work_parent))
    lock_fd = None
    try:
        lock_fd = _claim(work_dir)
        copy = _copy_consistent(source, work_dir, size, attempts, progress)
        journal_note = _roll_back_journal(copy, source, header)
        if journal_note is True:
            header, header_error = _header_of(copy, source)
        header_note = None
        if header is None:
            assert header_error is not None
            header, header_note = infer_header(copy, source, header_error)
        header, page_size_note = fit_page_size(copy, header, source)
        header, fields_note = fit_header_fields(copy, header, source)
        page_size_note = "; ".join(filter(None, [page_size_note, fields_note])) or None
        wal = _read_wal(copy, header)
        file_header = header
        header = _check_wal_belongs(header, source, wal)
        size_note = None
        if wal is not None and not wal.ignored:
            size_note = _fit_commit_size(copy, wal, source, broken=False)
            foreign = _contradicts_file(copy)
            if foreign and not size_note:
                size_note = _fit_commit_size(copy, wal, source, broken=True)
                foreign = None if size_note else foreign
            if foreign:
                wal = _set_aside_foreign(copy, wal, foreign)
                header = file_header
        truncated = _truncation(copy, header) or _damaged_size(copy, header, source)
        if truncated:
            trust_file_size(copy, header)
        truncated = "; ".join(filter(None, [truncated, size_note])) or None
        inferred: list[LostSchema] = []
        schema_note = _fold_or_rebuild_schema(copy, source, truncated, inferred)
        if isinstance(journal_note, str):
            truncated = "; ".join(filter(None, [truncated, journal_note]))
        short_note = None if inferred else put_back_short_texts(copy, source)
        notes = [header_note, page_size_note, schema_note, short_note]
        schema_note = "; ".join(filter(None, notes)) or None
        return WorkCopy(
            work_dir=work_dir,
            db=copy,
            source=source,
            source_header=header,
            truncated_note=truncated,
            wal=wal,
            schema_note=schema_note,
            left_out=[e for lost in inferred for e in lost.left_out_json()],
            tables_lost=[t for lost in inferred for t in lost.lost_tables],
            known_schema=bool(inferred),
            rebuilt_indexes=tuple(i for lost in inferred for i in lost.rebuilt_indexes),
            freelist_unknown=header_note is not None,
            lock_fd=lock_fd,
        )
    except BaseException:
        shutil.rmtree(work_dir, ignore_errors=True)
        if lock_fd is not None:
            os.close(lock_fd)
        raise


def _roll_back_journal(copy: Path, source: Path, header: HeaderFacts | None) -> str | bool:
    """Roll the copy's hot ``-journal`` back into it before any page is read, as
    SQLite does when it opens the file (``journal.py``). Returns False when there was
    no journal to apply (none, or none SQLite would apply: it is removed from the
    copy), True when it was rolled back, and a note when it belongs to another
    database: then it is set aside and the file read alone (SQLite would roll it back
    over the file and break it, so the note is base damage)."""
    path = sidecar(copy, JOURNAL_SUFFIX)
    if not path.exists():
        return False
    found = journal.read_header(path)
    if found is None:
        path.unlink()
        return False
    why = None if header is None else journal.foreign(copy, found, header.page_size)
    if why is not None:
        path.rename(copy.parent / "foreign.journal")
        return (
            f"{sidecar(source, JOURNAL_SUFFIX)}: set aside, it belongs to another database"
            f" ({why}); the database file was read alone. SQLite would roll it back over"
            " the file: move it away before Hermes opens the database again"
        )
    journal.roll_back(copy)
    return True


def _header_of(copy: Path, source: Path) -> tuple[HeaderFacts | None, DatabaseUnreadable | None]:
    """The copy's header as it reads now (after a rollback), or the error it gives."""
    with open(copy, "rb") as f:
        head = f.read(HEADER_SIZE)
    try:
        return parse_header(head, str(source)), None
    except DatabaseUnreadable as exc:
        if len(head) < HEADER_SIZE:
            raise
        return None, exc


def _copy_consistent(
    source: Path, work_dir: Path, size: int, attempts: int, progress: ProgressFn | None
) -> Path:
    dest = work_dir / source.name
    for _ in range(attempts):
        before = fingerprint(source)
        log = _committed_log(source)
        done = 0
        for suffix in COPY_SUFFIXES:
            target = Path(f"{dest}{suffix}")
            if target.exists():
                target.unlink()
            try:
                src = open_regular(f"{source}{suffix}")
            except FileNotFoundError:
                continue
            try:
                with src, os.fdopen(create_new(target), "wb") as out:
                    # A -wal as long as it was when the attempt began: a writer
                    # appending all the while would keep a copy to its end going.
                    limit = _wal_bytes(before) if suffix == WAL_SUFFIX else None
                    for copied in copy_bytes(src.fileno(), out.fileno(), limit):
                        done += copied
                        if progress:
                            progress("copy", done, size)
            except OSError as exc:
                raise copy_failed(source, work_dir.parent, exc) from None
        after = fingerprint(source)
        if after == before:
            return dest
        if log is not None and _only_appended(source, before, after, log, dest):
            os.truncate(sidecar(dest, WAL_SUFFIX), log.committed_bytes)
            return dest
    raise DatabaseChanged(
        f"{source}: changed while it was being copied ({attempts} attempts)",
        hint="a live writer holds it; stop Hermes (see statewardenctl holders) and retry",
    )


def _committed_log(source: Path) -> CommittedLog | None:
    """What ``source``'s ``-shm`` says of its ``-wal`` now (``wal_index.committed_log``;
    None: no ``-wal`` header, or no whole wal-index of this log)."""
    try:
        with open(sidecar(source, WAL_SUFFIX), "rb") as f:
            head = f.read(HEADER_BYTES)
        with open(sidecar(source, SHM_SUFFIX), "rb") as f:
            index = f.read(2 * INDEX_HEADER_BYTES)
    except OSError:
        return None
    return committed_log(head, index)


def _wal_bytes(before: Fingerprint) -> int | None:
    """The ``-wal``'s size in ``before`` (None: it had none)."""
    for entry in before:
        if entry[0] == WAL_SUFFIX and len(entry) > 1:
            return int(entry[1])
    return None


def _only_appended(
    source: Path, before: Fingerprint, after: Fingerprint, log: CommittedLog, dest: Path
) -> bool:
    """Whether the bundle changed during the copy only by what its writer wrote to the
    ``-wal`` past ``log``'s committed frames: the file is the same (no checkpoint wrote
    to it), no journal came or went, the ``-wal`` is the same file, no shorter, and has
    the same header (a log that starts over gets new salts); the index is live, its
    writer having committed meanwhile (its change counter moved: a ``-shm`` left by a
    writer killed earlier stands still while one that keeps its index in its own memory
    writes on); and the copied ``-wal`` (``dest``'s) bears the index out
    (``wal_index.names_a_commit``). The copy cut at the end of those frames is then
    the database as of that commit: what the writer wrote past them during the copy is
    left out (after a log started over, that is over older frames, in a ``-wal`` that
    no longer grows). The ``-shm``, which is not copied, changes with every commit.

    A live writer commits every few milliseconds: before this, every attempt of a copy
    that takes longer saw a commit, and each was a whole copy written for nothing
    before the backup API's copy (four copies of the file where one does)."""
    for old, new in zip(before, after, strict=True):
        if old == new or old[0] == SHM_SUFFIX:
            continue
        if old[0] != WAL_SUFFIX or len(old) == 1 or len(new) == 1:
            return False
        (_, old_size, *_, old_inode), (_, new_size, *_, new_inode) = old, new
        if new_inode != old_inode or new_size < old_size or old_size < log.committed_bytes:
            return False
    now = _committed_log(source)  # (its header: the -wal's now)
    if now is None or now.header != log.header or now.change == log.change:
        return False
    try:
        fd = os.open(sidecar(dest, WAL_SUFFIX), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return names_a_commit(fd, log)
    finally:
        os.close(fd)


def _read_wal(copy: Path, header: HeaderFacts) -> WalFacts | None:
    """The copied ``-wal`` frame by frame; a WAL SQLite would ignore is removed from the
    copy (SQLite then reads the file alone, as it would), and said so in the notes."""
    wal = sidecar(copy, WAL_SUFFIX)
    if not wal.exists() or wal.stat().st_size == 0:
        return None
    facts = read_wal(wal, header.page_size)
    if facts.ignored:
        # Out of SQLite's way, kept in the work dir: its frames may still be salvaged.
        aside = copy.parent / "ignored.wal"
        wal.rename(aside)
        facts.path = aside
        sidecar(copy, SHM_SUFFIX).unlink(missing_ok=True)
    elif facts.dropped_commits:
        # SQLite checkpoints and removes the -wal when the copy is folded; the frames
        # it does not replay are read later, from this copy.
        kept = copy.parent / "dropped-frames.wal"
        shutil.copyfile(wal, kept)
        facts.path = kept
    return facts


def _check_wal_belongs(header: HeaderFacts, source: Path, wal: WalFacts | None) -> HeaderFacts:
    """Refuse a valid ``-wal`` that was written for another database.

    Nothing in a WAL names its database, so two facts are checked: the WAL's page size
    must be the database's, and the newest replayed page 1 in the WAL must not be older
    than page 1 in the file (the schema cookie only grows within one database).
    """
    if wal is None or wal.ignored:
        return header
    if wal.page_size != header.page_size:
        raise DatabaseUnreadable(
            f"{source}-wal: belongs to another database (page size {wal.page_size},"
            f" database has {header.page_size})",
            hint="move the -wal aside to read the database file alone",
        )
    newest_page1 = wal.replayed_page(1)
    if newest_page1 is not None:
        try:
            wal_header = parse_header(newest_page1[:HEADER_SIZE], str(sidecar(source, WAL_SUFFIX)))
        except DatabaseUnreadable:
            raise DatabaseUnreadable(
                f"{source}-wal: its page 1 has no SQLite header; it belongs to no database"
            ) from None
        if wal_header.schema_cookie < header.schema_cookie:
            raise DatabaseUnreadable(
                f"{source}-wal: belongs to another database (its schema cookie"
                f" {wal_header.schema_cookie} is older than the file's {header.schema_cookie})",
                hint="move the -wal aside to read the database file alone",
            )
        return wal_header
    return header


def _quick_check(copy: Path) -> str | None:
    """The first problem ``PRAGMA quick_check`` finds in ``copy`` as SQLite reads it
    (with its ``-wal`` when there is one), None if none. The WAL is not checkpointed
    when the connection closes."""
    try:
        conn = apsw.Connection(str(copy))
    except apsw.Error as exc:
        return str(exc)
    try:
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        row = conn.execute("PRAGMA quick_check(1)").fetchone()
        result = "" if row is None else str(row[0])
        if result == "ok":
            return None
        lines = [ln for ln in result.splitlines() if ln and not ln.startswith("***")]
        return lines[0] if lines else "quick_check failed"
    except apsw.Error as exc:
        return str(exc).split("\n", 1)[0]
    finally:
        conn.close()
        sidecar(copy, SHM_SUFFIX).unlink(missing_ok=True)


def _contradicts_file(copy: Path) -> str | None:
    """Why the copy's valid ``-wal`` belongs to another database, or None.

    A WAL written for this file, replayed over it, gives a consistent database (each
    commit SQLite replays was consistent when written), and so does the file alone. A
    WAL whose pages contradict the file (other trees at the same page numbers) gives a
    broken one: when the file alone passes ``quick_check`` and file + WAL does not, the
    WAL is not this file's.
    """
    with_wal = _quick_check(copy)
    if with_wal is None:
        return None
    wal = sidecar(copy, WAL_SUFFIX)
    held = copy.parent / "held.wal"
    wal.rename(held)
    try:
        alone = _quick_check(copy)
    finally:
        sidecar(copy, WAL_SUFFIX).unlink(missing_ok=True)
        held.rename(wal)
    if alone is not None:
        return None  # the file itself is damaged: the WAL may well be its own
    return f"replayed over the file it breaks it ({with_wal}); the file alone is intact"


def _fit_commit_size(copy: Path, wal: WalFacts, source: Path, *, broken: bool) -> str | None:
    """A note when the database size of the last commit frame SQLite replays is
    damaged, after the copy's ``-wal`` was given the size its pages prove.

    The size a commit leaves is the highest page its b-trees and freelist reach
    (``schema_root.highest_reached_with``, the replayed frames over the file). A size past
    every page the file and the WAL hold (SQLite reads, but cannot checkpoint), or,
    when the copy read with the WAL is ``broken``, a size short of pages the b-trees
    reach (SQLite cuts live pages off) is the field's damage, not the pages'. The
    proven size is kept only if SQLite then finds the copy intact."""
    last = wal.last_commit()
    if last is None:
        return None
    images = wal.replayed_images()
    present = max([copy.stat().st_size // wal.page_size, *images])
    if not broken and last.commit <= present:
        return None
    highest = highest_reached_with(copy, images)
    if not 0 < highest <= present or highest == last.commit:
        return None
    if broken and highest < last.commit:
        return None
    path = sidecar(copy, WAL_SUFFIX)
    kept = copy.parent / "before-size.wal"
    shutil.copyfile(path, kept)
    rewrite_commit_size(path, last, highest)
    if _quick_check(copy) is not None:
        kept.replace(path)
        return None
    kept.unlink()
    return (
        f"{source}-wal: frame {last.index + 1}, the last commit SQLite replays, gives"
        f" the database size as {last.commit} pages, but its b-trees reach page {highest}"
        f" and the file and the WAL hold {present}: the size field is damaged; the"
        f" private copy replayed it as {highest} pages"
    )


def _set_aside_foreign(copy: Path, wal: WalFacts, reason: str) -> WalFacts:
    aside = copy.parent / "foreign.wal"
    sidecar(copy, WAL_SUFFIX).rename(aside)
    sidecar(copy, SHM_SUFFIX).unlink(missing_ok=True)
    return WalFacts(size=wal.size, path=aside, page_size=wal.page_size, foreign=reason)


def _truncation(copy: Path, header: HeaderFacts) -> str | None:
    size = copy.stat().st_size
    pages_present = size // header.page_size
    short = header.page_count_valid and pages_present < header.page_count
    if short and not sidecar(copy, WAL_SUFFIX).exists():
        return (
            f"the file is truncated: the header says {header.page_count} pages,"
            f" {pages_present} are present ({size} bytes)"
        )
    if size % header.page_size:
        return (
            f"the file is truncated: {size} bytes is not a whole number of"
            f" {header.page_size}-byte pages"
        )
    return None


def _damaged_size(copy: Path, header: HeaderFacts, source: Path) -> str | None:
    """A note when the header's database size is less than the file's pages and the
    b-trees reach a page past it: that page is live, so the size field is the damage
    (SQLite would read none of the rows there); the copy is then read to the file's
    end (``header_fit.trust_file_size``). Pages past the size that no b-tree reaches are a stale
    tail, not the database's: SQLite ignores them, and so does ``pages.py``."""
    if sidecar(copy, WAL_SUFFIX).exists():
        return None  # the WAL's commits set the size
    beyond = reached_past_size(copy)
    if beyond is None:
        return None
    pages = copy.stat().st_size // header.page_size
    return (
        f"{source}: the header's database size ({header.page_count} pages) is less than"
        f" the file's {pages} pages, and the b-trees reach page {beyond} past it: the size"
        " field is damaged; the private copy was read to the file's end"
    )


def _fold_or_rebuild_schema(
    copy: Path, source: Path, truncated: str | None, inferred: list[LostSchema]
) -> str | None:
    """Fold the copy; if its schema cannot be read, rebuild page 1 from the intact
    ``sqlite_schema`` leaves (``schema_root.rebuild_schema_root``) and fold again. Returns a
    note when page 1 was rebuilt; raises the first error if that does not help."""
    try:
        _fold(copy, source, truncated)
        return None
    except DatabaseUnreadable as first:
        if truncated:
            raise
        # Schema rows that still read raw: the pages are there, SQLite refused them.
        readable = False
        with contextlib.suppress(OSError, ValueError, IndexError, struct.error):
            readable = bool(schema_records(copy))
        leaves = 0
        with contextlib.suppress(DatabaseUnreadable):
            leaves = rebuild_schema_root(copy)
            if leaves:
                _fold(copy, source, truncated)
                note = (
                    f"{source}: page 1 (the root of sqlite_schema) is damaged, so SQLite"
                    f" cannot read the schema; it was rebuilt in the private copy from"
                    f" {leaves} intact sqlite_schema leaf pages"
                )
                return _complete_schema(copy, source, note, inferred)
        # No schema leaf left either: Hermes' known schema, if the rows fit one.
        try:
            lost = rebuild_from_known_schema(copy, source)
        except DatabaseUnreadable as exc:
            raise DatabaseUnreadable(f"{first}; {str(exc).removeprefix(f'{source}: ')}") from None
        try:
            _fold(copy, source, truncated)
        except DatabaseUnreadable:
            raise first from None
        inferred.append(lost)
        return _with_indexes(copy, lost, lost.note(source, str(first) if readable else None))


def _with_indexes(copy: Path, lost: LostSchema, note: str) -> str:
    """Fill the new, empty indexes of the copy from its tables; the note says which
    could not be."""
    not_indexed = reindex(copy, lost)
    if not_indexed:
        note += f"; the indexes of {', '.join(not_indexed)} could not be rebuilt in the copy"
    return note


def _complete_schema(copy: Path, source: Path, note: str, inferred: list[LostSchema]) -> str:
    """Page 1 was rebuilt from the schema leaves left; when rows of ``sqlite_schema``
    were lost with a destroyed leaf and the file is Hermes', the objects they named
    are added from the known schema (``lost_schema``), their tables found by shape.
    Otherwise the schema stays as rebuilt (the report names the rows lost)."""
    if not schema_rowid_gaps(copy):
        return note
    records = schema_records(copy)
    present = {str(v[1]): int(v[3]) for v in records}
    try:
        lost = rebuild_from_known_schema(copy, source, present=present, kept=records)
        _fold(copy, source, None)
    except DatabaseUnreadable:
        return note
    inferred.append(lost)
    return _with_indexes(copy, lost, f"{note}; {lost.note(source).removeprefix(f'{source}: ')}")


def _fold(copy: Path, source: Path, truncated: str | None) -> None:
    """Replay the WAL / roll back a hot journal into the copy, then checkpoint it away.

    Errors name the source (the copy is an implementation detail) and say when the
    file is truncated, since that is then the reason the schema cannot be read.
    """

    def error(exc: apsw.Error) -> DatabaseError:
        err = classify_error(source, exc)
        if truncated:
            return DatabaseUnreadable(f"{source}: {truncated}; the schema cannot be read")
        if isinstance(err, DatabaseUnreadable):
            return DatabaseUnreadable(f"{source}: the schema cannot be read ({exc})")
        return err

    try:
        conn = apsw.Connection(str(copy))
    except apsw.Error as exc:
        raise error(exc) from None
    try:
        # The copy is private and removed after use: never synced, so it never goes to
        # the disk. An fsync of a file this size holds up every fsync on the file
        # system meanwhile, Hermes' commits on the live file among them.
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("SELECT count(*) FROM sqlite_schema").fetchall()
        mode = conn.execute("PRAGMA journal_mode").fetchone()
        if mode and str(mode[0]).lower() == "wal":
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except apsw.Error as exc:
        raise error(exc) from None
    finally:
        conn.close()
    for suffix in (WAL_SUFFIX, SHM_SUFFIX):
        if os.path.exists(sidecar(copy, suffix)) and os.path.getsize(sidecar(copy, suffix)) == 0:
            os.unlink(sidecar(copy, suffix))
