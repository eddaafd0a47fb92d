"""The fuzz lab on a file Hermes left half-written: killed (SIGKILL) in the middle of a
large transaction in rollback mode, new pages spilled past the header's size, a hot
``-journal`` beside it (``lab/fuzz.hot_journal_db``). The journal is rolled back in the
private copy before any page is read, so every seed keeps every promise against the
truth carved from the file SQLite presents; before that, check called half of these
seeds base damage though recover brought every row back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import fuzz

# Hermes writers and recover's integrity-check child are real processes.
pytestmark = pytest.mark.process

SEEDS = 12


def test_fixed_seeds_over_a_hot_journal_keep_every_promise(tmp_path: Path) -> None:
    """Each of a fixed block of seeds, its damage drawn over the half-written file, is
    recovered with no intact row dropped, no wrong row passed off as good, loss
    reported exactly when rows were lost, check's class matching what recover proved,
    and the source bundle (journal included) unchanged."""
    broken = []
    for seed in range(SEEDS):
        case, found = fuzz.run_seed(tmp_path / str(seed), seed, hot_journal=True)
        if found:
            broken.append(f"{case.describe()}: {found[:3]}")
    assert broken == []
