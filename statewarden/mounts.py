"""The filesystem under a database, and whether WAL is safe on it.

WAL needs coherent POSIX locks and a coherent shared memory map of ``-shm`` between
every process using the database. Network filesystems (NFS, SMB/CIFS, Ceph,
GlusterFS) and cross-VM shares (virtiofs on Docker Desktop / OrbStack, 9p and drvfs
on Windows) do not give that, and FUSE filesystems cannot be trusted to: there WAL
can corrupt silently while ``integrity_check`` passes (docs/stories.md story 8).

No pathlib and no re: ``statewardenctl holders`` run as a user reads the mounts (is
``/proc`` mounted ``hidepid``?), and the two would be a quarter of its CPU time.
"""

from __future__ import annotations

import os

from statewarden.record import FrozenRecord

MOUNTINFO = "/proc/self/mountinfo"

# Filesystem types on which WAL is unsafe (exact names); any ``fuse.*`` also is.
UNSAFE_FOR_WAL = frozenset(
    {
        "virtiofs",
        "9p",
        "9p2000",
        "drvfs",
        "vboxsf",
        "prl_fs",
        "vmhgfs",
        "fuse",
        "fuseblk",
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ncpfs",
        "ceph",
        "glusterfs",
        "lustre",
        "gpfs",
        "afs",
        "ocfs2",
        "gfs2",
        "beegfs",
    }
)

_OCTAL = frozenset("01234567")


class Mount(FrozenRecord):
    """One line of ``mountinfo``: where, what filesystem, from where, with which options."""

    __slots__ = ("fstype", "mount_point", "options", "source", "super_options")
    mount_point: str
    fstype: str
    source: str
    options: str
    super_options: str  # the filesystem's own options (proc: hidepid=, subset=)

    def __init__(
        self, mount_point: str, fstype: str, source: str, options: str, super_options: str = ""
    ) -> None:
        self._set(
            mount_point=mount_point,
            fstype=fstype,
            source=source,
            options=options,
            super_options=super_options,
        )

    @property
    def unsafe_for_wal(self) -> bool:
        return is_unsafe_for_wal(self.fstype)


def is_unsafe_for_wal(fstype: str) -> bool:
    return fstype in UNSAFE_FOR_WAL or fstype.startswith("fuse.")


def unescape(field: str) -> str:
    """Decode the octal escapes the kernel writes in mountinfo (``\\040`` is a space)."""
    if "\\" not in field:
        return field
    out: list[str] = []
    i, n = 0, len(field)
    while i < n:
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and _OCTAL.issuperset(code):
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """Parse ``/proc/<pid>/mountinfo`` (proc(5)); malformed lines are skipped."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < sep + 3:
            continue
        mounts.append(
            Mount(
                mount_point=unescape(fields[4]),
                fstype=fields[sep + 1],
                source=unescape(fields[sep + 2]),
                options=fields[5],
                super_options=fields[sep + 3] if len(fields) > sep + 3 else "",
            )
        )
    return mounts


def read_mounts(path: str | os.PathLike[str] = MOUNTINFO) -> list[Mount]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_mountinfo(f.read())
    except OSError:
        return []


def mount_for(path: str | os.PathLike[str], mounts: list[Mount] | None = None) -> Mount | None:
    """The mount a path lives on: the longest mount point that is a prefix of it.

    The path is resolved first (symlinks followed as far as they exist), since the mount
    is where the file really lives. A later mount on the same point hides an earlier
    one, so the last one wins.
    """
    mounts = read_mounts() if mounts is None else mounts
    real = os.path.realpath(os.path.abspath(path))
    best: Mount | None = None
    for m in mounts:
        point = m.mount_point.rstrip("/") or "/"
        inside = point in ("/", real) or real.startswith(point + "/")
        if inside and (best is None or len(point) >= len(best.mount_point.rstrip("/") or "/")):
            best = m
    return best
