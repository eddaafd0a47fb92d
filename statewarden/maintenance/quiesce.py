"""Quiesce: stop every holder, then wait until full holder scans show none for a while.

Units are stopped and started through the user manager with a job wait
(``systemd.py``); a process that is not a unit gets SIGTERM, then SIGKILL after the
grace period, and only after its start time shows it is still the process the plan
named (a pid can be reused). Several such processes are stopped together: SIGTERM to
all, one grace period, SIGKILL to the rest (two that ignore SIGTERM cost one
``stop_grace``, not two). Settling is a loop of full ``/proc`` scans that must show
zero holders for ``settle_s`` in a row. A holder that turns up meanwhile is stopped the
same way, and counted by its command line; one that comes back more than
``respawn_limit`` times ends the run, named with its parent chain and the SSH client
it came from, so the user knows what keeps starting it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from statewarden.errors import QuiesceFailed, SystemdCallFailed, SystemdUnavailable
from statewarden.holders import (
    HolderScan,
    HolderScanner,
    annotate,
    read_cmdline,
    read_environ_var,
    read_stat,
    read_uid,
    short_command,
)
from statewarden.maintenance.plan import REFUSE, SIGNAL, STOP_UNIT, HolderDecision, decide
from statewarden.maintenance.wording import incomplete_reason
from statewarden.systemd import JobResult, UserManager, call_sync

SCAN_GAP_S = 0.1
EXIT_POLL_S = 0.05
# An incomplete scan is taken again before it ends a run: a process that exits or takes a
# lock while /proc is read leaves one scan short, and the next one whole. What stays
# incomplete this many full scans in a row (hidepid, an unreadable /proc/locks, a lock
# held outside this PID namespace) ends the run, as before: it fails closed.
INCOMPLETE_SCANS = 5


def _alive(pid: int, start_ticks: int | None) -> bool:
    try:
        st = read_stat(pid)
    except OSError:
        return False
    if st.state in ("Z", "X"):
        return False
    return start_ticks is None or st.start_ticks == start_ticks


def start_ticks_of(pid: int) -> int | None:
    try:
        return read_stat(pid).start_ticks
    except OSError:
        return None


def terminate_all(targets: Sequence[tuple[int, int | None]], grace_s: float) -> dict[int, str]:
    """Stop every ``(pid, start ticks)`` at once: SIGTERM to each, then one grace period
    for all, then SIGKILL to those still there (after their start time shows they are
    still the process named). How each ended, by pid: ``gone``, ``term`` or ``kill``."""
    how: dict[int, str] = {}
    waiting: list[tuple[int, int | None]] = []
    for pid, ticks in targets:
        how[pid] = "gone"
        if not _alive(pid, ticks):
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        how[pid] = "term"
        waiting.append((pid, ticks))
    deadline = time.monotonic() + grace_s
    while waiting and time.monotonic() < deadline:
        waiting = [(pid, ticks) for pid, ticks in waiting if _alive(pid, ticks)]
        if waiting:
            time.sleep(EXIT_POLL_S)
    killed = []
    for pid, ticks in waiting:
        if not _alive(pid, ticks):
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        how[pid] = "kill"
        killed.append((pid, ticks))
    for pid, ticks in killed:
        while _alive(pid, ticks):
            time.sleep(EXIT_POLL_S)
    return how


def running_again(
    commands: Sequence[str], gone: set[int], db: Path
) -> dict[str, list[tuple[int, int]]]:
    """Of ``commands`` (as :func:`short_command` names them), those live processes of
    this uid run now that are none of the processes signalled (``gone``) and that are
    a Hermes of ``db`` (:func:`_of_database`): started again by whoever respawns them
    (the desktop app's ``serve --isolated``). command -> [(pid, parent pid)], every
    such process. The same command of another Hermes home is not it (a report once
    said another home's gateway was this one's, running again, while this one's
    stayed stopped)."""
    wanted = set(commands)
    found: dict[str, list[tuple[int, int]]] = {}
    me = os.getuid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in gone:
            continue
        pid = int(entry.name)
        try:
            if read_uid(pid) != me:
                continue
            command = short_command(read_cmdline(pid))
            if command in wanted and _of_database(pid, db):
                found.setdefault(command, []).append((pid, read_stat(pid).ppid))
        except OSError:
            continue
    return found


def still_runs(pid: int, command: str, db: Path) -> bool:
    """Whether ``pid`` is still a process of this uid running ``command`` for ``db``."""
    try:
        if read_uid(pid) != os.getuid():
            return False
        return short_command(read_cmdline(pid)) == command and _of_database(pid, db)
    except OSError:
        return False


def _of_database(pid: int, db: Path) -> bool:
    """Whether process ``pid`` is a Hermes of ``db``: it holds the file now, or its
    Hermes home (``$HERMES_HOME``, else ``$HOME/.hermes``, from its environment) is the
    folder of ``db``."""
    real = os.path.realpath(db)
    try:
        with os.scandir(f"/proc/{pid}/fd") as fds:
            for fd in fds:
                with contextlib.suppress(OSError):
                    if os.readlink(fd.path) == real:
                        return True
    except OSError:
        pass
    home = read_environ_var(pid, "HERMES_HOME")
    if not home:
        user_home = read_environ_var(pid, "HOME")
        if not user_home:
            return False
        home = os.path.join(user_home, ".hermes")
    # The home itself only: a process of the home a profile lives in is the default
    # profile's (another profile's Hermes was once named this one's, running again); one
    # that works on a profile of its home holds that profile's file once it runs.
    return os.path.dirname(real) == os.path.realpath(home)


def complete_scan(scanner: HolderScanner, gap_s: float = SCAN_GAP_S) -> HolderScan:
    """One full scan of the first target; taken again, up to ``INCOMPLETE_SCANS`` in all,
    while it is incomplete. The last scan either way: the caller still checks
    ``complete`` (a scan that stayed incomplete is never taken for a whole one)."""
    scan = scanner.scan(full=True)[0]
    for _ in range(INCOMPLETE_SCANS - 1):
        if scan.complete:
            break
        time.sleep(gap_s)
        scan = scanner.scan(full=True)[0]
    return scan


def stop_units(units: Sequence[str], address: str | None, timeout_s: float) -> list[JobResult]:
    return _jobs("stop", units, address, timeout_s)


def start_units(units: Sequence[str], address: str | None, timeout_s: float) -> list[JobResult]:
    return _jobs("start", units, address, timeout_s)


def _jobs(
    action: str, units: Sequence[str], address: str | None, timeout_s: float
) -> list[JobResult]:
    async def run(m: UserManager) -> list[JobResult]:
        out = []
        for unit in units:
            call = m.stop_unit if action == "stop" else m.start_unit
            out.append(await call(unit, timeout_s=timeout_s))
        return out

    try:
        return call_sync(run, address)
    except (SystemdUnavailable, SystemdCallFailed) as exc:
        raise QuiesceFailed(f"could not {action} {', '.join(units)}: {exc}") from None


def unit_states(units: Sequence[str], address: str | None) -> dict[str, str]:
    """Each unit's ActiveState (``unknown`` if the manager does not know it)."""

    async def run(m: UserManager) -> dict[str, str]:
        out = {}
        for unit in units:
            info = await m.unit(unit)
            out[unit] = info.active_state if info is not None else "unknown"
        return out

    try:
        return call_sync(run, address)
    except (SystemdUnavailable, SystemdCallFailed):
        return dict.fromkeys(units, "unknown")


def annotate_units(scanner_scans: list[HolderScan], address: str | None) -> str | None:
    """Confirm holders' units with the manager; the reason it could not, or None."""

    try:
        call_sync(lambda m: annotate(m, scanner_scans), address)
    except SystemdUnavailable as exc:
        return str(exc)
    except SystemdCallFailed as exc:
        return f"systemd user manager not reachable: {exc}"
    return None


def describe_origin(d: HolderDecision) -> str:
    """``parent chain: 4411 hermes-desktop <- 1200 sshd; SSH client 10.0.0.2 ...``."""
    chain = " <- ".join(f"{p.get('pid')} {p.get('comm') or '?'}" for p in d.parents) or "none"
    text = f"parent chain: {chain}"
    if d.ssh_connection:
        text += f"; started over SSH from {d.ssh_connection.split()[0]}"
    return text


@dataclass
class SettleResult:
    ok: bool
    reason: str = ""
    comebacks: dict[str, int] = field(default_factory=dict)
    signalled: list[HolderDecision] = field(default_factory=list)
    scans: int = 0


@dataclass
class Settler:
    """Full scans until no holder is seen for ``settle_s``; stops what comes back."""

    scanner: HolderScanner
    settle_s: float
    timeout_s: float
    respawn_limit: int
    grace_s: float
    force: bool
    stop_interactive: bool
    on_signal: Callable[[HolderDecision], None]
    on_unit: Callable[[str], None]
    unit_timeout_s: float
    address: str | None = None
    systemd_ok: bool = True
    # Holders waited for, never signalled: the statewarden daemon, whose reads of the
    # file are short and read-only (a verification's copy, a header read).
    wait_for: frozenset[int] = frozenset()

    def run(self) -> SettleResult:
        result = SettleResult(ok=False)
        started = time.monotonic()
        quiet_since = time.monotonic()
        while True:
            scan = complete_scan(self.scanner)
            result.scans += 1
            if not scan.complete:
                result.reason = incomplete_reason(scan)
                return result
            # This process holds the original open for reading (fence.hold_open).
            scan.holders = [h for h in scan.holders if h.pid != os.getpid()]
            waiting = [h for h in scan.holders if h.pid in self.wait_for]
            scan.holders = [h for h in scan.holders if h.pid not in self.wait_for]
            if scan.holders and self.systemd_ok:
                self.systemd_ok = annotate_units([scan], self.address) is None
            to_signal: list[tuple[HolderDecision, int | None]] = []
            for h in scan.holders:
                d = decide(
                    h,
                    force=self.force,
                    stop_interactive=self.stop_interactive,
                    systemd_ok=self.systemd_ok,
                )
                key = d.command
                result.comebacks[key] = result.comebacks.get(key, 0) + 1
                if d.action == REFUSE:
                    result.reason = f"pid {d.pid} ({d.command}) opened the database: {d.reason}"
                    return result
                if result.comebacks[key] > self.respawn_limit:
                    result.reason = (
                        f"{d.command} came back {result.comebacks[key]} times"
                        f" (last as pid {d.pid}; {describe_origin(d)}): close what starts it"
                        " (the desktop app starts hermes serve --isolated) and retry"
                    )
                    return result
                if d.action == STOP_UNIT and d.unit:
                    self.on_unit(d.unit)
                    stop_units([d.unit], self.address, self.unit_timeout_s)
                elif d.action == SIGNAL:
                    to_signal.append((d, h.start_ticks))
            # Those that will not stop are waited for together: one grace period in all.
            for d, _ in to_signal:
                self.on_signal(d)
                result.signalled.append(d)
            if to_signal:
                terminate_all([(d.pid, ticks) for d, ticks in to_signal], self.grace_s)
            now = time.monotonic()
            if scan.holders or waiting:
                quiet_since = now
            elif now - quiet_since >= self.settle_s:
                result.ok = True
                return result
            if now - started > self.timeout_s:
                result.reason = f"holders did not settle within {self.timeout_s:g} s"
                return result
            time.sleep(SCAN_GAP_S)
