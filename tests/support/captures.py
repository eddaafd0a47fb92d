"""Hermes' retired WAL captures as Hermes writes them (``capture_of``), and a main image
with a WAL of committed frames to put in one (``image_and_wal``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import apsw

CAPTURE = "state.db.retired-wal-20261130-220000-42"


def capture_of(home: Path, image: bytes, wal: bytes, name: str = CAPTURE) -> Path:
    """A retired WAL capture as Hermes writes it: the main image, the WAL it held and
    manifest.json, in a folder beside state.db."""
    d = home / name
    d.mkdir()
    (d / "state.db").write_bytes(image)
    (d / "state.db-wal").write_bytes(wal)
    manifest = {
        "version": 1,
        "captured_at": "2026-11-30T22:00:00Z",
        "main": {"mode": "copied", "file": "state.db"},
        "wal": {"file": "state.db-wal"},
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def image_and_wal(db: Path, work: Path, new_messages: int) -> tuple[bytes, bytes]:
    """The main image of ``db`` and a WAL of committed frames that append
    ``new_messages`` messages (copies of the newest ones, new ids from the table's
    AUTOINCREMENT) to it."""
    base = work / "base.db"
    shutil.copyfile(db, base)
    conn = apsw.Connection(str(base))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    image = base.read_bytes()
    conn.execute("PRAGMA wal_autocheckpoint=0")
    cols = [str(r[1]) for r in conn.execute("PRAGMA table_info(messages)") if r[1] != "id"]
    names = ", ".join(cols)
    with conn:
        conn.execute(
            f"INSERT INTO messages({names}) SELECT {names} FROM messages"
            f" ORDER BY id DESC LIMIT {new_messages}"
        )
    wal = Path(f"{base}-wal").read_bytes()
    conn.close()
    return image, wal
