"""The watchers on a real machine's rough edges: a log that is a FIFO or a device, no
inotify left for this user, and the files newer Hermes keeps beside state.db."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from lab.hermes_fixtures import log_line
from statewarden.config import Config
from statewarden.incidents.signals import Found, Signal
from statewarden.targets import target_for_db
from statewarden.watch.monitor import TargetMonitor

WHEN = dt.datetime(2026, 9, 7, 17, 5, 28, 701000)


def monitor_for(home: Path) -> TargetMonitor:
    (home / "logs").mkdir(parents=True, exist_ok=True)
    return TargetMonitor(target_for_db(home / "state.db"), Config())


def failed(found: Sequence[Found]) -> list[Signal]:
    return [s for s in found if isinstance(s, Signal) and s.kind == "watcher_failed"]


class TestLogIsNotARegularFile:
    """A FIFO (nobody writing: an open without O_NONBLOCK would hang for ever) or a link
    to /dev/zero (endless bytes) where a log should be: skipped with a one-line message
    that says what it is, never read, never blocking (the suite's per-test timeout fails
    a hang)."""

    @pytest.mark.parametrize("make", ["fifo", "dev_zero"])
    def test_skipped_with_the_right_message(self, tmp_path: Path, make: str) -> None:
        home = tmp_path / "home"
        m = monitor_for(home)
        m.poll()
        log = home / "logs" / "agent.log"
        if make == "fifo":
            os.mkfifo(log)
            what = f"{log} is a FIFO (named pipe), not a log file"
        else:
            log.symlink_to("/dev/zero")
            what = f"{log} is a character device (a link to /dev/zero), not a log file"
        (sig,) = failed(m.poll())
        assert sig.key == "logs/agent.log"
        assert sig.summary == (
            f"Hermes' log agent.log is skipped: {what}; statewarden reads only regular files, "
            "so nothing logged there is seen. Remove it (Hermes creates agent.log again as a "
            "regular file)"
        )
        assert "read access" not in sig.summary
        assert failed(m.poll()) == []  # said once
        # The other logs are still followed.
        errors = home / "logs" / "errors.log"
        errors.write_text(
            log_line(WHEN, "ERROR", "hermes_state", "x: database disk image is malformed")
            + "\n"
            + log_line(WHEN, "INFO", "gateway.run", "next")  # completes the record
            + "\n"
        )
        found = m.poll()
        assert [s.kind for s in found if isinstance(s, Signal)] == ["corruption"]
        # Back to a regular file: the incident clears and the log is read.
        log.unlink()
        log.write_text(log_line(WHEN, "INFO", "gateway.run", "hello") + "\n")
        (cleared,) = failed(m.poll())
        assert cleared.clears
        m.close()

    def test_fifo_with_a_writer_is_not_read(self, tmp_path: Path) -> None:
        """Even with a writer keeping the FIFO open, nothing is read from it."""
        home = tmp_path / "home"
        m = monitor_for(home)
        m.poll()
        log = home / "logs" / "gateway.log"
        os.mkfifo(log)
        rd = os.open(log, os.O_RDONLY | os.O_NONBLOCK)
        wr = os.open(log, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(
                wr,
                (log_line(WHEN, "ERROR", "x", "database disk image is malformed") + "\n").encode(),
            )
            found = m.poll()
            assert [s.kind for s in found if isinstance(s, Signal)] == ["watcher_failed"]
            assert os.read(rd, 4096)  # the bytes are still in the pipe: never consumed
        finally:
            os.close(wr)
            os.close(rd)
            m.close()
