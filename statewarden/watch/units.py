"""The unit watcher: the Hermes units' state changes and restarts, over D-Bus.

Subscribes to ``PropertiesChanged`` of the user manager's Hermes units *before*
reading their state (so no change falls between the two), then:

- every restart (``NRestarts`` going up) and every ``ActiveState`` change is a timeline
  observation ("hermes-gateway.service restarted (3 restarts)");
- ``crash_restarts`` restarts within ``crash_window_s`` is ``crash_loop``; it clears
  once the unit has run for a whole window without restarting;
- ``status`` ("watching N Hermes units") is listed again when a unit not seen before
  changes, when a unit's ``ActiveState`` or ``LoadState`` changes (and ``RELIST_AFTER_S``
  later: a stopped unit is unloaded without a change being sent), and every
  ``CHECK_EVERY_S``, so it follows units that appear and disappear.

No bus, no user manager or access denied: the reason is kept in ``status`` and the
connection retried with capped backoff (from the shortest wait again once connected);
the rest of the daemon (and everything found through /proc) goes on working.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from statewarden.backoff import Backoff
from statewarden.errors import SystemdUnavailable
from statewarden.incidents import Found, Observation, Signal
from statewarden.systemd import DEFAULT_UNIT_PATTERNS, UnitChange, UserManager

DEFAULT_CRASH_RESTARTS = 5
DEFAULT_CRASH_WINDOW_S = 600.0
BACKOFF_START_S = 2.0
BACKOFF_MAX_S = 300.0
CHECK_EVERY_S = 30.0
# Properties whose change may add a unit to the listing or take one out of it.
_LISTING_CHANGES = frozenset({"ActiveState", "LoadState"})
RELIST_AFTER_S = 2.0  # ... and again this long after such a change


class UnitWatcher:
    def __init__(
        self,
        on_found: Callable[[Found], None],
        db_for_unit: Callable[[str], str],
        *,
        address: str | None = None,
        patterns: tuple[str, ...] = tuple(DEFAULT_UNIT_PATTERNS),
        crash_restarts: int = DEFAULT_CRASH_RESTARTS,
        crash_window_s: float = DEFAULT_CRASH_WINDOW_S,
    ) -> None:
        self.on_found = on_found
        self.db_for_unit = db_for_unit
        self.address = address
        self.patterns = patterns
        self.crash_restarts = crash_restarts
        self.crash_window_s = crash_window_s
        self.status = "starting"
        self.backoff = Backoff(BACKOFF_START_S, BACKOFF_MAX_S)
        self._restarts_seen: dict[str, int] = {}
        self._restart_times: dict[str, deque[float]] = {}
        self._looping: set[str] = set()
        self.units: set[str] = set()  # the Hermes units loaded, as last listed

    def restarted(self, unit: str, n_restarts: int, now: float) -> None:
        """Account for a unit's restart counter; raise crash_loop when it loops."""
        before = self._restarts_seen.get(unit)
        self._restarts_seen[unit] = n_restarts
        if before is None or n_restarts <= before:
            return
        db = self.db_for_unit(unit)
        times = self._restart_times.setdefault(unit, deque(maxlen=1000))
        for _ in range(n_restarts - before):
            times.append(now)
        self.on_found(
            Observation(
                "unit_restarted",
                db,
                f"{unit} restarted ({n_restarts} restarts)",
                now,
                {"unit": unit, "n_restarts": n_restarts},
            )
        )
        recent = [t for t in times if t >= now - self.crash_window_s]
        if len(recent) >= self.crash_restarts and unit not in self._looping:
            self._looping.add(unit)
            self.on_found(
                Signal(
                    "crash_loop",
                    db,
                    f"{unit} restarted {len(recent)} times in {self.crash_window_s / 60:.0f} min "
                    f"({n_restarts} restarts in all)",
                    now,
                    key=unit,
                    source=f"unit:{unit}",
                    fields={"unit": unit, "n_restarts": n_restarts},
                )
            )

    def check_quiet(self, now: float) -> None:
        """Clear crash_loop for units that ran a whole window without restarting."""
        for unit in sorted(self._looping):
            times = self._restart_times.get(unit)
            if not times or times[-1] < now - self.crash_window_s:
                self._looping.discard(unit)
                self.on_found(
                    Signal(
                        "crash_loop",
                        self.db_for_unit(unit),
                        f"{unit} stable again",
                        now,
                        key=unit,
                        clears=True,
                    )
                )

    def _state_change(self, unit: str, changed: dict[str, Any], now: float) -> None:
        if "NRestarts" in changed:
            self.restarted(unit, int(changed["NRestarts"]), now)
        state = changed.get("ActiveState")
        if isinstance(state, str):
            sub = changed.get("SubState")
            text = f"{unit} is {state}" + (f" ({sub})" if isinstance(sub, str) else "")
            self.on_found(
                Observation(
                    "unit_state",
                    self.db_for_unit(unit),
                    text,
                    now,
                    {"unit": unit, "active_state": state},
                )
            )

    async def _watch_once(self) -> None:
        async with UserManager(self.address) as manager:
            stream = await manager.watch_units(self.patterns)
            await self._list(manager)
            self.backoff.succeeded()  # connected: a later loss starts again from the shortest wait
            iterator = stream.__aiter__()
            relist_at: float | None = None  # monotonic: list again then (a unit unloading)
            # The next change, awaited across quiet periods: cancelling ``__anext__`` on a
            # timeout would close the stream for good (an async generator ends when a
            # cancellation goes through it), and with it the watch.
            pending: asyncio.Task[UnitChange] | None = None
            try:
                while True:
                    wait = CHECK_EVERY_S
                    if relist_at is not None:
                        wait = max(0.0, min(wait, relist_at - time.monotonic()))
                    if pending is None:
                        pending = asyncio.ensure_future(iterator.__anext__())
                    done, _ = await asyncio.wait({pending}, timeout=wait)
                    if not done:
                        relist_at = None
                        await self._list(manager)  # units unloaded meanwhile are gone
                        self.check_quiet(time.time())
                        continue
                    try:
                        change = pending.result()
                    except StopAsyncIteration:
                        return  # the stream ended: reconnect
                    finally:
                        pending = None
                    now = time.time()
                    self._state_change(change.unit, change.changed, now)
                    if change.unit not in self.units or _LISTING_CHANGES & set(change.changed):
                        await self._list(manager)  # a unit appeared, started or stopped
                        # A stopped unit is unloaded a moment later (no change is sent then).
                        relist_at = time.monotonic() + RELIST_AFTER_S
                    self.check_quiet(now)
            finally:
                if pending is not None:
                    pending.cancel()

    async def _list(self, manager: UserManager) -> None:
        """The Hermes units loaded now: ``status`` follows them as they come and go."""
        units = await manager.list_units(self.patterns)
        for info in units:
            self._restarts_seen.setdefault(info.name, info.n_restarts)
        # A unit whose file is gone lingers as "not-found" while something refers to it.
        self.units = {info.name for info in units if info.load_state == "loaded"}
        n = len(self.units)
        self.status = f"watching {n} Hermes unit{'s' if n != 1 else ''}"

    async def run(self) -> None:
        """Watch until cancelled; reconnect with backoff when the user manager is lost."""
        while True:
            why = "the user manager stopped sending changes"
            try:
                await self._watch_once()
            except SystemdUnavailable as exc:
                why = str(exc)
            except (OSError, EOFError) as exc:
                why = f"lost the user manager ({exc})"
            delay = self.backoff.failed()
            self.status = f"{why}; retrying in {delay:.0f} s"
            await asyncio.sleep(delay)
