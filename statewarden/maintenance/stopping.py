"""The steps of a run that stop Hermes and start it again: the snapshot right before the
first stop, the stop itself (units, then processes), the settle scans, the last looks
for a holder, and the restart of what was stopped (docs/safety.md rule 14)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from statewarden.errors import EXIT_FAILED, StatewardenError
from statewarden.holders import Holder, short_command
from statewarden.maintenance.journal import Abort
from statewarden.maintenance.quiesce import (
    Settler,
    complete_scan,
    describe_origin,
    running_again,
    start_ticks_of,
    start_units,
    still_runs,
    stop_units,
    terminate_all,
    unit_states,
)
from statewarden.maintenance.report import StartAgain, UnitStarted
from statewarden.maintenance.snapshots import take_snapshot
from statewarden.maintenance.wording import incomplete_reason

if TYPE_CHECKING:
    from pathlib import Path

    from statewarden.maintenance.state import RunState

UNIT_START_CHECK_S = 1.0
LOOK_AGAIN_S = 0.2


def named(holders: list[Holder]) -> str:
    """``hermes gateway run (pid 4242), hermes chat (pid 4244)``: holders as a person names them."""
    return ", ".join(f"{short_command(h.cmdline) or h.comm} (pid {h.pid})" for h in holders)


def snapshot_before_stop(run: RunState) -> None:
    """A verified snapshot right before anything is stopped (``maintenance.snapshots``):
    taken online, so it costs no downtime. Not taking one never stops the run."""
    if (run.report.recover or {}).get("damage") not in (None, "none"):
        run.report.notes.append(
            "no snapshot before the stop: the pre-build's check found damage in the live"
            " file, and a snapshot must pass check (the original goes to quarantine)"
        )
        return
    run.journal.step("snapshot")
    try:
        snap = take_snapshot(
            run.db,
            run.state,
            run.target.name,
            run.mc.snapshots_keep,
            run.mc.snapshots_max_age,
            progress=run.progress,
        )
    except (OSError, StatewardenError) as exc:
        run.report.notes.append(f"no snapshot before the stop: {exc}")
        return
    run.report.notes.append(f"snapshot before the stop: {snap.path}")


def stop(run: RunState) -> None:
    """Stop the plan's units one by one, then signal its processes all at once."""
    assert run.plan is not None
    for unit in run.plan.units:
        run.journal.stop_if_cancelled()
        run.journal.step("stop-unit", unit=unit)
        run.mark_down()
        run.stopped_units.append(unit)
        (res,) = stop_units([unit], run.address, run.mc.unit_timeout)
        if not res.ok:
            raise Abort(f"could not stop {unit}: job {res.result}", EXIT_FAILED)
    # All at once: SIGTERM to each, one grace period, SIGKILL to those still there.
    targets = []
    for d in run.plan.signals:
        ticks = start_ticks_of(d.pid)
        run.journal.step("signal", pid=d.pid, command=d.command, parent=_parent(d))
        run.mark_down()
        targets.append((d.pid, ticks))
    ended = terminate_all(targets, run.mc.stop_grace)
    for d in run.plan.signals:
        run.signalled.append(
            {"pid": d.pid, "command": d.command, "parent": _parent(d), "ended": ended[d.pid]}
        )


def _parent(d: Any) -> int | None:
    """The pid of the parent of the holder ``d`` decides about (None: not known)."""
    parents = getattr(d, "parents", None) or []
    pid = parents[0].get("pid") if parents else None
    return pid if isinstance(pid, int) else None


def settle(run: RunState) -> None:
    """Full holder scans until none shows a holder for ``maintenance.settle``; a holder
    that comes back is stopped again, up to ``maintenance.respawn_limit``."""
    run.journal.step("settle")

    def on_unit(unit: str) -> None:
        run.ledger.step("stop-unit", unit=unit)
        run.mark_down()
        if unit not in run.stopped_units:
            run.stopped_units.append(unit)

    def on_signal(d: Any) -> None:
        parent = _parent(d)
        run.ledger.step("signal", pid=d.pid, command=d.command, parent=parent, settle=True)
        run.mark_down()
        run.signalled.append(
            {
                "pid": d.pid,
                "command": d.command,
                "parent": parent,
                "settle": True,
                "ended": "signalled",
                "origin": describe_origin(d),
            }
        )

    result = Settler(
        scanner=run.scanner(),
        settle_s=run.mc.settle,
        timeout_s=run.mc.settle_timeout,
        respawn_limit=run.mc.respawn_limit,
        grace_s=run.mc.stop_grace,
        force=run.options.force,
        stop_interactive=run.mc.stop_interactive,
        on_signal=on_signal,
        on_unit=on_unit,
        unit_timeout_s=run.mc.unit_timeout,
        address=run.address,
        wait_for=frozenset({run.daemon}) if run.daemon is not None else frozenset(),
    ).run()
    if not result.ok:
        raise Abort(result.reason, EXIT_FAILED)


def no_holders(run: RunState, when: str) -> None:
    """One more full scan: nobody but this process may hold the old file now (the
    daemon's short read-only reads are waited for, up to maintenance.settle_timeout)."""
    deadline = time.monotonic() + run.mc.settle_timeout
    while True:
        scan = complete_scan(run.scanner())
        if not scan.complete:
            raise Abort(incomplete_reason(scan), EXIT_FAILED)
        others = [h for h in scan.holders if h.pid != os.getpid()]
        if not others or any(h.pid != run.daemon for h in others):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(LOOK_AGAIN_S)
    if others:
        raise Abort(f"{named(others)} opened the database {when}", EXIT_FAILED)


def restart_once(run: RunState) -> None:
    """Start again what the run stopped, once (the restart step, or the guard around the
    steps when they ended before it); with --all-profiles, once for every profile's run
    (``all_profiles.py``)."""
    if not run.restarted and not run.restart_later:
        run.restarted = True
        run.not_started = restart(run)


def restart(run: RunState) -> list[str]:
    """Start again the units the run stopped, in reverse order, each checked active a
    moment later; the units that did not come back. Never raises (rule 14)."""
    failed: list[str] = []
    units = list(reversed(run.stopped_units))
    if units:
        run.journal.guarded("restart", lambda: run.journal.step("restart", units=units))
        try:
            results = start_units(units, run.address, run.mc.unit_timeout)
        except Exception as exc:  # noqa: BLE001 - named; the units are listed as failed
            run.journal.failed("restart", exc)
            return units
        run.note_downtime()
        # A simple service's start job is done at fork; one whose program cannot run
        # fails just after. Look again a moment later.
        time.sleep(UNIT_START_CHECK_S)
        try:
            states = unit_states(units, run.address)
        except Exception as exc:  # noqa: BLE001 - started; only the look failed
            run.journal.failed("restart", exc)
            states = {}
        for r in results:
            state = states.get(r.unit, "unknown")
            run.report.units_started.append(UnitStarted.of(r, state))
            if not r.ok or state != "active":
                failed.append(r.unit)
    else:
        run.note_downtime()
    run.report.units_stopped = list(run.stopped_units)
    run.report.start_again = start_again(run.signalled, run.db)
    return failed


def start_again(signalled: list[dict[str, Any]], db: Path) -> list[StartAgain]:
    """Each process the run stopped, once: running again (its respawner started it:
    ``running_again`` names the new pid), still running (never stopped), or for the
    user to start again. The processes the stop signalled each ran in their own right
    (two with one command line are two); one signalled while settling came back in the
    place of one stopped before, of its command (:func:`_stopped_processes`). Each is
    matched with a live process of its command for ``db`` that none was, one each: one
    with the same parent first (its respawner), then any other."""
    stopped = _stopped_processes(signalled)
    if not stopped:
        return []
    gone = {int(s["pid"]) for s in signalled}
    try:
        live = running_again(list(dict.fromkeys(p["command"] for p in stopped)), gone, db)
    except OSError:
        live = {}
    again: dict[int, int | None] = {}
    for p in stopped:  # a run killed between its ledger line and the signal: still runs
        last = int(p["pid"])
        if still_runs(last, p["command"], db):
            again[last] = last
    for same_parent in (True, False):
        for p in stopped:
            last = int(p["pid"])
            if last in again:
                continue
            for candidate in live.get(p["command"], []):
                if not same_parent or candidate[1] in p["parents"]:
                    again[last] = candidate[0]
                    live[p["command"]].remove(candidate)
                    break
    return [StartAgain(int(p["pid"]), p["command"], again.get(int(p["pid"]))) for p in stopped]


def _stopped_processes(signalled: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The processes behind ``signalled``, in order: {"pid": the last one signalled,
    "command", "parents": the parent pids seen}. One signalled while settling
    (``settle``) came back in the place of the last one before it of its command with
    the same parent, else of the last one of its command; else it is one more."""
    out: list[dict[str, Any]] = []
    for s in signalled:
        command, parent = str(s["command"]), s.get("parent")
        same = [p for p in out if p["command"] == command]
        if s.get("settle") and same:
            taken = [p for p in same if parent in p["parents"]] or same
            taken[-1]["pid"] = s["pid"]
            taken[-1]["parents"].add(parent)
        else:
            out.append({"pid": s["pid"], "command": command, "parents": {parent}})
    for p in out:
        p["parents"].discard(None)
    return out
