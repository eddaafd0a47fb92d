"""After a restart, open state-kind incidents are evaluated afresh.

A state condition (a stale holder, an unsafe mount, a failing watcher) is known only
to the watcher that saw it, in memory: after a restart, an incident whose condition
cleared while the daemon was down would stay open for ever, as no watcher remembers to
clear it. So the incidents of state kinds open at start-up (not those raised from a
log line, which resolve after their quiet period) wait here until a fresh evaluation
either finds them again (a signal with their fingerprint) or resolves them:

- ``HOLDER_KINDS`` once a holder scan has run;
- ``START_KINDS`` once start-up is done (watchers polled, mounts checked, first scan);
- ``wal_growth`` and ``crash_loop`` once their window has passed since the start.

Which is which is each kind's ``after_restart`` in ``incidents/kinds.py``; the two sets
here are views of that table.
"""

from __future__ import annotations

from collections.abc import Callable

from statewarden.incidents.book import IncidentBook, Update, from_logs
from statewarden.incidents.signals import Found, Signal
from statewarden.kinds import KINDS, is_state_kind

HOLDER_KINDS = frozenset(n for n, k in KINDS.items() if k.after_restart == "holder_scan")
START_KINDS = frozenset(n for n, k in KINDS.items() if k.after_restart == "start_up")
RESTART_RESOLUTION = "no longer the case (evaluated afresh after a restart)"


class RestartCheck:
    def __init__(self, book: IncidentBook, on_update: Callable[[Update], None]) -> None:
        self.book = book
        self.on_update = on_update
        # fingerprint -> (kind, incident id), until found again or resolved.
        self.pending: dict[str, tuple[str, int]] = {
            i.fingerprint: (i.kind, i.id)
            for i in book.open_incidents()
            if is_state_kind(i.kind) and not from_logs(i)
        }

    def seen(self, found: Found) -> None:
        """A signal that finds the condition again keeps its incident open."""
        if self.pending and isinstance(found, Signal) and not found.clears:
            self.pending.pop(found.fingerprint, None)

    def settle(self, kinds: frozenset[str]) -> None:
        """Resolve the waiting incidents of ``kinds``: the evaluation did not find them."""
        for fp, (kind, inc_id) in list(self.pending.items()):
            if kind in kinds:
                del self.pending[fp]
                update = self.book.resolve(inc_id, RESTART_RESOLUTION)
                if update is not None:
                    self.on_update(update)
