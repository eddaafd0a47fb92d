"""Maintenance: stop every holder, repair, swap, restart.

``plan`` decides how each holder is stopped, ``prebuild`` makes the new file while
Hermes runs, ``quiesce`` stops holders and waits for them to settle, ``fence`` keeps
the old file from being opened again, ``swap`` puts the new file in place and the
original in quarantine, ``ledger`` records each step before it starts. ``steps`` is
the list of a run's steps (their work in ``new_file``, ``stopping``, ``catch_up`` and
``after_swap``), ``run`` goes through them with one guard around them (and its
roll-back; ``resume`` takes up a run from its ledger), ``state`` is what they share,
``journal`` what a run tells as it goes, ``report`` what it did. ``windows`` and
``auto`` are the daemon's side. ``all_profiles`` drives every profile's run through
one stop (``--all-profiles``); ``apply_captures`` builds the new file of
``--apply-captures``.
"""

from typing import TYPE_CHECKING

from statewarden.public import public_face

# The names other parts use, and the module each lives in ("": the submodule itself).
HOMES = {
    "outcomes": "",
    "AutoMaintenance": "auto",
    "execute_all": "all_profiles",
    "resume_all": "all_profiles",
    "in_progress": "ledger",
    "lock_holder": "ledger",
    "run_dir": "ledger",
    "Plan": "plan",
    "ACTIONS": "run",
    "MaintenanceRun": "run",
    "Options": "run",
    "PAST_THE_SWAP": "run",
    "RunReport": "report",
    "backup_copy": "snapshots",
    "list_snapshots": "snapshots",
    "take_snapshot": "snapshots",
    "list_quarantine": "swap",
    "cancel_line": "wording",
    "step_line": "wording",
}
__all__ = list(HOMES)
if not TYPE_CHECKING:  # mypy reads each name in its home module, typed
    __getattr__ = public_face(__name__, HOMES)
