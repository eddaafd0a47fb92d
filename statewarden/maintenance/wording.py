"""What a person reads of a maintenance run, wherever it runs (the CLI itself, or the
daemon with the CLI watching): one line per step event, the answer to a cancel, and
why a holder scan was not complete, with the processes that could not be read
counted in one line rather than listed one by one."""

from __future__ import annotations

import os
from typing import Any

from statewarden.holders.report import HolderScan

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


def incomplete_reason(scan: HolderScan) -> str:
    """Why ``scan`` is not complete: its problems, with every process that could not be
    read folded into one line (a sandbox or a busy host has thousands)."""
    unread = {int(u["pid"]): u for u in scan.uninspectable}
    per_pid = [p for p in scan.problems if _names_one_of(p, unread)]
    rest = [p for p in scan.problems if p not in per_pid]
    if per_pid:
        me = os.geteuid()
        others = sum(1 for u in unread.values() if u.get("uid") not in (None, me))
        n = len(per_pid)
        who = "process" if n == 1 else "processes"
        whose = " of other users" if others >= n else ""
        rest.insert(
            0,
            f"{n} {who}{whose} could not be read (the first: {per_pid[0]}); with"
            " holders.other_users: locks they are checked through /proc/locks instead",
        )
    return "holder scan incomplete: " + "; ".join(rest)


def _names_one_of(problem: str, unread: dict[int, Any]) -> bool:
    if not problem.startswith("pid "):
        return False
    head = problem[4:].split(" ", 1)[0]
    return head.isdigit() and int(head) in unread and "could not be inspected" in problem
