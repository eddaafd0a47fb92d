"""What Hermes' retired WAL captures and pre-update backups hold that the live file lacks:
``statewardenctl captures``.

Hermes keeps a capture of the WAL it retired (``state.db.retired-wal-<ts>-<pid>/``) and
the Desktop updater a backup (``state.db.pre-update-emergency-<ts>.bak``) and deletes
neither: on a healthy database they can reach gigabytes, and users ask whether anything
in them is missing from the live file. Each is read as ``recover --extra-source`` reads
one (``other_copies``: opened through its folder's descriptor without following a
symlink, copied privately, its WAL replayed there, ``integrity_check`` passed), and
counts only once it proves it is of this database (docs/safety.md rule 15). The live
file is read on its own private copy (``bundle``), never in place.

For each table keyed by its rowid, the rows the copy holds whose rowid the live file
lacks are counted, and of those the ones above the live file's ``sqlite_sequence`` for
the table: AUTOINCREMENT never gave those rowids out in the live file, so it never held
them and Hermes never deleted them there (a write the live file lost). A lacking rowid at
or below the sequence was given out and may have been deleted since: nothing here tells
which, and it is said so. Nothing is changed, in the live file or in the copies.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from statewarden.errors import path_error
from statewarden.progress import ProgressFn
from statewarden.recovery.bundle import WorkCopy, make_work_copy
from statewarden.recovery.decoding.keysets import KeySet
from statewarden.recovery.decoding.schema import read_schema
from statewarden.recovery.evidence.other_copies import ExtraSources, OtherCopy, foreign, open_copies
from statewarden.recovery_files import RecoveryFile, scan
from statewarden.sidecars import SIDECAR_SUFFIXES
from statewarden.sqlite import quote_ident, uri_for
from statewarden.sqlite_header import open_regular

SAMPLE_ROWIDS = 20
# What a caller does with the captures once read, while their private copies exist:
# (the live file's private copy, its journal mode, each capture proven of this
# database by name -> its private copy, newest first).
ThenFn = Callable[[Path, str, dict[str, Path]], None]
_KINDS = {"retired_wal": "retired WAL capture", "pre_update_backup": "pre-update backup"}


@dataclass
class TableGap:
    """One table of a copy against the live file."""

    table: str
    rows: int  # rows of the table in the copy
    lacking: int  # of those, rowids the live file lacks
    never_given_out: int  # of those, above the live file's sqlite_sequence: lost writes
    sequence: int | None  # the live file's sqlite_sequence for the table (AUTOINCREMENT)
    sample: list[int] = field(default_factory=list)  # some lacking rowids

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rows": self.rows,
            "lacking": self.lacking,
            "never_given_out": self.never_given_out,
            "sequence": self.sequence,
            "sample": self.sample,
        }


@dataclass
class CaptureReading:
    """One capture or backup: what it is, and what it holds that the live file lacks."""

    kind: str  # "retired WAL capture" or "pre-update backup"
    name: str
    bytes: int
    captured_at: str | None
    # "of this database", or why it is not used (refused: not of this database;
    # unreadable; fails its check; a capture still being written)
    verdict: str
    used: bool = False
    tables: list[TableGap] = field(default_factory=list)

    @property
    def lacking(self) -> int:
        return sum(t.lacking for t in self.tables)

    @property
    def never_given_out(self) -> int:
        return sum(t.never_given_out for t in self.tables)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "bytes": self.bytes,
            "captured_at": self.captured_at,
            "verdict": self.verdict,
            "used": self.used,
            "lacking": self.lacking,
            "never_given_out": self.never_given_out,
            "tables": [t.to_json() for t in self.tables],
        }


def read_captures(
    db: Path,
    work_parent: Path,
    *,
    progress: ProgressFn | None = None,
    live: Path | None = None,
    then: ThenFn | None = None,
) -> list[CaptureReading]:
    """Every capture and pre-update backup of ``db``, read against its live file (or
    ``live``, a copy of it: maintenance's catch-up reads the stopped file through its
    fence). ``then`` is given the captures proven of this database, on the same private
    copies the reading used (``maintenance --apply-captures`` builds its new file
    there), and is not called when none is."""
    _must_be_a_file(live or db)
    found = [i for i in scan(db).items if i.what in _KINDS]
    names = {i.name for i in found}
    # A backup's -wal / -shm copy is read with its backup, never as a backup of its own.
    items = [i for i in found if not any(i.name == n + s for n in names for s in SIDECAR_SUFFIXES)]
    if not items:
        return []
    readings = {i.name: _reading(i) for i in items}
    candidates = [i for i in items if readings[i.name].verdict == ""]
    if not candidates:
        return list(readings.values())
    work = make_work_copy(live or db, work_parent, progress=progress)
    try:
        with tempfile.TemporaryDirectory(prefix="copies-", dir=work.work_dir) as copies_dir:
            left_out: dict[Path, str] = {}
            extras = ExtraSources([db.parent / i.name for i in candidates])
            opened = open_copies(extras, Path(copies_dir), [], database=db, left_out=left_out)
            by_name = {c.name: c for c in opened}
            for i, item in enumerate(candidates):
                if progress:
                    progress("read captures", i, len(candidates))
                reading = readings[item.name]
                copy = by_name.get(item.name)
                if copy is None:
                    why = left_out.get(db.parent / item.name)
                    reading.verdict = why or "not used: it cannot be read"
                    continue
                _compare(reading, copy, work)
            if progress:
                progress("read captures", len(candidates), len(candidates))
            proven = {c.name: c.path for c in opened if readings[c.name].used}
            if then is not None and proven:
                then(work.db, work.source_header.journal_mode, proven)
    finally:
        work.cleanup()
    return list(readings.values())


def _must_be_a_file(db: Path) -> None:
    """The live file is a regular file (a symlink to one too), whatever lies beside it:
    a folder, a FIFO or a device is :class:`DatabaseUnreadable` (one line), as the
    private copy would find it, never "no captures beside it" only because none are
    there; a path that cannot be read as named is the caller's (``path_error``)."""
    try:
        with open_regular(db):
            pass
    except OSError as exc:
        raise path_error(exc.filename or db, exc) from None


def _reading(item: RecoveryFile) -> CaptureReading:
    """The reading of ``item`` before it is opened: its verdict already when it cannot
    be (a capture still being written, or one whose main image was not copied)."""
    reading = CaptureReading(_KINDS[item.what], item.name, item.bytes, item.captured_at, "")
    if item.partial:
        reading.verdict = "not used: an interrupted or unfinished capture (.partial)"
    elif item.what == "retired_wal" and item.main_mode == "header_only":
        reading.verdict = "not used: Hermes kept only its main image's header (over 512 MB)"
    elif item.problem:
        reading.verdict = f"not used: {item.problem}"
    return reading


def _compare(reading: CaptureReading, copy: OtherCopy, work: WorkCopy) -> None:
    """Prove ``copy`` is of this database, then count, per table, its rows the live
    file lacks."""
    live = apsw.Connection(
        uri_for(work.db, mode="ro"), flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    theirs = apsw.Connection(str(copy.path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        why = foreign(copy, live, work.source_header.application_id, {})
        if why is not None:
            reading.verdict = f"refused: not of this database ({why})"
            return
        reading.verdict, reading.used = "of this database", True
        sequences = _sequences(live)
        shared = {o.name for o in read_schema(live).base_tables() if not o.without_rowid}
        for obj in read_schema(theirs).base_tables():
            if obj.name not in shared:
                continue
            gap = _table_gap(obj.name, live, theirs, sequences.get(obj.name))
            if gap is not None:
                reading.tables.append(gap)
    finally:
        theirs.close()
        live.close()


def _sequences(conn: apsw.Connection) -> dict[str, int]:
    with contextlib.suppress(apsw.SQLError):
        return {str(n): int(s) for n, s in conn.execute("SELECT name, seq FROM sqlite_sequence")}
    return {}


def _table_gap(
    table: str, live: apsw.Connection, theirs: apsw.Connection, sequence: int | None
) -> TableGap | None:
    t = quote_ident(table)
    try:
        have = KeySet(int(r[0]) for r in live.execute(f"SELECT rowid FROM {t} NOT INDEXED"))
        rows = lacking = above = 0
        sample: list[int] = []
        for (rowid,) in theirs.execute(f"SELECT rowid FROM {t} NOT INDEXED ORDER BY rowid"):
            rows += 1
            if int(rowid) in have:
                continue
            lacking += 1
            if sequence is not None and int(rowid) > sequence:
                above += 1
            if len(sample) < SAMPLE_ROWIDS:
                sample.append(int(rowid))
    except apsw.SQLError:
        return None  # a table without a rowid in one of them
    return TableGap(table, rows, lacking, above, sequence, sample)
