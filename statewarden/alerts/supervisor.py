"""The alert that statewarden itself has stopped for good.

When ``statewarden.service`` fails past its start limit, the user manager starts
``statewarden-failed@statewarden.service.service`` (its ``OnFailure=``), which runs
``statewardenctl alerts supervisor-failed UNIT``: one ``supervisor_failed`` notification,
sent straight through each configured sink from that short-lived process (the daemon,
and with it the outbox's delivery loop, is not running), with a few retries for a sink
that is only briefly unreachable. So a dead supervisor is never silent.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Mapping

from statewarden.alerts.message import Item, Notification
from statewarden.alerts.outbox import Entry
from statewarden.alerts.service import make_sinks
from statewarden.alerts.sink import Refused, Rejected, Retry, SinkError
from statewarden.config import AlertsConfig

KIND = "supervisor_failed"
EVIDENCE_LINES = 3
RETRIES = 3
RETRY_WAIT_S = 2.0


def last_log_lines(unit: str, n: int = EVIDENCE_LINES) -> list[str]:
    """The unit's last journal lines (best effort: none when the journal is not readable)."""
    try:
        r = subprocess.run(
            ["journalctl", "--user", "-u", unit, "-n", str(n), "-o", "cat", "--no-pager"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in r.stdout.splitlines() if line.strip()][-n:]


def notification(unit: str, evidence: list[str], now: float | None = None) -> Notification:
    now = time.time() if now is None else now
    item = Item(
        incident=0,
        kind=KIND,
        severity="critical",
        db="every watched database",
        profile="all",
        summary=f"{unit} has stopped for good (start limit hit): nothing watches"
        " Hermes' state.db until it runs again",
        change="opened",
        first_seen=now,
        last_seen=now,
        count=1,
        evidence=evidence,
        next_step=f"journalctl --user -u {unit} -n 50; fix the cause, then"
        f" systemctl --user reset-failed {unit} && systemctl --user start {unit}",
    )
    return Notification(f"{KIND}:{unit}:{now:.6f}", "firing", socket.gethostname(), now, [item])


async def send(
    cfg: AlertsConfig, unit: str, env: Mapping[str, str] | None = None
) -> dict[str, dict[str, str]]:
    """Send the notification through every configured sink; each sink's answer."""
    n = notification(unit, last_log_lines(unit))
    results: dict[str, dict[str, str]] = {}
    for name, sink in make_sinks(cfg, env).items():
        entry = Entry(0, name, n, n.created_at, on_disk=False)
        try:
            for attempt in range(RETRIES):
                try:
                    answer = await sink.deliver(entry, lambda _parts: None)
                except Retry:
                    if attempt == RETRIES - 1:
                        raise
                    await asyncio.sleep(RETRY_WAIT_S * 2**attempt)
                else:
                    results[name] = {"result": "ok", "answer": answer}
                    break
        except (Retry, Rejected, Refused) as exc:
            kind = {Retry: "failed", Rejected: "rejected", Refused: "refused"}[type(exc)]
            results[name] = {"result": kind, "answer": str(exc)}
        except SinkError as exc:  # pragma: no cover - every sink raises one of the three
            results[name] = {"result": "failed", "answer": str(exc)}
        finally:
            await sink.close()
    return results
