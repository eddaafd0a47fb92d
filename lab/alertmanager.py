"""A real Prometheus Alertmanager (Debian's ``prometheus-alertmanager``) on 127.0.0.1.

Started with its own config, storage folder and a free port, no clustering. Its one
receiver is a webhook to ``webhook_url`` (``send_resolved: true``, short group waits), so
a test sees what Alertmanager itself sends on, resolved notifications included;
:meth:`Alertmanager.alerts` is ``GET /api/v2/alerts`` (the active alerts).
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

BINARY = "/usr/bin/prometheus-alertmanager"
START_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Alertmanager:
    def __init__(self, folder: Path, webhook_url: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "alertmanager.yml"
        config.write_text(
            "route:\n"
            "  receiver: hook\n"
            "  group_by: [alertname, database]\n"
            "  group_wait: 0s\n"
            "  group_interval: 1s\n"
            "  repeat_interval: 1h\n"
            "receivers:\n"
            "  - name: hook\n"
            "    webhook_configs:\n"
            f"      - url: {json.dumps(webhook_url)}\n"
            "        send_resolved: true\n"
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "alertmanager.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    BINARY,
                    f"--config.file={config}",
                    f"--storage.path={folder / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--cluster.listen-address=",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_S
        while True:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"alertmanager did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)

    def alerts(self) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/api/v2/alerts", timeout=5)
        r.raise_for_status()
        data: list[dict[str, Any]] = r.json()
        return data

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
