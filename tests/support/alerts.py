"""What the alert tests share: signals and a router on a real incident book and outbox,
a stand-in for structlog, Telegram configs and notifications, and the daemon's alert config."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from lab.bot_api import BotApi
from statewarden.alerts.message import Item, Notification
from statewarden.alerts.outbox import Outbox
from statewarden.alerts.router import Route, Router
from statewarden.config import AlertsConfig, TelegramConfig
from statewarden.incidents.book import IncidentBook, Update
from statewarden.incidents.signals import Signal

DB = "/home/u/.hermes/state.db"
T0 = 1_800_000_000.0
CFG = AlertsConfig()  # group_wait 30 s, no_wait critical, repeat 4 h
TOKEN = "123456789:AAHfakeTokenForTestsOnly_abcdefghijk"


def sig(kind: str, at: float, key: str = "", clears: bool = False, **kw: object) -> Signal:
    return Signal(
        kind,
        DB,
        f"{kind} summary",
        at=at,
        key=key,
        clears=clears,
        evidence=("2026-11-30 10:00:00 ERROR gateway: database is locked",),
        **kw,  # type: ignore[arg-type]
    )


class Rig:
    def __init__(self, tmp_path: Path, cfg: AlertsConfig = CFG) -> None:
        self.tmp = tmp_path
        self.cfg = cfg
        self.book = IncidentBook(tmp_path / "incidents.json")
        self.outbox = Outbox(tmp_path / "outbox", max_entries=100)
        self.router = self.make_router()

    def make_router(self) -> Router:
        return Router(
            self.cfg,
            self.outbox,
            {"journald": Route("info"), "telegram": Route("warning")},
            state_path=self.tmp / "alerts.json",
            host="box",
            profile_of=lambda db: "default",
            holders_of=lambda db: ["pid 42 (gateway, hermes-gateway.service): hermes gateway"],
        )

    def fire(self, s: Signal) -> Update:
        update = self.book.record(s)
        assert update is not None
        self.router.submit(update, now=s.at)
        return update

    def sent(self, sink: str = "journald") -> list[str]:
        return [e.key for e in self.outbox.pending(sink)]


class Log:
    """Collects what the delivery loop logs (the real daemon passes structlog)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        def log(event: str, **kw: Any) -> None:
            self.lines.append((level, event, kw))

        return log


def cfg(api: BotApi, **kw: Any) -> TelegramConfig:
    base = TelegramConfig(
        enabled=True, chat_id="123456789", api_base=api.url, min_interval=0.05, timeout=1.0
    )
    return dataclasses.replace(base, **kw)


def note(
    key: str, summary: str = "database disk image is malformed", evidence: int = 1
) -> Notification:
    item = Item(
        7,
        "corruption",
        "critical",
        "/home/u/.hermes/state.db",
        "default",
        summary,
        "opened",
        1.0,
        2.0,
        3,
        evidence=[f"line {k} <b>&" for k in range(evidence)],
        next_step="statewardenctl check --profile default",
    )
    return Notification(key, "firing", "box", 1.0, [item])


def configure(env: dict[str, str], api_url: str, **alerts: object) -> None:
    path = Path(env["XDG_CONFIG_HOME"]) / "statewarden" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in alerts.items())
    path.write_text(
        "alerts:\n"
        "  retry_max: 500ms\n"
        "  group_wait: 300ms\n"
        f"{extra}"
        "  journald: {enabled: true}\n"
        "  telegram:\n"
        "    enabled: true\n"
        '    chat_id: "123456789"\n'
        f"    api_base: {api_url}\n"
        "    min_interval: 50ms\n"
        "    timeout: 2s\n"
    )
    env["STATEWARDEN_TELEGRAM_TOKEN"] = TOKEN
