"""A record header's field count, counted in C (``pages._header_fields``), is what
reading it varint by varint gives, on the records of a file Hermes wrote and on
headers of random bytes (garbled cells, 9-byte varints, a varint cut by the end)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from lab.hermes_fixtures import SMALL, built_db
from statewarden.errors import PageFormatError
from statewarden.recovery.pages import PAGE_TABLE_LEAF, DatabaseFile, _header_fields, varint


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
