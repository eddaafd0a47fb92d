"""``KeySet`` behaves as a set of the same keys would (random sets against Python's own),
and holds a dense run of rowids in a bitmap, not one object a rowid."""

from __future__ import annotations

import itertools
import random
import sys
from typing import Any

import apsw
import pytest

from statewarden.recovery.decoding.keysets import FIRST_LOOK, KeySet
from statewarden.recovery.evidence.copies import _rowids_read, in_order


def _random_keys(rng: random.Random) -> set[Any]:
    """Dense runs, sparse 64-bit rowids (garbled cells), negative ones, and key tuples."""
    keys: set[Any] = set()
    for _ in range(rng.randint(0, 3)):
        lo = rng.randint(-70_000, 300_000)
        keys |= {lo + rng.randint(0, 140_000) for _ in range(rng.randint(0, 4000))}
    keys |= {rng.randint(-(2**63), 2**63 - 1) for _ in range(rng.randint(0, 40))}
    if rng.random() < 0.3:
        keys |= {(rng.randint(0, 40), str(rng.randint(0, 9))) for _ in range(rng.randint(0, 30))}
    return keys


@pytest.mark.parametrize("seed", range(40))
def test_as_a_set(seed: int) -> None:
    """Random keys: membership, length, order, the operations with a set or another
    KeySet, copies, unions in place and discards all give what Python's set gives."""
    rng = random.Random(seed)
    a, b = _random_keys(rng), _random_keys(rng)
    ka, kb = KeySet(a), KeySet(b)
    assert len(ka) == len(a)
    assert set(ka) == a
    ints = sorted(k for k in a if isinstance(k, int))
    assert list(ka.ints()) == ints
    assert list(ka)[: len(ints)] == ints  # rowids first, ascending
    for lo in [-(2**63), -1, 0, *ints[:: max(1, len(ints) // 5)], 10**6, *list(b)[:3]]:
        if isinstance(lo, int):
            assert list(ka.after(lo)) == [r for r in ints if r > lo]
    for k in list(b)[:300] + list(a)[:300]:
        assert (k in ka) == (k in a)
    for got, want in (
        (ka | kb, a | b),
        (ka & kb, a & b),
        (ka - kb, a - b),
        (ka | b, a | b),
        (a | kb, a | b),
        (ka & b, a & b),
        (a & kb, a & b),
        (ka - b, a - b),
        (a - kb, a - b),
    ):
        assert isinstance(got, KeySet)
        assert set(got) == want
        assert len(got) == len(want)
    assert (ka == kb) == (a == b)
    assert ka == a
    assert a == ka
    assert ka == KeySet(a)
    assert ka != a | {10**12}
    assert ka <= KeySet(a | b)
    assert (ka <= kb) == (a <= b)
    grown = ka.copy()
    grown |= kb
    assert set(grown) == a | b
    assert len(grown) == len(a | b)
    assert set(ka) == a
    shrunk = KeySet(a | b)
    for k in list(b):
        shrunk.discard(k)
    assert set(shrunk) == (a | b) - b
    assert len(shrunk) == len((a | b) - b)


def test_keys_equal_as_in_a_set() -> None:
    """1.0 and True are the key 1 in a set; so they are here. Unhashable: not in it."""
    ks = KeySet([1, (2, "x")])
    assert 1.0 in ks
    assert True in ks
    assert (2, "x") in ks
    assert 1.5 not in ks
    assert [1] not in ks
    assert "1" not in ks
    ks.add(1.0)
    assert len(ks) == 2


def test_dense_rowids_cost_bits_not_objects() -> None:
    """A million dense rowids: a few hundred KiB, against tens of MiB as a set. Rowids
    scattered one to a stretch stay in one plain set, as they would in a set."""
    ks = KeySet(range(1, 1_000_001))
    held = sum(sys.getsizeof(b) for b in ks._bitmaps.values()) + sys.getsizeof(ks._loose)
    assert len(ks) == 1_000_000
    assert held < 200 * 1024
    assert sys.getsizeof(set(range(1, 1_000_001))) > 16 * 1024 * 1024
    scattered = [i << 20 for i in range(20_000)]
    sparse = KeySet(scattered)
    assert not sparse._bitmaps
    assert len(sparse._loose) == 20_000
    assert list(sparse.ints()) == scattered
    # Loose rowids move into a bitmap once their stretch holds SET_LIMIT of them, when
    # the loose ones are next looked over (each time their number has doubled).
    sparse.update(range(5, 5 + 13_000 * 5, 5))
    assert 0 in sparse._bitmaps
    assert all(r >> 16 != 0 for r in sparse._loose)
    assert len(sparse) == 33_000
    assert 0 in sparse
    assert 10 in sparse
    assert 11 not in sparse


def test_windows_cover_about_that_many_rowids() -> None:
    """The windows of a million dense rowids split them into stretches of at least the
    asked number (bar the last) and at most one bitmap more; nothing is left out."""
    ks = KeySet(range(1, 1_000_001))
    starts = ks.windows(262_144)
    assert starts == sorted(starts)
    edges = [-(2**63), *starts, 2**63]
    sizes = [sum(1 for r in ks.ints() if lo <= r < hi) for lo, hi in itertools.pairwise(edges)]
    assert sum(sizes) == 1_000_000
    assert all(n >= 262_144 for n in sizes[:-1])
    assert all(n < 262_144 + 65_536 for n in sizes)
    assert KeySet().windows(10) == []
    assert KeySet([5]).windows(10) == []


def test_emptied_and_zero() -> None:
    """Rowid 0 is a rowid like any other; a set emptied by discards is empty and false."""
    ks = KeySet([0, 5])
    ks.discard(5)
    assert 0 in ks
    assert len(ks) == 1
    assert ks
    ks.discard(0)
    assert not ks
    assert len(ks) == 0
    dense = KeySet(range(2000))
    for r in range(2000):
        dense.discard(r)
    assert not dense
    assert list(dense) == []
    assert dense.add_new(7) is True
    assert dense.add_new(7) is False
    assert KeySet(range(1000)).add_new(999) is False
    assert KeySet(range(1000)).add_new(1000) is True


@pytest.mark.parametrize("seed", range(6))
def test_rowids_read_keep_their_place(seed: int) -> None:
    """Rowids read in b-tree order go straight into a KeySet while they rise; one out of
    order (a garbled cell) sends them through the longest rising run, as before."""
    rng = random.Random(seed)
    ids = sorted(rng.sample(range(1, 200_000), 3000))
    if seed % 2:
        for _ in range(seed):
            ids.insert(rng.randrange(len(ids)), rng.choice([0, 7, 10**9, ids[5]]))
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE TABLE t(pos INTEGER PRIMARY KEY, id)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(ids)))
    conn.execute("INSERT INTO t VALUES (-1, 'text, no rowid')")
    got = _rowids_read(conn, "SELECT id FROM t ORDER BY pos")
    assert got == in_order(ids)
    assert list(got.ints()) == sorted(got)
    if seed % 2:
        assert len(got) < len(set(ids))  # the garbled ones left out
    else:
        assert set(got) == set(ids)


def test_update_with_keys_a_set_takes_for_ints() -> None:
    """Floats equal to ints go in as those ints; when they make the loose rowids be
    looked over, the rowids after them still go in (none into a set no longer held)."""
    floats = [float(i) for i in range(FIRST_LOOK + 10)]
    scattered = [(5 << 16) + 7 * i for i in range(100)]
    ks = KeySet()
    ks.update([*floats, *scattered])
    assert set(ks) == set(range(FIRST_LOOK + 10)) | set(scattered)
    assert len(ks) == FIRST_LOOK + 10 + 100


@pytest.mark.parametrize("seed", range(30))
def test_up_to_keeps_the_rowids_at_most_the_bound(seed: int) -> None:
    """``up_to(n)``: the rowids at most ``n`` and nothing else, bitmaps cut at any bit
    (negative and 64-bit rowids, bounds inside, between and beyond the stretches); the
    set it came from is unchanged, and the new one is a set of its own."""
    rng = random.Random(seed)
    keys = _random_keys(rng)
    ks = KeySet(keys)
    ints = sorted(k for k in keys if isinstance(k, int))
    bounds = [-(2**63), -1, 0, 65_535, 65_536, 2**63 - 1]
    bounds += [r + d for r in ints[:: max(1, len(ints) // 7)] for d in (-1, 0, 1)]
    for last in bounds:
        got = ks.up_to(last)
        assert list(got.ints()) == [r for r in ints if r <= last], last
        assert len(got) == sum(1 for r in ints if r <= last)
    assert set(ks) == keys
    if ints:
        cut = ks.up_to(ints[-1])
        cut.discard(ints[0])
        assert ints[0] in ks
