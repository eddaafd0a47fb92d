"""The daemon's own health as incidents: state it cannot write, a journal it cannot read.

- **State writes.** The incident book, the timeline, the log offsets and the journal
  cursors keep working in memory when a write fails (a full disk, no descriptors
  left) and keep the failure in ``write_error``. :meth:`OwnHealth.check` retries the
  waiting writes and turns any failure into one ``state_unwritable`` incident (its
  announcement comes from memory, so the user hears of it and of every other incident
  meanwhile); it clears when every write works again.
- **The journal.** A follower whose journalctl may not read the journal (volatile
  storage, not in the ``systemd-journal`` group) is a ``watcher_failed`` incident per
  database that names the remedy; it clears when the journal can be followed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from statewarden.daemon.databases import WatchedDatabases
from statewarden.errors import StateUnwritable
from statewarden.incidents import Found, IncidentBook, Signal, Timeline
from statewarden.watch import JOURNAL_REMEDY


class OwnHealth:
    def __init__(
        self,
        state_dir: Path,
        book: IncidentBook,
        timeline: Timeline,
        databases: WatchedDatabases,
        on_found: Callable[[Found], None],
    ) -> None:
        self.state_dir = state_dir
        self.book = book
        self.timeline = timeline
        self.databases = databases
        self.on_found = on_found
        self._unwritable = False
        self._journal_problems: dict[str, str] = {}

    def check(self) -> None:
        """Once per loop: flush what waits, then raise or clear the incidents."""
        self._check_journals()
        self.book.flush()
        for follower, _task in self.databases.journals.values():
            if follower.write_error is not None:
                follower.save_cursor()
        self.timeline.flush()
        self._check_writes()

    def _write_errors(self) -> list[StateUnwritable]:
        candidates = [
            self.book.write_error,
            self.timeline.write_error,
            *(m.logs.write_error for m in self.databases.monitors.values()),
            *(f.write_error for f, _t in self.databases.journals.values()),
        ]
        return [e for e in candidates if e is not None]

    def _check_writes(self) -> None:
        errors = self._write_errors()
        if errors and not self._unwritable:
            self._unwritable = True
            self.on_found(
                Signal(
                    "state_unwritable",
                    "*",
                    f"statewarden cannot write its state in {self.state_dir} ({errors[0]}); "
                    "detection and alerts go on from memory and writes are retried: free "
                    "space (or descriptors) there",
                    key=str(self.state_dir),
                    source="state",
                    evidence=tuple(str(e) for e in errors),
                )
            )
        elif not errors and self._unwritable:
            self._unwritable = False
            self.on_found(
                Signal(
                    "state_unwritable",
                    "*",
                    "state can be written again",
                    key=str(self.state_dir),
                    source="state",
                    clears=True,
                )
            )

    def _check_journals(self) -> None:
        for key in set(self._journal_problems) - set(self.databases.journals):
            del self._journal_problems[key]
        for key, (follower, _task) in self.databases.journals.items():
            if follower.problem == self._journal_problems.get(key, ""):
                continue
            self._journal_problems[key] = follower.problem
            units = ", ".join(follower.units)
            if follower.problem:
                summary = (
                    f"the journal of {units} cannot be read ({follower.problem}), so the "
                    f"JSONL-fallback line Hermes prints only there cannot be seen; {JOURNAL_REMEDY}"
                )
                self.on_found(
                    Signal(
                        "watcher_failed",
                        key,
                        summary,
                        key="journal",
                        source="journal",
                        evidence=(follower.problem,),
                    )
                )
            else:
                self.on_found(
                    Signal(
                        "watcher_failed",
                        key,
                        f"the journal of {units} can be read again",
                        key="journal",
                        clears=True,
                    )
                )
