"""One maintenance run: plan, pre-build, quiesce, fence, settle, catch up, swap, restart.

Every step is written to the run ledger (``ledger.py``) before it starts. A run that
fails or aborts before the swap is rolled back here (fence down, our new file removed,
stopped units started again); one that got as far as the swap is rolled forward. After
a ``kill -9`` the same happens on ``--resume`` (or the daemon's start-up), from the
ledger alone: :meth:`MaintenanceRun.resume`.

Actions: ``repair`` (default: check while Hermes runs, and swap in a repaired file only
when damaged), ``check`` (read-only, nothing stopped), ``vacuum`` and
``journal-mode=delete|wal`` (a compacted copy, pre-built like a repair, in the journal
mode asked for), ``checkpoint`` (stop the holders, fold the ``-wal`` into the file
through SQLite, start them again: no swap).

``$STATEWARDEN_CRASH_AT=<step>`` makes the run ``SIGKILL`` itself right after the
ledger line of that step is durable (or, for ``sidecars-moved`` and ``original-kept``,
half-way through the swap; for ``catch-up-copied``, once the catch-up folder holds its
copy of the database); ``$STATEWARDEN_FAIL_AT=<step>`` raises an unexpected error
(:class:`_InjectedFault`) at the same points: the fault-injection points the crash and
fault tests use.

What maintenance stopped, it starts again (docs/safety.md, rule 14): from the first
stop on, a failure of any step is recorded in the report (``failures``) and the ledger,
and the run goes on to the restart. Before the swap it rolls back; after it, each step
(import, post-check, retention, report) runs guarded, and the units start again
whatever they did. The one exception is a swap that failed half-way and could not be
undone (the original's ``-wal`` is in quarantine): Hermes is not started on a file
whose log is elsewhere, and the error says so.

Work folders next to the database (the pre-build's and the catch-up's
``.statewarden-work-*``, the catch-up's ``.statewarden-catch-up-<db>-<run>``) are
removed by the step that made them; those of a run killed meanwhile by ``--resume``
or the next run of the same database (under its lock, so no live run uses them).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import os
import shutil
import signal
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import apsw
import yaml

from statewarden import recovery_files
from statewarden.atomic import private_dir
from statewarden.config import Config, state_dir
from statewarden.errors import (
    EXIT_FAILED,
    EXIT_MAINTENANCE_LOSS,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREADABLE,
    Cancelled,
    DatabaseChanged,
    DatabaseUnreadable,
    StatewardenError,
    UsageError,
)
from statewarden.holders.processes import short_command
from statewarden.holders.report import Holder
from statewarden.holders.scan import HolderScanner
from statewarden.lock import daemon_pid
from statewarden.maintenance import outcomes
from statewarden.maintenance.fence import Fence, Original, copy_out
from statewarden.maintenance.ledger import (
    FINISHED,
    Ledger,
    LedgerRecord,
    db_digest,
    read_ledger,
    run_dir,
    run_lock,
)
from statewarden.maintenance.merge import Source, build_merged, prepare_source, remove_sources
from statewarden.maintenance.plan import Plan, make_plan
from statewarden.maintenance.prebuild import (
    SourceIdentity,
    build_copy_as_is,
    build_new_file,
    build_restored,
    identity,
    new_file_path,
)
from statewarden.maintenance.profiles import affected_profiles
from statewarden.maintenance.quiesce import (
    Settler,
    annotate_units,
    complete_scan,
    describe_origin,
    running_again,
    start_ticks_of,
    start_units,
    stop_units,
    terminate_all,
    unit_states,
)
from statewarden.maintenance.report import (
    Failure,
    PostCheck,
    RunReport,
    StartAgain,
    StepTime,
    UnitStarted,
)
from statewarden.maintenance.snapshots import newest_of, take_snapshot
from statewarden.maintenance.swap import (
    NewFile,
    prune,
    put_back,
    quarantine_dir,
    quarantine_root,
    seal,
    swap,
)
from statewarden.maintenance.transcripts import ImportLimits, import_diverted, pending_sources
from statewarden.maintenance.wording import folded_problems, incomplete_reason
from statewarden.progress import ProgressFn
from statewarden.recovery.bundle import WORK_LOCK, WORK_PREFIX, remove_abandoned
from statewarden.recovery.check import check_database
from statewarden.recovery.diagnose import exit_code_for as check_exit_code
from statewarden.recovery.report import Report
from statewarden.sidecars import JOURNAL_SUFFIX, WAL_SUFFIX, sidecar
from statewarden.sqlite import open_readonly, wal_sidecars_absent
from statewarden.targets import Target

ACTIONS = ("repair", "check", "journal-mode=delete", "journal-mode=wal", "checkpoint", "vacuum")
# ``restore`` swaps a quarantined original back in (statewardenctl quarantine restore);
# ``merge`` an earlier file's rows merged with the current ones (maintenance --merge-from).
SWAP_ACTIONS = ("repair", "vacuum", "journal-mode=delete", "journal-mode=wal", "restore", "merge")
ENV_CRASH_AT = "STATEWARDEN_CRASH_AT"
ENV_FAIL_AT = "STATEWARDEN_FAIL_AT"
CATCH_UP_PREFIX = ".statewarden-catch-up-"
POST_CHECK_MAX_ERRORS = 100
POST_CHECK_SCANS = 5
UNIT_START_CHECK_S = 1.0
POST_CHECK_GAP_S = 0.2
# Why a cancel is refused from the swap on: the new file is going in (or is in).
PAST_THE_SWAP = (
    "the swap has begun, so the run finishes (the new file goes in, the units start again)"
)
CANCELLED = "cancelled by the user before the swap"

EmitFn = Callable[[dict[str, Any]], None]


class _InjectedFault(RuntimeError):
    """The unexpected error ``$STATEWARDEN_FAIL_AT`` raises (fault tests)."""


def _what_failed(exc: BaseException) -> str:
    """One line for an error a step did not expect."""
    if isinstance(exc, StatewardenError | _InjectedFault):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
    return f"{type(exc).__name__}: {exc}"


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


@dataclass
class Options:
    action: str = "repair"
    force: bool = False
    accept_loss: bool = False
    dry_run: bool = False
    confirm: Callable[[Plan], bool] | None = None
    restore_from: Path | None = None  # a quarantined state.db, for the restore action
    merge_from: Path | None = None  # an earlier file of the database, for the merge action
    import_transcripts: bool = True  # import what Hermes diverted, after the swap


def _named(holders: list[Holder]) -> str:
    """``hermes gateway run (pid 4242), hermes chat (pid 4244)``: holders as a person names them."""
    return ", ".join(f"{short_command(h.cmdline) or h.comm} (pid {h.pid})" for h in holders)


class MaintenanceRun:
    """A maintenance run on one target; :meth:`execute` or :meth:`resume`."""

    def __init__(
        self,
        target: Target,
        config: Config,
        options: Options | None = None,
        *,
        emit: EmitFn | None = None,
        progress: ProgressFn | None = None,
        address: str | None = None,
    ) -> None:
        self.target = target
        self.db = Path(os.path.abspath(target.db))
        self.config = config
        self.mc = config.maintenance
        self.options = options or Options()
        if self.options.action not in (*ACTIONS, "restore", "merge"):
            raise UsageError(
                f"unknown action {self.options.action!r} (one of: {', '.join(ACTIONS)})"
            )
        self._emit = emit
        self.address = address
        self.state = state_dir(config)
        self.folder = run_dir(self.state, self.db)
        self.ledger = Ledger(self.folder)
        self.report = RunReport(db=str(self.db), action=self.options.action)
        self.stopped_units: list[str] = []
        self.signalled: list[dict[str, Any]] = []
        self.fence: Fence | None = None  # from the plan on: the original and its fence
        self.new: Path | None = None
        self.folded_sha256: str | None = None
        self.sealed: NewFile | None = None  # the new file as built, proven at the swap
        self.merge_source: Source | None = None  # the merge's old file, recovered and proven
        self._t0 = time.monotonic()
        self._started_at = time.time()
        self._step_started: tuple[str, float] | None = None
        self._down_started: float | None = None
        # Cancel (Ctrl-C, or the daemon's SIGINT for a run handed to it): asked for at any
        # time, acted on at the next step before the swap; refused from the swap on.
        self._cancel_asked = False
        self._cancel_answer: dict[str, Any] | None = None
        self._committed = False  # the swap has begun: a cancel is refused
        self._resuming = False
        self._restarted = False  # what was stopped has been started again
        self._swap_begun = False  # the swap has begun moving files (or a resume found it so)
        self._swapped = False  # ... and is complete: the new file has the name
        self._keep_stopped: str | None = None  # why not (a swap that could not be undone)
        self._daemon = daemon_pid(self.state)  # never stopped: waited for
        user_progress = progress

        def checked_progress(phase: str, done: int, total: int) -> None:
            self._tell_cancel()
            if self._cancel_asked and not self._committed:
                raise Cancelled(CANCELLED)
            if user_progress is not None:
                user_progress(phase, done, total)

        self.progress: ProgressFn | None = checked_progress

    # -- events and the ledger -------------------------------------------------------

    def emit(self, event: str, **data: Any) -> None:
        if self._emit is not None:
            self._emit({"event": event, "db": str(self.db), **data})

    def cancel(self) -> tuple[bool, str]:
        """Ask the run to stop (safe to call from a signal handler: flags only). Before the
        swap it rolls back at its next step; from the swap on it is refused, and the run
        finishes. Returns (accepted, why); the run also emits a ``cancel`` event."""
        if self._resuming:
            answer = (False, "a resume finishes (or rolls back) what an interrupted run began")
        elif self._committed:
            answer = (False, PAST_THE_SWAP)
        else:
            self._cancel_asked = True
            answer = (True, "the run stops before the swap and rolls back what it did")
        self._cancel_answer = {"accepted": answer[0], "reason": answer[1]}
        return answer

    def _tell_cancel(self) -> None:
        """The answer to a cancel, as an event, once (outside the signal handler)."""
        answer, self._cancel_answer = self._cancel_answer, None
        if answer is not None:
            self.emit("cancel", **answer)

    def _stop_if_cancelled(self) -> None:
        self._tell_cancel()
        if self._cancel_asked and not self._committed:
            raise _Abort(CANCELLED, EXIT_FAILED, cancelled=True)

    def _commit(self) -> None:
        """The point of no return: from here a cancel is refused."""
        self._committed = True
        if self._cancel_asked:  # asked in between (a signal handler runs between bytecodes)
            self._committed = False
            raise _Abort(CANCELLED, EXIT_FAILED, cancelled=True)

    def _step(self, name: str, **data: Any) -> None:
        """Ledger line first (durable), then the event; timings per step."""
        self._tell_cancel()
        self.ledger.step(name, **data)
        now = time.monotonic()
        if self._step_started is not None:
            prev, since = self._step_started
            self.report.steps.append(StepTime(prev, round(now - since, 3)))
        self._step_started = (name, now)
        self.emit("step", step=name, **data)
        self._crash_point(name)

    @staticmethod
    def _crash_point(name: str) -> None:
        if os.environ.get(ENV_CRASH_AT) == name:
            os.kill(os.getpid(), signal.SIGKILL)
        if os.environ.get(ENV_FAIL_AT) == name:
            raise _InjectedFault(f"a fault injected at {name}")

    def _failed(self, step: str, exc: BaseException) -> None:
        """Record a step that failed after the stop; the run goes on to the restart."""
        error = _what_failed(exc)
        self.report.failures.append(Failure(step, error))
        self.emit("step-failed", step=step, error=error)
        with contextlib.suppress(OSError, StatewardenError):
            self.ledger.step("step-failed", step=step, error=error)

    def _guarded(self, step: str, work: Callable[[], None]) -> None:
        """Run one step after the swap: a failure is recorded, never raised."""
        try:
            work()
        except Exception as exc:  # noqa: BLE001 - rule 14: nothing may skip the restart
            self._failed(step, exc)

    def _current_step(self) -> str:
        return self._step_started[0] if self._step_started is not None else "run"

    def _owes_a_restart(self) -> bool:
        return bool(self.stopped_units or self.signalled) and not self._restarted

    def _let_go(self) -> None:
        if self.fence is not None:
            self.fence.let_go()

    def _fence(self) -> Fence:
        """The run's fence (there is one from the plan on, or from the ledger on a resume)."""
        assert self.fence is not None
        return self.fence

    def _finish(self, outcome: str, code: int, message: str = "") -> RunReport:
        self._let_go()
        self.report.outcome = outcome
        self.report.exit_code = code
        self.report.message = message or self.report.message
        if self._step_started is not None:
            prev, since = self._step_started
            self.report.steps.append(StepTime(prev, round(time.monotonic() - since, 3)))
            self._step_started = None
        self._tell_cancel()
        try:
            self.ledger.step(FINISHED, outcome=outcome, exit_code=code, message=self.report.message)
        except (OSError, StatewardenError) as exc:
            # The run is done; only its record is not: --resume finishes it again.
            self.report.notes.append(f"the run ledger could not be finished: {exc}")
        self.ledger.close()
        self.emit("finished", outcome=outcome, exit_code=code, message=self.report.message)
        return self.report

    # -- the run -----------------------------------------------------------------------

    def _private_folder(self) -> None:
        private_dir(self.folder.parent, what="maintenance")
        private_dir(self.folder, what="maintenance")

    def execute(self) -> RunReport:
        self._private_folder()
        with run_lock(self.folder):
            if not self.options.dry_run:
                for path in self._remove_work_folders():
                    self.report.notes.append(f"removed the work folder of a killed run: {path}")
            with self._starting_again_on_error():
                return self._told(self._execute())

    @contextlib.contextmanager
    def _starting_again_on_error(self) -> Iterator[None]:
        """The last net of rule 14: an error no step caught still starts what was stopped
        (then goes on to the caller, with the run left for --resume)."""
        try:
            yield
        except BaseException as exc:
            if self._swap_begun and not self._swapped and self._keep_stopped is None:
                # Never start Hermes on a half-swapped file: --resume rolls it forward.
                self._keep_stopped = "the swap was interrupted half-way"
            if self._owes_a_restart() and self._keep_stopped is None:
                self._failed("run", exc)
                if not self._swapped and self.fence is not None:
                    self._guarded("rollback", self.fence.take_down)
                self._restart()
                if isinstance(exc, Exception) and not isinstance(exc, StatewardenError):
                    started = ", ".join(self.stopped_units) or "nothing"
                    raise StatewardenError(
                        f"{self.db}: maintenance failed: {_what_failed(exc)}; started"
                        f" again: {started}",
                        hint="statewardenctl maintenance --resume finishes the run",
                    ) from exc
            raise

    def _told(self, report: RunReport) -> RunReport:
        """Leave the outcome for the daemon to tell through the alert sinks (before the
        lock is let go, so the daemon sees the outcome no later than the run's end)."""
        try:
            outcomes.record(self.state, report.to_json(), self.target.name, self._started_at)
        except (OSError, StatewardenError) as exc:
            report.notes.append(f"the outcome could not be left for the alerts: {exc}")
        return report

    def _execute(self) -> RunReport:
        record = read_ledger(self.ledger.path)
        if record is not None and not record.finished:
            raise StatewardenError(
                f"{self.db}: an earlier maintenance run did not finish",
                hint="statewardenctl maintenance --resume finishes or rolls it back",
            )
        if self.options.action == "check":
            return self._check()
        return self._run()

    def _check(self) -> RunReport:
        diag = check_database(self.db, self.db.parent, progress=self.progress)
        self.report.outcome = f"damage {diag.damage}"
        self.report.exit_code = check_exit_code(diag.damage)
        self.report.notes.extend(diag.findings())
        return self.report

    def _plan(self, scanner: HolderScanner) -> Plan:
        scan = complete_scan(scanner)
        scan.problems = folded_problems(scan)  # the plan's refusals: one line, not thousands
        if self._daemon is not None and any(h.pid == self._daemon for h in scan.holders):
            # Its reads are short and read-only: waited for (settle), never stopped.
            scan.holders = [h for h in scan.holders if h.pid != self._daemon]
            self.report.notes.append(
                f"the statewarden daemon (pid {self._daemon}) was reading the database;"
                " it is waited for, never stopped"
            )
        note = annotate_units([scan], self.address) if scan.holders else None
        plan = make_plan(
            self.db,
            scan,
            action=self.options.action,
            force=self.options.force,
            stop_interactive=self.mc.stop_interactive,
            systemd_note=note,
            settle_s=self.mc.settle,
            stop_grace_s=self.mc.stop_grace,
            offline=self.options.action == "checkpoint",
            quarantine=quarantine_root(self.state),
        )
        affected = affected_profiles(self.config, self.db, plan.units, self.address)
        plan.affected_profiles = [a.to_json() for a in affected]
        return plan

    def _run(self) -> RunReport:
        opts = self.options
        self.fence = Fence.of(self.db)
        scanner = HolderScanner(
            [self.db],
            exempt_comms=self.config.holders.exempt_comms,
            other_users=self.config.holders.other_users,
        )
        try:
            if opts.action == "merge":
                self._prepare_merge()
            plan = self._plan(scanner)
            self.report.plan = plan.to_json()
            self.emit("plan", plan=self.report.plan, lines=plan.render())
            if opts.dry_run:
                self.report.outcome = "dry run: nothing done"
                self.report.exit_code = EXIT_REFUSED if plan.refusals else EXIT_OK
                if plan.space_problem and not plan.refusals:
                    self.report.exit_code = EXIT_FAILED
                return self.report
            if plan.refusals:
                self.report.outcome = "refused: nothing done"
                self.report.exit_code = EXIT_REFUSED
                self.report.message = "; ".join(plan.refusals)
                return self.report
            if plan.space_problem:
                self.report.outcome = "failed before stopping anything"
                self.report.exit_code = EXIT_FAILED
                self.report.message = plan.space_problem
                return self.report
            if opts.confirm is not None and not opts.confirm(plan):
                self.report.outcome = "not confirmed: nothing done"
                self.report.exit_code = EXIT_FAILED
                return self.report
            self._tell_cancel()
            if self._cancel_asked:
                self.report.outcome = "cancelled: nothing done"
                self.report.exit_code = EXIT_FAILED
                self.report.cancelled = True
                return self.report
            run_id = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
            self.report.run_id = run_id
            self.ledger.create(
                {
                    "run_id": run_id,
                    "db": str(self.db),
                    "profile": self.target.name,
                    "action": opts.action,
                    "original": asdict(self.fence.orig),
                    "pid": os.getpid(),
                }
            )
            self.emit("started", run_id=run_id, action=opts.action, pid=os.getpid())
            return self._body(plan, scanner, run_id)
        finally:
            scanner.close()
            if self.merge_source is not None:
                self.merge_source.cleanup()

    def _body(self, plan: Plan, scanner: HolderScanner, run_id: str) -> RunReport:
        opts = self.options
        fnc = self._fence()
        before: SourceIdentity | None = None
        if opts.action in SWAP_ACTIONS:
            before, done = self._prebuild(run_id)
            if done is not None:
                return done
        try:
            self._stop_if_cancelled()
            self._snapshot_before_stop(plan)
            self._stop_if_cancelled()
            self._quiesce(plan)
            if opts.action in SWAP_ACTIONS:
                self._step("fence", mode=oct(fnc.orig.mode))
                fnc.put_up()
                if not fnc.effective:
                    self.report.notes.append(
                        "the fence (mode 000) does not stop root's processes; the settle"
                        " scans alone kept them out"
                    )
            self._stop_if_cancelled()
            self._step("settle")
            self._settle(scanner)
            self._stop_if_cancelled()
            if opts.action == "checkpoint":
                self._commit()
                return self._checkpoint()
            self._step("verify-source")
            if opts.action != "restore" and (before is None or not self._unchanged(before)):
                self._step("catch-up")
                done = self._catch_up(scanner)
                if done is not None:
                    return done
            # Root's processes ignore the fence: a last look right before the swap.
            self._no_holders(scanner, "just before the swap")
            self._commit()
        except _Abort as abort:
            self.report.cancelled = abort.cancelled
            return self._rollback(abort.message, abort.code)
        except StatewardenError as exc:
            self.report.cancelled = isinstance(exc, Cancelled)
            return self._rollback(str(exc), EXIT_FAILED)
        except Exception as exc:  # noqa: BLE001 - rule 14: roll back, start again
            self._failed(self._current_step(), exc)
            return self._rollback(_what_failed(exc), EXIT_FAILED)
        assert self.new is not None
        qdir = quarantine_dir(self.state, self.target.name, run_id)
        try:
            self._let_go()
            sealed = self.sealed or seal(self.new)
            self._step(
                "swap",
                new=str(self.new),
                quarantine=str(qdir),
                new_ino=sealed.ino,
                new_file=sealed.to_json(),
            )
        except Exception as exc:  # noqa: BLE001 - rule 14: roll back, start again
            self._failed("swap", exc)
            return self._rollback(_what_failed(exc), EXIT_FAILED)
        self._swap_begun = True
        try:
            res = swap(
                self.db, self.new, qdir, fnc.orig, run_id, sealed=sealed, after=self._crash_point
            )
        except Exception as exc:  # noqa: BLE001 - undone, then rolled back (rule 14)
            return self._swap_failed(qdir, exc)
        self._swapped = True
        self._guarded("swapped", lambda: self._step("swapped", files=res.files))
        self.report.swap_s = round(res.swap_s, 4)
        self.report.quarantine = str(qdir)
        if res.copied:
            self.report.notes.append(
                "the state dir is on another filesystem: the original was copied into"
                " quarantine (longer downtime)"
            )
        return self._after_swap()

    # -- steps -------------------------------------------------------------------------

    def _prebuild(self, run_id: str) -> tuple[SourceIdentity | None, RunReport | None]:
        """Build the new file while Hermes runs: the source's identity it was built from
        (None: build after the stop), and a report when the run ends here."""
        try:
            private_dir(quarantine_root(self.state))  # refused now, not at the swap
        except (OSError, StatewardenError) as exc:
            return None, self._finish("failed before stopping anything", EXIT_FAILED, str(exc))
        self.new = new_file_path(self.db, run_id)
        self._step("prebuild", new=str(self.new))
        built_from = identity(self.db)
        self.report.source_identity = built_from.to_json()
        before: SourceIdentity | None = built_from
        try:
            done = self._build()
            if done is None:
                self.sealed = seal(self.new)
            self.report.path = "pre-built while Hermes ran"
        except DatabaseChanged as exc:
            # A writer busy enough that no copy is consistent: build after the stop.
            self._remove_new()
            before = None
            done = None
            self.report.notes.append(f"no pre-build while Hermes ran: {exc.message}")
        except Cancelled as exc:
            self._remove_new()
            self.report.cancelled = True
            return None, self._finish("cancelled: nothing was stopped", EXIT_FAILED, str(exc))
        except StatewardenError as exc:
            self._remove_new()
            code = EXIT_UNREADABLE if isinstance(exc, DatabaseUnreadable) else EXIT_FAILED
            return None, self._finish("failed before stopping anything", code, str(exc))
        return before, done

    def _build(self) -> RunReport | None:
        """Build the new file; a report when the run ends here (healthy, loss, failed)."""
        assert self.new is not None
        if self.options.action == "repair":
            built = build_new_file(
                self.db, self.new, self.progress, extra_sources=other_copies(self.db, self.state)
            )
            rep = built.report
            self.folded_sha256 = built.folded_sha256
            self.report.recover = rep.to_json()
            if rep.damage == "none":
                self._remove_new()
                return self._finish(
                    "healthy: nothing to repair",
                    EXIT_OK,
                    "the check found no damage; nothing was stopped",
                )
            return self._gate(rep)
        if self.options.action == "restore":
            assert self.options.restore_from is not None
            build_restored(self.options.restore_from, self.new, self.progress)
            return None
        if self.options.action == "merge":
            return self._merged(self.db, prebuild=True)
        mode = None
        if self.options.action.startswith("journal-mode="):
            mode = "wal" if self.options.action.endswith("wal") else "rollback"
        build_copy_as_is(self.db, self.new, mode, self.progress)
        return None

    def _prepare_merge(self) -> None:
        """The merge's old file, recovered into the run's folder and proven to be this
        database's earlier file, before anything is planned or stopped: a path that
        cannot be used (exit 2), a file that is not this database's (exit 5) or that
        cannot be read at all (exit 4) is one line, and nothing is done."""
        assert self.options.merge_from is not None
        self.merge_source = prepare_source(
            self.options.merge_from,
            self.db,
            home=self.target.home,
            state=self.state,
            folder=self.folder,
            progress=self.progress,
        )
        src = self.merge_source
        self.report.merge = {"old": str(src.path), "proof": src.proof}

    def _merged(self, current: Path, *, prebuild: bool) -> RunReport | None:
        """Merge the old file with ``current`` into the new file; a report when the run
        ends here (nothing to merge, or a file that failed verification)."""
        assert self.merge_source is not None
        assert self.new is not None
        src = self.merge_source
        merged, folded = build_merged(src.recovered, current, self.new, self.progress)
        if prebuild:
            self.folded_sha256 = folded
        merged.old = str(src.path)
        self.report.merge = {**merged.to_json(), "summary": merged.summary(), "proof": src.proof}
        if merged.nothing:
            self._remove_new()
            message = f"every session and message of {src.path} is in {self.db} already"
            if not prebuild:
                raise _Abort(message + "; nothing to swap", EXIT_OK)
            return self._finish("nothing to merge", EXIT_OK, message + "; nothing was stopped")
        if not merged.verified:
            self._remove_new()
            why = "the merged file failed verification: " + "; ".join(merged.problems)
            if not prebuild:
                raise _Abort(why, EXIT_FAILED)
            return self._finish("failed before stopping anything", EXIT_FAILED, why)
        return None

    def _gate(self, rep: Report) -> RunReport | None:
        if not rep.verified:
            self._remove_new()
            return self._finish(
                "failed before stopping anything",
                EXIT_FAILED,
                "the repaired file failed verification",
            )
        if rep.loss_detected and not (self.options.accept_loss or self.mc.accept_loss):
            self._remove_new()
            return self._finish(
                "stopped: the repair would lose rows",
                EXIT_MAINTENANCE_LOSS,
                "nothing was swapped; see the loss report, then rerun with --accept-loss",
            )
        return None

    def _snapshot_before_stop(self, plan: Plan) -> None:
        """A verified snapshot right before anything is stopped (``maintenance.snapshots``):
        taken online, so it costs no downtime. Not taking one never stops the run."""
        if not self.mc.snapshots or not (plan.units or plan.signals):
            return
        if (self.report.recover or {}).get("damage") not in (None, "none"):
            self.report.notes.append(
                "no snapshot before the stop: the pre-build's check found damage in the live"
                " file, and a snapshot must pass check (the original goes to quarantine)"
            )
            return
        self._step("snapshot")
        try:
            snap = take_snapshot(
                self.db,
                self.state,
                self.target.name,
                self.mc.snapshots_keep,
                self.mc.snapshots_max_age,
                progress=self.progress,
            )
        except (OSError, StatewardenError) as exc:
            self.report.notes.append(f"no snapshot before the stop: {exc}")
            return
        self.report.notes.append(f"snapshot before the stop: {snap.path}")

    def _quiesce(self, plan: Plan) -> None:
        for unit in plan.units:
            self._stop_if_cancelled()
            self._step("stop-unit", unit=unit)
            self._mark_down()
            self.stopped_units.append(unit)
            (res,) = stop_units([unit], self.address, self.mc.unit_timeout)
            if not res.ok:
                raise _Abort(f"could not stop {unit}: job {res.result}", EXIT_FAILED)
        # All at once: SIGTERM to each, one grace period, SIGKILL to those still there.
        targets = []
        for d in plan.signals:
            ticks = start_ticks_of(d.pid)
            self._step("signal", pid=d.pid, command=d.command)
            self._mark_down()
            targets.append((d.pid, ticks))
        ended = terminate_all(targets, self.mc.stop_grace)
        for d in plan.signals:
            self.signalled.append({"pid": d.pid, "command": d.command, "ended": ended[d.pid]})

    def _mark_down(self) -> None:
        if self._down_started is None:
            self._down_started = time.monotonic()

    def _settle(self, scanner: HolderScanner) -> None:
        def on_unit(unit: str) -> None:
            self.ledger.step("stop-unit", unit=unit)
            self._mark_down()
            if unit not in self.stopped_units:
                self.stopped_units.append(unit)

        def on_signal(d: Any) -> None:
            self.ledger.step("signal", pid=d.pid, command=d.command)
            self._mark_down()
            self.signalled.append(
                {
                    "pid": d.pid,
                    "command": d.command,
                    "ended": "signalled",
                    "origin": describe_origin(d),
                }
            )

        result = Settler(
            scanner=scanner,
            settle_s=self.mc.settle,
            timeout_s=self.mc.settle_timeout,
            respawn_limit=self.mc.respawn_limit,
            grace_s=self.mc.stop_grace,
            force=self.options.force,
            stop_interactive=self.mc.stop_interactive,
            on_signal=on_signal,
            on_unit=on_unit,
            unit_timeout_s=self.mc.unit_timeout,
            address=self.address,
            wait_for=frozenset({self._daemon}) if self._daemon is not None else frozenset(),
        ).run()
        if not result.ok:
            raise _Abort(result.reason, EXIT_FAILED)

    def _unchanged(self, before: SourceIdentity) -> bool:
        """Whether the source still has the content the new file was built from: the
        same identity, or (Hermes checkpoints on close) no WAL left and exactly the bytes
        of the folded copy the pre-build used."""
        after = identity(self.db)
        if before.same_content(after):
            self.report.notes.append("the source did not change after the pre-build")
            return True
        if self.folded_sha256 is None or not after.wal_empty:
            return False
        same = self._fence().sha256() == self.folded_sha256
        if same:
            self.report.notes.append(
                "the source only checkpointed its WAL after the pre-build: same content"
            )
        return same

    def _catch_up(self, scanner: HolderScanner) -> RunReport | None:
        assert self.new is not None
        self._remove_new()
        # A copy of the fenced bundle, read through the descriptor held since before the
        # fence (never by lowering it): nobody can open the original meanwhile. The copy
        # goes into a folder of ours next to the database, reached only through its
        # descriptor: the database's owner may rename folders there while root works.
        name = self._catch_up_name(self.report.run_id)
        dfd = os.open(self.db.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        cfd: int | None = None
        try:
            os.mkdir(name, 0o700, dir_fd=dfd)
            cfd = os.open(
                name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd
            )
            if os.fstat(cfd).st_uid != os.geteuid():
                raise _Abort(f"{self.db.parent / name}: not the folder this run made", EXIT_FAILED)
            source = Path(f"/proc/self/fd/{cfd}") / self.db.name
            self._fence().copy_out(source)
            for sfx in (WAL_SUFFIX, JOURNAL_SUFFIX):
                _copy_sidecar(dfd, sidecar(self.db, sfx).name, Path(f"{source}{sfx}"))
            self._crash_point("catch-up-copied")
            if self.options.action == "repair":
                rep = build_new_file(
                    source,
                    self.new,
                    self.progress,
                    hash_folded=False,
                    extra_sources=other_copies(self.db, self.state),
                ).report
                rep.source = str(self.db)
                self.report.recover = rep.to_json()
            elif self.options.action == "merge":
                rep = None
                self._merged(source, prebuild=False)  # a failure is an _Abort: rolled back
            else:
                rep = None
                mode = None
                if self.options.action.startswith("journal-mode="):
                    mode = "wal" if self.options.action.endswith("wal") else "rollback"
                build_copy_as_is(source, self.new, mode, self.progress)
            self.sealed = seal(self.new)
        except OSError as exc:
            raise _Abort(f"the catch-up copy failed: {exc.strerror or exc}", EXIT_FAILED) from None
        finally:
            if cfd is not None:
                os.close(cfd)
            shutil.rmtree(name, dir_fd=dfd, ignore_errors=True)
            os.close(dfd)
        self.report.path = (
            "recovered again offline (the source changed after the pre-build)"
            if self.report.path
            else "recovered offline (no consistent copy could be taken while Hermes ran)"
        )
        self._no_holders(scanner, "during the catch-up")
        if rep is not None and rep.damage == "none":
            raise _Abort(
                "the check found no damage once Hermes was stopped; nothing to swap", EXIT_OK
            )
        if rep is not None and (
            not rep.verified
            or (rep.loss_detected and not (self.options.accept_loss or self.mc.accept_loss))
        ):
            code = EXIT_FAILED if not rep.verified else EXIT_MAINTENANCE_LOSS
            raise _Abort(
                "the catch-up repair failed verification"
                if not rep.verified
                else "the catch-up repair would lose rows (see --accept-loss)",
                code,
            )
        return None

    def _no_holders(self, scanner: HolderScanner, when: str) -> None:
        """One more full scan: nobody but this process may hold the old file now (the
        daemon's short read-only reads are waited for, up to maintenance.settle_timeout)."""
        deadline = time.monotonic() + self.mc.settle_timeout
        while True:
            scan = complete_scan(scanner)
            if not scan.complete:
                raise _Abort(incomplete_reason(scan), EXIT_FAILED)
            others = [h for h in scan.holders if h.pid != os.getpid()]
            if not others or any(h.pid != self._daemon for h in others):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(POST_CHECK_GAP_S)
        if others:
            who = _named(others)
            raise _Abort(f"{who} opened the database {when}", EXIT_FAILED)

    def _checkpoint(self) -> RunReport:
        self._step("checkpoint")
        try:
            conn = apsw.Connection(str(self.db))
            try:
                conn.set_busy_timeout(1000)
                res = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                conn.close()
            self.report.notes.append(f"wal_checkpoint(TRUNCATE): {res}")
        except apsw.Error as exc:
            self.report.notes.append(f"checkpoint failed: {exc}")
            self._restart()
            return self._finish("checkpoint failed", EXIT_FAILED, str(exc))
        self._restart()
        return self._finish("checkpointed", EXIT_OK)

    def _after_swap(self) -> RunReport:
        """From the swap on, every step runs guarded: a failure is recorded and the
        units start again whatever happened (rule 14). The diverted transcripts are
        imported once Hermes runs again, as a normal writer (transcripts.py)."""
        self._guarded("swapped", self._diverted)
        if self.report.action == "journal-mode=delete":
            self._guarded("swapped", self._journal_mode_pin)
        failed = self._restart()
        self._guarded("post-check", self._post_check)
        self._guarded("import", self._import_diverted)
        self._guarded("retention", self._prune)
        code = EXIT_OK
        problems = []
        rec = self.report.recover or {}
        if rec.get("loss_detected"):
            code = EXIT_MAINTENANCE_LOSS
            problems.append("swapped with accepted loss (listed in the recover report)")
        if failed:
            code = EXIT_FAILED
            problems.append(f"swapped, but {', '.join(failed)} did not start again")
        if self.report.post_check is not None and not self.report.post_check.ok:
            code = EXIT_FAILED
            problems.append("the post-check failed: " + self.report.post_check.summary)
        if self.report.failures:
            code = EXIT_FAILED
            problems.extend(f"{f.step} failed: {f.error}" for f in self.report.failures)
        message = "; ".join(problems)
        done = {"repair": "repaired", "merge": "merged"}.get(self.report.action, "swapped")
        return self._finish(done, code, message)

    def _prune(self) -> None:
        removed = prune(
            self.state, self.target.name, self.mc.quarantine_keep, self.mc.quarantine_max_age
        )
        for p in removed:
            self.report.notes.append(f"quarantine retention removed {p}")

    def _journal_mode_pin(self) -> None:
        """After ``journal-mode=delete``: does Hermes' config.yaml keep it that way?"""
        path = self.target.home / "config.yaml"
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            data = None
        db = data.get("database") if isinstance(data, dict) else None
        mode = db.get("journal_mode") if isinstance(db, dict) else None
        if str(mode).lower() == "delete":
            self.report.notes.append(f"{path} pins database.journal_mode: delete")
        else:
            self.report.notes.append(
                f"{path} does not pin database.journal_mode: delete; a newer Hermes may"
                " switch the file back to WAL: add `database: {journal_mode: delete}` there"
            )

    def _diverted(self) -> None:
        folder = self.target.home / "sessions"
        if folder.is_dir():
            self.report.diverted = sorted(str(p) for p in folder.glob("*.jsonl"))

    def _import_diverted(self) -> None:
        """Once Hermes runs again (as one more writer, through SQLite): what Hermes
        diverted while the file was unusable goes into the repaired file
        (maintenance/transcripts.py), unless ``--no-import``."""
        if self.report.action not in ("repair", "restore") or not pending_sources(self.target.home):
            return
        if not self.options.import_transcripts:
            self.report.notes.append("diverted transcripts not imported (--no-import)")
            return
        try:
            owner = os.stat(self.db).st_uid
        except OSError as exc:
            self.report.notes.append(f"diverted transcripts not imported: {exc}")
            return
        if owner != os.geteuid():
            # A connection of ours would leave -wal / -shm owned by us for Hermes to trip on.
            self.report.notes.append(
                f"diverted transcripts not imported: {self.db} belongs to uid {owner}; run"
                " the maintenance as that user to import them"
            )
            return
        self._step("import")
        limits = ImportLimits(self.mc.import_time_limit, self.mc.import_max_file_size)
        result = import_diverted(self.db, self.target.home, limits)
        self.report.imported = {**result.to_json(), "summary": result.summary()}

    def _restart(self) -> list[str]:
        """Start again what the run stopped: the units it lists that did not come back.
        Never raises (rule 14); called once, from the rollback, the steps after the
        swap, or the last net around the run."""
        if self._restarted:
            return []
        self._restarted = True
        failed: list[str] = []
        units = list(reversed(self.stopped_units))
        if units:
            self._guarded("restart", lambda: self._step("restart", units=units))
            try:
                results = start_units(units, self.address, self.mc.unit_timeout)
            except Exception as exc:  # noqa: BLE001 - named; the units are listed as failed
                self._failed("restart", exc)
                return units
            if self._down_started is not None:
                self.report.downtime_s = round(time.monotonic() - self._down_started, 3)
            # A simple service's start job is done at fork; one whose program cannot run
            # fails just after. Look again a moment later.
            time.sleep(UNIT_START_CHECK_S)
            try:
                states = unit_states(units, self.address)
            except Exception as exc:  # noqa: BLE001 - started; only the look failed
                self._failed("restart", exc)
                states = {}
            for r in results:
                state = states.get(r.unit, "unknown")
                self.report.units_started.append(UnitStarted.of(r, state))
                if not r.ok or state != "active":
                    failed.append(r.unit)
        elif self._down_started is not None:
            self.report.downtime_s = round(time.monotonic() - self._down_started, 3)
        self.report.units_stopped = list(self.stopped_units)
        self.report.start_again = self._start_again()
        return failed

    def _start_again(self) -> list[StartAgain]:
        """The processes the run signalled, once per command: each either running again
        (its respawner started it: ``running_again`` names the new pid) or for the user to
        start again."""
        commands = list(dict.fromkeys(str(s["command"]) for s in self.signalled))
        if not commands:
            return []
        gone = {int(s["pid"]) for s in self.signalled}
        try:
            again = running_again(commands, gone)
        except OSError:
            again = {}
        out = []
        for command in commands:
            pids = [s["pid"] for s in self.signalled if s["command"] == command]
            out.append(StartAgain(pids[-1], command, again.get(command)))
        return out

    def _post_check(self) -> None:
        self._step("post-check")
        integrity: str | list[str]
        try:
            # Immutable when no sidecar exists: a plain read-only open would leave an
            # empty -wal and -shm behind (only a writer may delete them).
            conn = open_readonly(
                self.db, busy_timeout_ms=1000, immutable=wal_sidecars_absent(self.db)
            )
            try:
                rows = conn.execute(f"PRAGMA integrity_check({POST_CHECK_MAX_ERRORS})").fetchall()
            finally:
                conn.close()
            integrity = "ok" if rows == [("ok",)] else [str(r[0]) for r in rows]
        except (StatewardenError, apsw.Error) as exc:
            integrity = f"could not be checked: {exc}"
        scanner = HolderScanner(
            [self.db],
            exempt_comms=self.config.holders.exempt_comms,
            other_users=self.config.holders.other_users,
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
        summary = (
            f"integrity {integrity if integrity == 'ok' else 'FAILED'},"
            f" {len(scan.holders)} holder(s) on the new file, {len(stale)} holding an old inode"
        )
        holders = [h.pid for h in scan.holders]
        ok = integrity == "ok" and not stale
        self.report.post_check = PostCheck(integrity, stale, holders, ok, summary)

    def _remove_new(self) -> None:
        if self.new is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.new)

    def _swap_failed(self, qdir: Path, exc: Exception) -> RunReport:
        """A swap that could not write (a full disk, a quarantine folder that became a
        symlink) or failed any other way: while the original still has its name, what
        was moved goes back and the run rolls back. If that cannot be done, the units
        stay stopped (the original's log is in quarantine) and the error says why."""
        reason = f"the swap failed: {_what_failed(exc)}"
        self._failed("swap", exc)
        try:
            put_back(self.db, qdir, self._fence().orig)
        except Exception as again:  # noqa: BLE001 - named below, units kept stopped
            self._keep_stopped = f"the swap could not be undone: {_what_failed(again)}"
            raise StatewardenError(
                f"{self.db}: {reason}; it could not be undone: {_what_failed(again)};"
                " Hermes is kept stopped (its log is in quarantine)",
                hint="free space, then statewardenctl maintenance --resume",
            ) from None
        return self._rollback(reason, EXIT_FAILED)

    def _rollback(self, reason: str, code: int) -> RunReport:
        self._guarded("rollback", self._let_go)
        self._guarded("rollback", lambda: self._step("rollback", reason=reason))
        if self.fence is not None:
            self._guarded("rollback", self.fence.take_down)
        self._guarded("rollback", self._remove_new)
        failed = self._restart()
        # Nothing was swapped: the time the holders were stopped is not a downtime figure
        # of a repair (the report says they were stopped and started again).
        self.report.downtime_s = None
        msg = f"aborted and rolled back: {reason}"
        if failed:
            msg += f"; {', '.join(failed)} did not start again"
        if self.report.cancelled:
            return self._finish("cancelled and rolled back: the database is unchanged", code, msg)
        return self._finish("rolled back: the database is unchanged", code, msg)

    # -- resume ------------------------------------------------------------------------

    def _catch_up_name(self, run_id: str) -> str:
        return f"{CATCH_UP_PREFIX}{db_digest(self.db)}-{run_id}"

    def _remove_work_folders(self) -> list[str]:
        """Remove what runs of this database killed mid-step left next to it: the work
        folders of the pre-build and the catch-up (a whole copy of the database each).
        Called with the run lock held, so no run of this database is using them."""
        removed = [str(p) for p in remove_abandoned(self.db.parent)]
        removed += [str(p) for p in remove_sources(self.folder)]
        mine = f"{CATCH_UP_PREFIX}{db_digest(self.db)}-"
        try:
            dfd = os.open(self.db.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return removed
        try:
            for name in os.listdir(dfd):
                if name.startswith(WORK_PREFIX) and _unclaimed_work_folder(dfd, name):
                    removed.append(str(self.db.parent / name))
                    continue
                rest = name[len(CATCH_UP_PREFIX) :]
                # This database's, or an older version's (mkdtemp's 8 random characters).
                if not name.startswith(mine) and not (
                    name.startswith(CATCH_UP_PREFIX) and len(rest) == 8 and "-" not in rest
                ):
                    continue
                st = os.lstat(name, dir_fd=dfd)
                if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
                    shutil.rmtree(name, dir_fd=dfd, ignore_errors=True)
                    removed.append(str(self.db.parent / name))
        finally:
            os.close(dfd)
        return removed

    def resume(self) -> RunReport:
        """Finish or roll back the run the ledger records as unfinished."""
        self._private_folder()
        with run_lock(self.folder):
            record = read_ledger(self.ledger.path)
            for path in self._remove_work_folders():
                self.report.notes.append(f"removed the work folder of a killed run: {path}")
            if record is None or record.finished:
                self.report.outcome = "nothing to resume"
                return self.report
            self.ledger.reopen()
            with self._starting_again_on_error():
                return self._told(self._resume(record))

    def _resume(self, record: LedgerRecord) -> RunReport:
        self._resuming = True
        begin = record.begin
        self.report.run_id = record.run_id
        self.report.action = str(begin.get("action", self.report.action))
        self.fence = Fence(self.db, Original(**begin["original"]), up=record.has("fence"))
        for e in record.steps("stop-unit"):
            if e["unit"] not in self.stopped_units:
                self.stopped_units.append(e["unit"])
        self.signalled = [
            {"pid": e["pid"], "command": e["command"]} for e in record.steps("signal")
        ]
        prebuild = record.last("prebuild")
        swap_step = record.last("swap")
        if swap_step is None:
            if prebuild is not None:
                self.new = Path(prebuild["new"])
            return self._rollback("resumed after an interruption before the swap", EXIT_FAILED)
        self.new = Path(swap_step["new"])
        self._swap_begun = True  # finished below (rolled forward), never started half-way
        qdir = Path(swap_step["quarantine"])
        self.report.quarantine = str(qdir)
        scanner = HolderScanner(
            [self.db],
            exempt_comms=self.config.holders.exempt_comms,
            other_users=self.config.holders.other_users,
            watch_opens=False,
        )
        try:
            swapped = os.stat(self.db).st_ino == swap_step.get("new_ino")
            if not swapped:
                scan = complete_scan(scanner)
                if scan.holders or not scan.complete:
                    why = (
                        f"held by {_named(scan.holders)}"
                        if scan.holders
                        else incomplete_reason(scan)
                    )
                    raise StatewardenError(
                        f"{self.db}: cannot finish the interrupted swap: {why};"
                        " the original is still in place",
                        hint="stop its holders and run statewardenctl maintenance --resume",
                    )
        finally:
            scanner.close()
        if swap_step.get("new_file"):
            sealed = NewFile.from_json(swap_step["new_file"])
        elif swapped:
            sealed = NewFile(0, int(swap_step.get("new_ino") or 0), 0, "")  # not looked at
        else:
            sealed = seal(self.new)  # a ledger of an older version
        self._step(
            "swap",
            new=str(self.new),
            quarantine=str(qdir),
            resumed=True,
            new_ino=swap_step.get("new_ino"),
            new_file=sealed.to_json(),
        )
        res = swap(
            self.db,
            self.new,
            qdir,
            self.fence.orig,
            record.run_id,
            sealed=sealed,
            after=self._crash_point,
        )
        self._swapped = True
        self._guarded("swapped", lambda: self._step("swapped", files=res.files))
        self.report.notes.append("resumed after an interruption during the swap: rolled forward")
        return self._after_swap()


def _unclaimed_work_folder(dfd: int, name: str) -> bool:
    """Remove a work folder of ours that a run killed while it was being set up left
    without its lock (``recovery.bundle`` names the lock only once it holds it, and
    copies nothing before): empty, or with an unnamed lock nobody holds. True if removed.
    A folder with its lock is for ``remove_abandoned`` to judge."""
    try:
        st = os.lstat(name, dir_fd=dfd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return False
        os.lstat(f"{name}/{WORK_LOCK}", dir_fd=dfd)
        return False  # claimed: held by a live run, or judged by remove_abandoned
    except FileNotFoundError:
        pass
    except OSError:
        return False
    try:
        fd = os.open(
            f"{name}/{WORK_LOCK}.new", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd
        )
    except FileNotFoundError:
        try:
            os.rmdir(name, dir_fd=dfd)  # only if empty: nothing was put in it
        except OSError:
            return False
        return True
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False  # being set up right now
    try:
        shutil.rmtree(name, dir_fd=dfd, ignore_errors=True)
    finally:
        os.close(fd)
    return True


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


class _Abort(Exception):
    def __init__(self, message: str, code: int, *, cancelled: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.cancelled = cancelled


def unfinished(config: Config, db: Path) -> bool:
    """Whether ``db`` has a run ledger that did not finish (for the daemon's start-up)."""
    record = read_ledger(run_dir(state_dir(config), Path(os.path.abspath(db))) / "run.jsonl")
    return record is not None and not record.finished
