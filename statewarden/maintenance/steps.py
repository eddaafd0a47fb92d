"""The steps of a maintenance run, in order, as one list: a run goes through them from
the first, ``--resume`` from the step its ledger says, and the guard in ``run.py`` holds
around them (before the swap a failure rolls back, after it a failure is recorded; what
was stopped is started again either way: docs/safety.md rule 14).

Each step's ``name`` is the one its ledger line, its event and ``$STATEWARDEN_CRASH_AT``
/ ``$STATEWARDEN_FAIL_AT`` use; ``stop`` writes one line per holder instead
(``stop-unit``, ``signal``), ``retention`` none. The small steps are here; the others
live with their job (``new_file``, ``stopping``, ``catch_up``, ``after_swap``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

import apsw

from statewarden.errors import EXIT_FAILED, StatewardenError
from statewarden.maintenance.after_swap import (
    import_diverted_transcripts,
    journal_mode_pin,
    list_diverted,
    post_check,
    retention,
)
from statewarden.maintenance.apply_captures import QUARANTINE_FOLDER, quarantine_captures
from statewarden.maintenance.catch_up import catch_up, verify_source
from statewarden.maintenance.journal import Abort, crash_point, what_failed
from statewarden.maintenance.new_file import prebuild
from statewarden.maintenance.quiesce import complete_scan
from statewarden.maintenance.report import Failure, RunReport
from statewarden.maintenance.stopping import (
    named,
    no_holders,
    restart_once,
    settle,
    snapshot_before_stop,
    stop,
)
from statewarden.maintenance.swap import NewFile, original_facts, put_back, seal, swap
from statewarden.maintenance.wording import incomplete_reason

if TYPE_CHECKING:
    from statewarden.maintenance.state import RunState

# ``restore`` swaps a quarantined original back in (statewardenctl quarantine restore);
# ``merge`` an earlier file's rows merged with the current ones (maintenance --merge-from).
# ``apply-captures`` the rows Hermes' captures hold that the live file lost.
SWAP_ACTIONS = (
    "repair",
    "vacuum",
    "journal-mode=delete",
    "journal-mode=wal",
    "restore",
    "merge",
    "apply-captures",
)

# Where a step runs: before anything is stopped (a failure ends the run with nothing
# to undo), from the first stop up to the swap (a failure rolls back), after the swap
# (a failure is recorded and the run goes on).
ONLINE = "online"
UNTIL_SWAP = "until the swap"
AFTER_SWAP = "after the swap"


@dataclass(frozen=True)
class Step:
    name: str
    stage: str
    work: Callable[[RunState], RunReport | None]
    applies: Callable[[RunState], bool]


def _always(_run: RunState) -> bool:
    return True


def _swaps(run: RunState) -> bool:
    return run.report.action in SWAP_ACTIONS


def _swapped(run: RunState) -> bool:
    return run.swapped


def _applied_captures(run: RunState) -> bool:
    return run.swapped and run.report.action == "apply-captures"


def _stops_something(run: RunState) -> bool:
    return run.mc.snapshots and run.plan is not None and bool(run.plan.units or run.plan.signals)


def fence(run: RunState) -> None:
    """Mode 000 on the old state.db: a respawned process of its uid cannot open it."""
    fnc = run.the_fence()
    run.journal.step("fence", mode=oct(fnc.orig.mode))
    fnc.put_up()
    if not fnc.effective:
        run.report.notes.append(
            "the fence (mode 000) does not stop root's processes; the settle"
            " scans alone kept them out"
        )


def checkpoint(run: RunState) -> None:
    """``checkpoint``: fold the ``-wal`` into the file through SQLite (no swap)."""
    run.journal.commit()
    run.journal.step("checkpoint")
    try:
        conn = apsw.Connection(str(run.db))
        try:
            conn.set_busy_timeout(1000)
            res = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            conn.close()
        run.report.notes.append(f"wal_checkpoint(TRUNCATE): {res}")
    except apsw.Error as exc:
        run.report.notes.append(f"checkpoint failed: {exc}")
        run.checkpoint_failed = str(exc)


def swap_in(run: RunState) -> None:
    """The new file in, the original and its sidecars into quarantine. A resume rolls
    forward a swap its ledger says began, once nobody holds the original."""
    assert run.new is not None
    qdir = run.quarantine
    sealed = _resumed_swap(run) if run.journal.resuming else _last_look_and_seal(run)
    run.swap_begun = True
    touched: list[str] = []
    try:
        if run.journal.resuming and not run.already_swapped:
            _unchanged_since_the_swap_began(run)
        res = swap(
            run.db,
            run.new,
            qdir,
            run.the_fence().orig,
            run.report.run_id,
            sealed=sealed,
            after=crash_point,
            touched=touched,
        )
    except Exception as exc:  # noqa: BLE001 - rule 14: put back and roll back, or say why not
        # A resumed swap whose new file is gone or changed rolls back too, while the
        # original has its name (put_back makes sure): an earlier attempt may have
        # moved its sidecars, so they are always looked for.
        _put_back(run, exc, ["(an earlier attempt)"] if run.journal.resuming else touched)
    run.swapped = True
    run.swap_files = res.files
    if res.unfinished:
        run.report.failures.append(
            Failure(
                "swap",
                f"the new file is in place, but {qdir}/manifest.json was not written"
                f" ({res.unfinished}): the original is kept there all the same, and"
                " `statewardenctl quarantine list` does not show it",
            )
        )
    if run.journal.resuming:
        run.report.notes.append("resumed after an interruption during the swap: rolled forward")
        return
    run.report.swap_s = round(res.swap_s, 4)
    run.report.quarantine = str(qdir)
    if res.copied:
        run.report.notes.append(
            "the state dir is on another filesystem: the original was copied into"
            " quarantine (longer downtime)"
        )


def _last_look_and_seal(run: RunState) -> NewFile:
    """Right before the swap: nobody holds the old file (root's processes ignore the
    fence), a cancel is refused from here, the new file proven, the ledger line."""
    assert run.new is not None
    no_holders(run, "just before the swap")
    run.journal.commit()
    try:
        run.let_go()
        sealed = run.sealed or seal(run.new)
        run.journal.step(
            "swap",
            new=str(run.new),
            quarantine=str(run.quarantine),
            new_ino=sealed.ino,
            new_file=sealed.to_json(),
            original=original_facts(run.db, run.quarantine),
            **_captures(run),
        )
    except Exception as exc:  # noqa: BLE001 - rule 14: roll back, start again
        run.journal.failed("swap", exc)
        raise Abort(what_failed(exc), EXIT_FAILED) from None
    return sealed


def _resumed_swap(run: RunState) -> NewFile:
    """A swap the ledger says began: nobody may hold the original still in place."""
    assert run.new is not None
    if not run.already_swapped:
        _nobody_holds_the_original(run)
    sealed = run.sealed or seal(run.new)
    run.journal.step(
        "swap",
        new=str(run.new),
        quarantine=str(run.quarantine),
        resumed=True,
        new_ino=run.resumed_ino,
        new_file=sealed.to_json(),
        original=run.resumed_original,
        **_captures(run),
    )
    return sealed


def _unchanged_since_the_swap_began(run: RunState) -> None:
    """A resumed swap rolls forward only if nobody wrote the original since its ledger
    line: a process the fence does not stop (root's) may have, and the new file lacks
    what it wrote (a resume once reported "repaired" without a session and its
    messages). A ledger from before this was recorded has nothing to compare."""
    recorded = run.resumed_original
    if recorded is not None and original_facts(run.db, run.quarantine) != recorded:
        raise StatewardenError(
            f"{run.db}: written while the run was interrupted (by a process the fence"
            " does not stop: root's); the new file lacks what it wrote, so it is not"
            " swapped in"
        )


def _captures(run: RunState) -> dict[str, list[str]]:
    """The captures an ``apply-captures`` run moves to quarantine after the swap, in the
    swap's ledger line: a resume moves them from there."""
    return {"captures": run.captures} if run.report.action == "apply-captures" else {}


def _nobody_holds_the_original(run: RunState) -> None:
    scan = complete_scan(run.scanner())
    if scan.holders or not scan.complete:
        why = f"held by {named(scan.holders)}" if scan.holders else incomplete_reason(scan)
        raise StatewardenError(
            f"{run.db}: cannot finish the interrupted swap: {why}; the original is still in place",
            hint="stop its holders and run statewardenctl maintenance --resume",
        )


def _put_back(run: RunState, exc: Exception, touched: list[str]) -> NoReturn:
    """A swap that could not write (a full disk, a quarantine folder that became a
    symlink) or failed any other way: while the original still has its name, what
    was moved goes back and the run rolls back (an :class:`Abort`). If that cannot be
    done, the units stay stopped (the original's log is in quarantine) and the error
    says why. When no sidecar left the database's folder (``touched`` is empty), the
    original is whole where it was: the run rolls back whatever the quarantine folder
    has become (a planted symlink once kept Hermes stopped with nothing moved)."""
    reason = f"the swap failed: {what_failed(exc)}"
    run.journal.failed("swap", exc)
    try:
        kept = put_back(run.db, run.quarantine, run.the_fence().orig)
    except Exception as again:  # noqa: BLE001 - named below, units kept stopped
        if not touched:
            run.swap_begun = False
            raise Abort(reason, EXIT_FAILED) from None
        run.keep_stopped = f"the swap could not be undone: {what_failed(again)}"
        raise StatewardenError(
            f"{run.db}: {reason}; it could not be undone: {what_failed(again)};"
            " Hermes is kept stopped (its log is in quarantine)",
            hint="free space, then statewardenctl maintenance --resume",
        ) from None
    run.swap_begun = False  # undone: nothing is half-way
    run.report.quarantine = None  # put back: nothing of the original is kept there
    for name in kept:
        run.report.quarantine = str(run.quarantine)
        run.report.notes.append(
            f"{run.quarantine / name}: the original's, from before the interruption, kept"
            f" there: a process made another {name} beside the database meanwhile"
        )
    raise Abort(reason, EXIT_FAILED)


def swapped(run: RunState) -> None:
    """The new file is in place: its ledger line, the transcripts Hermes diverted, and
    (``journal-mode=delete``) whether Hermes' config keeps the mode."""
    run.journal.guarded("swapped", lambda: run.journal.step("swapped", files=run.swap_files))
    run.journal.guarded("swapped", lambda: list_diverted(run))
    if run.report.action == "journal-mode=delete":
        run.journal.guarded("swapped", lambda: journal_mode_pin(run))


def captures_to_quarantine(run: RunState) -> None:
    """``apply-captures``: the captures whose rows are in the new file, moved into the
    run's quarantine folder (once: a resume moves only what is still beside state.db)."""
    run.journal.step("captures", names=run.captures)
    quarantine_captures(run.db, run.captures, run.quarantine)
    run.report.captures = {
        **(run.report.captures or {}),
        "quarantined": list(run.captures),
        "quarantine": str(run.quarantine / QUARANTINE_FOLDER),
    }


def restart(run: RunState) -> None:
    """What the run stopped, started again (before the post-check and the import, so
    nothing they do keeps Hermes down)."""
    restart_once(run)


STEPS: tuple[Step, ...] = (
    Step("prebuild", ONLINE, prebuild, _swaps),
    Step("snapshot", UNTIL_SWAP, snapshot_before_stop, _stops_something),
    Step("stop", UNTIL_SWAP, stop, _always),
    Step("fence", UNTIL_SWAP, fence, _swaps),
    Step("settle", UNTIL_SWAP, settle, _always),
    Step("checkpoint", UNTIL_SWAP, checkpoint, lambda run: run.report.action == "checkpoint"),
    Step("verify-source", UNTIL_SWAP, verify_source, _swaps),
    Step("catch-up", UNTIL_SWAP, catch_up, lambda run: _swaps(run) and run.changed),
    Step("swap", UNTIL_SWAP, swap_in, _swaps),
    Step("swapped", AFTER_SWAP, swapped, _swapped),
    Step("restart", AFTER_SWAP, restart, _always),
    Step("captures", AFTER_SWAP, captures_to_quarantine, _applied_captures),
    Step("post-check", AFTER_SWAP, post_check, _swapped),
    Step("import", AFTER_SWAP, import_diverted_transcripts, _swapped),
    Step("retention", AFTER_SWAP, retention, _swapped),
)
NAMES = tuple(s.name for s in STEPS)


def steps_from(name: str) -> tuple[Step, ...]:
    """The steps from ``name`` on, in order."""
    return STEPS[NAMES.index(name) :]
