"""The plan of a maintenance run: who holds the database now and how each will be stopped.

Per holder, one decision (DESIGN.md rule 11):

- ``stop-unit``: its ``.service`` unit is stopped with ``StopUnit`` and a job wait (a
  process of a unit is never signalled: the manager would restart it);
- ``signal``: a Hermes process that is not in a service unit gets SIGTERM, then SIGKILL
  after ``maintenance.stop_grace``;
- ``refuse``: another uid (never signalled, whatever the options), the user's
  interactive ``cli`` / ``tui`` without ``--force`` or ``maintenance.stop_interactive``,
  a kind that is neither Hermes nor a known companion (``sqlite3``, ``unknown``) without
  ``--force``, or a unit process when the user manager cannot be reached.

Litestream (``litestream replicate``) holds the database for as long as it replicates
it; it is stopped and started again like Hermes' own processes (its unit, usually
``litestream.service``), and picks the new file up as a new generation.

A scan that could not inspect every process is itself a refusal (rule 1). The plan also
states the free space next to the database (the pre-build writes a work copy and the
new file there) and the expected downtime.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statewarden.holders import Holder, HolderScan, short_command
from statewarden.recovery import FREE_SPACE_MARGIN_BYTES, bundle_bytes
from statewarden.sidecars import SHM_SUFFIX, sidecar

STOP_UNIT = "stop-unit"
SIGNAL = "signal"
REFUSE = "refuse"
INTERACTIVE_KINDS = ("cli", "tui")
HERMES_KINDS = ("gateway", "dashboard", "serve", "serve-isolated", "cron", "acp")
# Not Hermes, but known to hold state.db for good reason and safe to stop and restart.
COMPANION_KINDS = ("litestream",)
# Recover throughput on the reference machine (bench/recover.py): 266 MB in 4.6-15.6 s.
RECOVER_BYTES_PER_S = 20 * 1000 * 1000
# The folded copy, recover's copy of it and the new file, next to the database.
PREBUILD_SPACE_FACTOR = 3


@dataclass
class HolderDecision:
    """What will be done about one holder, and why."""

    pid: int
    kind: str
    uid: int | None
    unit: str | None
    command: str
    action: str  # stop-unit, signal, refuse
    reason: str
    parents: list[dict[str, Any]] = field(default_factory=list)
    ssh_connection: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "kind": self.kind,
            "uid": self.uid,
            "unit": self.unit,
            "command": self.command,
            "action": self.action,
            "reason": self.reason,
        }


@dataclass
class Plan:
    """Holders and units now, how each will be stopped, space and expected downtime."""

    db: Path
    action: str
    decisions: list[HolderDecision]
    units: list[str]
    scan_problems: list[str]
    systemd_note: str | None
    free_bytes: int
    needed_bytes: int
    db_bytes: int
    settle_s: float
    stop_grace_s: float
    # The quarantine on another filesystem than the database: the original and its
    # sidecars are copied there at the swap. (folder, bytes free, bytes needed)
    quarantine_space: tuple[Path, int, int] | None = None
    # Other profiles the stop reaches (one gateway serves every profile on current
    # Hermes): {"profile", "db", "unit", "how"} each (maintenance/profiles.py).
    affected_profiles: list[dict[str, Any]] = field(default_factory=list)

    @property
    def refusals(self) -> list[str]:
        out = [f"holder scan incomplete: {p}" for p in self.scan_problems]
        out += [
            f"pid {d.pid} ({d.command}): {d.reason}" for d in self.decisions if d.action == REFUSE
        ]
        return out

    @property
    def space_problem(self) -> str | None:
        if self.quarantine_space is not None:
            folder, free, needed = self.quarantine_space
            if free < needed:
                return (
                    f"not enough free space for the quarantine in {folder} (another"
                    f" filesystem, the original is copied there): {free} bytes free,"
                    f" {needed} needed"
                )
        if self.free_bytes >= self.needed_bytes:
            return None
        return (
            f"not enough free space next to {self.db}: {self.free_bytes} bytes free,"
            f" {self.needed_bytes} needed"
        )

    @property
    def signals(self) -> list[HolderDecision]:
        return [d for d in self.decisions if d.action == SIGNAL]

    def expected_downtime_s(self) -> tuple[float, float]:
        """(unchanged since the pre-build, changed and recovered again offline).

        Both add to the time the units take to stop and start: the settle period and
        a second for the swap and checks; a change adds an offline recover.
        """
        low = self.settle_s + 1.0
        high = low + self.db_bytes / RECOVER_BYTES_PER_S
        return round(low, 1), round(high, 1)

    def to_json(self) -> dict[str, Any]:
        low, high = self.expected_downtime_s()
        return {
            "db": str(self.db),
            "action": self.action,
            "holders": [d.to_json() for d in self.decisions],
            "units": list(self.units),
            "signal": [d.pid for d in self.signals],
            "refusals": self.refusals,
            "space_problem": self.space_problem,
            "systemd": self.systemd_note,
            "free_bytes": self.free_bytes,
            "needed_bytes": self.needed_bytes,
            "expected_downtime_s": {"unchanged": low, "changed": high},
            "affected_profiles": list(self.affected_profiles),
        }

    def render(self) -> list[str]:
        lines = [f"maintenance plan for {self.db} (action {self.action})"]
        if not self.decisions:
            lines.append("  no process holds the database")
        for d in self.decisions:
            how = {
                STOP_UNIT: f"stop unit {d.unit}",
                SIGNAL: "SIGTERM, then SIGKILL",
                REFUSE: "REFUSED",
            }[d.action]
            lines.append(f"  pid {d.pid} {d.kind} ({d.command}): {how}: {d.reason}")
        if self.units:
            lines.append(f"  units to stop, then start again: {', '.join(self.units)}")
        for a in self.affected_profiles:
            lines.append(
                f"  this stop also stops Hermes for profile {a['profile']} ({a['db']}):"
                f" {a['unit']} {a['how']}; it starts again with the units"
            )
        if self.systemd_note:
            lines.append(f"  systemd: {self.systemd_note}")
        lines.append(
            f"  free space next to the database: {self.free_bytes} bytes"
            f" ({self.needed_bytes} needed)"
        )
        low, high = self.expected_downtime_s()
        lines.append(
            f"  expected downtime after the units stop: about {low} s if nothing is written"
            f" after the pre-build, up to {high} s if it must be recovered again"
        )
        for r in [*self.refusals, *filter(None, [self.space_problem])]:
            lines.append(f"  cannot proceed: {r}")
        return lines


def decide(
    holder: Holder,
    *,
    force: bool,
    stop_interactive: bool,
    systemd_ok: bool,
    my_uid: int | None = None,
) -> HolderDecision:
    my_uid = os.geteuid() if my_uid is None else my_uid
    d = HolderDecision(
        pid=holder.pid,
        kind=holder.kind,
        uid=holder.uid,
        unit=holder.unit,
        command=short_command(holder.cmdline) or holder.comm,
        action=REFUSE,
        reason="",
        parents=list(holder.parents),
        ssh_connection=holder.ssh_connection,
    )
    in_service = bool(holder.unit and holder.unit.endswith(".service"))
    if holder.uid != my_uid:
        d.reason = f"runs as uid {holder.uid}, not {my_uid}: only its owner can stop it"
    elif holder.kind in INTERACTIVE_KINDS and not (force or stop_interactive):
        d.reason = (
            f"the user's interactive Hermes ({holder.kind}); close it, or pass --force"
            " (or set maintenance.stop_interactive)"
        )
    elif holder.kind not in HERMES_KINDS + INTERACTIVE_KINDS + COMPANION_KINDS and not force:
        d.reason = f"not a Hermes process (kind {holder.kind}); stop it, or pass --force"
    elif in_service and not systemd_ok:
        d.reason = f"runs in {holder.unit}, and the user manager cannot be reached to stop it"
    elif in_service:
        d.action, d.reason = STOP_UNIT, f"{holder.kind} in {holder.unit}"
    else:
        d.action = SIGNAL
        d.reason = f"{holder.kind}, not a unit" + (" (orphan)" if holder.orphan else "")
    return d


def make_plan(
    db: Path,
    scan: HolderScan,
    *,
    action: str,
    force: bool,
    stop_interactive: bool,
    systemd_note: str | None,
    settle_s: float,
    stop_grace_s: float,
    offline: bool = False,
    quarantine: Path | None = None,
) -> Plan:
    """The plan for ``scan``; ``offline`` actions need no pre-build space."""
    decisions = [
        decide(h, force=force, stop_interactive=stop_interactive, systemd_ok=systemd_note is None)
        for h in scan.holders
        if h.pid != os.getpid()
    ]
    units: list[str] = []
    for d in decisions:
        if d.action == STOP_UNIT and d.unit and d.unit not in units:
            units.append(d.unit)
    size = bundle_bytes(db)
    try:
        st = os.statvfs(db.parent)
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = 0
    needed = 0 if offline else size * PREBUILD_SPACE_FACTOR + FREE_SPACE_MARGIN_BYTES
    return Plan(
        quarantine_space=None if offline else _quarantine_space(db, size, quarantine),
        db=db,
        action=action,
        decisions=decisions,
        units=units,
        scan_problems=list(scan.problems),
        systemd_note=systemd_note,
        free_bytes=free,
        needed_bytes=needed,
        db_bytes=size,
        settle_s=settle_s,
        stop_grace_s=stop_grace_s,
    )


def _quarantine_space(db: Path, size: int, quarantine: Path | None) -> tuple[Path, int, int] | None:
    """Free and needed bytes where the quarantine goes, when that is another filesystem
    (on the same one the original is only linked there)."""
    if quarantine is None:
        return None
    folder = quarantine
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        if os.stat(folder).st_dev == os.stat(db.parent).st_dev:
            return None
        st = os.statvfs(folder)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        size += os.stat(sidecar(db, SHM_SUFFIX)).st_size
    return folder, st.f_bavail * st.f_frsize, size + FREE_SPACE_MARGIN_BYTES
