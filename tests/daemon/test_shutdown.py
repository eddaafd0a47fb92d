"""The daemon's staged shutdown: each stage said in the log, with its name, duration and
outcome; a stage that fails or overruns says so and the next one still runs."""

from __future__ import annotations

import asyncio
import re
import signal

import pytest
from structlog.testing import capture_logs

from statewarden.daemon.shutdown import run_stage
from statewarden.logs import get_logger
from tests.support.daemon import DaemonProc

STAGES = ("control socket", "file events", "background tasks", "alerts", "incident book")


async def _done() -> None:
    await asyncio.sleep(0)


async def _fails() -> None:
    raise OSError(28, "No space left on device")


async def _hangs() -> None:
    await asyncio.sleep(60)


def test_a_stage_that_finishes_is_logged_done() -> None:
    """A stage that finishes in time is one info line: its name, ``took_s``, ``done``."""
    with capture_logs() as logs:
        ok = asyncio.run(run_stage(get_logger(), "alerts", _done(), 5.0))
    assert ok is True
    assert logs == [
        {
            "event": "shutdown stage done",
            "log_level": "info",
            "stage": "alerts",
            "took_s": logs[0]["took_s"],
            "outcome": "done",
        }
    ]
    assert 0 <= logs[0]["took_s"] < 5.0


def test_a_stage_that_fails_says_so_and_the_next_one_runs() -> None:
    """A failing stage is an error line naming the stage and the error; it does not stop
    the shutdown: the stage after it runs and is logged too."""

    async def two() -> tuple[bool, bool]:
        log = get_logger()
        first = await run_stage(log, "incident book", _fails(), 5.0)
        second = await run_stage(log, "alerts", _done(), 5.0)
        return first, second

    with capture_logs() as logs:
        assert asyncio.run(two()) == (False, True)
    assert [(e["event"], e["stage"], e["outcome"]) for e in logs] == [
        ("shutdown stage failed", "incident book", "failed"),
        ("shutdown stage done", "alerts", "done"),
    ]
    assert logs[0]["log_level"] == "error"
    assert logs[0]["error"] == "OSError: [Errno 28] No space left on device"


def test_a_stage_that_overruns_is_given_up_and_said() -> None:
    """A stage past its limit is given up (cancelled) and a warning names it, with the
    limit and how long it took; the shutdown goes on."""
    with capture_logs() as logs:
        ok = asyncio.run(run_stage(get_logger(), "background tasks", _hangs(), 0.05))
    assert ok is False
    (entry,) = logs
    assert entry["event"] == "shutdown stage overran"
    assert entry["log_level"] == "warning"
    assert (entry["stage"], entry["outcome"], entry["limit_s"]) == (
        "background tasks",
        "overran",
        0.05,
    )
    assert 0.05 <= entry["took_s"] < 5.0


def test_reraise_keeps_the_error_for_the_caller() -> None:
    """With ``reraise`` (the incident book), a failed stage is logged, then raised."""
    with capture_logs() as logs, pytest.raises(OSError, match="No space left"):
        asyncio.run(run_stage(get_logger(), "incident book", _fails(), 5.0, reraise=True))
    assert [e["outcome"] for e in logs] == ["failed"]


def test_a_real_daemon_logs_every_stage_on_sigterm(daemon: DaemonProc) -> None:
    """A real ``statewarden run`` stopped with SIGTERM logs each shutdown stage, in order,
    each done, before ``statewarden stopped``; it exits 0."""
    assert daemon.stop(signal.SIGTERM) == 0
    lines = daemon.output()
    stage_lines = [line for line in lines if "shutdown stage" in line]
    named = [re.search(r'stage=("[^"]*"|\S+)', line).group(1).strip('"') for line in stage_lines]  # type: ignore[union-attr]
    assert named == list(STAGES), stage_lines
    assert all("shutdown stage done" in line and "outcome=done" in line for line in stage_lines)
    stopped = next(i for i, line in enumerate(lines) if "statewarden stopped" in line)
    assert stopped > lines.index(stage_lines[-1])
