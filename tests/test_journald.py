"""journald's native protocol, sd_notify, and the structlog set-up, over real sockets."""

from __future__ import annotations

import io
import json
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from statewarden import journald, logs
from tests.support.journal import decode_entry

pytestmark = pytest.mark.process


@pytest.fixture
def journal_socket(tmp_path: Path) -> Iterator[socket.socket]:
    path = tmp_path / "journal.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(5)
        yield sock


@pytest.fixture
def sender(journal_socket: socket.socket) -> Iterator[journald.JournalSender]:
    """A sender to ``journal_socket``, closed after the test."""
    sender = journald.JournalSender(journal_socket.getsockname())
    yield sender
    sender.close()


class TestNativeProtocol:
    def test_simple_and_multiline_fields(
        self, journal_socket: socket.socket, sender: journald.JournalSender
    ) -> None:
        """Plain fields use NAME=value; a value with a newline uses the length-prefixed form."""
        sender.send({"MESSAGE": "line one\nline two", "PRIORITY": 4, "X": "y"})
        data = journal_socket.recv(65536)
        assert b"PRIORITY=4\n" in data
        assert b"MESSAGE\n" + struct.pack("<Q", 17) + b"line one\nline two\n" in data
        assert decode_entry(data) == {"MESSAGE": "line one\nline two", "PRIORITY": "4", "X": "y"}

    def test_oversized_entry_goes_through_memfd(
        self, journal_socket: socket.socket, sender: journald.JournalSender
    ) -> None:
        """An entry larger than the socket buffer is passed as a sealed memfd."""
        journal_socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sender._socket().setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        big = "x" * 300_000
        sender.send({"MESSAGE": big})
        msg, ancdata, _flags, _addr = journal_socket.recvmsg(16, socket.CMSG_LEN(4))
        assert msg == b""
        fd = struct.unpack("i", ancdata[0][2][:4])[0]
        try:
            content = os.pread(fd, 400_000, 0)
        finally:
            os.close(fd)
        assert decode_entry(content) == {"MESSAGE": big}

    def test_field_names_are_sanitised(self) -> None:
        """Event keys become valid journal field names."""
        assert journald.field_name("db-path") == "DB_PATH"
        assert journald.field_name("_private") == "PRIVATE"
        assert journald.field_name("9lives") == "F_9LIVES"

    def test_missing_socket_is_not_available(self, tmp_path: Path) -> None:
        """No journal socket: the sender says so instead of failing later."""
        assert not journald.JournalSender(str(tmp_path / "none")).available


class TestNotify:
    @pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
    def test_notify_messages_arrive(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, abstract: bool
    ) -> None:
        """READY, STATUS, WATCHDOG, RELOADING (+MONOTONIC_USEC) and STOPPING reach the socket."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = f"statewarden-test-{os.getpid()}"
            sock.bind("\0" + name)
            monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        else:
            sock.bind(str(tmp_path / "notify"))
            monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
        sock.settimeout(5)
        assert journald.notify_ready("2 databases")
        assert sock.recv(4096) == b"READY=1\nSTATUS=2 databases"
        assert journald.notify_watchdog()
        assert sock.recv(4096) == b"WATCHDOG=1"
        assert journald.notify_reloading()
        lines = sock.recv(4096).decode().split("\n")
        assert lines[0] == "RELOADING=1"
        assert lines[1].startswith("MONOTONIC_USEC=")
        assert int(lines[1].split("=")[1]) > 0
        assert journald.notify_stopping()
        assert sock.recv(4096) == b"STOPPING=1"
        sock.close()

    def test_no_notify_socket_is_a_no_op(self) -> None:
        """Outside a service manager, notify reports False and does nothing."""
        assert journald.notify("READY=1") is False

    def test_dead_notify_socket_never_raises(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A manager that went away must not take the daemon down."""
        monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone"))
        assert journald.notify("READY=1") is False

    def test_watchdog_interval(self) -> None:
        """Ping at half of WATCHDOG_USEC, only when WATCHDOG_PID is ours (or unset)."""
        assert journald.watchdog_interval_s({"WATCHDOG_USEC": "10000000"}) == 5.0
        assert (
            journald.watchdog_interval_s({"WATCHDOG_USEC": "10000000", "WATCHDOG_PID": "1"}) is None
        )
        assert journald.watchdog_interval_s({}) is None
        assert journald.watchdog_interval_s({"WATCHDOG_USEC": "x"}) is None


class TestLogging:
    def teardown_method(self) -> None:
        structlog.reset_defaults()

    def test_journald_fields(
        self, journal_socket: socket.socket, sender: journald.JournalSender
    ) -> None:
        """Under systemd an event becomes an entry with PRIORITY, identifier and fields;
        never a MESSAGE_ID (those are the alerts'), even from a field of that name."""
        logs.configure("info", "journald", stream=io.StringIO(), journal=sender)
        logs.get_logger().warning(
            "jsonl fallback fired",
            message_id="3f9a1c5e2b7d4e8f9a0b1c2d3e4f5a6b",
            profile="default",
            holders=[1, 2],
        )
        entry = decode_entry(journal_socket.recv(65536))
        assert entry == {
            "MESSAGE": "jsonl fallback fired",
            "PRIORITY": "4",
            "SYSLOG_IDENTIFIER": "statewarden",
            "STATEWARDEN_MESSAGE_ID": "3f9a1c5e2b7d4e8f9a0b1c2d3e4f5a6b",
            "STATEWARDEN_PROFILE": "default",
            "STATEWARDEN_HOLDERS": "[1, 2]",
        }

    def test_level_filter(
        self, journal_socket: socket.socket, sender: journald.JournalSender
    ) -> None:
        """Events below the configured level are not sent."""
        logs.configure("warning", "journald", stream=io.StringIO(), journal=sender)
        logs.get_logger().info("quiet")
        logs.get_logger().error("loud")
        assert decode_entry(journal_socket.recv(65536))["MESSAGE"] == "loud"

    def test_no_journal_socket_falls_back_to_prefixed_stderr(self, tmp_path: Path) -> None:
        """Without a journal socket, lines carry <N> priority prefixes on stderr."""
        stream = io.StringIO()
        logs.configure(
            "info", "journald", stream=stream, journal=journald.JournalSender(str(tmp_path / "x"))
        )
        logs.get_logger().error("disk I/O error seen", profile="work")
        assert stream.getvalue() == "<3>disk I/O error seen profile=work\n"

    def test_secrets_are_redacted(self) -> None:
        """Token-like keys and bot tokens inside text never reach the output."""
        stream = io.StringIO()
        logs.configure("info", "plain", stream=stream)
        token = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawQ"
        logs.get_logger().info(
            "sending", bot_token=token, url=f"https://api.telegram.org/bot{token}/sendMessage"
        )
        out = stream.getvalue()
        assert token not in out
        assert "bot_token=***redacted***" in out

    def test_auto_picks_journald_under_systemd(
        self, journal_socket: socket.socket, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """INVOCATION_ID (set by systemd for every unit) switches auto to journald."""
        monkeypatch.setenv("INVOCATION_ID", "abc")
        assert logs.choose_format("auto", io.StringIO()) == "journald"
        monkeypatch.delenv("INVOCATION_ID")
        assert logs.choose_format("auto", io.StringIO()) == "plain"

    def test_daemon_logs_to_journal_socket_under_systemd(
        self, journal_socket: socket.socket, tmp_path: Path
    ) -> None:
        """A real `statewarden run` with JOURNAL_STREAM set sends its start event to the journal socket."""
        env = dict(
            os.environ,
            JOURNAL_STREAM="8:1234",
            STATEWARDEN_JOURNAL_SOCKET=journal_socket.getsockname(),
            HERMES_HOME=str(tmp_path / "none"),
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "statewarden.cli.daemon_cmd", "run"], env=env
        )
        try:
            entry = decode_entry(journal_socket.recv(65536))
            assert entry["MESSAGE"] == "statewarden started"
            assert entry["SYSLOG_IDENTIFIER"] == "statewarden"
            assert entry["PRIORITY"] == "6"
            assert entry["STATEWARDEN_CONFIG"] == "defaults"
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0


def test_json_format_is_json() -> None:
    """logging.format: json gives one JSON object per line."""
    stream = io.StringIO()
    logs.configure("info", "json", stream=stream)
    logs.get_logger().info("hello", n=1)
    structlog.reset_defaults()
    data = json.loads(stream.getvalue())
    assert data["event"] == "hello"
    assert data["n"] == 1
    assert data["level"] == "info"
