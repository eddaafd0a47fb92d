"""A live Hermes bundle to attack: a copy of a Hermes-written database, a real Hermes
writer killed mid-work, what a folder holds (files by SHA-256, links by target), and
what SQLite presents of a bundle, read from a copy."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import apsw

from lab.hermes_fixtures import TINY, built_db, writer_env
from tests.support.fake_hermes import LOG_ENV, WRITE_EVERY_ENV, install_fake_hermes


def bundle(folder: Path) -> dict[str, str]:
    """Each entry of ``folder``: a regular file's SHA-256, a symlink's target, else its mode."""
    out = {}
    for p in sorted(folder.iterdir()):
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode):
            out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif stat.S_ISLNK(st.st_mode):
            out[p.name] = "-> " + os.readlink(p)
        else:
            out[p.name] = stat.filemode(st.st_mode)
    return out


def live_copy(home: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    db = home / "state.db"
    shutil.copyfile(built_db(TINY), db)
    return db


def killed_writer(home: Path, bin_dir: Path) -> None:
    """A real Hermes writer (SessionDB) commits in WAL mode and is killed with SIGKILL:
    its -wal holds commits the file lacks."""
    install_fake_hermes(bin_dir)
    log = home.parent / "committed.log"
    env = writer_env(home)
    env[WRITE_EVERY_ENV] = "0.01"
    env[LOG_ENV] = str(log)
    proc = subprocess.Popen([str(bin_dir / "hermes"), "chat"], env=env, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    while not log.exists() or len(log.read_text().splitlines()) < 20:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()


def plant_sidecar(db: Path, suffix: str, plant: str, victim: Path) -> None:
    """Put at ``db``'s sidecar ``suffix`` a ``symlink`` to ``victim`` (40 kB of random
    bytes, written here), a ``fifo`` or a ``folder``."""
    victim.write_bytes(os.urandom(40_000))
    side = Path(f"{db}{suffix}")
    if plant == "symlink":
        side.symlink_to(victim)
    elif plant == "fifo":
        os.mkfifo(side)
    else:
        side.mkdir()


def plant_wal_of_another_database(db: Path, other: Path) -> None:
    """Put beside ``db`` a ``-wal`` that another database (made at ``other``, 50 rows of
    2 kB never checkpointed) wrote: SQLite would replay it over ``db``."""
    conn = apsw.Connection(str(other))
    conn.execute("PRAGMA journal_mode=WAL").fetchall()
    conn.execute("PRAGMA wal_autocheckpoint=0").fetchall()
    conn.execute("CREATE TABLE t(x)")
    for _ in range(50):
        conn.execute("INSERT INTO t VALUES (randomblob(2000))")
    shutil.copyfile(f"{other}-wal", f"{db}-wal")
    conn.close()
