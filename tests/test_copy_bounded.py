"""A raw copy reads a regular file only as far as it reached when the copy began.

A live writer appending to a file while it is copied (Hermes' ``-wal``, a replica a
tool keeps writing) kept a copy to the file's end going for as long as it wrote: every
step found more. Each caller refuses a copy of a file that changed meanwhile, so the
bytes past the first size were never used; ``atomic.copy_bytes`` now stops there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statewarden import atomic


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(atomic, "COPY_CHUNK_BYTES", 4096)


@pytest.mark.usefixtures("small_steps")
@pytest.mark.parametrize("kernel_copy", [True, False], ids=["copy_file_range", "read"])
def test_a_file_growing_during_the_copy_is_copied_to_its_first_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel_copy: bool
) -> None:
    """Every step appends a step's worth to the source (a writer faster than the copy):
    the copy ends at the size the source had when it began, each byte equal."""
    src = tmp_path / "growing"
    first = os.urandom(10 * 4096 + 17)
    src.write_bytes(first)
    if not kernel_copy:

        def refused(*_args: object) -> int:
            raise OSError(18, "Invalid cross-device link")

        monkeypatch.setattr(os, "copy_file_range", refused)
    out = tmp_path / "copy"
    with open(src, "rb") as s, open(src, "ab") as writer, open(out, "wb") as d:
        for _ in atomic.copy_bytes(s.fileno(), d.fileno()):
            writer.write(os.urandom(4096))
            writer.flush()
    assert src.stat().st_size > len(first)
    assert out.read_bytes() == first


def test_a_limit_below_the_size_is_kept(tmp_path: Path) -> None:
    """A limit smaller than the file (the committed part of a -wal) ends the copy there."""
    src = tmp_path / "src"
    src.write_bytes(os.urandom(9000))
    out = tmp_path / "copy"
    with open(src, "rb") as s, open(out, "wb") as d:
        assert sum(atomic.copy_bytes(s.fileno(), d.fileno(), 5000)) == 5000
    assert out.read_bytes() == src.read_bytes()[:5000]


def test_the_rest_from_the_current_offset(tmp_path: Path) -> None:
    """Copied from where the descriptor stands: what is left, no more."""
    src = tmp_path / "src"
    src.write_bytes(os.urandom(9000))
    out = tmp_path / "copy"
    with open(src, "rb") as s, open(out, "wb") as d:
        os.lseek(s.fileno(), 1000, os.SEEK_SET)
        assert sum(atomic.copy_bytes(s.fileno(), d.fileno())) == 8000
    assert out.read_bytes() == src.read_bytes()[1000:]


def test_a_pipe_is_read_to_its_end(tmp_path: Path) -> None:
    """A descriptor with no size (a pipe) is copied until it ends."""
    r, w = os.pipe()
    payload = os.urandom(20_000)  # less than a pipe's buffer: written before the copy
    assert os.write(w, payload) == len(payload)
    os.close(w)
    out = tmp_path / "copy"
    with open(out, "wb") as d:
        try:
            total = sum(atomic.copy_bytes(r, d.fileno()))
        finally:
            os.close(r)
    assert total == len(payload)
    assert out.read_bytes() == payload
