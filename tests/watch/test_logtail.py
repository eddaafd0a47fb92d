"""The log tailer on real files: appends, rotation by the real RotatingFileHandler,
copytruncate, restarts with persisted offsets, hostile bytes, and real inotify."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import logging
import logging.handlers
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.hermes_fixtures import hermes_python, log_line
from statewarden.targets import Target
from statewarden.watch.log_reader import LogReader
from statewarden.watch.logtail import (
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_RECORD_CHARS,
    LOG_NAMES,
    LogTailer,
)
from statewarden.watch.records import LogRecord, starts_record

pytestmark = pytest.mark.process

WHEN = dt.datetime(2026, 9, 7, 17, 5, 28, 701000)
HERMES_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/opt/hermes/hermes_state.py", line 1402, in append_message\n'
    "    cur.execute(sql, params)\n"
    "sqlite3.DatabaseError: database disk image is malformed"
)


def line(i: int) -> str:
    return log_line(WHEN, "INFO", "gateway.run", f"line {i}")


def append(path: Path, *lines: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        for text in lines:
            f.write(text + "\n")


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


class Clock:
    """A clock the test moves by hand, so idle delays need no sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def messages(records: list[LogRecord]) -> list[str]:
    return [r.message for r in records]


def drain(tailer: LogTailer) -> list[LogRecord]:
    out = tailer.poll()
    while tailer.behind:
        out += tailer.poll()
    return out + tailer.flush()


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    d = tmp_path / "home" / "logs"
    d.mkdir(parents=True)
    return d


@pytest.fixture
def offsets(tmp_path: Path) -> Path:
    return tmp_path / "state" / "logtail-default.json"


def tailer(logs: Path, offsets: Path, **kw: object) -> LogTailer:
    kw.setdefault("idle_flush_s", 0.0)
    return LogTailer(logs, offsets, **kw)  # type: ignore[arg-type]


@pytest.fixture
def rotating(logs: Path) -> Iterator[logging.Logger]:
    """A logger writing agent.log through the real RotatingFileHandler (small files)."""
    handler = logging.handlers.RotatingFileHandler(
        logs / "agent.log", maxBytes=2000, backupCount=3, encoding="utf-8"
    )
    handler.setFormatter(logging.Formatter(HERMES_FORMAT))
    logger = logging.getLogger(f"gateway.run.test{id(handler)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield logger
    logger.removeHandler(handler)
    handler.close()


class TestReading:
    def test_first_start_begins_at_end(self, logs: Path, offsets: Path) -> None:
        """On a first start, lines already in a log are history: only new ones come back."""
        append(logs / "agent.log", line(1), line(2))
        t = tailer(logs, offsets)
        assert t.poll() == []
        append(logs / "agent.log", line(3), line(4))
        assert messages(t.poll()) == ["line 3", "line 4"]

    def test_start_at_start_reads_history(self, logs: Path, offsets: Path) -> None:
        """start_at_end=False reads existing logs from their first byte."""
        append(logs / "errors.log", line(1), line(2))
        t = tailer(logs, offsets, start_at_end=False)
        assert messages(t.poll()) == ["line 1", "line 2"]

    def test_only_new_bytes_are_read(self, logs: Path, offsets: Path) -> None:
        """A second poll with nothing written reads no byte and returns nothing."""
        append(logs / "agent.log", line(1))
        t = tailer(logs, offsets, start_at_end=False)
        t.poll()
        read = t.stats.bytes_read
        assert t.poll() == []
        assert t.stats.bytes_read == read == (logs / "agent.log").stat().st_size

    def test_every_log_file_is_followed(self, logs: Path, offsets: Path) -> None:
        """agent.log, errors.log, gateway.log and gui.log are all read, each record
        saying which file it came from."""
        t = tailer(logs, offsets)
        t.poll()
        for name in LOG_NAMES:
            append(logs / name, log_line(WHEN, "INFO", "x", name))
        got = {r.message: Path(r.path).name for r in t.poll()}
        assert got == {name: name for name in LOG_NAMES}

    def test_traceback_is_joined_to_its_line(self, logs: Path, offsets: Path) -> None:
        """Lines that do not start with a timestamp belong to the record before them."""
        clock = Clock()
        t = tailer(logs, offsets, idle_flush_s=5.0, clock=clock)
        t.poll()
        first = log_line(WHEN, "ERROR", "run_agent", "Session DB append_message failed: boom")
        append(logs / "agent.log", first, TRACEBACK, line(2))
        [record] = t.poll()
        assert record.text == first + "\n" + TRACEBACK
        assert record.message == "Session DB append_message failed: boom"
        assert record.logger == "run_agent"

    def test_record_waits_for_next_line_or_idle_delay(self, logs: Path, offsets: Path) -> None:
        """A record being written (traceback still coming) is not returned until the
        next record starts or the idle delay has passed with no new line."""
        clock = Clock()
        t = tailer(logs, offsets, idle_flush_s=5.0, clock=clock)
        t.poll()
        first = log_line(WHEN, "ERROR", "gateway.run", "Supervised task x died: E()")
        append(logs / "agent.log", first, "Traceback (most recent call last):")
        assert t.poll() == []
        assert t.next_flush_in() == 5.0
        clock.now += 4.0
        append(logs / "agent.log", '  File "/x/run.py", line 1, in f')
        assert t.poll() == []
        clock.now += 5.0
        [record] = t.poll()
        assert record.text == (
            first + "\nTraceback (most recent call last):\n" + '  File "/x/run.py", line 1, in f'
        )
        assert t.next_flush_in() is None

    def test_partial_last_line_waits_for_its_newline(self, logs: Path, offsets: Path) -> None:
        """A line without its newline yet is not a line: it comes back whole later."""
        t = tailer(logs, offsets)
        t.poll()
        append_bytes(logs / "agent.log", line(1)[:30].encode())
        assert t.poll() == []
        append_bytes(logs / "agent.log", line(1)[30:].encode() + b"\n")
        assert messages(t.poll()) == ["line 1"]

    def test_file_appearing_later_is_read_from_its_start(
        self, tmp_path: Path, offsets: Path
    ) -> None:
        """A log created after start-up (even the logs dir itself) is read from byte 0."""
        logs = tmp_path / "late" / "logs"
        t = tailer(logs, offsets)
        assert t.poll() == []
        logs.mkdir(parents=True)
        append(logs / "gateway.log", line(1), line(2))
        assert messages(t.poll()) == ["line 1", "line 2"]

    def test_invalid_utf8_is_replaced(self, logs: Path, offsets: Path) -> None:
        """Bytes that are not UTF-8 become U+FFFD; the record is still parsed."""
        t = tailer(logs, offsets)
        t.poll()
        append_bytes(logs / "agent.log", line(1).encode() + b" \xff\xfe\xc3(\n")
        [record] = t.poll()
        assert record.message == "line 1 \ufffd\ufffd\ufffd("

    def test_nul_bytes_are_dropped(self, logs: Path, offsets: Path) -> None:
        """NUL bytes (a copytruncate hole) vanish; the line after them is intact."""
        t = tailer(logs, offsets)
        t.poll()
        append_bytes(logs / "agent.log", b"\x00" * 4096 + line(1).encode() + b"\n\x00\x00\n")
        [record] = t.poll()
        assert record.text == line(1)

    def test_ten_megabyte_line_is_cut_with_bounded_memory(self, logs: Path, offsets: Path) -> None:
        """A 10 MB line is kept to max_line_bytes, marked and counted; reading it does
        not hold it in memory; the next line is intact."""
        t = tailer(logs, offsets)
        t.poll()
        head = log_line(WHEN, "ERROR", "run_agent", "big: ")
        big = head.encode() + b"x" * 10_000_000
        append_bytes(logs / "agent.log", big + b"\n" + line(2).encode() + b"\n")
        tracemalloc.start()
        try:
            records = drain(t)
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert messages(records)[1] == "line 2"
        cut = len(big) - DEFAULT_MAX_LINE_BYTES
        assert records[0].truncated is True
        assert records[0].text.endswith(f" …[line cut: {cut} more bytes not kept]")
        assert len(records[0].text) == DEFAULT_MAX_LINE_BYTES + len(
            f" …[line cut: {cut} more bytes not kept]"
        )
        assert (t.stats.lines_cut, t.stats.bytes_cut) == (1, cut)
        assert peak < 2 * 1024 * 1024

    def test_file_replaced_by_directory_is_reported(self, logs: Path, offsets: Path) -> None:
        """agent.log turning into a directory is a problem reported once; the lines it
        had are still returned and the other logs are still followed."""
        append(logs / "agent.log", line(0))
        t = tailer(logs, offsets)
        t.poll()
        append(logs / "agent.log", line(1))
        append(logs / "errors.log", line(2))
        os.unlink(logs / "agent.log")
        (logs / "agent.log").mkdir()
        assert messages(t.poll()) == ["line 1", "line 2"]
        assert t.problems == {"agent.log": f"{logs / 'agent.log'} is a directory, not a log file"}
        assert [n.what for n in t.drain_notices()] == ["not_a_file"]
        append(logs / "errors.log", line(3))
        assert messages(t.poll()) == ["line 3"]
        assert t.drain_notices() == []
        (logs / "agent.log").rmdir()
        append(logs / "agent.log", line(4))
        assert messages(t.poll()) == ["line 4"]
        assert t.problems == {}

    def test_deleted_file_is_read_to_its_end(self, logs: Path, offsets: Path) -> None:
        """Lines written just before a log is deleted are still returned."""
        t = tailer(logs, offsets)
        t.poll()
        append(logs / "gui.log", line(1))
        t.poll()
        append(logs / "gui.log", line(2))
        os.unlink(logs / "gui.log")
        assert messages(t.poll()) == ["line 2"]
        assert t.poll() == []


HERMES_LOGGING_SCRIPT = """
import logging, sys
from pathlib import Path
import hermes_logging
hermes_logging.setup_logging(hermes_home=Path(sys.argv[1]), mode="gateway")
try:
    raise RuntimeError("database disk image is malformed")
except RuntimeError:
    logging.getLogger("gateway.session").exception(
        "gateway.session: state.db routing save failed: database disk image is malformed")
logging.getLogger("run_agent").info("turn finished")
"""


class TestCopies:
    def test_real_hermes_logging_copies_are_one_record(self, tmp_path: Path, offsets: Path) -> None:
        """Real hermes_logging (gateway mode) writes a WARNING to agent.log, errors.log and
        gateway.log: the tailer returns it once, traceback and all."""
        home = tmp_path / "hermes"
        (home / "logs").mkdir(parents=True)
        env = {**os.environ, "HERMES_HOME": str(home)}
        subprocess.run(
            [hermes_python(), "-c", HERMES_LOGGING_SCRIPT, str(home)],
            check=True,
            env=env,
            cwd=tmp_path,
        )
        for name in ("agent.log", "errors.log", "gateway.log"):
            assert "routing save failed" in (home / "logs" / name).read_text()
        t = tailer(home / "logs", offsets, start_at_end=False)
        got = drain(t)
        assert messages(got) == [
            "gateway.session: state.db routing save failed: database disk image is malformed",
            "turn finished",
        ]
        assert got[0].text.endswith("RuntimeError: database disk image is malformed")
        assert t.stats.duplicates == 2

    def test_same_text_twice_in_one_log_is_two_events(self, logs: Path, offsets: Path) -> None:
        """The same line twice in agent.log is two events; errors.log's copy of one of
        them is not a third."""
        text = log_line(WHEN, "WARNING", "run_agent", "Session DB append_message failed: x")
        t = tailer(logs, offsets)
        t.poll()
        append(logs / "agent.log", text, text)
        append(logs / "errors.log", text)
        assert messages(t.poll()) == ["Session DB append_message failed: x"] * 2
        append(logs / "errors.log", text)
        assert t.poll() == []
        append(logs / "errors.log", text)
        assert messages(t.poll()) == ["Session DB append_message failed: x"]
        assert t.stats.duplicates == 2

    def test_dedupe_can_be_switched_off(self, logs: Path, offsets: Path) -> None:
        """dedupe=False returns every file's copy."""
        text = log_line(WHEN, "WARNING", "run_agent", "x")
        t = tailer(logs, offsets, dedupe=False)
        t.poll()
        append(logs / "agent.log", text)
        append(logs / "errors.log", text)
        assert len(t.poll()) == 2


class TestRotation:
    def test_rotating_file_handler_mid_write(
        self, logs: Path, offsets: Path, rotating: logging.Logger
    ) -> None:
        """With the real RotatingFileHandler rotating every ~30 lines and polls falling
        between rotations, every record comes back exactly once, in order, tracebacks
        joined."""
        t = tailer(logs, offsets, start_at_end=False)
        got: list[LogRecord] = []
        for i in range(200):
            if i % 25 == 0:
                try:
                    raise RuntimeError(f"boom {i}")
                except RuntimeError:
                    rotating.exception("line %d", i)
            else:
                rotating.info("line %d", i)
            if i % 7 == 0:
                got += t.poll()
        got += drain(t)
        assert messages(got) == [f"line {i}" for i in range(200)]
        assert (logs / "agent.log.3").exists()
        tracebacks = [r for r in got if "\n" in r.text]
        assert len(tracebacks) == 8
        assert all(
            r.text.endswith(f"RuntimeError: boom {r.message.split()[1]}") for r in tracebacks
        )

    def test_polling_while_a_writer_thread_rotates(self, logs: Path, offsets: Path) -> None:
        """A writer thread logging through RotatingFileHandler (rotating every ~8 records)
        while polls run back to back, racing every rename: every record exactly once."""
        for trial in range(20):
            d = logs / f"t{trial}"
            d.mkdir()
            handler = logging.handlers.RotatingFileHandler(
                d / "agent.log", maxBytes=4000, backupCount=50
            )
            handler.setFormatter(logging.Formatter(HERMES_FORMAT))
            t = tailer(d, offsets.with_name(f"o{trial}.json"))
            t.poll()
            done = threading.Event()

            def write(h: logging.Handler = handler, ev: threading.Event = done) -> None:
                for i in range(60):
                    h.handle(
                        logging.LogRecord(
                            "gateway.session", logging.INFO, __file__, 1, f"filler {i}", None, None
                        )
                    )
                    try:
                        raise RuntimeError("database disk image is malformed")
                    except RuntimeError:
                        exc = sys.exc_info()
                    h.handle(
                        logging.LogRecord(
                            "gateway.session",
                            logging.ERROR,
                            __file__,
                            1,
                            f"malformed {i}",
                            None,
                            exc,
                        )
                    )
                ev.set()

            writer = threading.Thread(target=write)
            writer.start()
            got: list[LogRecord] = []
            while not done.is_set():
                got += t.poll()
            writer.join()
            handler.close()
            got += drain(t)
            want = [m for i in range(60) for m in (f"filler {i}", f"malformed {i}")]
            assert messages(got) == want, f"trial {trial}"

    def test_rotated_twice_between_polls(
        self, logs: Path, offsets: Path, rotating: logging.Logger
    ) -> None:
        """When x.log rotated twice since the last poll, the old inode (now x.log.2), then
        x.log.1, then the new x.log are read: nothing is skipped."""
        t = tailer(logs, offsets, start_at_end=False)
        rotating.info("line 0")
        got = t.poll()
        for i in range(1, 60):
            rotating.info("line %d", i)
        assert (logs / "agent.log.2").exists()
        assert not (logs / "agent.log.3").exists()
        got += drain(t)
        assert messages(got) == [f"line {i}" for i in range(60)]
        assert [n.what for n in t.drain_notices()] == ["rotated"]

    def test_second_writer_keeps_writing_to_the_rotated_file(
        self, logs: Path, offsets: Path
    ) -> None:
        """Two Hermes processes each have their own RotatingFileHandler on agent.log; when
        one rotates, the other keeps writing to the old inode (now agent.log.1). Those
        lines are still returned, also after a restart."""
        gateway = logging.handlers.RotatingFileHandler(
            logs / "agent.log", maxBytes=500, backupCount=3
        )
        dashboard = logging.handlers.RotatingFileHandler(logs / "agent.log", maxBytes=0)
        for h in (gateway, dashboard):
            h.setFormatter(logging.Formatter(HERMES_FORMAT))

        def emit(handler: logging.Handler, name: str, msg: str) -> None:
            handler.handle(logging.LogRecord(name, logging.INFO, __file__, 1, msg, None, None))

        try:
            a = tailer(logs, offsets, start_at_end=False)
            emit(dashboard, "dashboard", "dash 0")
            got = a.poll()
            for i in range(12):
                emit(gateway, "gateway.run", f"gw {i}")
            assert (logs / "agent.log.1").exists()
            got += a.poll()
            emit(dashboard, "dashboard", "dash 1")
            got += a.poll()
            a.close()
            emit(dashboard, "dashboard", "dash 2")
            b = tailer(logs, offsets)
            got += b.poll()
            assert b.rotated_offsets()["agent.log"][0]["inode"] == (
                (logs / "agent.log.1").stat().st_ino
            )
        finally:
            gateway.close()
            dashboard.close()
        assert sorted(messages(got)) == sorted(
            ["dash 0", "dash 1", "dash 2"] + [f"gw {i}" for i in range(12)]
        )

    def test_rotated_file_deleted_is_no_longer_followed(self, logs: Path, offsets: Path) -> None:
        """A rotated file deleted by the next rotation (past backupCount) is read to its
        end and let go."""
        handler = logging.handlers.RotatingFileHandler(
            logs / "agent.log", maxBytes=300, backupCount=1
        )
        handler.setFormatter(logging.Formatter(HERMES_FORMAT))
        t = tailer(logs, offsets, start_at_end=False)
        got: list[LogRecord] = []
        try:
            for i in range(40):
                handler.handle(
                    logging.LogRecord("x", logging.INFO, __file__, 1, f"line {i}", None, None)
                )
                got += t.poll()
        finally:
            handler.close()
        assert messages(got) == [f"line {i}" for i in range(40)]
        [followed] = t.rotated_offsets()["agent.log"]
        assert followed["inode"] == (logs / "agent.log.1").stat().st_ino

    def test_burst_rotating_a_new_log_before_the_first_poll(
        self, logs: Path, offsets: Path, rotating: logging.Logger
    ) -> None:
        """A log that appears and rotates several times before it is first polled: the
        rotated files are read (oldest first), then the new x.log; nothing is lost."""
        t = tailer(logs, offsets)
        assert t.poll() == []
        for i in range(100):
            rotating.info("line %d", i)
        assert (logs / "agent.log.3").exists()
        got = drain(t)
        # backupCount=3 kept the last 4 files; older lines were deleted by the handler.
        first = int(messages(got)[0].split()[1])
        assert messages(got) == [f"line {i}" for i in range(first, 100)]
        assert first == int((logs / "agent.log.3").read_text().splitlines()[0].rsplit(" ", 1)[1])

    def test_old_file_deleted_by_rotation_between_polls(self, logs: Path, offsets: Path) -> None:
        """When the file being read was rotated past backupCount (deleted) before the next
        poll, its tail and every rotated file after it are still read."""
        handler = logging.handlers.RotatingFileHandler(
            logs / "agent.log", maxBytes=300, backupCount=2
        )
        handler.setFormatter(logging.Formatter(HERMES_FORMAT))

        def emit(i: int) -> None:
            handler.handle(
                logging.LogRecord("x", logging.INFO, __file__, 1, f"line {i}", None, None)
            )

        t = tailer(logs, offsets, start_at_end=False)
        try:
            emit(0)
            got = t.poll()
            first = (logs / "agent.log").stat().st_ino
            for i in range(1, 25):
                emit(i)
        finally:
            handler.close()
        inodes = {p.stat().st_ino for p in logs.iterdir()}
        assert first not in inodes
        assert len(inodes) == 3
        got += drain(t)
        assert messages(got) == [f"line {i}" for i in range(25)]

    def test_logrotate_create_mode(self, logs: Path, offsets: Path) -> None:
        """logrotate's create mode (rename, new file): the old file's unread tail first."""
        t = tailer(logs, offsets)
        t.poll()
        append(logs / "agent.log", line(1))
        t.poll()
        append(logs / "agent.log", line(2))
        os.rename(logs / "agent.log", logs / "agent.log.1")
        append(logs / "agent.log", line(3))
        assert messages(t.poll()) == ["line 2", "line 3"]

    def test_copytruncate(self, logs: Path, offsets: Path) -> None:
        """copytruncate (same inode, now shorter): read again from the start."""
        t = tailer(logs, offsets)
        t.poll()
        append(logs / "agent.log", line(1), line(2))
        t.poll()
        shutil.copyfile(logs / "agent.log", logs / "agent.log.1")
        os.truncate(logs / "agent.log", 0)
        append(logs / "agent.log", line(3))
        assert messages(t.poll()) == ["line 3"]
        assert [n.what for n in t.drain_notices()] == ["truncated"]


class TestRewrittenInPlace:
    """A log truncated and written again between two polls, to the same size or more:
    neither inode nor size changed, only the bytes did."""

    @staticmethod
    def rewrite(path: Path, first: int, count: int) -> list[str]:
        """Truncate ``path`` and write lines ``first`` .. ``first + count - 1`` (all the
        same length), as a writer that reopens its log with "w" does."""
        texts = [f"rewrite {i:06d}" for i in range(first, first + count)]
        with open(path, "w", encoding="utf-8") as f:
            for text in texts:
                f.write(log_line(WHEN, "INFO", "gateway.run", text) + "\n")
        return texts

    @pytest.mark.parametrize(("rounds", "per_round"), [(100, 1), (20, 5)])
    def test_same_size_rewrites_lose_no_line(
        self, logs: Path, offsets: Path, rounds: int, per_round: int
    ) -> None:
        """Every round rewrites the file to exactly the size it had: each line is
        returned once, none is lost, none twice."""
        path = logs / "agent.log"
        t = tailer(logs, offsets, start_at_end=False, dedupe=False)
        written: list[str] = []
        got: list[str] = []
        sizes = set()
        for n in range(rounds):
            written += self.rewrite(path, n * per_round, per_round)
            sizes.add(path.stat().st_size)
            got += messages(t.poll())
        assert len(sizes) == 1  # the same size every time: only the bytes tell
        assert got == written
        notices = [x.what for x in t.drain_notices()]
        assert notices == ["rewritten"] * (rounds - 1)

    def test_rewritten_larger_reads_from_the_start(self, logs: Path, offsets: Path) -> None:
        """A log rewritten in place with more lines than before is read again from its start: the
        new records, each once."""
        path = logs / "agent.log"
        t = tailer(logs, offsets, start_at_end=False)
        first = self.rewrite(path, 0, 3)
        assert messages(t.poll()) == first
        second = self.rewrite(path, 3, 7)
        assert messages(t.poll()) == second

    def test_appending_is_not_a_rewrite(self, logs: Path, offsets: Path) -> None:
        """Appends (also to a half-written last line) read on from the offset."""
        path = logs / "agent.log"
        t = tailer(logs, offsets, start_at_end=False)
        append(path, line(1))
        append_bytes(path, line(2)[:10].encode())
        assert messages(t.poll()) == ["line 1"]
        append_bytes(path, (line(2)[10:] + "\n").encode())
        append(path, line(3))
        assert messages(t.poll()) == ["line 2", "line 3"]
        assert t.drain_notices() == []

    def test_rewrite_by_another_process(self, logs: Path, offsets: Path) -> None:
        """A real second process truncates and rewrites the log to the same size."""
        path = logs / "agent.log"
        t = tailer(logs, offsets, start_at_end=False, dedupe=False)
        got: list[str] = []
        written: list[str] = []
        for n in range(5):
            texts = [f"proc {n:03d} {k}" for k in range(4)]
            body = "".join(log_line(WHEN, "INFO", "gateway.run", x) + "\n" for x in texts)
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys; open(sys.argv[1], 'w').write(sys.argv[2])",
                    str(path),
                    body,
                ],
                check=True,
            )
            written += texts
            got += messages(t.poll())
        assert got == written


class TestRestart:
    def test_rewritten_in_place_while_down(self, logs: Path, offsets: Path) -> None:
        """Rewritten to the same size, same first bytes, while statewarden was down: the
        bytes before the saved offset tell, and the file is read from its start."""
        path = logs / "agent.log"
        head = log_line(WHEN, "INFO", "gateway.run", "header kept by the rewrite")
        append(path, head, line(1), line(2))
        a = tailer(logs, offsets, start_at_end=False)
        assert messages(a.poll()) == ["header kept by the rewrite", "line 1", "line 2"]
        a.close()
        size = path.stat().st_size
        with open(path, "r+", encoding="utf-8") as f:  # same inode, same size, same head
            f.truncate(0)
            f.write(head + "\n" + line(7) + "\n" + line(8) + "\n")
        assert path.stat().st_size == size
        b = tailer(logs, offsets)
        assert messages(b.poll()) == ["header kept by the rewrite", "line 7", "line 8"]

    def test_offsets_file_without_mark_still_resumes(self, logs: Path, offsets: Path) -> None:
        """An offsets file written before the mark was kept resumes where it says."""
        append(logs / "agent.log", line(1))
        a = tailer(logs, offsets, start_at_end=False)
        a.poll()
        a.close()
        saved = json.loads(offsets.read_text())
        del saved["files"]["agent.log"]["mark"]
        offsets.write_text(json.dumps(saved))
        append(logs / "agent.log", line(2))
        b = tailer(logs, offsets)
        assert messages(b.poll()) == ["line 2"]

    def test_no_duplicate_and_no_missed_line(self, logs: Path, offsets: Path) -> None:
        """Lines written while statewarden was down come back once; old ones never."""
        append(logs / "agent.log", line(1))
        a = tailer(logs, offsets, start_at_end=False)
        assert messages(a.poll()) == ["line 1"]
        a.close()
        append(logs / "agent.log", line(2), line(3))
        b = tailer(logs, offsets)
        assert messages(b.poll()) == ["line 2", "line 3"]

    def test_offsets_file(self, logs: Path, offsets: Path) -> None:
        """The offsets file holds (dev, inode, offset, digest of the first bytes, digest
        of the bytes before the offset) per followed log, and no temp file is left next to
        it."""
        append(logs / "agent.log", line(1))
        a = tailer(logs, offsets)
        a.poll()
        st = (logs / "agent.log").stat()
        digest = hashlib.sha256((line(1) + "\n").encode()).hexdigest()[:16]
        assert json.loads(offsets.read_text()) == {
            "version": 1,
            "files": {
                "agent.log": {
                    "dev": st.st_dev,
                    "inode": st.st_ino,
                    "offset": st.st_size,
                    "head": f"{st.st_size}:{digest}",
                    "mark": f"{st.st_size}:{digest}",  # the whole file is the last 256 bytes
                }
            },
        }
        assert sorted(p.name for p in offsets.parent.iterdir()) == [offsets.name]

    def test_save_interval_bounds_offset_writes(self, logs: Path, offsets: Path) -> None:
        """With save_interval_s, polls save at most that often; close() always saves,
        so a clean restart still neither repeats nor misses a line."""
        clock = Clock()
        append(logs / "agent.log", line(1))
        a = tailer(logs, offsets, start_at_end=False, save_interval_s=10.0, clock=clock)
        a.poll()
        saved = offsets.read_text()
        append(logs / "agent.log", line(2))
        clock.now += 5.0
        assert messages(a.poll()) == ["line 2"]
        assert offsets.read_text() == saved
        clock.now += 5.0
        append(logs / "agent.log", line(3))
        assert messages(a.poll()) == ["line 3"]
        assert offsets.read_text() != saved
        append(logs / "agent.log", line(4))
        assert messages(a.poll()) == ["line 4"]
        a.close()
        append(logs / "agent.log", line(5))
        b = tailer(logs, offsets)
        assert messages(b.poll()) == ["line 5"]

    def test_for_target(self, tmp_path: Path) -> None:
        """for_target follows the target's logs dir, offsets named after the target."""
        home = tmp_path / "h"
        (home / "logs").mkdir(parents=True)
        target = Target("work", home, home / "state.db", home / "logs", "hermes-gateway.service")
        t = LogTailer.for_target(target, tmp_path / "state", idle_flush_s=0.0)
        t.poll()
        append(home / "logs" / "gui.log", line(1))
        assert messages(t.poll()) == ["line 1"]
        assert (tmp_path / "state" / "logtail-work.json").exists()

    def test_record_waiting_at_shutdown_is_read_whole_after_restart(
        self, logs: Path, offsets: Path
    ) -> None:
        """A record still waiting for its traceback when statewarden stops is not lost
        and not returned in halves: the saved offset is its start."""
        clock = Clock()
        first = log_line(WHEN, "ERROR", "run_agent", "Session DB append_message failed: x")
        append(logs / "agent.log", line(1), first)
        a = tailer(logs, offsets, start_at_end=False, idle_flush_s=60.0, clock=clock)
        assert messages(a.poll()) == ["line 1"]
        a.close()
        append(logs / "agent.log", TRACEBACK, line(2))
        b = tailer(logs, offsets, idle_flush_s=60.0, clock=clock)
        [record] = b.poll()
        assert record.text == first + "\n" + TRACEBACK

    def test_rotation_while_down(self, logs: Path, offsets: Path, rotating: logging.Logger) -> None:
        """A log rotated while statewarden was down is found again by its inode in
        x.log.N: its unread tail, the files after it, then the new x.log."""
        rotating.info("line 0")
        a = tailer(logs, offsets, start_at_end=False)
        assert messages(a.poll()) == ["line 0"]
        a.close()
        for i in range(1, 50):
            rotating.info("line %d", i)
        assert (logs / "agent.log.1").exists()
        b = tailer(logs, offsets)
        assert messages(drain(b)) == [f"line {i}" for i in range(1, 50)]

    def test_rotated_away_while_down_is_a_gap(self, logs: Path, offsets: Path) -> None:
        """When the old inode is gone altogether, the new file is read from its start
        and the gap is reported."""
        append(logs / "agent.log", line(1))
        a = tailer(logs, offsets, start_at_end=False)
        a.poll()
        a.close()
        os.unlink(logs / "agent.log")
        append(logs / "agent.log", line(2))
        b = tailer(logs, offsets)
        assert messages(b.poll()) == ["line 2"]
        assert [n.what for n in b.drain_notices()] == ["gap"]

    def test_truncated_while_down(self, logs: Path, offsets: Path) -> None:
        """A log truncated and rewritten while statewarden was down (copytruncate) is
        read from 0, and the lines the copy took away are reported as a gap."""
        append(logs / "agent.log", line(1), line(2))
        a = tailer(logs, offsets, start_at_end=False)
        a.poll()
        a.close()
        os.truncate(logs / "agent.log", 0)
        append(logs / "agent.log", line(3))
        b = tailer(logs, offsets)
        assert messages(b.poll()) == ["line 3"]
        assert [n.what for n in b.drain_notices()] == ["gap"]

    def test_reused_inode_is_not_the_same_file(self, logs: Path, offsets: Path) -> None:
        """A new log that got the old one's inode number back is told apart by its first
        bytes, and read from its start."""
        append(logs / "agent.log", line(1), line(2))
        a = tailer(logs, offsets, start_at_end=False)
        a.poll()
        a.close()
        saved = json.loads(offsets.read_text())
        os.unlink(logs / "agent.log")
        append(logs / "agent.log", log_line(WHEN, "INFO", "gateway.run", "new 1"), line(3))
        saved["files"]["agent.log"]["inode"] = (logs / "agent.log").stat().st_ino
        offsets.write_text(json.dumps(saved))
        b = tailer(logs, offsets)
        assert messages(b.poll()) == ["new 1", "line 3"]

    def test_log_created_while_down_is_read_from_start(self, logs: Path, offsets: Path) -> None:
        """Not a first start: a log that appeared while statewarden was down is new."""
        a = tailer(logs, offsets)
        a.poll()
        a.close()
        append(logs / "gateway.log", line(1))
        b = tailer(logs, offsets)
        assert messages(b.poll()) == ["line 1"]


def tail_in_pieces(
    data: bytes,
    cuts: list[int],
    after_poll: Callable[[LogTailer, list[LogRecord]], None],
    limit: int,
    record_chars: int = DEFAULT_MAX_RECORD_CHARS,
) -> tuple[list[LogRecord], tuple[object, ...]]:
    """Write ``data`` to a new agent.log in pieces split at ``cuts`` (out of range: the
    end), a tailer reading it from the start polling after each piece and handing what it
    got to ``after_poll``. Returns what the final flush gives and the tailer's counts."""
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        logs.mkdir()
        t = LogTailer(
            logs,
            Path(tmp) / "o.json",
            start_at_end=False,
            idle_flush_s=3600.0,
            max_line_bytes=limit,
            max_record_chars=record_chars,
        )
        pos = 0
        for split in [*sorted(min(c, len(data)) for c in cuts), len(data)]:
            append_bytes(logs / "agent.log", data[pos:split])
            pos = max(pos, split)
            after_poll(t, t.poll())
        flushed = t.flush()
        counts = dataclasses.astuple(t.stats)
        t.close()
    return flushed, counts


_LINE_TEXT = st.text(st.characters(blacklist_characters="\n\r\x00", codec="utf-8"), max_size=120)


class TestChunkBoundaries:
    @settings(max_examples=150, deadline=None)
    @given(
        lines=st.lists(st.tuples(st.booleans(), _LINE_TEXT), min_size=1, max_size=30),
        cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
        limit=st.sampled_from([40, 64 * 1024]),
    )
    def test_any_write_split_gives_the_same_records(
        self, lines: list[tuple[bool, str]], cuts: list[int], limit: int
    ) -> None:
        """However the bytes are split across writes and polls, the records are the
        lines written, tracebacks joined, each line cut to ``limit`` bytes and marked."""
        texts = [log_line(WHEN, "INFO", "x", t) if start else "  " + t for start, t in lines]
        data = "".join(t + "\n" for t in texts).encode()

        def kept(text: str) -> str:
            raw = text.encode()
            if len(raw) <= limit:
                return text
            cut = len(raw) - limit
            return raw[:limit].decode("utf-8", errors="replace") + (
                f" …[line cut: {cut} more bytes not kept]"
            )

        expected: list[list[str]] = []
        for text in texts:
            if starts_record(text) or not expected:
                expected.append([])
            if text.strip() or expected[-1]:
                expected[-1].append(kept(text))
        want = ["\n".join(r).rstrip() for r in expected]
        want = [w for w in want if w.strip()]
        got: list[LogRecord] = []
        flushed, _ = tail_in_pieces(data, cuts, lambda _t, polled: got.extend(polled), limit)
        got += flushed
        assert [r.text.rstrip() for r in got] == want


def _line_by_line(*_args: object) -> bool:
    """``LogReader._feed_records`` declining every block: lines are read one by one."""
    return False


_ASCII_TEXT = st.text(st.sampled_from("ab :#\t-0123"), max_size=60)


class TestWholeBlockReading:
    @staticmethod
    def _read(data: bytes, cuts: list[int], limit: int, record_chars: int) -> list[object]:
        seen: list[object] = []

        def after_poll(t: LogTailer, got: list[LogRecord]) -> None:
            seen.append([(r.text, r.truncated, r.at, r.message) for r in got])
            seen.append(t.offsets()["agent.log"]["offset"])

        flushed, counts = tail_in_pieces(data, cuts, after_poll, limit, record_chars)
        seen.append([(r.text, r.truncated) for r in flushed])
        seen.append(counts)
        return seen

    @settings(max_examples=200, deadline=None)
    @given(
        lines=st.lists(
            st.tuples(st.sampled_from(["start", "more", "blank", "space"]), _ASCII_TEXT),
            min_size=1,
            max_size=40,
        ),
        cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=8),
        limit=st.sampled_from([30, 64 * 1024]),
        record_chars=st.sampled_from([50, 256 * 1024]),
    )
    def test_same_as_line_by_line(
        self,
        lines: list[tuple[str, str]],
        cuts: list[int],
        limit: int,
        record_chars: int,
    ) -> None:
        """Plain ASCII lines are cut into records a whole block at a time; what that
        gives (records, their truncation, the saved offset after each poll, the counts)
        is exactly what reading line by line gives, whatever the splits and bounds."""
        shapes = {"more": "  {}", "blank": "", "space": "   "}
        data = "".join(
            (log_line(WHEN, "INFO", "x", t) if kind == "start" else shapes[kind].format(t)) + "\n"
            for kind, t in lines
        ).encode()
        fast = self._read(data, cuts, limit, record_chars)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(LogReader, "_feed_records", _line_by_line)
            assert self._read(data, cuts, limit, record_chars) == fast


class TestHistory:
    """A log replaced by an older copy of itself brings back history, not news."""

    def _lines(self, start: dt.datetime, n: int, what: str) -> list[str]:
        return [
            log_line(start + dt.timedelta(seconds=i), "CRITICAL", "hermes_state", f"{what} {i}")
            for i in range(n)
        ]

    def test_an_older_copy_of_a_log_is_not_read_again(self, logs: Path, offsets: Path) -> None:
        """errors.log read; then an older copy (six minutes older lines) renamed over it:
        none of its lines is returned, a "history" notice says why, a restarted tailer
        does not return them either, and a new line written after them is returned."""
        errors = logs / "errors.log"
        errors.write_text("")
        t = tailer(logs, offsets, names=["errors.log"])
        assert drain(t) == []
        now = dt.datetime.now().replace(microsecond=0)
        append(errors, *self._lines(now, 3, "current"))
        assert messages(drain(t)) == ["current 0", "current 1", "current 2"]
        old = logs / "errors.log.bak"
        old.write_text("\n".join(self._lines(now - dt.timedelta(minutes=6), 4, "old")) + "\n")
        os.rename(old, errors)
        assert drain(t) == []
        (note,) = [n for n in t.drain_notices() if n.what == "history"]
        assert "4 record(s) older" in note.text
        assert t.stats.history_skipped == 4
        t.save()
        t.close()
        again = tailer(logs, offsets, names=["errors.log"])
        append(errors, *self._lines(now + dt.timedelta(seconds=5), 1, "new"))
        assert messages(drain(again)) == ["new 0"]
        again.close()

    def test_a_log_appended_to_is_news_whatever_its_times(self, logs: Path, offsets: Path) -> None:
        """Lines appended to the same file are news even when their time goes back (two
        processes out of order, the clock set back an hour at the end of summer time):
        every line returned."""
        agent = logs / "agent.log"
        agent.write_text("")
        t = tailer(logs, offsets, names=["agent.log"])
        assert drain(t) == []
        now = dt.datetime.now().replace(microsecond=0)
        append(agent, *self._lines(now, 1, "late"))
        append(agent, *self._lines(now - dt.timedelta(seconds=20), 1, "early"))
        append(agent, *self._lines(now - dt.timedelta(hours=1), 1, "summer time"))
        assert messages(drain(t)) == ["late 0", "early 0", "summer time 0"]
        t.close()
