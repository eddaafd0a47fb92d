"""What a maintenance run did, measured: :class:`RunReport` and the records it holds.

The CLI prints it (``render``, or ``to_json`` with ``--json``), the daemon logs it and
sends it over the control socket, where ``from_json`` takes it back. The run's own
records are typed (a step's time, a unit started again, a process to start again, the
post-check, a step that failed); what other parts report (the recover report, the
plan, the import, the merge) is kept as the JSON those parts give.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from statewarden.errors import EXIT_OK
from statewarden.systemd import JobResult

POST_CHECK_ERRORS_SHOWN = 3  # the text report's first integrity errors of a failed post-check


def rows_lost(table: dict[str, Any]) -> int:
    """The rows one table of a recover report lost: those known by key (``lost``) and
    those whose key the damage took (``unnamed_lost``). Never the length of
    ``lost_keys_sample``, which stops at a hundred keys."""
    known = table.get("lost")
    if not isinstance(known, int):
        known = len(table.get("lost_keys_sample") or [])
    unnamed = table.get("unnamed_lost")
    return known + (unnamed if isinstance(unnamed, int) else 0)


def lost_words(table: dict[str, Any]) -> str:
    """``740 lost``; ``0 lost, up to 740`` when unreadable stretches could have held
    more (``lost_at_most``); ``up to ?`` when one of them is open-ended."""
    lost = rows_lost(table)
    at_most = table.get("lost_at_most")
    if isinstance(at_most, int) and at_most > lost:
        return f"{lost} lost, up to {at_most}"
    if at_most is None and table.get("unreadable_ranges"):
        return f"{lost} lost, up to ? (an unreadable stretch with no end)"
    return f"{lost} lost"


@dataclass
class StepTime:
    """How long one step of the run took, from its ledger line to the next one's."""

    step: str
    seconds: float


@dataclass
class UnitStarted:
    """A unit the run started again: systemd's answer to the start job, and the unit's
    state a moment later."""

    unit: str
    action: str
    job: str
    result: str
    waited_s: float
    gave_up: bool
    state: str

    @classmethod
    def of(cls, job: JobResult, state: str) -> UnitStarted:
        return cls(**job.to_json(), state=state)


@dataclass
class StartAgain:
    """A process the run signalled: running again (``running_again``: its new pid, its
    respawner started it) or for the user to start again."""

    pid: int
    command: str
    running_again: int | None


@dataclass
class PostCheck:
    """The live file after the swap: SQLite's integrity check (``ok`` or its first
    errors) and the processes holding it (none may hold an old inode)."""

    integrity: str | list[str]
    stale_holders: list[int]
    holders: list[int]
    ok: bool
    summary: str


@dataclass
class Failure:
    """A step that failed after something was stopped (docs/safety.md rule 14)."""

    step: str
    error: str


def _typed(cls: type[Any], data: Any) -> Any:
    """A record from its JSON, keys it does not know left out (a daemon of another
    version may send more)."""
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class RunReport:
    """What a run did, measured: the CLI prints it, the daemon logs it."""

    db: str
    action: str
    run_id: str = ""
    outcome: str = ""
    exit_code: int = EXIT_OK
    message: str = ""
    path: str = ""  # pre-built, caught up offline
    steps: list[StepTime] = field(default_factory=list)
    downtime_s: float | None = None
    swap_s: float | None = None
    quarantine: str | None = None
    units_stopped: list[str] = field(default_factory=list)
    units_started: list[UnitStarted] = field(default_factory=list)
    start_again: list[StartAgain] = field(default_factory=list)
    diverted: list[str] = field(default_factory=list)
    imported: dict[str, Any] | None = None  # the diverted transcripts' import (transcripts.py)
    post_check: PostCheck | None = None  # null in JSON as {} (no post-check ran)
    recover: dict[str, Any] | None = None
    merge: dict[str, Any] | None = None  # what a merge did (merge.py), and why the file
    captures: dict[str, Any] | None = None  # what apply-captures brought in (apply_captures.py)
    plan: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    source_identity: dict[str, Any] | None = None  # the source at the pre-build
    cancelled: bool = False
    # Steps that failed after something was stopped: recorded, and the run went on to
    # the restart (rule 14).
    failures: list[Failure] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["post_check"] = data["post_check"] or {}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunReport:
        """The report a run's ``to_json`` gave (the daemon's run, over the control
        socket); keys it does not know are left out."""
        known = {f.name for f in fields(cls)}
        plain = {k: v for k, v in data.items() if k in known}
        plain["steps"] = [_typed(StepTime, s) for s in plain.get("steps") or []]
        plain["units_started"] = [_typed(UnitStarted, u) for u in plain.get("units_started") or []]
        plain["start_again"] = [_typed(StartAgain, p) for p in plain.get("start_again") or []]
        plain["post_check"] = (
            _typed(PostCheck, plain["post_check"]) if plain.get("post_check") else None
        )
        plain["failures"] = [_typed(Failure, f) for f in plain.get("failures") or []]
        return cls(**plain)

    def _import_lines(self) -> list[str]:
        imp = self.imported
        if imp is None:
            return [f"  diverted transcript (kept, not imported): {d}" for d in self.diverted]
        lines = [f"  {imp['summary']}"]
        for f in imp["files"]:
            if f["imported"] or f["skipped"]:
                skipped = ", ".join(f"{n} {why}" for why, n in sorted(f["skipped"].items()))
                odd = f.get("odd_timestamps") or 0
                lines.append(
                    f"    {f['path']}: {f['imported']} imported, {f['already_present']} already"
                    f" there{'; skipped ' + skipped if skipped else ''}"
                    f"{f'; {odd} with an unusable time, placed in order' if odd else ''}"
                )
        lines.extend(f"    not imported: {n}" for n in imp["not_imported"])
        lines.append("  the diverted files are kept as they were (never changed or deleted)")
        return lines

    def _captures_lines(self) -> list[str]:
        cap = self.captures
        if cap is None:
            return []
        lines = [f"  {cap['summary']}"] if "summary" in cap else []
        for c in cap.get("captures") or []:
            lines.append(f"    {c['kind']} {c['name']}: {c['verdict']}")
        runs: list[list[Any]] = []  # [capture, table, first rowid, last rowid]
        for r in cap.get("rows") or []:
            last = runs[-1] if runs else None
            if last and last[:2] == [r["capture"], r["table"]] and last[3] + 1 == r["rowid"]:
                last[3] = r["rowid"]
            else:
                runs.append([r["capture"], r["table"], r["rowid"], r["rowid"]])
        for capture, table, first, end in runs:
            ids = f"rowid {first}" if first == end else f"rowids {first}-{end}"
            lines.append(f"    brought in: {table} {ids} from {capture}")
        for r in cap.get("left_out") or []:
            lines.append(
                f"    left out: {r['table']} rowid {r['rowid']} of {r['capture']}: {r['why']}"
            )
        for name in cap.get("quarantined") or []:
            lines.append(f"    moved to quarantine: {name}")
        return lines

    def _recover_lines(self) -> list[str]:
        rec = self.recover
        if rec is None:
            return []
        lines = [
            f"  recover: damage {rec.get('damage')}, strategy {rec.get('strategy')},"
            f" verified {rec.get('verified')}, loss_detected {rec.get('loss_detected')}"
        ]
        for name, t in sorted((rec.get("tables") or {}).items()):
            lost = rows_lost(t) or t.get("lost_at_most") or t.get("unreadable_ranges")
            if t.get("duplicates_dropped") or lost or t.get("set_aside"):
                lines.append(
                    f"    {name}: {t.get('recovered')} rows kept, {lost_words(t)},"
                    f" {t.get('duplicates_dropped')} duplicate(s) dropped,"
                    f" {t.get('set_aside')} set aside, {t.get('status')}"
                )
        return lines

    def render(self) -> list[str]:
        lines = [f"maintenance {self.action} of {self.db}: {self.outcome}"]
        if self.message:
            lines.append(f"  {self.message}")
        if self.path:
            lines.append(f"  new file: {self.path}")
        for s in self.steps:
            lines.append(f"  {s.step:<12} {s.seconds:8.3f} s")
        if self.downtime_s is not None:
            lines.append(f"  downtime: {self.downtime_s:.3f} s (first stop -> last unit active)")
        elif self.units_stopped or self.start_again:
            done = ["units stopped and started again"] if self.units_stopped else []
            done += ["processes stopped (named below)"] if self.start_again else []
            swapped = self.outcome in ("repaired", "swapped", "merged")
            lines.append(f"  {'; '.join(done)}{'' if swapped else ', nothing swapped'}")
        if self.swap_s is not None:
            lines.append(f"  swap: {self.swap_s * 1000:.1f} ms")
        if self.quarantine:
            lines.append(f"  original kept in {self.quarantine}")
        for u in self.units_started:
            lines.append(f"  unit {u.unit}: start {u.result}, now {u.state}")
        for p in self.start_again:
            if p.running_again == p.pid:
                lines.append(f"  still running: {p.command} (pid {p.pid}; it was never stopped)")
            elif p.running_again:
                lines.append(
                    f"  running again: {p.command} (pid {p.running_again}; whatever"
                    " started it started it again)"
                )
            else:
                lines.append(f"  start again yourself: {p.command} (was pid {p.pid})")
        lines.extend(self._import_lines())
        if self.merge is not None:
            if "summary" in self.merge:
                lines.append(f"  {self.merge['summary']}")
            lines.append(f"  {self.merge['old']} is this database's: {self.merge['proof']}")
        lines.extend(self._captures_lines())
        if self.post_check is not None:
            lines.append(f"  post-check: {self.post_check.summary}")
            if isinstance(self.post_check.integrity, list):
                shown = self.post_check.integrity[:POST_CHECK_ERRORS_SHOWN]
                lines.extend(f"    {e}" for e in shown)
        lines.extend(self._recover_lines())
        for f in self.failures:
            lines.append(f"  failed: {f.step}: {f.error}")
        for n in self.notes:
            lines.append(f"  note: {n}")
        return lines
