"""``maintenance --all-profiles``: every profile's database repaired in one stop.

One Hermes gateway serves every profile (``profiles.py``), so a repair of each profile
on its own would stop and start it once per profile. Here each profile's database has a
run of its own (its own ledger, fence, new file and quarantine: ``run.py``), and the
runs share the stop:

1. each run plans and pre-builds while Hermes runs (``prebuild``); a healthy database
   ends there, checked and left as is, and so does one that cannot be repaired
   (refused, unreadable, a loss not accepted): nothing stopped for it. The runs left
   take their snapshots (``maintenance.snapshots``) before anything is stopped;
2. the runs left go through their steps up to the swap, one after the other: the
   first stops the units (the others find them stopped, and record them too, so the
   ledger of each says what to start again), each fences, settles, catches up and
   swaps its own database. A run whose step fails rolls back its own database only
   (fence down, new file removed: untouched) and the next run goes on;
3. the units are started again once, for all of them (``restart_later``: no run
   starts them on its own), whatever happened in 2 (rule 14). The one exception is
   rule 14's: a swap that failed half-way and could not be undone keeps Hermes
   stopped, as it would for one profile, since the gateway would open that database;
4. each swapped run then checks its new file, imports diverted transcripts and prunes
   its quarantine.

The outcome: one report per profile, and the exit code of the worst (0 when every
profile ended 0: repaired or healthy). A ``kill -9`` leaves each profile's ledger as its
own run would: ``--all-profiles --resume`` takes up every unfinished run the same way
(each rolled forward from the swap or back before it, then one restart).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statewarden.errors import EXIT_FAILED, EXIT_OK, StatewardenError
from statewarden.maintenance.journal import what_failed
from statewarden.maintenance.ledger import LedgerRecord, read_ledger, run_lock
from statewarden.maintenance.new_file import prebuild
from statewarden.maintenance.report import RunReport
from statewarden.maintenance.resume import take_up
from statewarden.maintenance.steps import AFTER_SWAP, NAMES, steps_from
from statewarden.maintenance.stopping import restart_once, start_again

if TYPE_CHECKING:
    from statewarden.maintenance.run import MaintenanceRun

RESTART = "restart"


@dataclass
class AllProfilesReport:
    """Each profile's run report, and the outcome of them all."""

    reports: list[RunReport] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return max((r.exit_code for r in self.reports), default=EXIT_OK)

    @property
    def outcome(self) -> str:
        bad = [p for p, r in zip(self.profiles, self.reports, strict=True) if r.exit_code]
        if not bad:
            return "every profile done"
        if len(bad) == len(self.reports):
            return "no profile done: " + ", ".join(bad)
        return "partial: not done for " + ", ".join(bad)

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "notes": list(self.notes),
            "profiles": [
                {"profile": p, **r.to_json()}
                for p, r in zip(self.profiles, self.reports, strict=True)
            ],
        }

    def render(self) -> list[str]:
        lines = [f"maintenance of every profile: {self.outcome}"]
        lines += [f"  note: {n}" for n in self.notes]
        for p, r in zip(self.profiles, self.reports, strict=True):
            lines.append(f"profile {p}:")
            lines += [f"  {line}" for line in r.render()]
        return lines


@contextlib.contextmanager
def _locked(runs: list[MaintenanceRun]) -> Iterator[None]:
    """Every run's lock, held for the whole of it (one run at a time per database)."""
    with contextlib.ExitStack() as stack:
        for run in runs:
            run._private_folder()
            stack.enter_context(run_lock(run.folder))
        yield


def execute_all(runs: list[MaintenanceRun]) -> AllProfilesReport:
    """Every profile's run (``runs``, one per database), in one stop."""
    with _locked(runs):
        ended: dict[int, RunReport] = {}
        going: list[MaintenanceRun] = []
        for i, run in enumerate(runs):
            if not run.db.exists():  # a profile Hermes has not written to yet
                run.report.outcome = "no state.db: nothing to do"
                ended[i] = run.report
                continue
            if not run.options.dry_run:
                run._removed_work_folders()
            try:
                done = run._begin()
                if done is None:
                    done = prebuild(run)  # the ledger is begun: it ends there, or goes on
            except (OSError, StatewardenError) as exc:
                done = _not_begun(run, exc)
            if done is not None:
                ended[i] = done
            else:
                going.append(run)
        for run in going:
            # Each run's snapshot before the first stop, while Hermes still runs.
            (snapshot,) = steps_from("snapshot")[:1]
            if snapshot.applies(run):
                snapshot.work(run)  # never fails the run (a note when none is taken)
        together = _together(going, {id(r): ("stop", None) for r in going})
        return _outcome(runs, ended, together)


def resume_all(runs: list[MaintenanceRun]) -> AllProfilesReport:
    """Every profile's unfinished run taken up from its ledger, then one restart."""
    with _locked(runs):
        ended: dict[int, RunReport] = {}
        going: list[MaintenanceRun] = []
        starts: dict[int, tuple[str | None, LedgerRecord | None]] = {}
        for i, run in enumerate(runs):
            record = read_ledger(run.ledger.path)
            run._removed_work_folders()
            if record is None or record.finished:
                run.report.outcome = "nothing to resume"
                ended[i] = run.report
                continue
            run.ledger.reopen()
            run.journal.resuming = True
            going.append(run)
            starts[id(run)] = (None, record)
        together = _together(going, starts)
        return _outcome(runs, ended, together)


def _outcome(
    runs: list[MaintenanceRun], ended: dict[int, RunReport], together: dict[int, RunReport]
) -> AllProfilesReport:
    out = AllProfilesReport()
    for i, run in enumerate(runs):
        report = ended.get(i) or together[id(run)]
        out.profiles.append(run.target.name)
        out.reports.append(run._told(report))
        run._close()
    return out


def _together(
    runs: list[MaintenanceRun], starts: dict[int, tuple[str | None, LedgerRecord | None]]
) -> dict[int, RunReport]:
    """The runs' steps up to the restart one after the other, one restart for all, then
    each run's steps after it; each run's report by ``id``."""
    later: dict[int, str | None] = {}
    errors: dict[int, BaseException] = {}
    for run in runs:
        run.restart_later = True
    try:
        for run in runs:
            first, record = starts[id(run)]
            try:
                later[id(run)] = _until_restart(run, first, record)
            except Exception as exc:  # noqa: BLE001 - this profile's failure, named
                errors[id(run)] = exc
    finally:
        for run in runs:
            run.restart_later = False
        _restart_all(runs)
    out = {}
    for run in runs:
        if id(run) in errors:
            out[id(run)] = _failed(run, errors[id(run)])
            continue
        out[id(run)] = _after_restart(run, later[id(run)])
    return out


def _until_restart(
    run: MaintenanceRun, first: str | None, record: LedgerRecord | None
) -> str | None:
    """The run's steps from ``first`` (a resume: from where its ledger says) up to the
    restart, in its guard; the step it goes on from after the restart (None: none)."""
    with run._restarting():
        if record is not None:
            first = take_up(run, record)
            if first is None:
                run._roll_back("resumed after an interruption before the swap", EXIT_FAILED)
        if first is None:
            return None
        if NAMES.index(first) > NAMES.index(RESTART):
            return first  # it was past the restart: it goes on from there
        for step in steps_from(first):
            if step.name == RESTART:
                return RESTART
            if not step.applies(run):
                continue
            if step.stage == AFTER_SWAP:
                run.journal.guarded(step.name, functools.partial(step.work, run))
            elif not run._until_swap(step):
                return None
    return None


def _restart_all(runs: list[MaintenanceRun]) -> None:
    """What the runs stopped, started once: the units of all of them by the first run
    that stopped something (each other run's ledger says the restart began too, and its
    report shows the units it had stopped). Not when a run keeps Hermes stopped (a swap
    half done): the gateway would open that database."""
    owing = [r for r in runs if r.owes_a_restart()]
    if not owing:
        return
    kept = [r for r in runs if r.keep_stopped is not None]
    if kept:
        why = "; ".join(f"{r.target.name}: {r.keep_stopped}" for r in kept)
        for r in owing:
            r.restart_later = True  # nor at the end of its own steps
            r.report.notes.append(f"Hermes is kept stopped for every profile: {why}")
        return
    lead = owing[0]
    for r in owing[1:]:
        for unit in r.stopped_units:
            if unit not in lead.stopped_units:
                lead.stopped_units.append(unit)
    restart_once(lead)
    for r in owing[1:]:
        units = list(reversed(r.stopped_units))
        r.journal.guarded(RESTART, functools.partial(r.journal.step, RESTART, units=units))
        r.restarted = True
        r.not_started = [u for u in lead.not_started if u in r.stopped_units]
        r.report.units_started = [u for u in lead.report.units_started if u.unit in units]
        r.report.units_stopped = list(r.stopped_units)
        r.report.start_again = start_again(r.signalled, r.db)
        r.note_downtime()


def _after_restart(run: MaintenanceRun, first: str | None) -> RunReport:
    """The run's steps after the restart (the post-check, the import, retention), then
    its outcome."""
    with run._restarting():
        if first is not None:
            for step in steps_from(first):
                if step.name == RESTART or not step.applies(run):
                    continue
                run.journal.guarded(step.name, functools.partial(step.work, run))
    return run._conclude()


def _not_begun(run: MaintenanceRun, exc: BaseException) -> RunReport:
    """The report of a run that could not begin (an earlier run of this database did not
    finish, its holders could not be scanned): nothing done for this profile."""
    run.report.outcome = "failed before stopping anything"
    run.report.exit_code = EXIT_FAILED
    hint = getattr(exc, "hint", None)
    run.report.message = what_failed(exc) + (f" ({hint})" if hint else "")
    return run.report


def _failed(run: MaintenanceRun, exc: BaseException) -> RunReport:
    """The report of a run whose steps ended in an error no step caught (its ledger is
    left for --resume)."""
    run.report.outcome = "failed"
    run.report.exit_code = EXIT_FAILED
    run.report.message = what_failed(exc)
    return run.report
