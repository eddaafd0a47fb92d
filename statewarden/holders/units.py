"""Which systemd unit each holder belongs to, confirmed by the user manager over D-Bus.

The holder scan gives a first answer from each process's cgroup; the manager's answer
(``GetUnitByPID``, the unit's ``MainPID``) wins when it has one, and decides whether a
holder re-parented to PID 1 or to the user manager is an *orphan*.

The D-Bus client (:mod:`statewarden.systemd`: dbus-fast and asyncio) is imported only
once a manager may answer: where none can, :func:`systemd_view` says why without it.
"""

from __future__ import annotations

from statewarden.errors import SystemdCallFailed, SystemdUnavailable
from statewarden.manager_socket import FALLBACK, UNREACHABLE, unreachable_reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from statewarden.holders.scan import HolderScan
    from statewarden.systemd import UnitInfo, UserManager


async def annotate(manager: UserManager, scans: Iterable[HolderScan]) -> None:
    """Confirm each holder's unit with ``GetUnitByPID`` and refine ``orphan`` with MainPID.

    The cgroup gave a first answer; the manager's answer wins when it has one. A holder
    that is its unit's main process is never an orphan; one re-parented to the manager
    that is not the main process of its service is.
    """
    units: dict[str, UnitInfo | None] = {}
    for scan in scans:
        for h in scan.holders:
            name = await manager.unit_by_pid(h.pid)
            if name is None:
                continue
            h.unit = name
            if name not in units:
                units[name] = await manager.unit(name)
            info = units[name]
            if info is None:
                continue
            h.main_pid_of_unit = info.main_pid == h.pid
            reparented = h.ppid == 1 or bool(h.parents and h.parents[0].get("user_manager"))
            h.orphan = reparented and not h.main_pid_of_unit


def systemd_view(
    scans: Sequence[HolderScan],
    patterns: Sequence[str] | None = None,
    address: str | None = None,
) -> tuple[list[UnitInfo], str | None]:
    """For the CLI: the Hermes units, with holders annotated, or why systemd could not help.

    Returns ``(units, None)``, or ``([], reason)`` with the one-line reason. ``patterns``:
    the units listed (None: :data:`~statewarden.systemd.DEFAULT_UNIT_PATTERNS`).
    """
    reason = unreachable_reason(address)
    if reason is not None:
        return [], reason
    from statewarden.systemd import DEFAULT_UNIT_PATTERNS, call_sync  # noqa: PLC0415

    async def run(m: UserManager) -> list[UnitInfo]:
        await annotate(m, scans)
        return await m.list_units(DEFAULT_UNIT_PATTERNS if patterns is None else patterns)

    try:
        return call_sync(run, address), None
    except SystemdUnavailable as exc:
        return [], str(exc)
    except SystemdCallFailed as exc:
        return [], f"{UNREACHABLE}: {exc}; {FALLBACK}"


def annotate_holders(scans: Sequence[HolderScan], address: str | None = None) -> str | None:
    """:func:`annotate` for the CLI: None when done, else the one-line reason it could not."""
    return systemd_view(scans, address=address)[1]
