"""A run killed between creating its ledger and writing the ledger's first line.

The fault suite's kill -9 at a random moment once landed there: the ledger was an empty
file, ``--resume`` took it for an unfinished run and ended in "unexpected KeyError:
'original'", and every later run was refused ("an earlier maintenance run did not
finish"): maintenance stuck for good. Invariant: a run does nothing before its begin
line is durable, so a ledger without one records a run that did nothing: nothing to
resume, and the next run begins as if it were not there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from statewarden.maintenance.ledger import LAST_LEDGER_NAME, LEDGER_NAME, read_ledger, run_dir
from tests.support.maintenance import maintenance_config, report_of, run_maintenance

pytestmark = pytest.mark.process


@pytest.mark.parametrize("left", [b"", b'{"step": "begin", "run_id": "2026', b"\n\n"])
def test_a_run_killed_before_its_first_line_did_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hermes_home: Path, left: bytes
) -> None:
    """An empty ledger, a torn first line or blank lines: --resume has nothing to
    resume (exit 0, a report), and a run after it goes through and finishes."""
    maintenance_config(tmp_path, monkeypatch)
    db = hermes_home / "state.db"
    folder = run_dir(tmp_path / "xdg-state" / "statewarden", db)
    folder.mkdir(mode=0o700, parents=True)
    for parent in (folder.parent, folder.parent.parent):
        parent.chmod(0o700)
    (folder / LEDGER_NAME).write_bytes(left)
    resumed = run_maintenance("--db", str(db), "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert report_of(resumed)["outcome"] == "nothing to resume"
    done = run_maintenance("--db", str(db), "--action", "vacuum", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    record = read_ledger(folder / LEDGER_NAME)
    assert record is not None
    assert record.began
    assert record.finished
    assert not (folder / LAST_LEDGER_NAME).exists()  # the run that did nothing left no record
