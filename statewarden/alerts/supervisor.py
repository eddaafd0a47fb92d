"""The alert that statewarden itself has stopped for good.

When ``statewarden.service`` fails past its start limit, the user manager starts
``statewarden-failed@statewarden.service.service`` (its ``OnFailure=``), which runs
``statewardenctl alerts supervisor-failed UNIT``: one ``supervisor_failed`` notification,
sent straight through each configured sink from that short-lived process (the daemon,
and with it the outbox's delivery loop, is not running), with a few retries for a sink
that is only briefly unreachable. So a dead supervisor is never silent.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Mapping

from statewarden.alerts.message import Item, Notification
from statewarden.alerts.service import make_sinks, send_direct
from statewarden.config import AlertsConfig

KIND = "supervisor_failed"
EVIDENCE_LINES = 3
RETRIES = 2  # more tries for a sink that is briefly unreachable (2 s, then 4 s)
RETRY_WAIT_S = 2.0


def last_log_lines(unit: str, n: int = EVIDENCE_LINES) -> list[str]:
    """The unit's last journal lines (best effort: none when the journal is not readable)."""
    try:
        r = subprocess.run(
            ["journalctl", "--user", "-u", unit, "-n", str(n), "-o", "cat", "--no-pager"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
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
    return await send_direct(make_sinks(cfg, env), n, retries=RETRIES, retry_wait_s=RETRY_WAIT_S)
