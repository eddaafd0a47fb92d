"""One maintenance run: the plan, then the steps of ``steps.py`` in order, with one guard
around them; ``--resume`` goes on over the same list from where the ledger says.

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

What maintenance stopped, it starts again (docs/safety.md, rule 14), and the one place
that holds it is :meth:`MaintenanceRun._restarting`, around the steps: before the swap a
failing step rolls back, after it a failing step is recorded (``failures``) and the
next one runs; whichever way the steps end (even by an error no one foresaw) the units
start again. The one exception is a swap that failed half-way and could not be undone
(the original's ``-wal`` is in quarantine): Hermes is not started on a file whose log
is elsewhere, and the error says so. With ``--all-profiles`` the runs of every profile
share one stop (``all_profiles.py``): each run's guard leaves the restart to it
(``restart_later``), and it starts the units once, in a ``finally``, for all of them.

Work folders next to the database (``work_folders.py``) are removed by the step that
made them; those of a run killed meanwhile by ``--resume`` or the next run of the same
database (under its lock, so no live run uses them).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from statewarden.atomic import private_dir
from statewarden.errors import (
    EXIT_FAILED,
    EXIT_MAINTENANCE_LOSS,
    EXIT_OK,
    EXIT_REFUSED,
    Cancelled,
    RunInProgress,
    StatewardenError,
    path_error,
)
from statewarden.maintenance import outcomes
from statewarden.maintenance.fence import Fence
from statewarden.maintenance.journal import PAST_THE_SWAP as PAST_THE_SWAP  # noqa: PLC0414 - its home for callers
from statewarden.maintenance.journal import Abort, what_failed
from statewarden.maintenance.ledger import LedgerRecord, read_ledger, run_lock
from statewarden.maintenance.new_file import other_copies as other_copies  # noqa: PLC0414 - its name for callers
from statewarden.maintenance.new_file import prepare_merge, preview_captures, remove_new
from statewarden.maintenance.plan import Plan, make_plan
from statewarden.maintenance.profiles import affected_profiles
from statewarden.maintenance.quiesce import annotate_units, complete_scan
from statewarden.maintenance.report import RunReport
from statewarden.maintenance.resume import take_up
from statewarden.maintenance.state import ACTIONS as ACTIONS  # noqa: PLC0414 - its name for callers
from statewarden.maintenance.state import Options as Options  # noqa: PLC0414 - its name for callers
from statewarden.maintenance.state import RunState
from statewarden.maintenance.steps import AFTER_SWAP, ONLINE, Step, steps_from
from statewarden.maintenance.stopping import restart_once
from statewarden.maintenance.swap import quarantine_dir, quarantine_root
from statewarden.maintenance.wording import folded_problems
from statewarden.maintenance.work_folders import remove_work_folders
from statewarden.recovery import check_database
from statewarden.recovery import exit_code_for as check_exit_code
from statewarden.sqlite import require_database
from statewarden.sqlite_header import not_a_database

# Actions whose job includes a file that does not read (check names it, repair recovers
# it, restore replaces it); every other action needs the live file to read.
READS_DAMAGE = ("check", "repair", "restore")


def looked_at(db: Path) -> None:
    """``db`` looked at as ``check`` looks at it first, by every action on it and by
    ``--resume``: a path that cannot be used as named (missing, a folder the user cannot
    search) is one line, exit 2; one that names no regular file (a folder, a FIFO, a
    socket, a device) is exit 4. A stat, not an open: a file a killed run left fenced
    (mode 000) is still looked at, and its run taken up or named."""
    try:
        mode = os.stat(db).st_mode
    except OSError as exc:
        raise path_error(exc.filename or db, exc) from None
    if not stat.S_ISREG(mode):
        raise not_a_database(db, mode)


REPAIR_FIRST = "repair it first: statewardenctl maintenance --action repair"


class MaintenanceRun(RunState):
    """A maintenance run on one target; :meth:`execute` or :meth:`resume`."""

    # -- the run -------------------------------------------------------------------------

    def _private_folder(self) -> None:
        private_dir(self.folder.parent, what="maintenance")
        private_dir(self.folder, what="maintenance")

    def _removed_work_folders(self) -> None:
        for path in remove_work_folders(self.db, self.folder):
            self.report.notes.append(f"removed the work folder of a killed run: {path}")

    def execute(self) -> RunReport:
        if self.options.action != "restore":  # (it may put back a file that is gone)
            looked_at(self.db)
        self._private_folder()
        with run_lock(self.folder):
            if not self.options.dry_run:
                self._removed_work_folders()
            try:
                return self._told(self._execute())
            finally:
                self._close()

    def _close(self) -> None:
        if self._scanner is not None:
            self._scanner.close()
        if self.merge_source is not None:
            self.merge_source.cleanup()

    def _told(self, report: RunReport) -> RunReport:
        """Leave the outcome for the daemon to tell through the alert sinks (before the
        lock is let go, so the daemon sees the outcome no later than the run's end)."""
        try:
            outcomes.record(self.state, report.to_json(), self.target.name, self._started_at)
        except (OSError, StatewardenError) as exc:
            report.notes.append(f"the outcome could not be left for the alerts: {exc}")
        return report

    def _execute(self) -> RunReport:
        ended = self._begin()
        return ended if ended is not None else self._walk("prebuild")

    def _begin(self) -> RunReport | None:
        """The run up to its first step: the plan, and (when it goes on) its ledger
        begun; a report when it ends there (a check, a dry run, refused, not
        confirmed)."""
        record = read_ledger(self.ledger.path)
        if record is not None and not record.finished:
            raise RunInProgress(
                f"{self.db}: an earlier maintenance run did not finish",
                hint="statewardenctl maintenance --resume finishes or rolls it back",
            )
        if self.options.action == "check":
            diag = check_database(self.db, self.db.parent, progress=self.progress)
            self.report.outcome = f"damage {diag.damage}"
            self.report.exit_code = check_exit_code(diag.damage)
            self.report.notes.extend(diag.findings())
            return self.report
        if self.options.action not in READS_DAMAGE:
            # The other actions carry the live file's rows over as SQLite reads them:
            # a file that does not read is one line, before anything is planned.
            require_database(self.db, hint=REPAIR_FIRST)
        self.fence = Fence.of(self.db)
        if self.options.action == "merge":
            prepare_merge(self)
        if self.options.action == "apply-captures" and self.options.dry_run:
            preview_captures(self)
        plan = self.plan = self._plan()
        self.report.plan = plan.to_json()
        self.journal.emit("plan", plan=self.report.plan, lines=plan.render())
        ended = self._nothing_done(plan)
        if ended is not None:
            return ended
        run_id = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
        self.report.run_id = run_id
        self.quarantine = quarantine_dir(self.state, self.target.name, run_id)
        self.ledger.create(
            {
                "run_id": run_id,
                "db": str(self.db),
                "profile": self.target.name,
                "action": self.options.action,
                "original": asdict(self.fence.orig),
                "pid": os.getpid(),
            }
        )
        self.journal.emit("started", run_id=run_id, action=self.options.action, pid=os.getpid())
        return None

    def _nothing_done(self, plan: Plan) -> RunReport | None:
        """The report of a run that ends at its plan: a dry run, refused, no space, not
        confirmed or cancelled; None when it goes on."""
        opts, rep = self.options, self.report
        if opts.dry_run:
            rep.outcome = "dry run: nothing done"
            rep.exit_code = EXIT_REFUSED if plan.refusals else EXIT_OK
            if plan.space_problem and not plan.refusals:
                rep.exit_code = EXIT_FAILED
        elif plan.refusals:
            rep.outcome, rep.exit_code = "refused: nothing done", EXIT_REFUSED
            rep.message = "; ".join(plan.refusals)
        elif plan.space_problem:
            rep.outcome, rep.exit_code = "failed before stopping anything", EXIT_FAILED
            rep.message = plan.space_problem
        elif opts.confirm is not None and not opts.confirm(plan):
            rep.outcome, rep.exit_code = "not confirmed: nothing done", EXIT_FAILED
        else:
            self.journal.tell_cancel()
            if not self.journal.cancel_asked:
                return None
            rep.outcome, rep.exit_code = "cancelled: nothing done", EXIT_FAILED
            rep.cancelled = True
        return rep

    def _plan(self) -> Plan:
        scan = complete_scan(self.scanner())
        scan.problems = folded_problems(scan)  # the plan's refusals: one line, not thousands
        if self.daemon is not None and any(h.pid == self.daemon for h in scan.holders):
            # Its reads are short and read-only: waited for (settle), never stopped.
            scan.holders = [h for h in scan.holders if h.pid != self.daemon]
            self.report.notes.append(
                f"the statewarden daemon (pid {self.daemon}) was reading the database;"
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

    # -- the steps, and the one guard around them -------------------------------------

    def _walk(self, first: str | None, record: LedgerRecord | None = None) -> RunReport:
        """The steps from ``first`` on, in order (None: none, the run rolls back), then
        the run's outcome. A resume takes up the run its ledger ``record`` holds first,
        inside the guard, and goes on from the step it names."""
        with self._restarting():
            if record is not None:
                first = take_up(self, record)
            if first is None:
                self._roll_back("resumed after an interruption before the swap", EXIT_FAILED)
            for step in steps_from(first) if first is not None else ():
                if not step.applies(self):
                    continue
                if step.stage == ONLINE:
                    done = step.work(self)
                    if done is not None:
                        return done  # ended with nothing stopped
                elif step.stage == AFTER_SWAP:
                    self.journal.guarded(step.name, functools.partial(step.work, self))
                elif not self._until_swap(step):
                    break
        return self._conclude()

    def _until_swap(self, step: Step) -> bool:
        """One step before the swap; False when it failed and the run rolled back."""
        try:
            self.journal.stop_if_cancelled()
            step.work(self)
            return True
        except (Exception, Abort) as exc:
            if self.swap_begun:
                raise  # half-way: never rolled back here (--resume rolls it forward)
            if isinstance(exc, Abort):
                reason, code, cancelled = exc.message, exc.code, exc.cancelled
            elif isinstance(exc, StatewardenError):
                reason, code, cancelled = str(exc), EXIT_FAILED, isinstance(exc, Cancelled)
            else:
                self.journal.failed(self.journal.current_step(), exc)
                reason, code, cancelled = what_failed(exc), EXIT_FAILED, False
            self.report.cancelled = cancelled
            self._roll_back(reason, code)
            return False

    @contextlib.contextmanager
    def _restarting(self) -> Iterator[None]:
        """Rule 14, in one place: however the steps end (done, rolled back, or by an
        error no step caught), what the run stopped is started again; an error then
        goes on to the caller, the run left for --resume. The one exception: a swap
        interrupted half-way keeps Hermes stopped (--resume rolls it forward)."""
        try:
            yield
        except BaseException as exc:
            if self.swap_begun and not self.swapped and self.keep_stopped is None:
                # Never start Hermes on a half-swapped file: --resume rolls it forward.
                self.keep_stopped = "the swap was interrupted half-way"
            if self.owes_a_restart() and self.keep_stopped is None:
                self.journal.failed("run", exc)
                if not self.swapped and self.fence is not None:
                    self.journal.guarded("rollback", self.fence.take_down)
                restart_once(self)
                if isinstance(exc, Exception) and not isinstance(exc, StatewardenError):
                    started = ", ".join(self.stopped_units) or "nothing"
                    raise StatewardenError(
                        f"{self.db}: maintenance failed: {what_failed(exc)}; started"
                        f" again: {started}",
                        hint="statewardenctl maintenance --resume finishes the run",
                    ) from exc
            raise
        if self.owes_a_restart():
            restart_once(self)

    def _roll_back(self, reason: str, code: int) -> None:
        """Undo what the run did before the swap (the restart follows, in the guard)."""
        self.journal.guarded("rollback", self.let_go)
        self.journal.guarded("rollback", lambda: self.journal.step("rollback", reason=reason))
        if self.fence is not None:
            self.journal.guarded("rollback", self.fence.take_down)
        self.journal.guarded("rollback", lambda: remove_new(self))
        self.rolled_back = (reason, code)

    def _conclude(self) -> RunReport:
        """The outcome of a run whose steps are done (the units started again)."""
        if self.rolled_back is not None:
            reason, code = self.rolled_back
            # Nothing was swapped: the time the holders were stopped is not a downtime
            # figure of a repair (the report says they were stopped and started again).
            self.report.downtime_s = None
            msg = f"aborted and rolled back: {reason}"
            if self.not_started:
                msg += f"; {', '.join(self.not_started)} did not start again"
            if self.report.cancelled:
                return self.finish(
                    "cancelled and rolled back: the database is unchanged", code, msg
                )
            return self.finish("rolled back: the database is unchanged", code, msg)
        if self.report.action == "checkpoint":
            if self.checkpoint_failed is not None:
                return self.finish("checkpoint failed", EXIT_FAILED, self.checkpoint_failed)
            return self.finish("checkpointed", EXIT_OK)
        return self._swap_outcome()

    def _swap_outcome(self) -> RunReport:
        code = EXIT_OK
        problems = []
        if (self.report.recover or {}).get("loss_detected"):
            code = EXIT_MAINTENANCE_LOSS
            problems.append("swapped with accepted loss (listed in the recover report)")
        if self.not_started:
            code = EXIT_FAILED
            problems.append(f"swapped, but {', '.join(self.not_started)} did not start again")
        post = self.report.post_check
        if post is not None and not post.ok:
            code = EXIT_FAILED
            problems.append("the post-check failed: " + post.summary)
        if self.report.failures:
            code = EXIT_FAILED
            problems.extend(f"{f.step} failed: {f.error}" for f in self.report.failures)
        done = {"repair": "repaired", "merge": "merged", "apply-captures": "applied"}.get(
            self.report.action, "swapped"
        )
        return self.finish(done, code, "; ".join(problems))

    # -- resume ------------------------------------------------------------------------

    def resume(self) -> RunReport:
        """Finish or roll back the run the ledger records as unfinished: the same steps,
        from the one the ledger says (``resume.resume_point``)."""
        looked_at(self.db)
        self._private_folder()
        with run_lock(self.folder):
            record = read_ledger(self.ledger.path)
            self._removed_work_folders()
            if record is None or record.finished:
                self.report.outcome = "nothing to resume"
                return self.report
            self.ledger.reopen()
            try:
                return self._told(self._resume(record))
            finally:
                self._close()

    def _resume(self, record: LedgerRecord) -> RunReport:
        """The run's state as its ledger has it, then the steps from where it was (no
        restart in between: a swap begun is rolled forward before Hermes starts)."""
        self.journal.resuming = True
        return self._walk(None, record)
