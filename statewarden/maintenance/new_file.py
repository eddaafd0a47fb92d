"""The new file of a run, built while Hermes runs (the pre-build): a repair recovered
and gated (verified, no loss unless accepted), a quarantined original restored, an
earlier file merged with the current one, or a copy as is (vacuum, journal mode).
A healthy file, a loss not accepted or a file that fails verification ends the run
here, with nothing stopped."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from statewarden import recovery_files
from statewarden.atomic import private_dir
from statewarden.errors import (
    EXIT_FAILED,
    EXIT_MAINTENANCE_LOSS,
    EXIT_OK,
    EXIT_UNREADABLE,
    Cancelled,
    DatabaseChanged,
    DatabaseUnreadable,
    StatewardenError,
)
from statewarden.maintenance.apply_captures import build_applied
from statewarden.maintenance.journal import Abort
from statewarden.maintenance.merge import build_merged, prepare_source
from statewarden.maintenance.prebuild import (
    build_copy_as_is,
    build_new_file,
    build_restored,
    identity,
    new_file_path,
)
from statewarden.maintenance.report import RunReport
from statewarden.maintenance.snapshots import newest_of
from statewarden.maintenance.swap import quarantine_root, seal
from statewarden.recovery import Report

if TYPE_CHECKING:
    from statewarden.maintenance.state import RunState


def other_copies(db: Path, state: Path) -> list[Path]:
    """What recover may take a lost row from (``recovery/other_copies.py``): the newest
    verified snapshot of ``db``, and Hermes' published retired WAL captures (main image
    copied) and pre-update backups beside it (each verified again before use)."""
    newest = newest_of(state, db)
    snaps = [Path(newest.path)] if newest is not None else []
    beside = [
        db.parent / i.name
        for i in recovery_files.scan(db).items
        if i.what in ("retired_wal", "pre_update_backup")
        and not i.partial
        and not i.problem
        and i.main_mode in (None, "copied")
    ]
    return snaps[:1] + beside


def journal_mode_of(action: str) -> str | None:
    """The journal mode a ``journal-mode=...`` action asks for (None: keep the file's)."""
    if action.startswith("journal-mode="):
        return "wal" if action.endswith("wal") else "rollback"
    return None


def remove_new(run: RunState) -> None:
    if run.new is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(run.new)


def prebuild(run: RunState) -> RunReport | None:
    """Build the new file while Hermes runs (``run.built_from``: the source's identity
    it was built from; None: build after the stop), and a report when the run ends here."""
    try:
        private_dir(quarantine_root(run.state))  # refused now, not at the swap
    except (OSError, StatewardenError) as exc:
        return run.finish("failed before stopping anything", EXIT_FAILED, str(exc))
    run.new = new_file_path(run.db, run.report.run_id)
    run.journal.step("prebuild", new=str(run.new))
    built_from = identity(run.db)
    run.report.source_identity = built_from.to_json()
    run.built_from = built_from
    try:
        done = _build(run)
        if done is None:
            run.sealed = seal(run.new)
        run.report.path = "pre-built while Hermes ran"
    except DatabaseChanged as exc:
        # A writer busy enough that no copy is consistent: build after the stop.
        remove_new(run)
        run.built_from = None
        done = None
        run.report.notes.append(f"no pre-build while Hermes ran: {exc.message}")
    except Cancelled as exc:
        remove_new(run)
        run.report.cancelled = True
        return run.finish("cancelled: nothing was stopped", EXIT_FAILED, str(exc))
    except StatewardenError as exc:
        remove_new(run)
        code = EXIT_UNREADABLE if isinstance(exc, DatabaseUnreadable) else EXIT_FAILED
        return run.finish("failed before stopping anything", code, str(exc))
    return done


def _build(run: RunState) -> RunReport | None:
    """Build the new file; a report when the run ends here (healthy, loss, failed)."""
    assert run.new is not None
    action = run.options.action
    if action == "repair":
        built = build_new_file(
            run.db, run.new, run.progress, extra_sources=other_copies(run.db, run.state)
        )
        rep = built.report
        run.folded_sha256 = built.folded_sha256
        run.report.recover = rep.to_json()
        if rep.damage == "none":
            remove_new(run)
            return run.finish(
                "healthy: nothing to repair",
                EXIT_OK,
                "the check found no damage; nothing was stopped",
            )
        return _gate(run, rep)
    if action == "restore":
        assert run.options.restore_from is not None
        build_restored(run.options.restore_from, run.new, run.progress)
        return None
    if action == "merge":
        return merged(run, run.db, prebuild=True)
    if action == "apply-captures":
        return captures_applied(run, None, prebuild=True)
    build_copy_as_is(run.db, run.new, journal_mode_of(action), run.progress)
    return None


def _gate(run: RunState, rep: Report) -> RunReport | None:
    if not rep.verified:
        remove_new(run)
        return run.finish(
            "failed before stopping anything",
            EXIT_FAILED,
            "the repaired file failed verification",
        )
    if rep.loss_detected and not run.accepts_loss():
        remove_new(run)
        return run.finish(
            "stopped: the repair would lose rows",
            EXIT_MAINTENANCE_LOSS,
            "nothing was swapped; see the loss report, then rerun with --accept-loss",
        )
    return None


def prepare_merge(run: RunState) -> None:
    """The merge's old file, recovered into the run's folder and proven to be this
    database's earlier file, before anything is planned or stopped: a path that
    cannot be used (exit 2), a file that is not this database's (exit 5) or that
    cannot be read at all (exit 4) is one line, and nothing is done."""
    assert run.options.merge_from is not None
    run.merge_source = prepare_source(
        run.options.merge_from,
        run.db,
        home=run.target.home,
        state=run.state,
        folder=run.folder,
        progress=run.progress,
    )
    src = run.merge_source
    run.report.merge = {"old": str(src.path), "proof": src.proof}


def merged(run: RunState, current: Path, *, prebuild: bool) -> RunReport | None:
    """Merge the old file with ``current`` into the new file; a report when the run
    ends here (nothing to merge, or a file that failed verification)."""
    assert run.merge_source is not None
    assert run.new is not None
    src = run.merge_source
    result, folded = build_merged(src.recovered, current, run.new, run.progress)
    if prebuild:
        run.folded_sha256 = folded
    result.old = str(src.path)
    run.report.merge = {**result.to_json(), "summary": result.summary(), "proof": src.proof}
    return _ends_here(
        run,
        prebuild=prebuild,
        nothing=f"every session and message of {src.path} is in {run.db} already"
        if result.nothing
        else "",
        nothing_outcome="nothing to merge",
        failed=""
        if result.verified
        else "the merged file failed verification: " + "; ".join(result.problems),
    )


def preview_captures(run: RunState) -> None:
    """A dry run of ``--apply-captures``: what would be brought in now, built the same
    way in the run's private folder and not kept."""
    result = build_applied(run.db, None, run.folder, progress=run.progress)
    run.report.captures = result.to_json()


def captures_applied(run: RunState, current: Path | None, *, prebuild: bool) -> RunReport | None:
    """Bring the rows the captures hold that the live file lost (``current``: the
    stopped file's copy to read, None: the live file) into the new file; a report when
    the run ends here (nothing to bring in, or a file that failed verification)."""
    assert run.new is not None
    result = build_applied(run.db, run.new, run.new.parent, live=current, progress=run.progress)
    if prebuild:
        run.folded_sha256 = result.folded_sha256
    run.captures = result.proven
    run.report.captures = result.to_json()
    return _ends_here(
        run,
        prebuild=prebuild,
        nothing="the captures beside it hold no row the live file lost above its sequences"
        if result.nothing
        else "",
        nothing_outcome="nothing to apply",
        failed=""
        if result.verified
        else "the file with the captures' rows failed verification: " + "; ".join(result.problems),
    )


def _ends_here(
    run: RunState, *, prebuild: bool, nothing: str, nothing_outcome: str, failed: str
) -> RunReport | None:
    """Where a merge or the captures' rows end the run: ``nothing`` to bring in (exit 0)
    or a new file that ``failed`` its verification (exit 1), the new file removed either
    way. Before the stop (``prebuild``) the run finishes here, nothing stopped; after it
    (the catch-up) the run is aborted and rolled back. None: the run goes on."""
    if not nothing and not failed:
        return None
    remove_new(run)
    if nothing:
        if not prebuild:
            raise Abort(nothing + "; nothing to swap", EXIT_OK)
        return run.finish(nothing_outcome, EXIT_OK, nothing + "; nothing was stopped")
    if not prebuild:
        raise Abort(failed, EXIT_FAILED)
    return run.finish("failed before stopping anything", EXIT_FAILED, failed)
