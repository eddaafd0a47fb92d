"""A record header's field count, counted in C (``carving._header_fields``), is what
reading it varint by varint gives, on the records of a file Hermes wrote and on
headers of random bytes (garbled cells, 9-byte varints, a varint cut by the end); and
``carving.survey_leaves`` reads damaged leaves once to the same answers as the two reads
it replaced made apart."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from lab import corruption
from lab.hermes_fixtures import SMALL, built_db
from statewarden.errors import PageFormatError
from statewarden.recovery.decoding.carving import _header_fields, _space_accounted, survey_leaves
from statewarden.recovery.decoding.page_format import PAGE_TABLE_LEAF, _header_of, varint
from statewarden.recovery.decoding.pages import DatabaseFile


def _by_varints(record: bytes, at: int, hsize: int) -> int | str:
    fields = 0
    try:
        while at < hsize:
            _, at = varint(record, at)
            fields += 1
    except PageFormatError:
        return "raises"
    return fields


def _counted(record: bytes, at: int, hsize: int) -> int | str:
    try:
        return _header_fields(record, at, hsize)
    except PageFormatError:
        return "raises"


def test_same_count_on_every_record_hermes_wrote(tmp_path: Path) -> None:
    """Every cell of every table leaf of a Hermes file: the same count both ways."""
    db = DatabaseFile(built_db(SMALL))
    checked = 0
    try:
        for n in range(1, db.page_count + 1):
            pg = db.page(n)
            header_at = 100 if n == 1 else 0
            if pg[header_at] != PAGE_TABLE_LEAF:
                continue
            for off in db.cell_offsets(n):
                size, pos = varint(pg, off)
                _, pos = varint(pg, pos)
                local = pg[pos : pos + min(size, db._local_size(size, table=True))]
                hsize, at = varint(local, 0)
                if 0 < hsize <= len(local):
                    assert _header_fields(local, at, hsize) == _by_varints(local, at, hsize)
                    checked += 1
    finally:
        db.close()
    assert checked > 1000


@pytest.mark.parametrize("seed", range(5))
def test_same_count_or_same_error_on_random_headers(seed: int) -> None:
    """Random header bytes, rich in high-bit bytes: runs of 8 and more (9-byte
    varints), a last varint that runs past the header or past the record's end."""
    rng = random.Random(seed)
    for _ in range(20_000):
        length = rng.randrange(0, 40)
        high = rng.random()
        record = bytes(
            rng.randrange(0x80, 0x100) if rng.random() < high else rng.randrange(0, 0x80)
            for _ in range(length)
        )
        at = rng.randrange(0, 3)
        hsize = rng.randrange(at, max(at, length) + 2)
        assert _counted(record, at, hsize) == _by_varints(record, at, hsize), (record, at, hsize)


def _garbled_and_counts_apart(
    db: DatabaseFile, leaves: list[int]
) -> tuple[list[int], list[int], set[int]]:
    """The two reads ``survey_leaves`` makes in one, made apart (the reference)."""
    garbled, unreadable = [], []
    for n in leaves:
        pg = db.page(n)
        try:
            offsets = db._offsets_of(n, pg, _header_of(n, pg))
        except (PageFormatError, struct.error, IndexError):
            unreadable.append(n)
            continue
        try:
            prev = None
            used = 0
            for off in offsets:
                size, pos = varint(pg, off)
                rowid, pos = varint(pg, pos)
                local = db._local_size(size, table=True)
                end = pos + local + (4 if local < size else 0)
                if end > db.usable or (prev is not None and rowid <= prev):
                    raise PageFormatError("garbled")
                prev = rowid
                used += end - off
            if not _space_accounted(db, n, pg, used):
                raise PageFormatError("cells and free space do not fill the page")
        except (PageFormatError, struct.error, IndexError):
            garbled.append(n)
    counts: set[int] = set()
    for n in sorted(set(leaves) - set(garbled)):
        try:
            pg = db.page(n)
            offsets = db._offsets_of(n, pg, _header_of(n, pg))
        except (PageFormatError, struct.error, IndexError):
            continue
        for off in offsets:
            try:
                size, pos = varint(pg, off)
                _, pos = varint(pg, pos)
                record = pg[pos : pos + min(size, db._local_size(size, table=True))]
                hsize, at = varint(record, 0)
                if 0 < hsize <= len(record):
                    counts.add(_by_varints_strict(record, at, hsize))
            except (PageFormatError, struct.error, IndexError):
                continue
    return garbled, unreadable, counts


def _by_varints_strict(record: bytes, at: int, hsize: int) -> int:
    fields = 0
    while at < hsize:
        _, at = varint(record, at)
        fields += 1
    return fields


@pytest.mark.parametrize("seed", range(12))
def test_survey_of_damaged_leaves_is_the_two_reads_made_apart(tmp_path: Path, seed: int) -> None:
    """Leaves of messages and sessions with random sectors zeroed or scribbled, cells
    garbled, a header rewritten: garbled, unreadable and field counts as before."""
    case = corruption.fresh_copy(tmp_path, SMALL)
    rng = random.Random(seed)
    pf = corruption.PristineFile(case.db)
    leaves: list[int] = []
    for table in ("messages", "sessions"):
        leaves += pf.tree_pages(case.roots[table])[1]
    with open(case.db, "r+b") as f:
        for leaf in rng.sample(leaves, min(8, len(leaves))):
            at = (leaf - 1) * pf.page_size + rng.randrange(0, pf.page_size - 512)
            f.seek(at)
            f.write(bytes(512) if rng.random() < 0.5 else rng.randbytes(512))
        f.seek((leaves[0] - 1) * pf.page_size)
        f.write(bytes(16))  # its header: a leaf whose cell pointers do not read
    db = DatabaseFile(case.db)
    try:
        got = survey_leaves(db, leaves + leaves[:3])
        want = _garbled_and_counts_apart(db, leaves + leaves[:3])
    finally:
        db.close()
    assert got == want
    garbled, unreadable, counts = got
    assert garbled  # the comparison is not of empty lists
    assert unreadable == [leaves[0], leaves[0]]
    assert counts
