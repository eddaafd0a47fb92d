"""The offsets file: read back as written, damaged input read as "nothing known", and
written only when it changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

from statewarden.watch.offsets import Offset, OffsetsFile, head_digest, is_saved_file, mark_digest


def test_round_trip_and_no_write_when_unchanged(tmp_path: Path) -> None:
    """What is saved loads back equal; saving the same again leaves the file alone."""
    path = tmp_path / "logtail-default.json"
    box = OffsetsFile(path)
    files = {"agent.log": Offset(1, 2, 30, "4:abcd", "4:ef01")}
    rotated = {"agent.log": [Offset(1, 3, 0, "0:e3b0")]}
    known = {"agent.log": {(1, 3), (1, 9)}}
    box.save(files, rotated, known)
    first = os.stat(path)
    box.save(dict(files), dict(rotated), dict(known))
    assert os.stat(path).st_ino == first.st_ino  # not replaced: nothing changed
    loaded = OffsetsFile(path).load()
    assert loaded.files == files
    assert loaded.rotated == rotated
    assert loaded.known == known
    assert json.loads(path.read_text())["version"] == 1


def test_missing_damaged_and_hostile_files(tmp_path: Path) -> None:
    """No file: a first start (files None). Not JSON, not an object, or entries of the
    wrong shape: nothing known, but not a first start; good entries beside bad survive."""
    path = tmp_path / "o.json"
    assert OffsetsFile(path).load().files is None
    for text in ("{not json", "[1, 2]", "\x00\xff", '"s"'):
        path.write_text(text, errors="surrogateescape")
        assert OffsetsFile(path).load().files == {}
    good = {"dev": 1, "inode": 2, "offset": 3, "head": "0:x"}
    path.write_text(
        json.dumps(
            {
                "files": {"a.log": good, "b.log": {"dev": "x"}, "c.log": [1]},
                "rotated": {"a.log": [good, None, {"inode": 1}], "b.log": "nope"},
                "known_rotated": {"a.log": [[1, 2], [3, 4]], "b.log": [["x", 1]], "c.log": 5},
            }
        )
    )
    loaded = OffsetsFile(path).load()
    assert loaded.files == {"a.log": Offset(1, 2, 3, "0:x", "")}
    assert loaded.rotated == {"a.log": [Offset(1, 2, 3, "0:x", "")]}
    assert loaded.known == {"a.log": {(1, 2), (3, 4)}}


def test_is_saved_file_tells_a_reused_inode_apart(tmp_path: Path) -> None:
    """A path is the saved file only with the same inode, first bytes and bytes before
    the offset; a rewritten file or a directory is not."""
    log = tmp_path / "agent.log"
    log.write_bytes(b"line one\nline two\n")
    st = os.stat(log)

    fd = os.open(log, os.O_RDONLY)
    try:
        saved = Offset(st.st_dev, st.st_ino, 9, head_digest(fd, 256), mark_digest(fd, 9))
    finally:
        os.close(fd)
    assert is_saved_file(log, saved)
    with log.open("r+b") as f:  # rewritten in place, same inode
        f.write(b"LINE")
    assert not is_saved_file(log, saved)
    assert not is_saved_file(tmp_path, saved)
    assert not is_saved_file(tmp_path / "gone.log", saved)
