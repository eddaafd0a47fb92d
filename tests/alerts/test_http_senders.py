"""What every sender over HTTP (the heartbeat, the Alertmanager sink, the Telegram sink)
shares, held across the senders and across URLs: the server a text names is the URL's
scheme, host and port, never a secret piece of it, and "?" where the URL names no host;
the secret read from a private file is scrubbed from every text about the sender."""

from __future__ import annotations

from pathlib import Path

import pytest

from statewarden.alerts.alertmanager import AlertmanagerSink
from statewarden.alerts.heartbeat import Heartbeat
from statewarden.alerts.http import HttpSender
from statewarden.alerts.telegram import TelegramSink
from statewarden.config import AlertmanagerConfig, HeartbeatConfig, TelegramConfig
from tests.support.alerts import Log

KEY = "5f1c0a2e8b3d4c1e9f6a2d7b8e9c0a1b"
PASSWORD = "s3cret-Pa55"
# A secret URL -> the server its texts name.
URLS = {
    f"https://hc.example.org/ping/{KEY}": "https://hc.example.org",
    f"https://user:{PASSWORD}@hc.example.org:8443/ping/{KEY}": "https://hc.example.org:8443",
    f"http://127.0.0.1:3001/api/push/{KEY}?status=up": "http://127.0.0.1:3001",
    f"https:///ping/{KEY}": "?",  # no host: nothing to name
    "http://": "?",
}


def secret_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "secret.url"
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


def senders(tmp_path: Path, url: str) -> list[HttpSender]:
    """Each sender whose URL is a secret, built from ``url`` in a private file."""
    path = secret_file(tmp_path, url)
    return [
        Heartbeat(HeartbeatConfig(url_file=path), log=Log(), trouble=lambda: ""),
        AlertmanagerSink(AlertmanagerConfig(url_file=path)),
    ]


@pytest.mark.parametrize("url", list(URLS))
def test_a_secret_url_names_its_server_by_scheme_host_and_port(tmp_path: Path, url: str) -> None:
    """The server each sender names is scheme, host and port of its URL ("?" without a
    host), and none of the URL's secret pieces (key, password) survives its scrubber."""
    for sender in senders(tmp_path, url):
        name = type(sender).__name__
        assert sender.server == URLS[url], name
        assert KEY not in sender.server, name
        assert PASSWORD not in sender.server, name
        said = sender.scrub(f"cannot reach {url}: {KEY} {PASSWORD}")
        for secret in (s for s in (KEY, PASSWORD) if s in url):
            assert secret not in said, (name, said)


def test_a_url_with_no_secret_is_named_with_its_path(tmp_path: Path) -> None:
    """An Alertmanager URL written in the config holds no secret: it is named whole (with
    its path, which tells one Alertmanager behind a proxy from another), scrubbed of nothing."""
    sink = AlertmanagerSink(AlertmanagerConfig(url="http://am.example.org:9093/am/"))
    assert sink.server == "http://am.example.org:9093/am"
    assert sink.scrub("http://am.example.org:9093/am") == "http://am.example.org:9093/am"


def test_the_telegram_token_and_its_secret_half_are_scrubbed(tmp_path: Path) -> None:
    """The bot token, and its secret half on its own, are scrubbed; the server named is
    the API base, which holds no token."""
    token = "123456789:AAH" + KEY
    sink = TelegramSink(TelegramConfig(token_file=secret_file(tmp_path, token), chat_id="1"))
    assert sink.server == TelegramConfig().api_base
    said = sink.scrub(f"https://api.telegram.org/bot{token}/sendMessage; AAH{KEY}")
    assert token not in said
    assert KEY not in said
