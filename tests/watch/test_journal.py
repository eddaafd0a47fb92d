"""The journal follower: its journalctl commands, its behaviour when journalctl cannot run,
and the daemon following a real journald and systemd --user (root only).

The gateway prints the JSONL fallback line to stdout, so only its unit's journal has it
(docs/hermes.md). There a real unit prints that line; the daemon, following the journal with
journalctl, must open a jsonl_fallback incident.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.hermes_fixtures import TINY, make_home
from statewarden.watch.journal import JournalFollower, journalctl_command
from tests.support.daemon import DaemonProc
from tests.support.systemd_harness import UserSystemd, unavailable_reason, user_systemd
from tests.support.waiting import wait_for


def run_until_first_failure(f: JournalFollower, limit_s: float = 4.0) -> None:
    """Run the follower on a real event loop until journalctl has failed once."""

    async def run() -> None:
        task = asyncio.create_task(f.run())
        for _ in range(int(limit_s / 0.02)):
            await asyncio.sleep(0.02)
            if f.errors:
                break
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(run())


class TestCommand:
    def test_first_start_begins_when_the_follower_was_made(self) -> None:
        """Without a cursor, entries since the follower's creation are read (a line logged
        while journalctl starts up is not skipped as history)."""
        assert journalctl_command(["u.service"], None, as_root=True, since=1796000000.7)[-3:] == [
            "-n",
            "all",
            "--since=@1796000000",
        ]

    def test_user_and_root_forms(self) -> None:
        """A user follows its own units; root matches _SYSTEMD_USER_UNIT (--user-unit filters on
        the caller's uid). With a saved cursor it resumes after it, else it starts at the end."""
        assert journalctl_command(["hermes-gateway.service"], None, as_root=False) == [
            "journalctl",
            "-f",
            "-o",
            "json",
            "--no-pager",
            "--user",
            "-u",
            "hermes-gateway.service",
            "-n",
            "0",
        ]
        assert journalctl_command(["a.service", "b.service"], "s=abc", as_root=True) == [
            "journalctl",
            "-f",
            "-o",
            "json",
            "--no-pager",
            "_SYSTEMD_USER_UNIT=a.service",
            "_SYSTEMD_USER_UNIT=b.service",
            "--after-cursor=s=abc",
        ]


@pytest.mark.process
class TestFailures:
    def test_missing_journalctl_is_a_status_not_a_crash(self, tmp_path: Path) -> None:
        """No journalctl: the follower says so in its status and keeps retrying."""
        entries: list[dict[str, Any]] = []
        f = JournalFollower(
            ["hermes-gateway.service"],
            tmp_path / "cursor",
            entries.append,
            journalctl=str(tmp_path / "no-such-journalctl"),
        )

        run_until_first_failure(f)
        assert f.status == f"journal not followed: {tmp_path / 'no-such-journalctl'} not found"
        assert f.errors == 1
        assert entries == []

    def test_entries_and_cursor_from_a_real_process(self, tmp_path: Path) -> None:
        """Whatever runs as journalctl, its JSON lines are handed over in order, garbage lines
        are skipped, and the last cursor is saved for the next start."""
        fake = tmp_path / "journalctl"
        fake.write_text(
            "#!/bin/sh\n"
            'echo \'{"MESSAGE": "one", "__CURSOR": "c1"}\'\n'
            "echo 'not json'\n"
            'echo \'{"MESSAGE": "two", "__CURSOR": "c2"}\'\n'
            "exit 1\n"
        )
        fake.chmod(0o755)
        entries: list[dict[str, Any]] = []
        f = JournalFollower(
            ["u.service"], tmp_path / "cursor", entries.append, journalctl=str(fake)
        )

        run_until_first_failure(f)
        assert [e["MESSAGE"] for e in entries] == ["one", "two"]
        assert (tmp_path / "cursor").read_text() == "c2"
        assert f.status.startswith("journal not followed: journalctl exited with 1")
        again = JournalFollower(
            ["u.service"], tmp_path / "cursor", entries.append, journalctl=str(fake)
        )
        assert (
            journalctl_command(again.units, again._cursor, as_root=True)[-1] == "--after-cursor=c2"
        )

    def test_entries_end_a_failure_streak(self, tmp_path: Path) -> None:
        """A journalctl that handed over entries before it died is retried after the
        shortest wait, however long the streak before it was."""
        fake = tmp_path / "journalctl"
        fake.write_text('#!/bin/sh\necho \'{"MESSAGE": "one", "__CURSOR": "c1"}\'\nexit 1\n')
        fake.chmod(0o755)
        entries: list[dict[str, Any]] = []
        f = JournalFollower(
            ["u.service"], tmp_path / "cursor", entries.append, journalctl=str(fake)
        )
        f.backoff.failures = 8  # a long streak before this run: the next wait would be 256 s

        async def run() -> None:
            task = asyncio.create_task(f.run())
            for _ in range(200):
                await asyncio.sleep(0.02)
                if entries and f.status.startswith("journal not followed"):
                    break
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        asyncio.run(run())
        assert [e["MESSAGE"] for e in entries] == ["one"]
        assert f.errors == 1
        assert f.status.endswith("retrying in 1 s")


UNIT = "hermes-gateway.service"
FALLBACK = "[gateway] Warning: SQLite session store unavailable, falling back to JSONL: database disk image is malformed"


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[UserSystemd]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with user_systemd(tmp_path / "manager") as m:
        yield m


@pytest.mark.systemd
class TestRealJournald:
    def test_fallback_line_printed_by_a_unit_opens_incident(
        self, manager: UserSystemd, tmp_path: Path
    ) -> None:
        """A unit printing the JSONL fallback line to stdout -> a jsonl_fallback incident."""
        home = make_home(tmp_path / "hermes", TINY)
        config = tmp_path / "config.yaml"
        config.write_text(f"targets:\n  - home: {home}\n    gateway_unit: {UNIT}\n")
        env = dict(
            os.environ,
            HERMES_HOME=str(home),
            XDG_STATE_HOME=str(tmp_path / "state"),
            XDG_RUNTIME_DIR=str(tmp_path / "run"),
            XDG_CONFIG_HOME=str(tmp_path / "cfg"),
        )
        env.pop("NOTIFY_SOCKET", None)
        # Inside the manager's mount namespace, where its journal lives.
        d = DaemonProc(
            env, "--config", str(config), prefix=("nsenter", "-t", str(manager.manager_pid), "-m")
        )
        try:
            d.wait_for_line("statewarden ready")
            wait_for(
                lambda: d.ctl_raw("status")["databases"][0]["journal"].startswith("following"),
                what="journal followed",
            )
            manager.write_unit(
                UNIT, f"[Service]\nExecStart=/bin/sh -c 'echo \"{FALLBACK}\"; exec sleep 300'\n"
            )
            manager.daemon_reload()
            r = manager.systemctl("start", UNIT)
            assert r.returncode == 0, r.stderr
            wait_for(lambda: FALLBACK in manager.journal(UNIT), what="line in the unit's journal")
            (inc,) = wait_for(
                lambda: [
                    i for i in d.ctl("incidents")["incidents"] if i["kind"] == "jsonl_fallback"
                ],
                what="jsonl_fallback incident",
            )
            assert inc["severity"] == "critical"
            assert "database disk image is malformed" in inc["summary"]
            assert inc["source"].startswith("journal")
        finally:
            manager.systemctl("stop", UNIT)
            assert d.stop(signal.SIGTERM) == 0

    def test_crash_looping_unit_opens_crash_loop(
        self, manager: UserSystemd, tmp_path: Path
    ) -> None:
        """A Hermes unit that keeps dying and being restarted by systemd is a crash_loop
        incident, seen through NRestarts over D-Bus; restarts are on the timeline."""
        home = make_home(tmp_path / "hermes", TINY)
        config = tmp_path / "config.yaml"
        config.write_text(
            f"targets:\n  - home: {home}\n    gateway_unit: {UNIT}\nwatch:\n  journal: false\n"
        )
        env = dict(
            manager.env(),
            HERMES_HOME=str(home),
            XDG_STATE_HOME=str(tmp_path / "state"),
            XDG_RUNTIME_DIR=str(tmp_path / "run"),
            XDG_CONFIG_HOME=str(tmp_path / "cfg"),
        )
        env.pop("NOTIFY_SOCKET", None)
        manager.write_unit(
            UNIT,
            "[Unit]\nStartLimitIntervalSec=0\n[Service]\nExecStart=/bin/false\n"
            "Restart=always\nRestartSec=200ms\n",
        )
        manager.daemon_reload()
        d = DaemonProc(env, "--config", str(config))
        try:
            d.wait_for_line("statewarden ready")
            wait_for(
                lambda: d.ctl_raw("status")["units"].startswith("watching"), what="units watched"
            )
            manager.systemctl("start", UNIT)
            (inc,) = wait_for(
                lambda: [i for i in d.ctl("incidents")["incidents"] if i["kind"] == "crash_loop"],
                what="crash_loop incident",
            )
            assert inc["key"] == UNIT
            assert inc["db"] == str(home / "state.db")
            shown = d.ctl("incidents", "show", str(inc["id"]))
            assert any(e["what"] == "unit_restarted" for e in shown["timeline"])
        finally:
            manager.systemctl("stop", UNIT)
            assert d.stop(signal.SIGTERM) == 0
