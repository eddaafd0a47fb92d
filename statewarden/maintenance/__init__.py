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
    "ACTIONS": "state",
    "MaintenanceRun": "run",
    "Options": "run",
    "PAST_THE_SWAP": "journal",
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
else:  # the same names, typed, for mypy (tests/project/test_layers.py holds them to HOMES)
    from statewarden.maintenance.all_profiles import execute_all as execute_all
    from statewarden.maintenance.all_profiles import resume_all as resume_all
    from statewarden.maintenance.auto import AutoMaintenance as AutoMaintenance
    from statewarden.maintenance.journal import PAST_THE_SWAP as PAST_THE_SWAP
    from statewarden.maintenance.ledger import in_progress as in_progress
    from statewarden.maintenance.ledger import lock_holder as lock_holder
    from statewarden.maintenance.ledger import run_dir as run_dir
    from statewarden.maintenance.plan import Plan as Plan
    from statewarden.maintenance.report import RunReport as RunReport
    from statewarden.maintenance.run import MaintenanceRun as MaintenanceRun
    from statewarden.maintenance.run import Options as Options
    from statewarden.maintenance.snapshots import backup_copy as backup_copy
    from statewarden.maintenance.snapshots import list_snapshots as list_snapshots
    from statewarden.maintenance.snapshots import take_snapshot as take_snapshot
    from statewarden.maintenance.state import ACTIONS as ACTIONS
    from statewarden.maintenance.swap import list_quarantine as list_quarantine
    from statewarden.maintenance.wording import cancel_line as cancel_line
    from statewarden.maintenance.wording import step_line as step_line
