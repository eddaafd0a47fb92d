"""File events (inotify through watchdog) that wake the daemon's loop.

One observer watches, non-recursively, every directory holding a watched database
and every Hermes logs directory. Any event there calls ``on_event(path)`` from the
observer thread; the daemon turns that into ``loop.call_soon_threadsafe(wake, path)``,
and the loop polls. Events carry no meaning here: the watchers' polls decide what changed, so a
missed or merged event costs at most one ``watch.poll_interval``.

Without inotify (the user's instances or watches used up: ``statewarden/inotify.py``)
nothing stops: the observer, or the watch of a directory, is left out, ``degraded`` says
why and what to raise, and the daemon's ``watch.poll_interval`` poll detects everything,
later. ``retry`` tries again every ``RETRY_S``; ``signals`` turns the state into a
``watcher_degraded`` incident and its clearing.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from statewarden.incidents import Found, Signal
from statewarden.inotify import unavailable
from statewarden.logs import get_logger

RETRY_S = 10.0
SIGNAL_KEY = "file_events"


class _Handler(FileSystemEventHandler):
    def __init__(self, on_event: Callable[[str], None]) -> None:
        self.on_event = on_event

    def on_any_event(self, event: FileSystemEvent) -> None:
        path = event.src_path
        self.on_event(path.decode(errors="replace") if isinstance(path, bytes) else path)


class FileEvents:
    def __init__(
        self,
        on_event: Callable[[str], None],
        *,
        observer_factory: Callable[[], Any] = Observer,
        retry_s: float = RETRY_S,
    ) -> None:
        self._handler = _Handler(on_event)
        self._factory = observer_factory
        self._observer: Any = None
        self._watches: dict[str, Any] = {}
        self._wanted: set[str] = set()
        self._started = False
        self.retry_s = retry_s
        self._next_retry = 0.0
        # Why file events are (partly) unavailable and the daemon relies on its poll.
        self.degraded: str | None = None
        self._reported: str | None = None
        self.log = get_logger()

    def start(self) -> None:
        self._started = True
        self._start_observer()

    def _start_observer(self) -> bool:
        try:
            observer = self._factory()
            observer.daemon = True
            observer.start()
        except OSError as exc:
            self._degrade(f"file events: {unavailable(exc.errno, str(exc.strerror or exc))}")
            return False
        self._observer = observer
        return True

    def _degrade(self, why: str) -> None:
        if why != self.degraded:
            self.log.warning("inotify unavailable; polling instead", reason=why)
        self.degraded = why
        self._next_retry = time.monotonic() + self.retry_s

    def watch_dirs(self, dirs: set[str]) -> None:
        """Watch exactly ``dirs`` (adding new ones, dropping gone ones)."""
        self._wanted = set(dirs)
        if self._observer is None:
            return
        for d in sorted(set(self._watches) - dirs):
            try:
                self._observer.unschedule(self._watches.pop(d))
            except (KeyError, OSError, ValueError):
                self._watches.pop(d, None)
        problem = None
        for d in sorted(dirs - set(self._watches)):
            try:
                self._watches[d] = self._observer.schedule(self._handler, d, recursive=False)
            except FileNotFoundError:
                continue  # gone meanwhile: the next rescan drops it
            except OSError as exc:
                # This directory is polled only. The instance limit (EMFILE) is this
                # user's, not the directory's: watchdog 7 makes its one inotify instance
                # at the first watch, older versions when the observer starts; said alike.
                where = "file events" if exc.errno == errno.EMFILE else f"file events for {d}"
                problem = problem or (
                    f"{where}: {unavailable(exc.errno, str(exc.strerror or exc))}"
                )
        if problem is not None:
            self._degrade(problem)
        else:
            self.degraded = None

    def retry(self, now_monotonic: float | None = None) -> None:
        """Try inotify again if it was unavailable and ``retry_s`` has passed."""
        now = time.monotonic() if now_monotonic is None else now_monotonic
        if not self._started or self.degraded is None or now < self._next_retry:
            return
        self._next_retry = now + self.retry_s
        if self._observer is None and not self._start_observer():
            return
        self.watch_dirs(self._wanted)
        if self.degraded is None:
            self.log.info("inotify available again; file events back")

    def signals(self, now: float) -> list[Found]:
        """``watcher_degraded`` when file events became unavailable, cleared when back."""
        if self.degraded == self._reported:
            return []
        before, self._reported = self._reported, self.degraded
        if self.degraded is not None:
            return [
                Signal(
                    "watcher_degraded",
                    "*",
                    f"{self.degraded}. Detection goes on by polling (up to one "
                    "watch.poll_interval later)",
                    now,
                    key=SIGNAL_KEY,
                    source="events",
                    evidence=(self.degraded,),
                )
            ]
        if before is None:
            return []
        return [
            Signal(
                "watcher_degraded",
                "*",
                "file events (inotify) work again",
                now,
                key=SIGNAL_KEY,
                source="events",
                clears=True,
            )
        ]

    def status(self) -> dict[str, Any]:
        return {"watcher": "file events", "degraded": self.degraded}

    def stop(self, timeout_s: float = 5.0) -> None:
        self._started = False
        if self._observer is None:
            return
        self._observer.stop()
        self._observer.join(timeout_s)
        self._observer = None
        self._watches.clear()
