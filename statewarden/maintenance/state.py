"""The state of one maintenance run, shared by its steps: :class:`RunState` (what the
steps read and write, and the small things they share: the holder scanner, the fence,
the downtime clock, the end of the run), and the run's :class:`Options`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statewarden.config import Config, state_dir
from statewarden.errors import Cancelled, UsageError
from statewarden.holders import HolderScanner
from statewarden.lock import daemon_pid
from statewarden.maintenance.fence import Fence
from statewarden.maintenance.journal import CANCELLED, EmitFn, Journal
from statewarden.maintenance.ledger import Ledger, run_dir
from statewarden.maintenance.merge import Source
from statewarden.maintenance.plan import Plan
from statewarden.maintenance.prebuild import SourceIdentity
from statewarden.maintenance.report import RunReport
from statewarden.maintenance.swap import NewFile
from statewarden.progress import ProgressFn
from statewarden.targets import Target

ACTIONS = ("repair", "check", "journal-mode=delete", "journal-mode=wal", "checkpoint", "vacuum")


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


class RunState:
    """What the steps of a run read and write (``steps.py``): the target and its
    settings, the plan, what was stopped, the fence, the new file, how far the swap went,
    the report and the journal. :class:`run.MaintenanceRun` goes through the steps."""

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
        if self.options.action not in (*ACTIONS, "restore", "merge", "apply-captures"):
            raise UsageError(
                f"unknown action {self.options.action!r} (one of: {', '.join(ACTIONS)})"
            )
        self.address = address
        self.state = state_dir(config)
        self.folder = run_dir(self.state, self.db)
        self.ledger = Ledger(self.folder)
        self.report: RunReport = RunReport(db=str(self.db), action=self.options.action)
        self.journal = Journal(self.db, self.ledger, self.report, emit)
        self.plan: Plan | None = None
        self.stopped_units: list[str] = []
        self.signalled: list[dict[str, Any]] = []
        self.fence: Fence | None = None  # from the plan on: the original and its fence
        self.new: Path | None = None
        self.built_from: SourceIdentity | None = None  # None: built after the stop
        self.changed: bool = True  # the source changed since the pre-build: catch up
        self.folded_sha256: str | None = None
        self.sealed: NewFile | None = None  # the new file as built, proven at the swap
        self.merge_source: Source | None = None  # the merge's old file, recovered and proven
        # apply-captures: the captures proven of this database, moved to quarantine after
        # the swap (from the build, or the swap's ledger line on a resume)
        self.captures: list[str] = []
        self.quarantine = Path()  # where the swap puts the original
        self.swap_files: Any = None  # what the swap moved (its ledger line)
        self.resumed_ino: int | None = None  # the new file's inode, as the ledger has it
        self.resumed_original: dict[str, list[int]] | None = None  # swap.original_facts
        self.already_swapped = False  # a resume found the new file in place
        self.checkpoint_failed: str | None = None
        self.swap_begun = False  # the swap has begun moving files (or a resume found it so)
        self.swapped = False  # ... and is complete: the new file has the name
        self.keep_stopped: str | None = None  # why not (a swap that could not be undone)
        self.rolled_back: tuple[str, int] | None = None  # why, and the exit code
        self.not_started: list[str] = []  # units that did not start again
        self.daemon = daemon_pid(self.state)  # never stopped: waited for
        self._scanner: HolderScanner | None = None
        self.restarted = False  # what was stopped has been started again
        # --all-profiles: the units are started again once, for every profile's run,
        # by all_profiles.py (never left stopped: it restarts them whatever happens)
        self.restart_later = False
        self._down_started: float | None = None
        self._started_at = time.time()
        user_progress = progress

        def checked_progress(phase: str, done: int, total: int) -> None:
            self.journal.tell_cancel()
            if self.journal.cancel_asked and not self.journal.committed:
                raise Cancelled(CANCELLED)
            if user_progress is not None:
                user_progress(phase, done, total)

        self.progress: ProgressFn | None = checked_progress

    def cancel(self) -> tuple[bool, str]:
        """Ask the run to stop (safe to call from a signal handler: flags only). Before the
        swap it rolls back at its next step; from the swap on it is refused, and the run
        finishes. Returns (accepted, why); the run also emits a ``cancel`` event."""
        return self.journal.cancel()

    # -- what the steps share ------------------------------------------------------------

    def scanner(self) -> HolderScanner:
        """The run's holder scanner (one for all its scans, closed at the end)."""
        if self._scanner is None:
            self._scanner = HolderScanner(
                [self.db],
                exempt_comms=self.config.holders.exempt_comms,
                other_users=self.config.holders.other_users,
                watch_opens=not self.journal.resuming,
            )
        return self._scanner

    def the_fence(self) -> Fence:
        """The run's fence (there is one from the plan on, or from the ledger on a resume)."""
        assert self.fence is not None
        return self.fence

    def let_go(self) -> None:
        if self.fence is not None:
            self.fence.let_go()

    def accepts_loss(self) -> bool:
        return self.options.accept_loss or self.mc.accept_loss

    def mark_down(self) -> None:
        if self._down_started is None:
            self._down_started = time.monotonic()

    def note_downtime(self) -> None:
        if self._down_started is not None:
            self.report.downtime_s = round(time.monotonic() - self._down_started, 3)

    def owes_a_restart(self) -> bool:
        return bool(self.stopped_units or self.signalled) and not self.restarted

    def finish(self, outcome: str, code: int, message: str = "") -> RunReport:
        self.let_go()
        return self.journal.finish(outcome, code, message)
