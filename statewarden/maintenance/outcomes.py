"""A maintenance run's outcome, handed to the daemon and told through the alert sinks.

Every run that repaired (or swapped), aborted and rolled back, or refused leaves one
**outcome file** when it ends: ``<state dir>/maintenance/outcomes/<ns>-<run id>.json``
(written atomically, by whoever ran it: the daemon's own window run, a user's
``statewardenctl maintenance`` or ``quarantine restore``). The daemon picks each one up
(:func:`pending`), queues its notification in the durable outbox (the key is the run's,
so one queued twice is sent once), then removes the file (:func:`done`). With no daemon
running the files wait for it; only the newest :data:`KEEP` are kept.

Outcome kinds (each its own MESSAGE_ID in the kinds table):

- ``maintenance_repaired``: a new file is in place (downtime, rows kept, loss if any,
  where the original was quarantined, units started again, post-check);
- ``maintenance_rolled_back``: aborted and rolled back, the database unchanged (who kept
  coming back, from where);
- ``maintenance_refused``: nothing was stopped (why: a holder that may not be stopped,
  too little space, a repair that would lose rows, a failed pre-build).

Dry runs, ``check``, ``checkpoint``, a healthy file and an unconfirmed run tell nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import time
import uuid
from pathlib import Path
from typing import Any

from statewarden.alerts import Item, Notification
from statewarden.atomic import private_dir, write_atomic
from statewarden.kinds import KINDS
from statewarden.maintenance.report import lost_words, rows_lost

OUTCOMES_DIR = "outcomes"
KEEP = 50  # outcome files kept while no daemon collects them
EVIDENCE_MAX = 8  # lines of detail per outcome
# A repaired run is a warning (Hermes was stopped: the default Telegram route carries
# it); one with accepted loss, a unit that did not start or a failed post-check, error.
SEVERITY = {0: "warning"}


def folder(state_dir: Path) -> Path:
    return state_dir / "maintenance" / OUTCOMES_DIR


def kind_of(outcome: str) -> str | None:
    """The outcome kind of a run's ``outcome`` text, or None when it tells nothing."""
    if outcome in ("repaired", "swapped", "merged"):
        return "maintenance_repaired"
    if outcome.startswith("rolled back"):
        return "maintenance_rolled_back"
    if outcome.startswith(("refused", "failed before stopping", "stopped: the repair")):
        return "maintenance_refused"
    return None


def record(state_dir: Path, report: dict[str, Any], profile: str, started_at: float) -> Path | None:
    """Leave the outcome file of a run that ended (None if its outcome tells nothing)."""
    if kind_of(str(report.get("outcome", ""))) is None:
        return None
    where = private_dir(folder(state_dir))
    run_id = report.get("run_id") or "norun-" + uuid.uuid4().hex[:6]
    data = {
        **report,
        "run_id": run_id,
        "profile": profile,
        "started_at": started_at,
        "finished_at": time.time(),
    }
    path = where / f"{time.time_ns():020d}-{run_id}.json"
    write_atomic(path, json.dumps(data, default=str))
    for old in sorted(where.glob("*.json"))[:-KEEP]:
        with contextlib.suppress(OSError):
            old.unlink()
    return path


def pending(state_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Outcome files waiting for the daemon, oldest first; an unreadable one is dropped."""
    where = folder(state_dir)
    try:
        st = os.lstat(where)
        # A folder planted as a symlink, or not ours: nothing in it is read or removed.
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return []
        names = sorted(p for p in where.iterdir() if p.name.endswith(".json"))
    except OSError:
        return []
    out = []
    for path in names:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                data = json.loads(f.read())
            if not isinstance(data, dict) or kind_of(str(data.get("outcome", ""))) is None:
                raise ValueError("not an outcome")
        except (OSError, ValueError):
            done(path)
            continue
        out.append((path, data))
    return out


def done(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _rows_line(rec: dict[str, Any]) -> str:
    parts = []
    for name, t in sorted((rec.get("tables") or {}).items()):
        if name.startswith("sqlite_") or "_fts" in name:
            continue
        part = f"{name} {t.get('recovered')}"
        if t.get("duplicates_dropped"):
            part += f" ({t['duplicates_dropped']} duplicate(s) dropped)"
        if (
            rows_lost(t)
            or t.get("lost_at_most")
            or t.get("unreadable_ranges")
            or t.get("set_aside")
        ):
            part += f" ({lost_words(t)}, {t.get('set_aside') or 0} set aside)"
        parts.append(part)
    loss = "LOSS (see the recover report)" if rec.get("loss_detected") else "no loss"
    return f"rows kept: {', '.join(parts) or '-'}; {loss}"


def details(data: dict[str, Any]) -> list[str]:
    """The lines a person reads about one run."""
    kind = kind_of(str(data.get("outcome", "")))
    lines = [f"run {data.get('run_id')}: {data.get('action')}, {data.get('outcome')}"]
    if data.get("message"):
        lines.append(str(data["message"]))
    if kind == "maintenance_repaired":
        if data.get("downtime_s") is not None:
            swap = data.get("swap_s")
            lines.append(
                f"downtime {data['downtime_s']:.2f} s (first stop -> last unit active)"
                + (f", swap {swap * 1000:.1f} ms" if swap is not None else "")
            )
        if data.get("recover"):
            lines.append(_rows_line(data["recover"]))
        if data.get("quarantine"):
            lines.append(f"original kept in {data['quarantine']}")
        if data.get("post_check"):
            lines.append(f"post-check: {data['post_check'].get('summary', '')}")
    units = [u["unit"] for u in data.get("units_started") or []]
    if units:
        lines.append(f"started again: {', '.join(units)}")
    for p in data.get("start_again") or []:
        if p.get("running_again"):
            lines.append(f"running again: {p.get('command')} (pid {p.get('running_again')})")
        else:
            lines.append(f"start again yourself: {p.get('command')} (was pid {p.get('pid')})")
    return lines[:EVIDENCE_MAX]


def summary(data: dict[str, Any]) -> str:
    kind = kind_of(str(data.get("outcome", "")))
    action = data.get("action", "repair")
    if kind == "maintenance_repaired":
        what = "repaired" if action == "repair" else f"{action}: new file swapped in"
        return f"state.db {what} by a maintenance run"
    if kind == "maintenance_rolled_back":
        return f"maintenance {action} aborted and rolled back; the database is unchanged"
    return f"maintenance {action} refused; nothing was stopped"


def severity_of(data: dict[str, Any]) -> str:
    kind = kind_of(str(data.get("outcome", "")))
    if kind == "maintenance_repaired":
        return SEVERITY.get(int(data.get("exit_code") or 0), "error")
    return "error" if kind == "maintenance_rolled_back" else "warning"


def next_step(data: dict[str, Any]) -> str:
    kind = kind_of(str(data.get("outcome", ""))) or "maintenance_refused"
    profile = data.get("profile", "default")
    if kind == "maintenance_repaired" and data.get("exit_code"):
        return f"statewardenctl status --profile {profile}; statewardenctl incidents"
    return KINDS[kind].next_step.format(profile=profile)


def notification(data: dict[str, Any], host: str | None = None) -> Notification:
    """The notification telling one outcome (its key is the run's: sent once)."""
    kind = kind_of(str(data.get("outcome", ""))) or "maintenance_refused"
    finished = float(data.get("finished_at") or time.time())
    item = Item(
        incident=0,
        kind=kind,
        severity=severity_of(data),
        db=str(data.get("db", "")),
        profile=str(data.get("profile", "-")),
        summary=summary(data),
        change="opened",
        first_seen=float(data.get("started_at") or finished),
        last_seen=finished,
        count=1,
        evidence=details(data),
        next_step=next_step(data),
    )
    host = host or socket.gethostname()
    return Notification(f"{kind}:{data.get('run_id')}", "firing", host, finished, [item])
