"""The standing fuzz lab (``lab/fuzz.py``) in CI: random damage to a Hermes database,
ground truth by carving, and recover held to its promises on every seed.

On every seed: no row whose exact record is still in the damaged file is dropped, no
row is written out as good unless it equals the row Hermes wrote (a partial or
unverified row names the columns it cannot vouch for, a stale one is named),
``loss_detected`` is true whenever some row did not come back as it was and only when
the report lists something lost or unproven, the source is unchanged, and ``check``
calls damage to a base table's rows base damage (and a file recover brings back
untouched not). Every file recover writes passes ``check`` (docs/safety.md rule 16):
clean when nothing was lost, and otherwise naming only what the report lists as lost
or unproven.
A longer run is ``bench/fuzz_recover.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import fuzz, zero_values
from statewarden.demo.damage import PristineFile, schema_roots, write_at
from statewarden.recovery.recover import recover

# 120 seeds, about 15 s on one core; the named findings below come on top.
SEEDS_PER_BLOCK = 30
BLOCKS = 4


@pytest.mark.parametrize("block", range(BLOCKS))
def test_fixed_seeds_keep_every_promise(tmp_path: Path, block: int) -> None:
    """Each seed of a fixed block (its damage drawn from the seed: zeroed sectors and
    4 KiB blocks, random bytes, torn and reverted pages) is recovered with no intact
    row dropped, no wrong row passed off as good, loss reported exactly when rows were
    lost and the source bundle unchanged."""
    broken = []
    for seed in range(block * SEEDS_PER_BLOCK, (block + 1) * SEEDS_PER_BLOCK):
        case, found = fuzz.run_seed(tmp_path / str(seed), seed)
        if found:
            broken.append(f"{case.describe()}: {found[:3]}")
    assert broken == []


@pytest.mark.parametrize("name", sorted(fuzz.FINDINGS))
def test_named_finding(tmp_path: Path, name: str) -> None:
    """A seed that once broke a promise (see ``lab/fuzz.FINDINGS`` for what each did
    before its fix) now keeps every promise."""
    case, found = fuzz.run_seed(tmp_path, fuzz.FINDINGS[name])
    assert found == [], case.describe()


@pytest.mark.parametrize("name", sorted(fuzz.VIEW_FIRST_FINDINGS))
def test_named_finding_on_a_file_whose_schema_hash_starts_with_a_view(
    tmp_path: Path, name: str
) -> None:
    """A seed that broke a promise on a copy whose schema hash starts with a view
    (``lab/fuzz.VIEW_FIRST_FINDINGS``: SQLite's check then names no unused page) now
    keeps every promise."""
    case, found = fuzz.run_seed(tmp_path, fuzz.VIEW_FIRST_FINDINGS[name], view_first=True)
    assert found == [], case.describe()


def test_the_truth_sees_damage(tmp_path: Path) -> None:
    """The carving truth is no constant: on a seed that zeroes part of a message's
    record that row counts as not intact, and every row of an untouched copy as
    intact."""
    case = fuzz.fuzz_case(tmp_path / "d", fuzz.FINDINGS["zeroed_block_in_a_record"])
    assert not all(ok for _, ok in case.truth["messages"].values())
    whole = fuzz.carve_truth(case.pristine, case.pristine)
    assert all(ok for rows in whole.values() for _, ok in rows.values())
    assert len(whole["messages"]) > 400


# Seeds of the zero-cost copy; most of them rebuild the usage table, its zeros on the boundary.
ZERO_COST_SEEDS = range(12)


def test_zero_cost_copy_keeps_every_promise(tmp_path: Path) -> None:
    """On a copy whose usage rows cost 0.0 (``fuzz.zero_costs_db``), every seed keeps
    every promise and its output passes check: the sixteen zero bytes of costs that
    recover writes across a sector boundary are no zeroed sector (before, check of the
    output said base damage, "run into zeroed bytes"). Most seeds do lay them there."""
    broken, on_boundary = [], 0
    for seed in ZERO_COST_SEEDS:
        case, found = fuzz.run_seed(tmp_path / str(seed), seed, zero_costs=True)
        if found:
            broken.append(f"{case.describe()}: {found[:3]}")
        out = tmp_path / str(seed) / "out" / "recovered.db"
        on_boundary += any(r.looks_zeroed for r in zero_values.zero_runs(out))
    assert broken == []
    assert on_boundary >= len(ZERO_COST_SEEDS) // 2


def zero_a_usage_sector(db: Path) -> None:
    """Zero the first whole 512-byte sector of the cell content of ``db``'s last
    ``session_model_usage`` leaf (as a disk loses one)."""
    pf = PristineFile(db)
    leaf = pf.tree_pages(schema_roots(db)["session_model_usage"])[1][-1]
    content = int.from_bytes(pf.page(leaf)[5:7], "big")
    sector = -(-content // 512) * 512
    assert sector + 512 <= pf.page_size
    write_at(db, (leaf - 1) * pf.page_size + sector, bytes(512))


@pytest.mark.parametrize("seed", [fuzz.FINDINGS["zeroed_block_in_a_record"], 1])
def test_the_check_of_the_output_can_fail(tmp_path: Path, seed: int) -> None:
    """The output check is no constant: an output that passes it (one with messages
    lost, one with nothing lost) no longer does once a sector of its usage rows is
    zeroed, though the report's loss is the same."""
    case = fuzz.fuzz_case(tmp_path / "db", seed)
    out = tmp_path / "out.db"
    report = recover(case.db, out).to_json()
    work = tmp_path / "work"
    work.mkdir()
    assert fuzz.output_check_violations(out, work, report) == []
    zero_a_usage_sector(out)
    [found] = fuzz.output_check_violations(out, work, report)
    assert "session_model_usage" in found
