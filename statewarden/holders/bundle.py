"""A database's bundle as ``/proc`` shows it: which file of it a descriptor or a map names.

The bundle is ``state.db`` and its ``-wal``, ``-shm`` and ``-journal``, where SQLite keeps
them (through a symlink to the database file, next to the file it leads to). A
descriptor or a map matches by ``(st_dev, st_ino)``; one that names a bundle file by
path but not by inode is **stale**: an old or deleted file still written through.

The inodes are read once, when a scan begins; a file can be deleted meanwhile and its
number given to another file (Hermes 0.22 in rollback mode creates and deletes its
``-journal`` at every transaction; another Hermes' next journal, anywhere on the same
filesystem, may get the number). So an inode matches only while it is the bundle file:
the path the descriptor or map shows is the file's, or the file there still has it.
"""

from __future__ import annotations

import os

from statewarden.holders.report import FILE_NAMES
from statewarden.record import FrozenRecord
from statewarden.sidecars import BUNDLE_SUFFIXES, sidecar_name

_DELETED = " (deleted)"

# (bundle index, file name in FILE_NAMES, stale): one file of one bundle, as held
Hit = tuple[int, str, bool]


class Bundle(FrozenRecord):
    """One database's files as a scan matches them."""

    __slots__ = ("db", "dir_real", "ids", "name_bytes", "names", "paths", "real")
    db: str  # as the caller named it (what the report shows)
    real: str  # the file SQLite opens for it: symlinks followed, as SQLite follows them
    dir_real: str
    ids: dict[str, tuple[int, int] | None]  # file name -> (dev, ino) now
    names: dict[str, str]  # actual file name on disk -> name in FILE_NAMES
    paths: dict[str, str]  # name in FILE_NAMES -> the file's path (symlinks followed)
    name_bytes: bytes  # the database's file name, as memory maps spell it

    def __init__(
        self,
        db: str,
        real: str,
        ids: dict[str, tuple[int, int] | None],
        names: dict[str, str],
        name_bytes: bytes,
    ) -> None:
        dir_real = os.path.dirname(real)
        self._set(
            db=db,
            real=real,
            dir_real=dir_real,
            ids=ids,
            names=names,
            paths={name: os.path.join(dir_real, file) for file, name in names.items()},
            name_bytes=name_bytes,
        )


def stat_id(path: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``path``, or None where it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def bundle_of(db: str) -> Bundle:
    """The bundle of ``db`` as it is on disk now."""
    # SQLite follows a symlink to the database file and names -wal and -shm after the
    # file it leads to (unixFullPathname): a --db that is a link still finds them.
    real = os.path.realpath(db)
    ids = {
        name: stat_id(sidecar_name(real, suffix))
        for name, suffix in zip(FILE_NAMES, BUNDLE_SUFFIXES, strict=True)
    }
    base = os.path.basename(real)
    names = {base + suffix: name for name, suffix in zip(FILE_NAMES, BUNDLE_SUFFIXES, strict=True)}
    return Bundle(db=db, real=real, ids=ids, names=names, name_bytes=os.fsencode(base))


def bundle_files(dbs: list[str]) -> list[str]:
    """Each database's bundle (the file, -wal, -shm, -journal) where SQLite keeps it."""
    return [sidecar_name(os.path.realpath(db), sfx) for db in dbs for sfx in BUNDLE_SUFFIXES]


def match_descriptor(fst: os.stat_result, link: str, bundles: list[Bundle]) -> Hit | None:
    """Which bundle file the descriptor ``link`` (whose ``stat`` is ``fst``) holds, if any."""
    key = (fst.st_dev, fst.st_ino)
    for i, t in enumerate(bundles):
        for name, fid in t.ids.items():
            if fid == key:
                try:
                    where = os.readlink(link)
                except OSError:
                    where = ""
                # Otherwise the number is another file's now: no file of ours.
                return (i, name, False) if still_the_file(t, name, key, where) else None
    if fst.st_nlink:
        # Linked somewhere: not a deleted or replaced bundle file (a file renamed
        # away, e.g. into quarantine, no longer carries a bundle name either).
        return None
    try:
        where = os.readlink(link)
    except OSError:
        return None
    return stale_name(where, bundles)


def still_the_file(t: Bundle, name: str, key: tuple[int, int], where: str) -> bool:
    """Whether a descriptor or map on inode ``key``, the one bundle ``t``'s file ``name``
    had when the scan began, holds that file: ``where`` (the path ``/proc`` shows for
    it) is the file's path, or the file at that path has ``key`` still (a process that
    opened it by another path: a hard link, another mount namespace)."""
    if where.endswith(_DELETED):
        where = where[: -len(_DELETED)]
    path = t.paths[name]
    return where == path or stat_id(path) == key


def stale_name(where: str, bundles: list[Bundle]) -> Hit | None:
    """The bundle file a path names (an old or deleted one: stale), if any."""
    if where.endswith(_DELETED):
        where = where[: -len(_DELETED)]
    folder, _, base = where.rpartition("/")
    for i, t in enumerate(bundles):
        if folder == t.dir_real and base in t.names:
            return (i, t.names[base], True)
    return None


def match_maps(
    maps: bytes,
    bundles: list[Bundle],
    found: dict[Hit, int],
    stale_ids: dict[tuple[int, int], tuple[int, str]],
) -> None:
    """Count in ``found`` each bundle file ``/proc/<pid>/maps`` maps (a file mapped in
    several regions once); note in ``stale_ids`` the inode of each stale one."""
    wanted: dict[tuple[str, int], tuple[int, str]] = {}
    for i, t in enumerate(bundles):
        for name, fid in t.ids.items():
            if fid:
                dev = f"{os.major(fid[0]):02x}:{os.minor(fid[0]):02x}"
                wanted[(dev, fid[1])] = (i, name)
    seen: set[tuple[str, int]] = set()
    for raw in maps.splitlines():
        if not any(t.name_bytes in raw for t in bundles):
            continue
        parts = raw.decode("utf-8", "replace").split(None, 5)
        if len(parts) < 6:
            continue
        key = (parts[3], int(parts[4]))
        if key in seen:
            continue  # one file mapped in several regions counts once
        seen.add(key)
        hit: Hit | None = None
        if key in wanted:
            i, name = wanted[key]
            fid = bundles[i].ids[name]
            if fid is not None and still_the_file(bundles[i], name, fid, parts[5]):
                hit = (i, name, False)
        else:
            hit = stale_name(parts[5], bundles)
            if hit is not None:
                maj, _, mnr = parts[3].partition(":")
                fid = (os.makedev(int(maj, 16), int(mnr, 16)), key[1])
                stale_ids[fid] = (hit[0], hit[1])
        if hit is not None:
            found[hit] = found.get(hit, 0) + 1
