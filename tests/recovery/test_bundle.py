"""The private copy's byte copier: the kernel's copy_file_range, and read/write where
the kernel refuses it, give the same bytes; a full disk is an error, not a short copy."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from statewarden import atomic


def _copy(src: Path, dst: Path) -> list[int]:
    with open(src, "rb") as s, open(dst, "wb") as d:
        return list(atomic.copy_bytes(s.fileno(), d.fileno()))


@pytest.fixture
def source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(atomic, "COPY_CHUNK_BYTES", 64 * 1024)
    path = tmp_path / "src.db"
    path.write_bytes(os.urandom(1_000_003))
    return path


def test_kernel_copy_in_steps(source: Path, tmp_path: Path) -> None:
    """Copied by copy_file_range in steps of at most COPY_CHUNK_BYTES; every byte equal."""
    steps = _copy(source, tmp_path / "out.db")
    assert sum(steps) == source.stat().st_size
    assert max(steps) <= 64 * 1024
    assert (tmp_path / "out.db").read_bytes() == source.read_bytes()


def test_refused_at_once_or_midway_reads_and_writes_the_rest(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """copy_file_range refused (EXDEV, as across filesystems on old kernels) from the
    start or after some steps: the rest is read and written, the copy is still whole."""
    real = os.copy_file_range

    class Refusing:
        """copy_file_range that works ``allowed`` times, then fails with EXDEV."""

        def __init__(self, allowed: int) -> None:
            self.left = allowed

        def __call__(self, src: int, dst: int, count: int) -> int:
            self.left -= 1
            if self.left < 0:
                raise OSError(errno.EXDEV, "Invalid cross-device link")
            return real(src, dst, count)

    for allowed in (0, 3):
        refusing = Refusing(allowed)
        monkeypatch.setattr(os, "copy_file_range", refusing)
        out = tmp_path / f"out{allowed}.db"
        assert sum(_copy(source, out)) == source.stat().st_size
        assert out.read_bytes() == source.read_bytes()


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_full_disk_is_an_error(source: Path, small_tmpfs: Path) -> None:
    """A destination with no room left raises ENOSPC (never a silently short copy)."""
    with pytest.raises(OSError, match="No space left") as err:
        _copy(source, small_tmpfs / "out.db")
    assert err.value.errno == errno.ENOSPC
