"""File events through the real inotify observer, the way the daemon wakes up."""

from __future__ import annotations

import threading
from pathlib import Path

from statewarden.watch.events import FileEvents


class TestFileEvents:
    def test_write_in_watched_dir_calls_back_with_the_path(self, tmp_path: Path) -> None:
        """A line appended to a log in a watched directory reaches the callback with its path;
        a directory no longer watched stays quiet."""
        seen: list[str] = []
        got = threading.Event()

        def on_event(path: str) -> None:
            seen.append(path)
            got.set()

        logs = tmp_path / "logs"
        other = tmp_path / "other"
        logs.mkdir()
        other.mkdir()
        events = FileEvents(on_event)
        events.start()
        try:
            events.watch_dirs({str(logs), str(other)})
            (logs / "agent.log").write_text("line\n")
            assert got.wait(10)
            assert str(logs / "agent.log") in seen
            events.watch_dirs({str(logs)})
            seen.clear()
            got.clear()
            (other / "x.log").write_text("x\n")
            (logs / "agent.log").write_text("again\n")
            assert got.wait(10)
            assert not any(p.startswith(str(other)) for p in seen)
        finally:
            events.stop()

    def test_missing_directory_is_not_fatal(self, tmp_path: Path) -> None:
        """A directory that vanished is skipped; the other watched directories still report."""
        got = threading.Event()
        events = FileEvents(lambda _p: got.set())
        events.start()
        try:
            events.watch_dirs({str(tmp_path / "gone"), str(tmp_path)})
            (tmp_path / "agent.log").write_text("line\n")
            assert got.wait(10)
        finally:
            events.stop()
