"""The steps of a run after the new file is in place: the diverted transcripts listed,
the ``journal-mode=delete`` pin looked for, the post-check of the live file and its
holders, the import of what Hermes diverted (as one more writer, once Hermes runs
again), and quarantine retention. Each runs guarded (``run.py``): a failure is
recorded and the units start again whatever happened (docs/safety.md rule 14)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import apsw
import yaml

from statewarden.errors import StatewardenError
from statewarden.holders import HolderScanner
from statewarden.maintenance.report import PostCheck
from statewarden.maintenance.swap import prune
from statewarden.maintenance.transcripts import ImportLimits, import_diverted, pending_sources
from statewarden.sqlite import read_live

if TYPE_CHECKING:
    from statewarden.maintenance.state import RunState

POST_CHECK_MAX_ERRORS = 100
POST_CHECK_SCANS = 5
POST_CHECK_GAP_S = 0.2


def list_diverted(run: RunState) -> None:
    """The transcripts Hermes diverted while the file was unusable (``sessions/*.jsonl``)."""
    folder = run.target.home / "sessions"
    if folder.is_dir():
        run.report.diverted = sorted(str(p) for p in folder.glob("*.jsonl"))


def journal_mode_pin(run: RunState) -> None:
    """After ``journal-mode=delete``: does Hermes' config.yaml keep it that way?"""
    path = run.target.home / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        data = None
    db = data.get("database") if isinstance(data, dict) else None
    mode = db.get("journal_mode") if isinstance(db, dict) else None
    if str(mode).lower() == "delete":
        run.report.notes.append(f"{path} pins database.journal_mode: delete")
    else:
        run.report.notes.append(
            f"{path} does not pin database.journal_mode: delete; a newer Hermes may"
            " switch the file back to WAL: add `database: {journal_mode: delete}` there"
        )


def post_check(run: RunState) -> None:
    """Integrity of the live file (read-only) and a holder scan: no process may hold an
    old inode."""
    run.journal.step("post-check")
    integrity: str | list[str]
    try:
        # The units run again: one may open the file during the check (read_live).
        query = f"PRAGMA integrity_check({POST_CHECK_MAX_ERRORS})"
        rows = read_live(run.db, lambda conn: conn.execute(query).fetchall(), busy_timeout_ms=1000)
        integrity = "ok" if rows == [("ok",)] else [str(r[0]) for r in rows]
    except (StatewardenError, apsw.Error) as exc:
        integrity = f"could not be checked: {exc}"
    scanner = HolderScanner(
        [run.db],
        exempt_comms=run.config.holders.exempt_comms,
        other_users=run.config.holders.other_users,
        watch_opens=False,
    )
    try:
        # A unit that just started may be creating -wal / -shm while the scan reads
        # the files' inodes: a holder looks stale only if it still does a moment later.
        for _ in range(POST_CHECK_SCANS):
            scan = scanner.scan(full=True)[0]
            stale = [h.pid for h in scan.holders if h.stale]
            if not stale:
                break
            time.sleep(POST_CHECK_GAP_S)
    finally:
        scanner.close()
    run.report.post_check = PostCheck(
        integrity=integrity,
        stale_holders=stale,
        holders=[h.pid for h in scan.holders],
        ok=integrity == "ok" and not stale,
        summary=(
            f"integrity {_integrity_word(integrity)},"
            f" {len(scan.holders)} holder(s) on the new file,"
            f" {len(stale)} holding an old inode"
        ),
    )


def _integrity_word(integrity: str | list[str]) -> str:
    """``ok``; ``FAILED`` (errors found); or why the new file could not be checked."""
    return "FAILED" if isinstance(integrity, list) else integrity


def import_diverted_transcripts(run: RunState) -> None:
    """Once Hermes runs again (as one more writer, through SQLite): what Hermes
    diverted while the file was unusable goes into the repaired file
    (maintenance/transcripts.py), unless ``--no-import``."""
    if run.report.action not in ("repair", "restore") or not pending_sources(run.target.home):
        return
    if not run.options.import_transcripts:
        run.report.notes.append("diverted transcripts not imported (--no-import)")
        return
    try:
        owner = os.stat(run.db).st_uid
    except OSError as exc:
        run.report.notes.append(f"diverted transcripts not imported: {exc}")
        return
    if owner != os.geteuid():
        # A connection of ours would leave -wal / -shm owned by us for Hermes to trip on.
        run.report.notes.append(
            f"diverted transcripts not imported: {run.db} belongs to uid {owner}; run"
            " the maintenance as that user to import them"
        )
        return
    run.journal.step("import")
    limits = ImportLimits(run.mc.import_time_limit, run.mc.import_max_file_size)
    result = import_diverted(run.db, run.target.home, limits)
    run.report.imported = {**result.to_json(), "summary": result.summary()}


def retention(run: RunState) -> None:
    """Old quarantine folders removed (``maintenance.quarantine_keep``, ``_max_age``)."""
    removed = prune(run.state, run.target.name, run.mc.quarantine_keep, run.mc.quarantine_max_age)
    for p in removed:
        run.report.notes.append(f"quarantine retention removed {p}")
