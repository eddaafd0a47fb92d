"""The journal follower's commands and its behaviour when journalctl cannot run."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from statewarden.watch.journal import JournalFollower, journalctl_command


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
