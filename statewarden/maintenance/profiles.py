"""Which other Hermes profiles a maintenance stop affects.

Current Hermes runs one gateway per host for every profile (``gateway/host_topology.py``):
stopping "the gateway" to repair one profile's state.db stops the others too. The plan
names each profile a stop reaches, and how: its configured gateway unit is among the
units to stop, or a process of one of those units holds its database (a holder scan of
the other profiles' databases, units confirmed with the user manager). They start
again with the units the run stopped (``run.py``: what is stopped is started again).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from statewarden.config import Config
from statewarden.errors import StatewardenError
from statewarden.holders import HolderScanner
from statewarden.maintenance.quiesce import annotate_units
from statewarden.targets import Target, discover

__all__ = ["AffectedProfile", "affected_profiles"]


@dataclass(frozen=True)
class AffectedProfile:
    """Another profile whose Hermes a stop reaches."""

    profile: str
    db: str
    unit: str
    how: str  # "its gateway unit" or "holds its database"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return f"{self.profile} ({self.db}): {self.unit} {self.how}"


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def affected_profiles(
    config: Config, db: Path, units: list[str], address: str | None
) -> list[AffectedProfile]:
    """The other profiles (of ``config``'s targets, or the ones found on disk) that
    stopping ``units`` reaches. Best effort: a profile that cannot be looked at is
    left out, never a reason to refuse the run."""
    if not units:
        return []
    try:
        others = [t for t in discover(config) if not _same_file(t.db, db)]
    except (OSError, StatewardenError):
        return []
    found: dict[str, AffectedProfile] = {}
    for t in others:
        unit = _configured_unit(t)
        if unit in units:
            found[t.name] = AffectedProfile(t.name, str(t.db), unit, "is its gateway unit")
    held = [t for t in others if t.name not in found and t.db.exists()]
    if held:
        for t, unit in _holding_units(config, held, address):
            if unit in units:
                found.setdefault(
                    t.name, AffectedProfile(t.name, str(t.db), unit, "holds its database")
                )
    return sorted(found.values(), key=lambda a: a.profile)


def _configured_unit(t: Target) -> str | None:
    try:
        return t.gateway_unit
    except (OSError, StatewardenError, UnicodeError):
        return None


def _holding_units(
    config: Config, targets: list[Target], address: str | None
) -> list[tuple[Target, str]]:
    scanner = HolderScanner(
        [t.db for t in targets],
        exempt_comms=config.holders.exempt_comms,
        other_users=config.holders.other_users,
        watch_opens=False,
    )
    try:
        scans = scanner.scan(full=True)
    except (OSError, StatewardenError):
        return []
    finally:
        scanner.close()
    if any(s.holders for s in scans):
        annotate_units(scans, address)
    return [(t, h.unit) for t, s in zip(targets, scans, strict=True) for h in s.holders if h.unit]
