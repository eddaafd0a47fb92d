"""A full disk does not silence an alert: the state directory on a real, full, tiny
tmpfs (a private mount namespace), a corruption incident still reaches the local Bot API
server, sent from memory, and the reason it is not on disk is reported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.bot_api import BotApi
from tests.support.repo import REPO

pytestmark = pytest.mark.process

TOKEN = "123456789:AAHfakeTokenForTestsOnly_abcdefghijk"

SCRIPT = textwrap.dedent(
    """\
    import asyncio, json, sys
    from pathlib import Path
    from tests.support.full_disk import mount_full_tmpfs
    state, url = Path(sys.argv[1]), sys.argv[2]
    mount_full_tmpfs(state)
    from statewarden.alerts.service import Alerts
    from statewarden.config import AlertsConfig, JournaldAlertsConfig, TelegramConfig
    from statewarden.incidents.book import IncidentBook
    from statewarden.incidents.signals import Signal

    class Log:
        lines = []
        def __getattr__(self, level):
            return lambda event, **kw: self.lines.append([level, event, kw])

    cfg = AlertsConfig(journald=JournaldAlertsConfig(enabled=False),
                       telegram=TelegramConfig(enabled=True, chat_id="1", api_base=url,
                                               min_interval=0.01))
    log = Log()
    alerts = Alerts(cfg, state, log=log, env={"STATEWARDEN_TELEGRAM_TOKEN": sys.argv[3]},
                    host="box")
    update = IncidentBook(None).record(Signal("corruption", "/db", "database disk image is malformed"))

    async def main():
        task = asyncio.create_task(alerts.run())
        alerts.submit(update)
        for _ in range(600):
            await asyncio.sleep(0.05)
            if alerts.status()["sinks"]["telegram"]["delivered"]:
                break
        status = alerts.status()
        task.cancel()
        await alerts.close()
        return status

    print(json.dumps({"status": asyncio.run(main()), "log": log.lines}))
    """
)


@pytest.fixture
def api() -> Iterator[BotApi]:
    server = BotApi()
    yield server
    server.stop()


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root and unshare for a private tmpfs",
)
def test_full_disk_sends_from_memory(tmp_path: Path, api: BotApi) -> None:
    """With the state directory on a full tmpfs, a corruption notification is still delivered to
    Telegram from memory; the persist error and the log say so, and the token is never shown."""
    state = tmp_path / "state"
    state.mkdir()
    r = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            sys.executable,
            "-c",
            SCRIPT,
            str(state),
            api.url,
            TOKEN,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["status"]["sinks"]["telegram"]["delivered"] == 1
    assert "No space left on device" in out["status"]["persist_error"]
    (req,) = api.accepted
    assert req.text.startswith("<b>CRITICAL corruption on box")
    events = [e for _lvl, e, _kw in out["log"]]
    assert any(
        e.startswith("alerts cannot be written to disk; sending from memory") for e in events
    )
    assert TOKEN not in r.stdout + r.stderr
