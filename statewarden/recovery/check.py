"""``check``: one database diagnosed on a private copy; the source is only read.

The one function both ``statewardenctl check`` and the daemon's ``check`` request
call. The copy is the only step that reads the source; ``copy_guard`` (a lock, for a
caller that also holds SQLite connections to the source, see docs/safety.md rule 2)
is held around that step alone, and the copy is diagnosed and removed
outside it.
"""

from __future__ import annotations

import contextlib
import os
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from statewarden.progress import ProgressFn
from statewarden.recovery.bundle import WorkCopy, make_work_copy
from statewarden.recovery.diagnose import Diagnosis, diagnose


def check_database(
    source: Path,
    work_parent: Path,
    *,
    progress: ProgressFn | None = None,
    copy_guard: AbstractContextManager[Any] | None = None,
) -> Diagnosis:
    """Copy ``source``'s bundle into a private work dir under ``work_parent`` (holding
    ``copy_guard`` while copying), diagnose the copy, remove it. The diagnosis names
    ``source``, not the copy."""
    with copy_guard if copy_guard is not None else contextlib.nullcontext():
        work = make_work_copy(source, work_parent, progress=progress)
    try:
        result = diagnose(
            work.db,
            progress=progress,
            truncated=work.truncated_note,
            wal=work.wal,
            wal_name=work.wal_name,
            schema_rebuilt=work.schema_note,
        )
        header_count_wrong(work, result)
    finally:
        work.cleanup()
    result.path = str(source)
    return result


def header_count_wrong(work: WorkCopy, result: Diagnosis) -> str | None:
    """A header whose (valid) page count is larger than the file, the file a whole
    number of pages, and a complete integrity check of the copy, read as far as the
    file goes, that finds nothing wrong: every page the database references is in the
    file, so the header's count is wrong, not the file short. The diagnosis' note says
    so instead of "truncated", and the class is ``unreadable`` (SQLite refuses the file
    as it is; nothing is lost). Returns that note (``None``: not this case). Call
    before the work copy is removed."""
    header = work.source_header
    size = os.stat(work.db).st_size
    present = size // header.page_size
    if not (
        work.truncated_note
        and work.truncated_note in result.notes
        and result.integrity_ok
        and header.page_count_valid
        and size % header.page_size == 0
        and present < header.page_count
    ):
        return None
    note = (
        f"the header says {header.page_count} pages, the file holds {present} ({size} bytes)"
        " and every page the database references: the header's page count is wrong, not"
        " the file short; SQLite refuses the file as it is"
    )
    result.notes[result.notes.index(work.truncated_note)] = note
    result.damage = "unreadable"
    return note
