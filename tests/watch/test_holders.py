"""The holder watcher: real holders of a real Hermes database, diffed scan by scan into
timeline observations and state signals that open and clear."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lab.hermes_fixtures import holding
from statewarden.holders.processes import KINDS
from statewarden.incidents.signals import Found, Observation, Signal
from statewarden.watch.holders import HOLDER_RULES, HolderWatcher

pytestmark = pytest.mark.process

# A SQLite connection in WAL mode that then opens and closes the database file outside
# SQLite: closing that descriptor drops the process's POSIX locks.
DROP_LOCKS = (
    "import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
    " c.execute('select count(*) from sessions').fetchall();"
    " os.close(os.open(sys.argv[1], os.O_RDONLY)); print('ready', flush=True); sys.stdin.read()"
)


@contextmanager
def lock_dropper(db: Path) -> Iterator[int]:
    with subprocess.Popen(
        [sys.executable, "-c", DROP_LOCKS, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:  # closes its pipes on the way out
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            yield proc.pid
        finally:
            proc.kill()
            proc.wait()


def watcher(db: Path, *, max_writers: int = 8, expected: tuple[str, ...] = KINDS) -> HolderWatcher:
    w = HolderWatcher([db], max_writers=max_writers, expected_kinds=expected)
    w.diff(w.scan(), now=1.0)  # the first scan: what is there already is not news
    return w


def signals(found: list[Found]) -> list[tuple[str, str, bool]]:
    return [(f.kind, f.key, f.clears) for f in found if isinstance(f, Signal)]


def observations(found: list[Found]) -> list[str]:
    return [f.what for f in found if isinstance(f, Observation)]


class TestObservations:
    def test_first_scan_counts_then_arrivals_and_departures(self, hermes_home: Path) -> None:
        """The first scan only counts; later a holder arriving or leaving is observed, with
        the new count."""
        db = hermes_home / "state.db"
        w = HolderWatcher([db], max_writers=8, expected_kinds=KINDS)
        (first,) = w.diff(w.scan(), now=1.0)
        assert isinstance(first, Observation)
        assert (first.what, first.text) == ("holders", "0 processes hold state.db (none)")
        with holding(hermes_home) as h:
            came = w.diff(w.scan(), now=2.0)
            assert observations(came) == ["holder_arrived", "holders"]
            assert came[0].fields["pid"] == h.pid
            assert w.diff(w.scan(), now=3.0) == []  # nothing changed, nothing said
        went = w.diff(w.scan(), now=4.0)
        assert observations(went) == ["holder_left", "holders"]
        assert went[0].text == f"pid {h.pid} ({came[0].fields['kind']}) closed state.db"  # type: ignore[union-attr]


class TestStateRules:
    def test_rules_table_names_known_kinds_once(self) -> None:
        """The holder rules table names stale_holder, lost_locks and unexpected_holder, each
        once."""
        kinds = [r.kind for r in HOLDER_RULES]
        assert kinds == ["stale_holder", "lost_locks", "unexpected_holder"]

    def test_stale_holder_opens_for_its_pid_and_clears_when_it_exits(
        self, hermes_home: Path
    ) -> None:
        """A writer holding a -wal another process unlinked: stale_holder keyed by its pid."""
        w = watcher(hermes_home / "state.db")
        with holding(hermes_home) as h:
            w.diff(w.scan(), now=2.0)
            os.unlink(hermes_home / "state.db-wal")
            found = w.diff(w.scan(), now=3.0)
            assert signals(found) == [("stale_holder", str(h.pid), False)]
            (sig,) = [f for f in found if isinstance(f, Signal)]
            assert "still holds an old or deleted state.db-wal inode" in sig.summary
            assert sig.evidence == (sig.summary,)
            assert signals(w.diff(w.scan(), now=4.0)) == [("stale_holder", str(h.pid), False)]
        assert signals(w.diff(w.scan(), now=5.0)) == [("stale_holder", str(h.pid), True)]

    def test_lost_locks_open_and_clear(self, hermes_home: Path) -> None:
        """A WAL connection that lost its locks: lost_locks for that pid only."""
        db = hermes_home / "state.db"
        w = watcher(db)
        with holding(hermes_home), lock_dropper(db) as pid:
            found = w.diff(w.scan(), now=2.0)
            assert signals(found) == [("lost_locks", str(pid), False)]
            (sig,) = [f for f in found if isinstance(f, Signal)]
            assert "lost its SQLite locks" in sig.summary
        assert signals(w.diff(w.scan(), now=3.0)) == [("lost_locks", str(pid), True)]

    def test_an_unexpected_kind_is_one_only_after_it_held_long_enough(
        self, hermes_home: Path
    ) -> None:
        """With ``unexpected_after`` 60 s: a script that holds state.db 28 s and goes is
        never unexpected_holder; one that stays is, once seen 60 s (the watcher's clock)."""
        db = hermes_home / "state.db"
        w = HolderWatcher([db], max_writers=8, expected_kinds=(), unexpected_after=60.0)
        w.diff(w.scan(), now=1.0)
        with holding(hermes_home):
            assert signals(w.diff(w.scan(), now=2.0)) == []
            assert signals(w.diff(w.scan(), now=30.0)) == []
        assert signals(w.diff(w.scan(), now=31.0)) == []
        with holding(hermes_home) as stays:
            assert signals(w.diff(w.scan(), now=100.0)) == []
            assert signals(w.diff(w.scan(), now=159.0)) == []
            assert signals(w.diff(w.scan(), now=160.0)) == [
                ("unexpected_holder", str(stays.pid), False)
            ]

    def test_unexpected_kinds_and_too_many_holders(self, hermes_home: Path) -> None:
        """Holders of kinds not expected, and more holders than max_writers, in table
        order; each clears on its own when its holder leaves."""
        db = hermes_home / "state.db"
        w = watcher(db, max_writers=1, expected=())
        with holding(hermes_home) as a:
            assert signals(w.diff(w.scan(), now=2.0)) == [("unexpected_holder", str(a.pid), False)]
            with holding(hermes_home) as b:
                found = w.diff(w.scan(), now=3.0)
                assert signals(found) == [
                    ("unexpected_holder", str(a.pid), False),
                    ("unexpected_holder", str(b.pid), False),
                    ("multi_writer", "", False),
                ]
                many = [f for f in found if isinstance(f, Signal)][-1]
                assert many.summary.startswith("2 processes hold state.db at once (more than 1)")
            assert signals(w.diff(w.scan(), now=4.0)) == [
                ("unexpected_holder", str(a.pid), False),
                ("unexpected_holder", str(b.pid), True),
                ("multi_writer", "", True),
            ]
