"""The asyncio supervisor behind ``statewarden run``.

Start-up runs in named phases (config, discovery, ready); the main loop wakes on a
ticker (``discovery.rescan_interval``) or a signal. Signal handlers only record the
signal; the loop acts on it: SIGTERM/SIGINT stop, SIGHUP reloads the config and keeps
the old one if the new one is invalid. With no Hermes home on the machine the daemon
says so and keeps running: a home or database that appears later is picked up on the
next rescan.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from statewarden import journald
from statewarden.config import Config
from statewarden.errors import ConfigError
from statewarden.logs import get_logger
from statewarden.targets import Target, discover


@dataclass
class _Seen:
    """What the last rescan found, to log only what changed."""

    targets: dict[str, Target] = field(default_factory=dict)
    present: dict[str, bool] = field(default_factory=dict)
    announced_empty: bool = False


class Daemon:
    def __init__(self, config: Config, reload: Callable[[], Config]) -> None:
        self.config = config
        self._reload = reload
        self.log = get_logger()
        self._wake = asyncio.Event()
        self._stop_signal: int | None = None
        self._reload_requested = False
        self._seen = _Seen()

    # -------------------------------------------------------------- signals

    def _on_signal(self, signum: int) -> None:
        if signum == signal.SIGHUP:
            self._reload_requested = True
        else:
            self._stop_signal = signum
        self._wake.set()

    def request_stop(self) -> None:
        self._on_signal(signal.SIGTERM)

    # -------------------------------------------------------------- phases

    def rescan(self) -> list[Target]:
        """Discover targets and log what appeared or went away since the last scan."""
        targets = discover(self.config)
        seen = self._seen
        if not targets:
            if not seen.announced_empty:
                self.log.warning(
                    "no Hermes home found; waiting for one to appear",
                    looked_for="$HERMES_HOME or ~/.hermes",
                    rescan_interval_s=self.config.discovery.rescan_interval,
                )
                seen.announced_empty = True
        else:
            seen.announced_empty = False
        current = {str(t.db): t for t in targets}
        for key, t in current.items():
            exists = t.db.exists()
            if key not in seen.targets:
                self.log.info(
                    "watching database",
                    profile=t.name,
                    db=key,
                    present=exists,
                    gateway_unit=t.gateway_unit,
                )
            elif exists and not seen.present.get(key):
                self.log.info("database appeared", profile=t.name, db=key)
            elif not exists and seen.present.get(key):
                self.log.warning("database disappeared", profile=t.name, db=key)
            seen.present[key] = exists
        for key, t in seen.targets.items():
            if key not in current:
                self.log.info("no longer watching database", profile=t.name, db=key)
                seen.present.pop(key, None)
        seen.targets = current
        return targets

    def _status_line(self) -> str:
        n = len(self._seen.targets)
        present = sum(1 for v in self._seen.present.values() if v)
        if n == 0:
            return "waiting for a Hermes home"
        return f"{n} database{'s' if n != 1 else ''} watched, {present} present"

    def _apply_reload(self) -> None:
        journald.notify_reloading()
        try:
            new = self._reload()
        except ConfigError as exc:
            self.log.error("config reload failed; keeping the running config", error=str(exc))
        else:
            self.config = new
            self.log.info("config reloaded", source=new.source or "defaults")
        self.rescan()
        journald.notify("READY=1", f"STATUS={self._status_line()}")

    async def _watchdog(self, interval_s: float) -> None:
        # Pinged from the loop itself, so a hung loop stops pinging and gets restarted.
        while True:
            journald.notify_watchdog()
            await asyncio.sleep(interval_s)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(signum, self._on_signal, signum)
        tasks: list[asyncio.Task[Any]] = []
        interval = journald.watchdog_interval_s()
        if interval:
            tasks.append(asyncio.create_task(self._watchdog(interval)))
        self.log.info("statewarden started", config=self.config.source or "defaults")
        self.rescan()
        journald.notify_ready(self._status_line())
        try:
            while self._stop_signal is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._wake.wait(), timeout=self.config.discovery.rescan_interval
                    )
                self._wake.clear()
                if self._stop_signal is not None:
                    break
                if self._reload_requested:
                    self._reload_requested = False
                    self._apply_reload()
                    continue
                self.rescan()
                journald.notify_status(self._status_line())
        finally:
            journald.notify_stopping()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(signum)
        name = signal.Signals(self._stop_signal).name if self._stop_signal else "?"
        self.log.info("statewarden stopped", signal=name)
        return 0
