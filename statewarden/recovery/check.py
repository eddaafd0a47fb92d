"""``check``: one database diagnosed on a private copy; the source is only read.

The one function both ``statewardenctl check`` and the daemon's ``check`` request
call. The copy is the only step that reads the source; ``copy_guard`` (a lock, for a
caller that also holds SQLite connections to the source, see docs/safety.md rule 2)
is held around that step alone, and the copy is diagnosed and removed
outside it.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from statewarden.progress import ProgressFn
from statewarden.recovery.bundle import make_work_copy
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
    finally:
        work.cleanup()
    result.path = str(source)
    return result
