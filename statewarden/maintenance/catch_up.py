"""The catch-up: whether the database changed after the pre-build (verify-source), and
if it did, the new file built again, offline, from a copy read through the descriptor
the fence has held since before it went up (the fence is never lowered). The copy goes
into ``.statewarden-catch-up-<db>-<run id>/`` next to the database, reached only
through its descriptor, and is removed when the step ends."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from statewarden.errors import EXIT_FAILED, EXIT_MAINTENANCE_LOSS, EXIT_OK
from statewarden.maintenance.fence import copy_out
from statewarden.maintenance.journal import Abort, crash_point
from statewarden.maintenance.ledger import db_digest
from statewarden.maintenance.new_file import (
    captures_applied,
    journal_mode_of,
    merged,
    other_copies,
    remove_new,
)
from statewarden.maintenance.prebuild import build_copy_as_is, build_new_file, identity
from statewarden.maintenance.stopping import no_holders
from statewarden.maintenance.swap import seal
from statewarden.recovery import Report
from statewarden.sidecars import JOURNAL_SUFFIX, WAL_SUFFIX, sidecar

if TYPE_CHECKING:
    from statewarden.maintenance.state import RunState

CATCH_UP_PREFIX = ".statewarden-catch-up-"


def catch_up_name(db: Path, run_id: str) -> str:
    return f"{CATCH_UP_PREFIX}{db_digest(db)}-{run_id}"


def verify_source(run: RunState) -> None:
    """Whether the source still has the content the new file was built from: the
    same identity, or (Hermes checkpoints on close) no WAL left and exactly the bytes
    of the folded copy the pre-build used. If not, the catch-up step runs."""
    run.journal.step("verify-source")
    run.changed = run.options.action != "restore" and not _unchanged(run)


def _unchanged(run: RunState) -> bool:
    before = run.built_from
    if before is None:
        return False
    after = identity(run.db)
    if before.same_content(after):
        run.report.notes.append("the source did not change after the pre-build")
        return True
    if run.folded_sha256 is None or not after.wal_empty:
        return False
    same = run.the_fence().sha256() == run.folded_sha256
    if same:
        run.report.notes.append(
            "the source only checkpointed its WAL after the pre-build: same content"
        )
    return same


def catch_up(run: RunState) -> None:
    """Build the new file again from the stopped database; an :class:`Abort` when the
    run ends here (no damage after all, a repair that fails verification or would
    lose rows not accepted)."""
    run.journal.step("catch-up")
    assert run.new is not None
    remove_new(run)
    # A copy of the fenced bundle, read through the descriptor held since before the
    # fence (never by lowering it): nobody can open the original meanwhile. The copy
    # goes into a folder of ours next to the database, reached only through its
    # descriptor: the database's owner may rename folders there while root works.
    name = catch_up_name(run.db, run.report.run_id)
    dfd = os.open(run.db.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    cfd: int | None = None
    try:
        os.mkdir(name, 0o700, dir_fd=dfd)
        cfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        if os.fstat(cfd).st_uid != os.geteuid():
            raise Abort(f"{run.db.parent / name}: not the folder this run made", EXIT_FAILED)
        source = Path(f"/proc/self/fd/{cfd}") / run.db.name
        run.the_fence().copy_out(source)
        for sfx in (WAL_SUFFIX, JOURNAL_SUFFIX):
            _copy_sidecar(dfd, sidecar(run.db, sfx).name, Path(f"{source}{sfx}"))
        crash_point("catch-up-copied")
        rep = _rebuild(run, source)
        run.sealed = seal(run.new)
    except OSError as exc:
        raise Abort(f"the catch-up copy failed: {exc.strerror or exc}", EXIT_FAILED) from None
    finally:
        if cfd is not None:
            os.close(cfd)
        shutil.rmtree(name, dir_fd=dfd, ignore_errors=True)
        os.close(dfd)
    run.report.path = (
        "recovered again offline (the source changed after the pre-build)"
        if run.report.path
        else "recovered offline (no consistent copy could be taken while Hermes ran)"
    )
    no_holders(run, "during the catch-up")
    if rep is not None:
        _gate(run, rep)


def _rebuild(run: RunState, source: Path) -> Report | None:
    """The new file from the catch-up's copy ``source``; a repair's recover report."""
    assert run.new is not None
    action = run.options.action
    if action == "repair":
        rep = build_new_file(
            source,
            run.new,
            run.progress,
            hash_folded=False,
            extra_sources=other_copies(run.db, run.state),
        ).report
        rep.source = str(run.db)
        run.report.recover = rep.to_json()
        return rep
    if action == "merge":
        merged(run, source, prebuild=False)  # a failure is an Abort: rolled back
        return None
    if action == "apply-captures":
        captures_applied(run, source, prebuild=False)  # likewise
        return None
    build_copy_as_is(source, run.new, journal_mode_of(action), run.progress)
    return None


def _gate(run: RunState, rep: Report) -> None:
    if rep.damage == "none":
        raise Abort("the check found no damage once Hermes was stopped; nothing to swap", EXIT_OK)
    if not rep.verified:
        raise Abort("the catch-up repair failed verification", EXIT_FAILED)
    if rep.loss_detected and not run.accepts_loss():
        raise Abort(
            "the catch-up repair would lose rows (see --accept-loss)", EXIT_MAINTENANCE_LOSS
        )


def _copy_sidecar(dfd: int, name: str, dest: Path) -> None:
    """Copy the sidecar ``name`` of the folder ``dfd`` to the new file ``dest``, if it is a
    regular file (opened with ``O_NOFOLLOW``: a symlink planted there is not read)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return
        raise
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            copy_out(fd, dest)
    finally:
        os.close(fd)
