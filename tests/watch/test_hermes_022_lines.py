"""Hermes 0.22's own log lines about its database become the right signals.

The lines are real: ``hermes_scenarios.py`` makes the installed Hermes 0.22 (its own
``SessionDB``, repair, health latch, lock-owner report and gateway ledger) meet each
situation and write ``logs/agent.log`` with its own logging setup; the records are read
from that file. Lines no scenario here can provoke on this machine are formatted from the
installed source's own format strings (read at test time, never copied here).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lab.corruption import zero_middle_leaf
from lab.hermes_fixtures import NEWEST, NEWEST_HERMES, hermes_python, log_line, make_home
from statewarden.incidents.signals import Signal
from statewarden.targets import Target
from statewarden.watch.records import LogRecord, parse_record, starts_record
from statewarden.watch.rules import signals_from_record
from tests.support.hermes_texts import LoggedText, read_texts, sample_line, site_packages

pytestmark = pytest.mark.process

SCENARIOS = Path(__file__).with_name("hermes_scenarios.py")


def newest_python() -> str:
    try:
        return hermes_python(NEWEST_HERMES)
    except RuntimeError as exc:
        pytest.skip(f"Hermes {NEWEST_HERMES} is not installed: {exc}")


def read_log(path: Path) -> list[LogRecord]:
    """The records of a Hermes log file (a traceback joined to its line)."""
    records: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if starts_record(line) or not records:
            records.append([line])
        else:
            records[-1].append(line)
    return [parse_record("\n".join(lines), str(path)) for lines in records]


@dataclass
class Played:
    """What one scenario left: Hermes' log records and the facts it printed."""

    home: Path
    records: list[LogRecord]
    facts: dict[str, Any]

    @property
    def target(self) -> Target:
        return Target("default", self.home, self.home / "state.db", self.home / "logs")

    def signals(self, rule: str | None = None) -> list[Signal]:
        out = [
            s
            for r in self.records
            for s in signals_from_record(r, self.target)
            if isinstance(s, Signal)
        ]
        return [s for s in out if rule is None or s.fields.get("rule") == rule]

    def one(self, rule: str) -> Signal:
        found = self.signals(rule)
        assert len(found) == 1, (rule, [r.message[:120] for r in self.records])
        return found[0]


def start(home: Path, scenario: str) -> subprocess.Popen[str]:
    """Hermes 0.22 playing ``scenario`` in ``home``, in a process of its own."""
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [newest_python(), str(SCENARIOS), scenario, str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def played_in(home: Path, proc: subprocess.Popen[str]) -> Played:
    """What the scenario ``proc`` plays in ``home`` left, once it has ended."""
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    facts = json.loads(out.strip().splitlines()[-1])
    return Played(home.resolve(), read_log(home / "logs" / "agent.log"), facts)


SCENARIO_NAMES = (
    "wal_first",
    "zeroed",
    "notadb",
    "handles",
    "latch",
    "write_lock",
    "retired_wal",
    "repaired",
    "repair_exhausted",
    "repair_held",
    "unclean_exit",
)


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Played]:
    """Every scenario played once, each in a process and home of its own; the processes
    run side by side (no scenario reads another's home), at most four at a time."""
    root = tmp_path_factory.mktemp("hermes022")
    damaged = make_home(root / "unclean_exit", NEWEST)
    zero_middle_leaf(damaged / "state.db", "messages")
    out: dict[str, Played] = {}
    running: dict[str, subprocess.Popen[str]] = {}
    try:
        for scenario in SCENARIO_NAMES:
            running[scenario] = start(root / scenario, scenario)
            while running and (len(running) == 4 or scenario == SCENARIO_NAMES[-1]):
                first = next(iter(running))
                out[first] = played_in(root / first, running.pop(first))
    finally:
        for proc in running.values():
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    return out


def test_wal_reset_warning_with_the_interpreter_is_a_signal(played: dict[str, Played]) -> None:
    """0.22 puts "(interpreter PATH)" inside the WAL-reset warning; a state.db that is
    already WAL on this SQLite 3.40.1 still gives wal_reset_bug (error: WAL kept), naming
    the linked SQLite's version (the rules matched neither wording before)."""
    s = played["wal_first"].one("wal_reset_kept_wal")
    assert (s.kind, s.key, s.effective_severity) == ("wal_reset_bug", "library", "error")
    assert re.fullmatch(r"3\.\d+\.\d+", s.fields["version"])
    assert "(interpreter " in s.evidence[0]


@pytest.mark.parametrize("scenario", ["zeroed", "notadb"])
def test_wal_reset_warning_of_a_new_file_is_the_delete_mode_one(
    played: dict[str, Played], scenario: str
) -> None:
    """A fresh state.db Hermes creates on this SQLite uses DELETE mode: wal_reset_bug at
    warning, never the kept-WAL error."""
    s = played[scenario].one("wal_reset_delete")
    assert (s.kind, s.effective_severity) == ("wal_reset_bug", "warning")
    assert not played[scenario].signals("wal_reset_kept_wal")


@pytest.mark.parametrize(
    ("scenario", "size", "suffix"), [("zeroed", 8192, "zeroed"), ("notadb", 7500, "notadb")]
)
def test_moved_aside_state_db_is_sessions_vanished(
    played: dict[str, Played], scenario: str, size: int, suffix: str
) -> None:
    """Hermes moving an empty or damaged state.db aside and starting fresh is a critical
    sessions_vanished naming the moved-aside file, which exists and holds the old bytes."""
    s = played[scenario].one("sessions_vanished")
    assert (s.kind, s.effective_severity) == ("sessions_vanished", "critical")
    moved = Path(s.fields["moved_aside"])
    assert moved.is_file()
    assert moved.stat().st_size == size
    assert re.fullmatch(rf"state\.db\.{suffix}-\d{{8}}-\d{{6}}-\d+\.bak", moved.name)
    assert s.fields["size"] == size
    assert str(moved) in s.summary


def test_live_sessiondb_handles_are_duplicate_writers(played: dict[str, Played]) -> None:
    """Five writer handles on one state.db in one process: duplicate_writers, count 5."""
    s = played["handles"].one("duplicate_writers")
    assert (s.kind, s.effective_severity, s.fields["count"]) == ("duplicate_writers", "warning", 5)


def test_corruption_latch_is_one_corruption_signal(played: dict[str, Played]) -> None:
    """The health latch's "is structurally corrupt" line is one critical corruption, not
    also the generic one its quoted error would give."""
    signals = played["latch"].signals()
    assert [(s.kind, s.fields["rule"]) for s in signals] == [("corruption", "corrupt_latch")]
    assert signals[0].effective_severity == "critical"


def test_write_lock_owner_is_named_in_the_fields(played: dict[str, Played]) -> None:
    """The write-lock report names the process holding the WAL write lock: its pid, its
    command line and the lock become the signal's fields."""
    p = played["write_lock"]
    s = p.one("write_lock_holders")
    assert (s.kind, s.key) == ("write_failures", "write_lock")
    assert s.fields["holder_pid"] == p.facts["holder_pid"]
    assert s.fields["holder_pids"] == [p.facts["holder_pid"]]
    assert s.fields["holder_argv"].startswith("python")
    assert s.fields["holder_lock"] == "WAL write"


def test_deleted_wal_generation_is_captured_and_a_stale_holder(played: dict[str, Played]) -> None:
    """Deleting -wal/-shm under a live handle: Hermes halts (DeletedWalGenerationError),
    captures the retired generation and skips its checkpoint; every one of those lines is
    the stale_holder incident of the deleted generation, the capture named."""
    p = played["retired_wal"]
    assert p.facts["raised"] == "DeletedWalGenerationError"
    captured = p.one("retired_wal_captured")
    assert Path(captured.fields["capture"]).is_dir()
    for rule in ("retired_wal_captured", "deleted_sidecar", "retired_wal_checkpoint_skipped"):
        assert {(s.kind, s.key) for s in p.signals(rule)} == {("stale_holder", "deleted_sidecar")}


def test_repair_that_worked_is_self_repair(played: dict[str, Played]) -> None:
    """A repair Hermes promoted ("repaired via '...' and promoted") is a self_repair
    naming the strategy."""
    p = played["repaired"]
    assert p.facts["report"]["repaired"] == "True"
    promoted = [s for s in p.signals("repaired") if "promoted" in s.evidence[0]]
    assert len(promoted) == 1
    assert promoted[0].fields["strategy"] == p.facts["report"]["strategy"]


def test_repair_given_up_is_critical(played: dict[str, Played]) -> None:
    """ "repair skipped: automatic repair has already failed 3 times" is a critical
    self_repair: Hermes will not try again."""
    s = played["repair_exhausted"].one("repair_exhausted")
    assert (s.kind, s.key, s.effective_severity, s.fields["times"]) == (
        "self_repair",
        "repair_exhausted",
        "critical",
        3,
    )


def test_repair_skipped_for_a_live_writer(played: dict[str, Played]) -> None:
    """ "repair skipped: a live writer still holds state.db" is a self_repair error."""
    s = played["repair_held"].one("repair_blocked_by_writer")
    assert (s.kind, s.key, s.effective_severity) == ("self_repair", "repair_skipped", "error")


def test_integrity_failure_after_an_unclean_exit_is_corruption(played: dict[str, Played]) -> None:
    """The gateway's integrity check after an unclean exit, on a file with a zeroed page,
    fails; its line is a critical corruption quoting the check's verdict."""
    p = played["unclean_exit"]
    assert p.facts["verdict"] not in ("ok", "absent")
    s = p.one("integrity_after_crash")
    assert (s.kind, s.effective_severity) == ("corruption", "critical")
    assert s.fields["error"][:20] == str(p.facts["verdict"])[:20]


TARGET = Target(
    "default",
    Path("/home/u/.hermes"),
    Path("/home/u/.hermes/state.db"),
    Path("/home/u/.hermes/logs"),
)
WHEN = dt.datetime(2026, 12, 6, 15, 48, 6)


@pytest.fixture(scope="module")
def newest_texts() -> list[LoggedText]:
    site = site_packages(NEWEST_HERMES)
    if site is None:
        pytest.skip(f"Hermes {NEWEST_HERMES} is not installed: run packaging/setup-dev.sh")
    return read_texts(site)[0]


@pytest.mark.parametrize(
    ("phrase", "args", "expected"),
    [
        (
            "reported structural corruption outside the FTS",
            ("/home/u/.hermes/state.db", "database disk image is malformed", "/h/state.db"),
            ("corruption", "", "critical"),
        ),
        (
            "FTS indexes remain corrupt",
            ("vtable constructor failed",),
            ("self_repair", "fts_detached", "error"),
        ),
        (
            "FTS repair has been blocked by the same holder(s)",
            (12, 30.0, "PID 41 (hermes dashboard)", 60.0),
            ("self_repair", "fts_repair_blocked", "error"),
        ),
        (
            "Could not capture the retired WAL generation of %s at close",
            ("/home/u/.hermes/state.db", "No space left on device"),
            ("stale_holder", "deleted_sidecar", "critical"),
        ),
        (
            "Refusing forensic backup",
            ("/home/u/.hermes/state.db", "only 12 MB free"),
            ("self_repair", "backup_failed", "error"),
        ),
        (
            "spooled oldest message to",
            ("20261206_154806_a1b2c3", 200, "/home/u/.hermes/pending_messages/pending-1.json"),
            ("write_failures", "queue_spooled", "error"),
        ),
        (
            "session is stalled",
            ("20261206_154806_a1b2c3", 12, 3, 4, "database is locked"),
            ("write_failures", "transcript_append", "critical"),
        ),
        (
            "Session DB refused further writes",
            ("20261206_154806_a1b2c3", "StateDbReplacedError", "state.db was replaced"),
            ("jsonl_fallback", "refused", "critical"),
        ),
        (
            "no unique live child; not retrying",
            ("20261206_154806_a1b2c3",),
            ("messages_dropped", "rejected", "error"),
        ),
    ],
)
def test_newest_format_strings(
    newest_texts: list[LoggedText],
    phrase: str,
    args: tuple[object, ...],
    expected: tuple[str, str, str],
) -> None:
    """Lines no scenario here provokes, formatted from Hermes 0.22's own format strings,
    give their signal (kind, key, severity) first."""
    [found] = {t.template: t for t in newest_texts if phrase in t.template}.values()
    message = (
        found.template % args if "{}" not in found.template else sample_line(found.template, "x")
    )
    record = parse_record(
        log_line(WHEN, "ERROR", found.logger, message), "/home/u/.hermes/logs/agent.log"
    )
    signals = [s for s in signals_from_record(record, TARGET) if isinstance(s, Signal)]
    assert signals, message
    assert (signals[0].kind, signals[0].key, signals[0].effective_severity) == expected
