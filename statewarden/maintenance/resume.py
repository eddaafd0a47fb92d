"""``--resume``: a run's state as its unfinished ledger has it (the units it stopped, the
processes it signalled, its fence, how far the swap went), and the step of the list
(``steps.py``) it goes on from: the same steps a run goes through, from there."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statewarden.maintenance.fence import Fence, Original
from statewarden.maintenance.ledger import LedgerRecord
from statewarden.maintenance.steps import NAMES
from statewarden.maintenance.swap import NewFile

if TYPE_CHECKING:
    from statewarden.maintenance.state import RunState


def resume_point(record: LedgerRecord) -> str | None:
    """Where a resume of the run ``record`` holds goes on: the last step of the list it
    began from the swap on (its ledger line is written before it starts, so it may be
    half done: it runs again); None when it never began the swap (it is rolled back)."""
    from_swap = NAMES[NAMES.index("swap") :]
    began = [e["step"] for e in record.entries if e.get("step") in from_swap]
    return str(began[-1]) if began else None


def take_up(run: RunState, record: LedgerRecord) -> str | None:
    """Give ``run`` the state its ledger ``record`` has; the step it goes on from (None:
    it rolls back)."""
    begin = record.begin
    run.report.run_id = record.run_id
    run.report.action = str(begin.get("action", run.report.action))
    run.fence = Fence(run.db, Original(**begin["original"]), up=record.has("fence"))
    for e in record.steps("stop-unit"):
        if e["unit"] not in run.stopped_units:
            run.stopped_units.append(e["unit"])
    run.signalled = [
        {k: e[k] for k in ("pid", "command", "parent", "settle") if k in e}
        for e in record.steps("signal")
    ]
    first = resume_point(record)
    swap_line = record.last("swap")
    if swap_line is None:
        prebuild = record.last("prebuild")
        run.new = Path(prebuild["new"]) if prebuild is not None else None
    else:
        _swap_as_the_ledger_has_it(run, record, swap_line, first)
    return first


def _swap_as_the_ledger_has_it(
    run: RunState, record: LedgerRecord, line: dict[str, Any], first: str | None
) -> None:
    run.new = Path(line["new"])
    run.swap_begun = True  # finished by the steps (rolled forward), never half-way
    run.quarantine = Path(line["quarantine"])
    run.report.quarantine = str(run.quarantine)
    run.resumed_ino = line.get("new_ino")
    run.resumed_original = line.get("original")
    run.captures = [str(n) for n in line.get("captures") or []]
    run.already_swapped = os.stat(run.db).st_ino == run.resumed_ino
    if first != "swap":  # the swap is done: the steps go on after it
        run.swapped = True
        run.swap_files = (record.last("swapped") or {}).get("files")
        run.report.notes.append(
            f"resumed after an interruption after the swap: went on from {first}"
        )
    elif line.get("new_file"):
        run.sealed = NewFile.from_json(line["new_file"])
    elif run.already_swapped:
        run.sealed = NewFile(0, int(run.resumed_ino or 0), 0, "")  # not looked at
