"""A maintenance run's report and its outcome message count a table's loss as recover's
report counts it, however large: hundreds of messages lost (150 zeroed leaves of the
messages b-tree, ``lab.corruption.zeroed_run_of_leaves``).

Invariant: what a person reads about a run (``RunReport`` lines, the outcome's details
sent to the alert sinks) says the rows lost that recover's own report says
(``tables.<t>.lost`` and ``unnamed_lost``, bounded by ``lost_at_most``). Before, both
counted the keys in ``lost_keys_sample``, which stops at a hundred: 740 lost messages
read "100 lost", and with every witness destroyed "0 lost" with no bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import corruption
from statewarden.maintenance.outcomes import details
from statewarden.maintenance.report import RunReport, rows_lost
from statewarden.recovery.recover import recover


@pytest.mark.parametrize("witnesses", [True, False], ids=["witnessed", "no-witness"])
def test_a_run_reports_every_lost_row(tmp_path: Path, witnesses: bool) -> None:
    """The run's lines and the outcome's details carry recover's count, not the sample's."""
    case = corruption.zeroed_run_of_leaves(tmp_path / "db", witnesses=witnesses)
    truth = len(case.lost_rowids["messages"])
    assert truth > 100
    out = tmp_path / "out" / "recovered.db"
    out.parent.mkdir()
    rec = recover(case.db, out).to_json()
    t = rec["tables"]["messages"]
    assert rows_lost(t) == t["lost"] + t["unnamed_lost"]
    words = f"{truth} lost" if witnesses else f"0 lost, up to {truth}"
    report = RunReport(db=str(case.db), action="repair", recover=rec)
    lines = [line for line in report.render() if line.startswith("    messages:")]
    assert len(lines) == 1, lines
    assert f" {words}," in lines[0], lines
    data = {"outcome": "repaired", "run_id": "r1", "action": "repair", "recover": rec}
    rows = [line for line in details(data) if line.startswith("rows kept:")]
    assert len(rows) == 1, rows
    assert f"messages {t['recovered']} ({words}, " in rows[0], rows
