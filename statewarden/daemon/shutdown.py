"""One stage of the daemon's staged shutdown: run with a time limit, and said in the log.

Each stage is logged with its name, how long it took and its outcome: ``done`` (info),
``overran`` its time limit (warning: it was given up and the shutdown went on) or
``failed`` with the error (error). A stage that fails or overruns does not keep the
next one from running.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any


async def run_stage(
    log: Any, name: str, step: Awaitable[Any], limit_s: float, *, reraise: bool = False
) -> bool:
    """Await ``step`` for at most ``limit_s``; log the stage; True when it was done.

    With ``reraise``, a stage that failed raises its error once logged (for what the
    caller must not lose silently, such as the incident book not saved).
    """
    t0 = time.monotonic()
    try:
        await asyncio.wait_for(step, limit_s)
    except TimeoutError:
        took = round(time.monotonic() - t0, 3)
        log.warning(
            "shutdown stage overran", stage=name, took_s=took, limit_s=limit_s, outcome="overran"
        )
        return False
    except Exception as exc:
        took = round(time.monotonic() - t0, 3)
        log.error(
            "shutdown stage failed",
            stage=name,
            took_s=took,
            outcome="failed",
            error=f"{type(exc).__name__}: {exc}",
        )
        if reraise:
            raise
        return False
    log.info(
        "shutdown stage done", stage=name, took_s=round(time.monotonic() - t0, 3), outcome="done"
    )
    return True
