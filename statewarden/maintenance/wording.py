"""What a person reads of a maintenance run, wherever it runs (the CLI itself, or the
daemon with the CLI watching): one line per step event, the answer to a cancel, and
why a holder scan was not complete, with the processes that could not be read
counted in one line rather than listed one by one."""

from __future__ import annotations

import os
from typing import Any

from statewarden.holders import HolderScan

# The steps of a run (maintenance/run.py), in the words of the one who watches it.
STEP_WORDS = {
    "prebuild": "building the new file while Hermes runs",
    "snapshot": "taking a verified snapshot before anything is stopped",
    "fence": "fencing state.db (mode 000) so that nothing opens it",
    "settle": "waiting until no process holds the database",
    "verify-source": "checking whether the database changed since the pre-build",
    "catch-up": "building the new file again from the stopped database",
    "swap": "swapping the new file in (the original goes to quarantine)",
    "swapped": "the new file is in place",
    "import": "importing the transcripts Hermes diverted",
    "post-check": "checking the new file and who holds it",
    "checkpoint": "checkpointing the -wal into state.db",
    "captures": "moving the applied captures to quarantine",
}


def step_line(event: dict[str, Any]) -> str:
    """``stopping pid 4242 (hermes dashboard)``: one step event, said."""
    step = str(event.get("step"))
    if step == "stop-unit":
        return f"stopping unit {event.get('unit')}"
    if step == "signal":
        return f"stopping pid {event.get('pid')} ({event.get('command')})"
    if step == "restart":
        return f"starting again: {', '.join(event.get('units') or [])}"
    if step == "rollback":
        return f"rolling back: {event.get('reason')}"
    return STEP_WORDS.get(step, step)


def cancel_line(event: dict[str, Any]) -> str:
    """The run's answer to a cancel (Ctrl-C)."""
    if event.get("accepted"):
        return f"cancelling: {event.get('reason')}"
    return f"cannot cancel now: {event.get('reason')}"


def folded_problems(scan: HolderScan) -> list[str]:
    """``scan``'s problems, with every process that could not be read folded into one
    line (a sandbox or a busy host has hundreds or thousands, each its own problem)."""
    unread = {int(u["pid"]): u for u in scan.uninspectable}
    per_pid = [p for p in scan.problems if _names_one_of(p, unread)]
    if not per_pid:
        return list(scan.problems)
    rest = [p for p in scan.problems if p not in per_pid]
    me = os.geteuid()
    listed = [unread[_pid_of(p)] for p in per_pid]
    n = len(listed)
    others = sum(1 for u in listed if u.get("uid") not in (None, me))
    who = f"{n} {'process' if n == 1 else 'processes'}"
    if others == n:
        who += " of other users"
    elif others:
        who += f" ({others} of other users)"
    held = sum(1 for u in listed if u.get("holds_lock"))
    if held:
        locks = f"{held} of them {'holds' if held == 1 else 'hold'} a lock on state.db"
    elif all(u.get("holds_lock") is False for u in listed):
        locks = "none holds a lock on state.db"
    else:
        locks = "their locks could not be read"
    line = (
        f"{who} could not be read ({locks}; the first: {per_pid[0]}); holders.other_users:"
        " fail counts them against the scan, locks (the default) checks them through"
        " /proc/locks"
    )
    return [line, *rest]


def incomplete_reason(scan: HolderScan) -> str:
    """Why ``scan`` is not complete, in one line."""
    return "holder scan incomplete: " + "; ".join(folded_problems(scan))


def _pid_of(problem: str) -> int:
    return int(problem[4:].split(" ", 1)[0])


def _names_one_of(problem: str, unread: dict[int, Any]) -> bool:
    if not problem.startswith("pid "):
        return False
    head = problem[4:].split(" ", 1)[0]
    return head.isdigit() and int(head) in unread and "could not be inspected" in problem
