"""Offline recovery: a new database from a damaged one, never touching the source.

Steps (each only as far as the damage needs):

1. The bundle is copied to a work dir next to ``--output`` (same filesystem, free space
   checked, fingerprinted before and after: ``bundle.py``; a ``-wal`` SQLite ignores is
   left out, page 1 rebuilt if only it hides the schema) and diagnosed.
2. A fresh file is created from the **source's own** ``sqlite_schema``: tables, FTS
   tables, indexes (before the data, so a UNIQUE conflict fails one row, not a bulk
   copy), then the data, then views, FTS contents and the remaining triggers.
3. Tables the diagnosis found clean are copied in bulk. Damaged tables are copied one
   row at a time by a full scan in rowid order (``scan.py``): an unreadable stretch is
   narrowed by bisection and skipped, and each row that fails is set aside on its own.
   A row whose overflow chain is broken is kept with the columns that read (partial),
   then completed from the rest of its chain where the file still has it.
4. Whenever a table shows damage (a read error or not: pages no b-tree reaches, a
   count the planner disagrees with, a page referenced twice), rows on leaves no b-tree
   reaches are decoded from the file's pages (``carving.py``) and added for rowids the
   table lacks; with a damaged freelist only rows an index or FTS copy lists (deleted
   rows stay deleted). Rows of committed WAL transactions SQLite does not replay are
   added from the frame images (``wal.py``). Rows still missing whose text survives in
   the FTS copies are rebuilt into a side table (``copies.py``).
5. FTS contents: an FTS table whose shadow tables are intact is copied (and reconciled
   with the rows the output holds when its base table was copied row by row); a damaged
   index over an intact content table is rebuilt by FTS5's ``'rebuild'``; otherwise it
   is repopulated from the base table (Hermes 0.19.0's own-content FTS by its own
   triggers, created before the data; external content by ``'rebuild'``).
6. The output is verified (``verify.py``) and linked into place only at the very end
   and only if verified, so an interrupted or failed run leaves no file at ``--output``.

Nothing is written through a name someone else could have planted: the work folder is
a fresh ``mkdtemp`` (0700), the output and the report are linked into place as new
names (``atomic.write_new``), so no inode of the source bundle can be a write target.
Both folders are tried (a file created and removed) before the work starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
import time
from pathlib import Path

import apsw

from statewarden.atomic import fsync_dir, write_new
from statewarden.errors import StatewardenError, UsageError, path_error
from statewarden.json_output import json_document
from statewarden.progress import ProgressFn
from statewarden.recovery.accounting import account, measure_only
from statewarden.recovery.building.build import RebuildInputs, TableCopy
from statewarden.recovery.building.rebuild import Rebuild
from statewarden.recovery.building.salvage import (
    complete_salvage,
    decode_rows,
    verify_by_own_chains,
)
from statewarden.recovery.bundle import WorkCopy, make_work_copy
from statewarden.recovery.check import header_count_wrong
from statewarden.recovery.decoding.checks_child import EarlyChecker
from statewarden.recovery.decoding.schema import Schema, read_schema
from statewarden.recovery.decoding.schema_root import schema_rowid_gaps
from statewarden.recovery.diagnose import diagnose_ahead_of_fts
from statewarden.recovery.diagnosis import Diagnosis
from statewarden.recovery.evidence.copies import Feed
from statewarden.recovery.evidence.other_copies import (
    ExtraSources,
    OtherCopy,
    check_sources,
    open_copies,
)
from statewarden.recovery.fts_checks import FtsPending
from statewarden.recovery.report import Report
from statewarden.recovery.stale_counts import drop_rows_made_good, settle_counts
from statewarden.recovery.verify import verify_output
from statewarden.sidecars import BUNDLE_SUFFIXES, sidecar
from statewarden.sqlite import hermes_schema_version

# A recovery writes the work copy and the output next to each other.
SPACE_FACTOR = 2


def recover(
    source: Path,
    output: Path,
    *,
    report_path: Path | None = None,
    progress: ProgressFn | None = None,
    extra_sources: list[Path] | None = None,
    owner: int | None = None,
) -> Report:
    """Recover ``source`` into the new file ``output``; return the report (also written
    to ``report_path`` as JSON when given). ``extra_sources``: other copies that may
    prove a lost row (``other_copies.py``), read only when a table is damaged, and only
    files of ``owner``'s, the database's owner (default: ``source``'s; a work copy made
    from the database is not the database's)."""
    extras = ExtraSources([Path(p) for p in extra_sources or []], owner)
    check_sources(extras.paths)
    source = Path(source)
    output = Path(output)
    for path, option in ((output, "--output"), (report_path, "--report")):
        if path is not None and _of_bundle(Path(path), source):
            raise UsageError(f"{path}: a name of the source's files; {option} must be another")
    if _of_bundle(source, output):
        # SQLite would take the source for the output's -wal or -journal, and replay
        # or delete it the first time the output is opened.
        raise UsageError(f"{source}: a name of the output's files; --output must be another")
    if os.path.lexists(output):
        raise UsageError(f"{output}: already exists; refusing to overwrite it")
    if not output.parent.is_dir():
        raise UsageError(f"{output.parent}: {_not_a_folder(output.parent)} for --output")
    if report_path is not None and _same_place(Path(report_path), output):
        raise UsageError(f"{report_path}: --report and --output name the same file")
    if report_path is not None and os.path.lexists(report_path):
        raise UsageError(f"{report_path}: already exists; refusing to overwrite it")
    if report_path is not None and not Path(report_path).parent.is_dir():
        parent = Path(report_path).parent
        raise UsageError(f"{parent}: {_not_a_folder(parent)} for --report")
    # Both folders are tried before any work: a read-only one fails now, not after it.
    _check_writable(output, "--output")
    if report_path is not None:
        _check_writable(Path(report_path), "--report")
    started = time.monotonic()
    # FTS5's own checks, the longest part of a recovery, run in a child process: it
    # starts loading now, while the work copy is made (``EarlyChecker``).
    with contextlib.ExitStack() as stack:
        early = stack.enter_context(EarlyChecker())
        work = make_work_copy(source, output.parent, space_factor=SPACE_FACTOR, progress=progress)
        stack.callback(work.cleanup)  # before the checker's end: the last in, the first out
        copied = round(time.monotonic() - started, 3)
        try:
            report = _recover_copy(work, output, progress, extras, early)
        except (apsw.FullError, apsw.IOError, apsw.CantOpenError) as exc:
            raise _not_built(output, exc) from None
        report.timings = {"copy": copied, **report.timings}
        if not report.verified:
            # A file that failed verification is never left where a swap would take it.
            report.notes.append(f"the output failed verification and was not kept at {output}")
        if report_path is not None:
            _write_report(Path(report_path), report)
        if report.verified:
            _publish(work.work_dir / "output.db", output)
        return report


def _of_bundle(path: Path, source: Path) -> bool:
    """Is ``path`` one of the names of ``source``'s bundle (the database, its ``-wal``,
    ``-shm`` or ``-journal``), by its own name or the one its symlinks lead to? A file
    written there would become part of the database SQLite opens next. Folders are
    told apart by what they are (device and inode), not by how they are named: the
    source's folder reached through a bind mount is the same folder."""
    try:
        real = source.resolve()
    except (OSError, RuntimeError):
        return False  # a path that does not resolve: the checks after say what it is
    return any(_same_place(path, sidecar(db, s)) for db in (source, real) for s in BUNDLE_SUFFIXES)


def _same_place(one: Path, other: Path) -> bool:
    """Do ``one`` and ``other`` name one place: the same name in the same folder, the
    folders told apart by device and inode (a symlinked or bind-mounted spelling of a
    folder is that folder)?"""
    if os.path.abspath(one) == os.path.abspath(other):
        return True
    try:
        a, b = os.stat(one.parent), os.stat(other.parent)
    except OSError:
        return False
    return one.name == other.name and (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _not_built(output: Path, exc: apsw.Error) -> StatewardenError:
    """The recovered file could not be written or read back next to ``output``: no room
    (or SQLite's temporary folder full), no file can be made there (no inodes left), or
    an I/O error. One line, nothing judged."""
    nothing = "nothing was written at the output and the source was not changed"
    if isinstance(exc, apsw.FullError):
        return StatewardenError(
            f"{output.parent}: no room left to write the recovered file there ({exc}); {nothing}",
            hint="free some space there or in SQLite's temporary folder, and retry",
        )
    if isinstance(exc, apsw.CantOpenError):
        return StatewardenError(
            f"{output.parent}: a file of the recovery could not be made there ({exc}); {nothing}",
            hint="a folder out of free inodes or space fails this way: check both, and retry",
        )
    return StatewardenError(
        f"{output.parent}: writing or reading the recovered file there failed ({exc}); {nothing}",
        hint="a full disk can fail this way too: check its free space, and retry",
    )


def _not_a_folder(path: Path) -> str:
    """Why ``path``, which is no folder, is not one: in words, for one line."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return "no such directory"
    except OSError as exc:
        return str(path_error(path, exc)).removeprefix(f"{path}: ")
    return "not a directory"


def _check_writable(path: Path, option: str) -> None:
    """Create and remove a file in ``path``'s folder, and hold ``path``'s name to the
    longest that folder takes, or fail with one line (exit 2)."""
    directory = path.parent
    try:
        fd, name = tempfile.mkstemp(prefix=".statewarden-probe-", dir=directory)
    except OSError as exc:
        raise UsageError(f"{directory}: cannot write there for {option}: {exc.strerror}") from None
    os.close(fd)
    os.unlink(name)
    try:
        longest = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        return
    if len(os.fsencode(path.name)) > longest:
        raise UsageError(f"{path}: file name too long ({option}; at most {longest} bytes)")


def _write_report(path: Path, report: Report) -> None:
    """The report as a new file: never written through a planted name (symlink, link)."""
    text = json.dumps(json_document(report.to_json()), indent=2, default=str) + "\n"
    try:
        write_new(path, text)
    except FileExistsError:
        raise UsageError(f"{path}: appeared while recovering; refusing to overwrite it") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the report: {exc.strerror}") from None


def _publish(built: Path, output: Path) -> None:
    """Put the verified file at ``output`` atomically and without overwriting anything."""
    with open(built, "rb+") as f:
        os.fsync(f.fileno())
    try:
        os.link(built, output, follow_symlinks=False)
    except FileExistsError:
        raise UsageError(f"{output}: appeared while recovering; refusing to overwrite it") from None
    fsync_dir(output.parent)


def _recover_copy(
    work: WorkCopy,
    output: Path,
    progress: ProgressFn | None,
    extras: ExtraSources,
    early: EarlyChecker | None = None,
) -> Report:
    """The steps after the copy, each its own stage: diagnose, read the schema,
    salvage, rebuild (or copy a healthy file whole), complete the partial rows,
    verify and account. FTS5's own checks of the work copy go on in a child process
    meanwhile (``diagnose_ahead_of_fts``) and are joined where their verdicts are
    needed: after the whole copy of a file found healthy, before the FTS tables of a
    rebuild are filled; ``early``: the child for them, started ahead (``EarlyChecker``)."""
    diag, report, pending = _diagnose(work, output, progress, ahead=True, early=early)
    try:
        return _recover_diagnosed(work, output, progress, extras, (diag, report, pending))
    finally:
        if pending is not None:
            pending.stop()  # its checks end before the work folder goes


def _recover_diagnosed(
    work: WorkCopy,
    output: Path,
    progress: ProgressFn | None,
    extras: ExtraSources,
    diagnosed: tuple[Diagnosis, Report, FtsPending | None],
) -> Report:
    """``_recover_copy`` once the work copy is diagnosed (its FTS checks maybe pending)."""
    diag, report, pending = diagnosed
    schema, source_version = _read_source(work, report)
    built = work.work_dir / "output.db"
    whole = None
    if pending is not None and diag.damage == "none":
        whole, joined = _copy_ahead(work, built, schema, report, (diag, pending))
        if not joined:
            diag, report, _ = _diagnose(work, output, progress, ahead=False)
            schema, source_version = _read_source(work, report)
        report.damage = diag.damage
        pending = None
    reconciled: dict[str, Feed] = {}
    opened: dict[str, tuple[list[OtherCopy], list[str]]] = {}
    if whole is not None or diag.damage == "none":
        # Nothing to decode from a healthy file, but the WAL's notes.
        decode_rows(work, diag, schema, _damaged_tables(diag, schema), report)
        copies, unchanged_fts = whole or _copy_whole(work, built, schema, report)
    else:
        built_from = _build(
            work, built, (schema, diag, pending), report, progress, others=(extras, opened)
        )
        if built_from is None:
            # FTS5's verdicts could not be joined: diagnosed again, waiting for them.
            diag, report, _ = _diagnose(work, output, progress, ahead=False)
            schema, source_version = _read_source(work, report)
            built_from = _build(
                work, built, (schema, diag, None), report, progress, others=(extras, opened)
            )
        assert built_from is not None  # with no checks pending, the build runs whole
        copies, unchanged_fts, reconciled = built_from
    _verify(
        built,
        copies,
        report,
        work=work,
        diag=diag,
        schema=schema,
        source_version=source_version,
        unchanged_fts=unchanged_fts,
        reconciled=reconciled,
        progress=progress,
    )
    return report


def _build(
    work: WorkCopy,
    built: Path,
    diagnosed: tuple[Schema, Diagnosis, FtsPending | None],
    report: Report,
    progress: ProgressFn | None,
    *,
    others: tuple[ExtraSources, dict[str, tuple[list[OtherCopy], list[str]]]],
) -> tuple[dict[str, TableCopy], set[str], dict[str, Feed]] | None:
    """A damaged work copy: its rows decoded from the pages, then rebuilt; the report
    takes the class once FTS5's own verdicts are joined; None when they could not be
    (``Rebuild.run``). ``others``: the paths of other copies, and where they are kept
    once opened, with their notes (a build made again after a new diagnosis takes them
    from there)."""
    schema, diag, pending = diagnosed
    extras, opened = others
    damaged = _damaged_tables(diag, schema)
    decoded = decode_rows(work, diag, schema, damaged, report)
    if damaged and extras:
        if "others" not in opened:
            notes: list[str] = []
            found = open_copies(extras, work.work_dir, notes, database=work.source)
            opened["others"] = (found, notes)
        report.notes.extend(opened["others"][1])
    inputs = RebuildInputs(
        work,
        built,
        schema,
        diag,
        damaged=damaged,
        salvaged=decoded.salvaged,
        carved=decoded.carved,
        listed_by_old_indexes=decoded.listed_by_old_indexes,
        index_pages=decoded.index_pages,
        wal_rows=decoded.wal_rows,
        trust_unreached=not work.freelist_unknown
        and not any(g.kind == "freelist" for g in diag.groups),
        others=opened["others"][0] if damaged and extras else [],
        fts_pending=pending,
    )
    out = _rebuild(inputs, report, progress)
    report.damage = diag.damage
    return out


def _diagnose(
    work: WorkCopy,
    output: Path,
    progress: ProgressFn | None,
    *,
    ahead: bool,
    early: EarlyChecker | None = None,
) -> tuple[Diagnosis, Report, FtsPending | None]:
    """Diagnose the work copy; the report starts here, with the damage class and what
    the copy's rebuilt page 1 (if any) lost. ``ahead``: a file found healthy but for
    FTS5's own checks comes back while they go on (``diagnose_ahead_of_fts``)."""
    started = time.monotonic()
    diag, pending = diagnose_ahead_of_fts(work, progress=progress, ahead=ahead, early=early)
    header_note = header_count_wrong(work, diag)
    report = Report(source=str(work.source), output=str(output), damage=diag.damage)
    report.notes.extend(filter(None, [header_note]))
    report.timings["diagnose"] = round(time.monotonic() - started, 3)
    lost_writes = diag.lost_writes.to_json()
    # A row restorable from its indexes is listed with what was restored, not as stale.
    report.stale_rows = [s for s in lost_writes["stale_rows"] if not s["restorable"]]
    report.given_out = lost_writes["given_out"]
    if work.schema_note:
        report.notes.append(work.schema_note)
        report.rows_left_out = work.left_out
        report.tables_lost = work.tables_lost
        # Raw reads: diagnose closed its connection (docs/safety.md rule 2).
        report.schema_rows_lost = [list(g) for g in schema_rowid_gaps(work.db)]
        if report.schema_rows_lost:
            shown = ", ".join(f"{lo}..{hi}" for lo, hi in report.schema_rows_lost)
            report.notes.append(
                f"sqlite_schema rows {shown} were on a destroyed page: the objects they"
                " named (tables among them) are missing from the rebuilt schema"
            )
    return diag, report, pending


def _copy_ahead(
    work: WorkCopy,
    built: Path,
    schema: Schema,
    report: Report,
    ahead: tuple[Diagnosis, FtsPending],
) -> tuple[tuple[dict[str, TableCopy], set[str]] | None, bool]:
    """A file found healthy but for FTS5's own checks, which go on meanwhile: copied
    whole while they run (through SQLite only, as their connections are open:
    docs/safety.md rule 2), then the checks joined. Returns the copy, kept only when
    they passed (else removed: the file is rebuilt), and whether the diagnosis could
    take their verdicts (else it is made again)."""
    diag, pending = ahead
    whole = None
    try:
        whole = _copy_whole(work, built, schema, report)
    finally:
        started = time.monotonic()
        joined = pending.join(diag)
        waited = time.monotonic() - started
        report.timings["diagnose"] = round(report.timings["diagnose"] + waited, 3)
    if joined and diag.damage == "none":
        return whole, True
    for suffix in BUNDLE_SUFFIXES:
        sidecar(built, suffix).unlink(missing_ok=True)
    return None, joined


def _read_source(work: WorkCopy, report: Report) -> tuple[Schema, int | None]:
    """The work copy's schema and Hermes' schema_version (None, noted, if unreadable)."""
    conn = apsw.Connection(str(work.db))
    try:
        schema = read_schema(conn)
        try:
            source_version = hermes_schema_version(conn)
        except apsw.Error as exc:
            source_version = None
            report.notes.append(f"Hermes' schema_version could not be read from the source: {exc}")
    finally:
        conn.close()
    return schema, source_version


def _copy_whole(
    work: WorkCopy, built: Path, schema: Schema, report: Report
) -> tuple[dict[str, TableCopy], set[str]]:
    """A healthy file: copied whole by ``VACUUM INTO``, its keys measured for the
    accounting; every FTS table is as it was."""
    report.strategy = "none"
    with report.timed("rebuild"):
        _vacuum_into(work.db, built, work.source_header.journal_mode)
        copies = measure_only(work.db, schema)
    return copies, {o.name for o in schema.tables() if o.module == "fts5"}


def _rebuild(
    inputs: RebuildInputs, report: Report, progress: ProgressFn | None
) -> tuple[dict[str, TableCopy], set[str], dict[str, Feed]] | None:
    """A damaged file: rebuilt (``rebuild.py``), then its partial rows completed from
    the pages; return the table copies, the FTS tables left as the copy had them and
    those whose index is proven by construction (``verify.py``): only reconciled with
    clean rows (``Rebuild.fts_reconciled``) or made by FTS5's 'rebuild' from their own
    content (``Rebuild.fts_reindexed``)."""
    diag = inputs.diag
    rebuild_started = time.monotonic()
    rebuild = Rebuild(inputs, report=report, progress=progress)
    copies = rebuild.run()
    if copies is None:
        return None  # FTS5's verdicts could not be joined (``Rebuild.run``)
    # The class is the diagnosis's once FTS5's own verdicts are in (joined in the run).
    report.strategy = "reindex" if diag.damage == "derived" else "rebuild"
    unchanged_fts = rebuild.fts_unchanged
    # FTS tables whose index needs no FTS5 check of its own: the source's, found
    # intact and kept by FTS5 through INSERT/DELETE of clean rows; or made by FTS5's
    # 'rebuild' from the content the output stores (``FtsFill._note_reindexed``).
    reconciled = {
        **_index_intact(diag, inputs.schema, rebuild.fts_reconciled),
        **rebuild.fts_reindexed,
    }
    # The wait for FTS5's own checks is the diagnosis's (``FtsFill.settle_modes``).
    waited = inputs.fts_pending.waited_s if inputs.fts_pending is not None else 0.0
    if waited:
        report.timings["diagnose"] = round(report.timings["diagnose"] + waited, 3)
    spent = time.monotonic() - rebuild_started - report.timings.get("fts", 0.0) - waited
    report.timings["rebuild"] = round(spent, 3)
    if report.partial_rows:
        with report.timed("salvage"):
            complete_salvage(inputs, report, copies)
        # Its updates fire the output's triggers with values of damaged rows: check
        # every FTS table.
        unchanged_fts = set()
        reconciled = {}
    if report.unverified_rows:
        with report.timed("salvage"):
            verify_by_own_chains(inputs, report, copies)
    if any(
        c.report.recovered_from_pages
        or c.report.recovered_from_wal
        or c.report.recovered_from_other_copies
        for c in copies.values()
    ):
        report.strategy = "salvage"
    return copies, unchanged_fts, reconciled


def _verify(
    built: Path,
    copies: dict[str, TableCopy],
    report: Report,
    *,
    work: WorkCopy,
    diag: Diagnosis,
    schema: Schema,
    source_version: int | None,
    unchanged_fts: set[str],
    reconciled: dict[str, Feed],
    progress: ProgressFn | None,
) -> None:
    """Verify the output on its own terms, then account for every table and count the
    sessions whose message_count disagrees."""
    if progress:
        progress("verify", 0, 1)
    with report.timed("verify"):
        # Accounted and its stale counts settled first: the verification sees the file
        # as it is published.
        account(built, copies, report)
        drop_rows_made_good(built, report)
        settle_counts(built, copies, report)
        flush = _Flush(built)
        try:
            report.verification = verify_output(
                built,
                source_schema_version=source_version,
                source_journal_mode=work.source_header.journal_mode,
                checked_on_source=_checked_on_source(diag, schema, unchanged_fts),
                reconciled=reconciled,
            )
        except BaseException:
            flush.close(raise_error=False)
            raise
        flush.close()
    report.verified = report.verification.ok
    if progress:
        progress("verify", 1, 1)


class _Flush:
    """The built file written out to disk in a thread while it is verified, so that
    the fsync before it is published (``_publish``) finds little left to write. Its
    descriptor is opened before the verification's connections and closed after them:
    closing a descriptor of a file drops every POSIX lock this process holds on it,
    SQLite's among them (docs/safety.md rule 2)."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._run, name="flush-output", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as exc:  # raised in the caller's thread (``close``)
            self._error = exc

    def close(self, *, raise_error: bool = True) -> None:
        """Wait for the flush and close its descriptor; raise its failure (a disk that
        cannot keep the output is no place to publish it)."""
        self._thread.join()
        os.close(self._fd)
        if self._error is not None and raise_error:
            raise self._error


def _checked_on_source(diag: Diagnosis, schema: Schema, unchanged: set[str]) -> set[str]:
    """Of the FTS tables the output holds as the work copy did (``unchanged``), those
    whose index the diagnosis checked and found intact: FTS5's check passed, no
    integrity error in them or their shadow tables, and the check ran to its end. The
    verification need not check them again."""
    if not diag.integrity_complete:
        return set()
    flagged = {g.object for g in diag.groups}
    return {
        name
        for name in unchanged
        if diag.fts.get(name) == "ok"
        and name not in flagged
        and not flagged & {o.name for o in schema.tables() if o.shadow_of == name}
    }


def _index_intact(diag: Diagnosis, schema: Schema, reconciled: dict[str, Feed]) -> dict[str, Feed]:
    """Of the reconciled FTS tables, those whose index the diagnosis found intact:
    FTS5's own check of it ran to its end and passed (on a connection of its own, even
    when the integrity check of the b-trees stopped early), and no integrity error or
    zeroed sector touches it or its shadow tables."""
    flagged = {g.object for g in diag.groups} | set(diag.zeroed_cells) | set(diag.cross_linked)
    return {
        name: feed
        for name, feed in reconciled.items()
        if diag.fts.get(name) == "ok"
        and name not in flagged
        and not flagged & {o.name for o in schema.tables() if o.shadow_of == name}
    }


_MISSING_FROM_INDEX_RE = re.compile(r"^row \d+ missing from index (\S+)")


def _damaged_tables(diag: Diagnosis, schema: Schema) -> set[str]:
    out = {g.object for g in diag.groups if g.kind == "table"}
    # "row N missing from index X": the index or the row changed; the table is read
    # row by row so that its rows are held against its intact indexes.
    for ln in diag.error_lines:
        if (m := _MISSING_FROM_INDEX_RE.match(ln)) and (idx := schema.by_name(m.group(1))):
            out.add(idx.tbl_name)
    base = {o.name for o in schema.base_tables()}
    out.update(name for name in diag.zeroed_cells if name in base)
    out.update(name for name in diag.cross_linked if name in base)
    # Rows changed on disk are read one by one: a column whose text is not UTF-8 any
    # more is unreadable, and the changed one comes back from the copies.
    out.update(
        c.table for c in diag.copies if (c.rows_rotted or c.rows_bad_text) and c.table in base
    )
    out.update(m.table for m in diag.misfits if m.table in base)
    for t in diag.tables:
        if (
            t.scan_rows != t.distinct_keys
            or t.unreadable_ranges
            or t.unreadable_rows
            or t.duplicate_keys
            or t.planner_rows != t.scan_rows
        ):
            out.add(t.name)
    if any(g.kind in ("unknown", "unattached") for g in diag.groups):
        out.update(o.name for o in schema.base_tables())
    return out


def _vacuum_into(db: Path, built: Path, journal_mode: str) -> None:
    conn = apsw.Connection(str(db))
    try:
        conn.execute("VACUUM INTO ?", (str(built),))
    finally:
        conn.close()
    _set_journal_mode(built, journal_mode)


def _set_journal_mode(path: Path, journal_mode: str) -> None:
    conn = apsw.Connection(str(path))
    try:
        conn.execute(f"PRAGMA journal_mode={'WAL' if journal_mode == 'wal' else 'DELETE'}")
    finally:
        conn.close()
