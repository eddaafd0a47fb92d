"""File events (inotify through watchdog) that wake the daemon's loop.

One observer watches, non-recursively, every directory holding a watched database
and every Hermes logs directory. Any event there calls ``on_event(path)`` from the
observer thread; the daemon turns that into ``loop.call_soon_threadsafe(wake, path)``,
and the loop polls. Events carry no meaning here: the watchers' polls decide what changed, so a
missed or merged event costs at most one ``watch.poll_interval``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from statewarden.logs import get_logger


class _Handler(FileSystemEventHandler):
    def __init__(self, on_event: Callable[[str], None]) -> None:
        self.on_event = on_event

    def on_any_event(self, event: FileSystemEvent) -> None:
        path = event.src_path
        self.on_event(path.decode(errors="replace") if isinstance(path, bytes) else path)


class FileEvents:
    def __init__(self, on_event: Callable[[str], None]) -> None:
        self._handler = _Handler(on_event)
        self._observer: Any = None
        self._watches: dict[str, Any] = {}
        self.log = get_logger()

    def start(self) -> None:
        self._observer = Observer()
        self._observer.daemon = True
        self._observer.start()

    def watch_dirs(self, dirs: set[str]) -> None:
        """Watch exactly ``dirs`` (adding new ones, dropping gone ones)."""
        if self._observer is None:
            return
        for d in sorted(set(self._watches) - dirs):
            try:
                self._observer.unschedule(self._watches.pop(d))
            except (KeyError, OSError, ValueError):
                self._watches.pop(d, None)
        for d in sorted(dirs - set(self._watches)):
            try:
                self._watches[d] = self._observer.schedule(self._handler, d, recursive=False)
            except OSError as exc:
                # inotify watch limits or a directory that vanished: polling still works.
                self.log.warning("file events unavailable for a directory", dir=d, error=str(exc))

    def stop(self, timeout_s: float = 5.0) -> None:
        if self._observer is None:
            return
        self._observer.stop()
        self._observer.join(timeout_s)
        self._observer = None
        self._watches.clear()
