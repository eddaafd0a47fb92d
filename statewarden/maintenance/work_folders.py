"""The work folders runs of a database leave next to it when killed mid-step (the
pre-build's and the catch-up's ``.statewarden-work-*``, the catch-up's
``.statewarden-catch-up-<db>-<run>``, a merge's sources in the run's folder), each a
whole copy of the database: removed by ``--resume`` and the next run, under the run
lock, so no live run of the database uses them."""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
from pathlib import Path

from statewarden.maintenance.catch_up import CATCH_UP_PREFIX
from statewarden.maintenance.ledger import db_digest
from statewarden.maintenance.merge import remove_sources
from statewarden.recovery import WORK_LOCK, WORK_PREFIX, remove_abandoned


def remove_work_folders(db: Path, folder: Path) -> list[str]:
    """Remove what runs of ``db`` killed mid-step left next to it (``folder``: the
    run's folder). Called with the run lock held."""
    removed = [str(p) for p in remove_abandoned(db.parent)]
    removed += [str(p) for p in remove_sources(folder)]
    mine = f"{CATCH_UP_PREFIX}{db_digest(db)}-"
    try:
        dfd = os.open(db.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return removed
    try:
        for name in os.listdir(dfd):
            if name.startswith(WORK_PREFIX) and _unclaimed_work_folder(dfd, name):
                removed.append(str(db.parent / name))
                continue
            rest = name[len(CATCH_UP_PREFIX) :]
            # This database's, or an older version's (mkdtemp's 8 random characters).
            if not name.startswith(mine) and not (
                name.startswith(CATCH_UP_PREFIX) and len(rest) == 8 and "-" not in rest
            ):
                continue
            st = os.lstat(name, dir_fd=dfd)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
                shutil.rmtree(name, dir_fd=dfd, ignore_errors=True)
                removed.append(str(db.parent / name))
    finally:
        os.close(dfd)
    return removed


def _unclaimed_work_folder(dfd: int, name: str) -> bool:
    """Remove a work folder of ours that a run killed while it was being set up left
    without its lock (``recovery.bundle`` names the lock only once it holds it, and
    copies nothing before): empty, or with an unnamed lock nobody holds. True if removed.
    A folder with its lock is for ``remove_abandoned`` to judge."""
    try:
        st = os.lstat(name, dir_fd=dfd)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            return False
        os.lstat(f"{name}/{WORK_LOCK}", dir_fd=dfd)
        return False  # claimed: held by a live run, or judged by remove_abandoned
    except FileNotFoundError:
        pass
    except OSError:
        return False
    try:
        fd = os.open(
            f"{name}/{WORK_LOCK}.new", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd
        )
    except FileNotFoundError:
        try:
            os.rmdir(name, dir_fd=dfd)  # only if empty: nothing was put in it
        except OSError:
            return False
        return True
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False  # being set up right now
    try:
        shutil.rmtree(name, dir_fd=dfd, ignore_errors=True)
    finally:
        os.close(fd)
    return True
