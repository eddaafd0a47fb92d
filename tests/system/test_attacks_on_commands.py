"""Attacks on ``check``, ``recover``, ``status`` and ``maintenance`` by a user of the machine.

Each test runs the installed ``statewardenctl`` as a whole process as uid 65534
(``setpriv``), with a HOME of its own in a folder it owns, against real Hermes
databases: planted symlinks at the paths it writes, a FIFO or a device where a
database file is expected, a small tmpfs in a private mount namespace. Each one failed
before the fix it names. A command that hangs is stopped by the subprocess timeout,
which fails the test; it measures nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.hermes_fixtures import TALL, built_db, make_home

USER = 65534
HANG_S = 120
CTL = str(Path(sys.executable).parent / "statewardenctl")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("unshare") is None,
    reason="needs root, setpriv and unshare (run the suite as root)",
)


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder every user can walk, outside pytest's own (which is mode 0700 and shared
    with other pytest sessions that reset it)."""
    path = Path(tempfile.mkdtemp(prefix="statewarden-attacks-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def user_dir(base: Path) -> Path:
    """A folder the user owns, with a Hermes home in it."""
    top = base / "u"
    make_home(top / "home")
    for root, dirs, files in os.walk(top):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.chown(name, USER, USER)
    return top


def as_user(
    top: Path, script: str, *, tmpfs: Path | None = None, size: str = "32m"
) -> subprocess.CompletedProcess[str]:
    """``sh -c SCRIPT`` as the user ($CTL is statewardenctl); with ``tmpfs``, a 32 MB tmpfs
    (``size``) is mounted there first, in a private mount namespace, owned by the user."""
    env = {
        "HOME": str(top),
        "PATH": "/usr/bin:/bin",
        "CTL": CTL,
        "LANG": "C.UTF-8",
        "XDG_RUNTIME_DIR": str(top / "run"),
        "XDG_STATE_HOME": str(top / "state"),
        "XDG_CONFIG_HOME": str(top / "config"),
        "SW_TOP": str(top),
    }
    user = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "sh", "-c", script]
    if tmpfs is None:
        cmd = user
    else:
        mount = f'mount -t tmpfs -o size={size},mode=0755,uid={USER},gid={USER} tmpfs "{tmpfs}" && exec "$@"'
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", mount, "sh", *user]
    return subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=HANG_S, check=False, cwd=top
    )


def one_line_error(r: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("(daemon not running")]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_recover_report_temporary_name_is_not_followed(base: Path) -> None:
    """A symlink planted at ``REPORT.tmp`` used to receive the report: the file it named
    was overwritten. Now the report goes through a new name and a hard link."""
    top = user_dir(base)
    r = as_user(
        top,
        'echo precious > "$SW_TOP/victim" && ln -s "$SW_TOP/victim" "$SW_TOP/r.json.tmp" && '
        '"$CTL" recover --source "$SW_TOP/home/state.db" --output "$SW_TOP/out.db" '
        '--report "$SW_TOP/r.json"',
    )
    assert r.returncode == 0, r.stderr
    assert (top / "victim").read_text() == "precious\n"
    assert not (top / "r.json").is_symlink()
    assert '"verified": true' in (top / "r.json").read_text()
    assert (top / "r.json.tmp").is_symlink()  # what was planted is left alone
    assert (top / "r.json").stat().st_mode & 0o077 == 0
    assert [p.name for p in top.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("command", ["recover", "check", "status"])
def test_fifo_as_database_is_refused(base: Path, command: str) -> None:
    """A FIFO at the database path used to block ``recover``, ``check`` and ``status``
    forever (an ``open`` with no writer). Now: one line, exit 4."""
    top = user_dir(base)
    args = {
        "recover": '--source "$SW_TOP/f/state.db" --output "$SW_TOP/out.db"',
        "check": '--db "$SW_TOP/f/state.db"',
        "status": '--db "$SW_TOP/f/state.db"',
    }[command]
    r = as_user(top, f'mkdir "$SW_TOP/f" && mkfifo "$SW_TOP/f/state.db" && "$CTL" {command} {args}')
    if command == "status":
        # status lists each database's problem and still exits 0, as for any unreadable file
        assert r.returncode == 0, r.stderr
        assert "problem" in r.stdout
        assert "state.db: is a FIFO, not a database" in r.stdout
        return
    one_line_error(r, 4, "state.db: is a FIFO, not a database")
    assert not (top / "out.db").exists()


@pytest.mark.parametrize("sidecar", ["fifo", "/dev/zero"])
@pytest.mark.parametrize("command", ["recover", "check"])
def test_sidecar_that_is_not_a_file_is_refused(base: Path, sidecar: str, command: str) -> None:
    """A ``-wal`` that is a FIFO used to hang the copy; one that is a symlink to
    ``/dev/zero`` was copied without end (3.7 GB in 10 s, until the disk was full). Run
    on a 32 MB tmpfs so the old behaviour cannot fill the machine's disk."""
    top = user_dir(base)
    work = top / "small"
    work.mkdir()
    os.chown(work, USER, USER)
    plant = 'mkfifo "$D/state.db-wal"' if sidecar == "fifo" else 'ln -s /dev/zero "$D/state.db-wal"'
    args = (
        '--source "$D/state.db" --output "$D/out.db"'
        if command == "recover"
        else '--db "$D/state.db"'
    )
    r = as_user(
        top,
        f'D="$SW_TOP/small" && cp "$SW_TOP/home/state.db" "$D/" && {plant} && '
        f'"$CTL" {command} {args} --work-dir "$D"'
        if command == "check"
        else f'D="$SW_TOP/small" && cp "$SW_TOP/home/state.db" "$D/" && {plant} && "$CTL" {command} {args}',
        tmpfs=work,
    )
    kind = "a FIFO" if sidecar == "fifo" else "a character device"
    one_line_error(r, 4, f"state.db-wal: is {kind}, not a database")


@pytest.mark.parametrize("owner", ["other-user", "other-writable"])
def test_work_folder_another_user_can_rename_is_refused(base: Path, owner: str) -> None:
    """``check --work-dir`` in a folder another user may rename entries of (theirs, or
    writable by all without the sticky bit) used to be accepted: that user could move
    the private copy's folder away and put a symlink in its place, so the copy of the
    database and the files built from it went where they chose. Now: exit 2, one line."""
    top = user_dir(base)
    shared = base / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777 if owner == "other-writable" else 0o755)
    os.chown(shared, 4242 if owner == "other-user" else USER, 4242)
    if owner == "other-user":
        # even sticky: its owner may rename anything in it
        os.chmod(shared, 0o1777)  # noqa: S103
    r = as_user(top, f'"$CTL" check --db "$SW_TOP/home/state.db" --work-dir "{shared}"')
    why = "owned by uid 4242" if owner == "other-user" else "writable by others and not sticky"
    one_line_error(r, 2, f"{shared}: {why}")
    assert os.listdir(shared) == []
    r = as_user(top, '"$CTL" check --db "$SW_TOP/home/state.db" --work-dir /tmp')
    assert r.returncode == 0, r.stderr  # /tmp: root's, sticky


def test_names_with_control_characters_are_escaped(base: Path) -> None:
    """A Hermes profile folder named with a newline and an escape sequence used to be
    printed raw by ``status`` and ``snapshots`` (the terminal took the escape, one entry
    became two lines), and a path with a newline split a one-line error in two."""
    top = user_dir(base)
    name = "ev\nil\x1b[31m"
    prof = top / "home" / "profiles" / name
    prof.mkdir(parents=True)
    shutil.copyfile(top / "home" / "state.db", prof / "state.db")
    for p in (prof.parent, prof, prof / "state.db"):
        os.chown(p, USER, USER)
    env = 'export HERMES_HOME="$SW_TOP/home"; P="$(printf "ev\\nil\\033[31m")"; '
    for script in (
        '"$CTL" status',
        '"$CTL" snapshots take --profile "$P"',
        '"$CTL" snapshots',
        '"$CTL" check --profile "$P"',
    ):
        r = as_user(top, env + script)
        assert r.returncode == 0, (script, r.stderr)
        assert "\x1b" not in r.stdout + r.stderr, script
        assert "ev\\nil\\x1b[31m" in r.stdout, (script, r.stdout)
    r = as_user(
        top, '"$CTL" recover --source "$(printf "no\\nsuch\\033[2J")" --output "$SW_TOP/o.db"'
    )
    one_line_error(r, 2, "no\\nsuch\\x1b[2J: no such file")


LEAVE_WAL = """
import os, sys, apsw
c = apsw.Connection(sys.argv[1])
c.execute("PRAGMA wal_autocheckpoint=0")
with c:
    for i in range(300):
        c.execute("INSERT INTO state_meta(key, value) VALUES (?, ?)", (f"k{i}", "x" * 3000))
os._exit(0)  # killed with its writes only in the -wal, as a crash leaves them
"""


def _wal_database(top: Path) -> tuple[Path, Path]:
    db = top / "home" / "state.db"
    subprocess.run([sys.executable, "-c", LEAVE_WAL, str(db)], check=True)
    wal = top / "home" / "state.db-wal"
    for p in (wal, top / "home" / "state.db-shm"):
        os.chown(p, USER, USER)
    state = top / "state"
    state.mkdir()
    os.chown(state, USER, USER)
    return db, wal


def test_quarantine_without_room_is_refused_before_stopping_anything(base: Path) -> None:
    """The state dir on another filesystem (a 600 KB tmpfs) with no room for the
    original and its 1.2 MB ``-wal``: the plan used to look only next to the database,
    and the run went as far as the swap. Now it fails before stopping anything."""
    top = user_dir(base)
    db, wal = _wal_database(top)
    before = {p.name: p.read_bytes() for p in (db, wal)}
    r = as_user(
        top,
        'export HERMES_HOME="$SW_TOP/home"; '
        '"$CTL" maintenance --db "$SW_TOP/home/state.db" --action vacuum --yes',
        tmpfs=top / "state",
        size="600k",
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert "failed before stopping anything" in r.stdout
    assert "not enough free space for the quarantine in" in r.stdout
    assert {p.name: p.read_bytes() for p in (db, wal)} == before


def test_full_quarantine_disk_during_the_swap_rolls_back(base: Path) -> None:
    """The state dir (quarantine) on a 24 MB tmpfs that another process fills during the
    settle period, the database's ``-wal`` 1.2 MB: the swap's copy of the ``-wal`` into
    quarantine hits ENOSPC. It used to end in "unexpected OSError" with state.db still
    fenced (mode 000) and a partial ``-wal`` in quarantine; ``--resume`` then skipped that
    sidecar as moved and put the new file beside the original's ``-wal``: state.db
    "malformed". Now the run puts the sidecars back and rolls back: the database and
    its ``-wal`` unchanged and readable. The filler starts when the ledger records the
    settle step (5 s here), and leaves 256 KB for the ledger."""
    top = user_dir(base)
    db, wal = _wal_database(top)
    before = {p.name: p.read_bytes() for p in (db, wal)}
    mode = db.stat().st_mode
    config = top / "sw.yaml"
    config.write_text("maintenance:\n  settle: 5s\n")
    r = as_user(
        top,
        'export HERMES_HOME="$SW_TOP/home"; S="$XDG_STATE_HOME/statewarden"; '
        '( until grep -qs \'"step": "settle"\' "$S"/maintenance/*/run.jsonl; do sleep 0.05; done; '
        '  free=$(df -k --output=avail "$XDG_STATE_HOME" | tail -1); '
        '  dd if=/dev/zero of="$XDG_STATE_HOME/filler" bs=1k count=$((free - 256)) 2>/dev/null ) & '
        f'"$CTL" maintenance --config "{config}" --db "$SW_TOP/home/state.db" --action vacuum'
        ' --yes; echo "rc=$?"; wait; rm "$XDG_STATE_HOME/filler"; '
        '"$CTL" maintenance --db "$SW_TOP/home/state.db" --resume; echo "resume rc=$?"; '
        'ls -A "$S/quarantine"',
        tmpfs=top / "state",
        size="24m",
    )
    assert "Traceback" not in r.stderr
    assert "unexpected" not in r.stderr, r.stderr
    assert "rc=1" in r.stdout, r.stdout + r.stderr
    assert "aborted and rolled back: the swap failed: No space left on device" in r.stdout
    assert "nothing to resume" in r.stdout
    assert r.stdout.rstrip().endswith("resume rc=0"), r.stdout  # quarantine left empty
    assert db.stat().st_mode == mode
    assert {p.name: p.read_bytes() for p in (db, wal)} == before
    assert not [p for p in db.parent.iterdir() if p.name.startswith(".statewarden-new")]
    check = subprocess.run(
        [
            sys.executable,
            "-c",
            "import apsw, sys; c = apsw.Connection(sys.argv[1]);"
            " print(c.execute('PRAGMA integrity_check').fetchall(),"
            " c.execute('SELECT count(*) FROM state_meta').fetchall())",
            str(db),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert check.stdout.strip() == "[('ok',)] [(300,)]"


@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o775])
def test_install_into_a_unit_folder_others_can_write_is_refused(base: Path, mode: int) -> None:
    """``install --unit-dir`` into a folder another user can write (sticky or not) used to
    be accepted: a ``statewarden.service.tmp`` symlink planted there received the unit
    (the file it named overwritten, the unit file left a symlink to it)."""
    top = user_dir(base)
    shared = base / "units"
    shared.mkdir()
    os.chown(shared, USER, USER)
    os.chmod(shared, mode)
    r = as_user(top, f'"$CTL" install --unit-dir "{shared}"')
    one_line_error(r, 1, f"{shared}: writable by others; refusing to write units there")
    assert os.listdir(shared) == []
    os.chown(shared, 0, 0)
    os.chmod(shared, 0o755)  # noqa: S103 - only root may write: the folder is not ours
    r = as_user(top, f'"$CTL" install --unit-dir "{shared}"')
    one_line_error(r, 1, f"{shared}: owned by uid 0, not by us")


def test_install_does_not_follow_a_symlink_at_the_temporary_name(base: Path) -> None:
    """In the user's own unit folder, a symlink at ``statewarden.service.tmp`` (left by a
    tool or another process of the user) was followed: the file it named was overwritten
    and ``statewarden.service`` became that symlink. docs/safety.md rule 12."""
    top = user_dir(base)
    r = as_user(
        top,
        'mkdir "$SW_TOP/units" && echo precious > "$SW_TOP/victim" && '
        'ln -s "$SW_TOP/victim" "$SW_TOP/units/statewarden.service.tmp" && '
        '"$CTL" install --unit-dir "$SW_TOP/units"',
    )
    assert "Traceback" not in r.stderr
    assert (top / "victim").read_text() == "precious\n"
    assert not (top / "units" / "statewarden.service").is_symlink()


@pytest.fixture(scope="module")
def two_runs_made() -> Iterator[tuple[Path, Path]]:
    """A user's folder after two maintenance runs (two quarantine entries), made once for
    the module: (the folder, a copy of it as it was then). The runs are what take time;
    each test gets the folder back as they left it, at the same path."""
    path = Path(tempfile.mkdtemp(prefix="statewarden-attacks-"))
    path.chmod(0o755)
    try:
        top = user_dir(path)
        r = as_user(
            top,
            'export HERMES_HOME="$SW_TOP/home"; '
            '"$CTL" maintenance --db "$SW_TOP/home/state.db" --action vacuum --yes >/dev/null && '
            '"$CTL" maintenance --db "$SW_TOP/home/state.db" --action vacuum --yes >/dev/null',
        )
        assert r.returncode == 0, r.stderr
        pristine = path / "pristine"
        subprocess.run(["cp", "-a", str(top), str(pristine)], check=True)
        yield top, pristine
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def after_two_runs(two_runs_made: tuple[Path, Path]) -> Path:
    """The user's folder of ``two_runs_made``, as the two runs left it."""
    top, pristine = two_runs_made
    shutil.rmtree(top)
    subprocess.run(["cp", "-a", str(pristine), str(top)], check=True)
    return top


@pytest.mark.parametrize(
    "manifest",
    [
        "[1, 2]",
        '{"files": 5}',
        '{"files": {"../../../etc/passwd": "x"}, "swapped_at": "soon"}',
        '{"db": "/etc/passwd", "swapped_at": 1e400}',
    ],
)
def test_damaged_quarantine_manifest_is_read_as_far_as_it_goes(
    after_two_runs: Path, manifest: str
) -> None:
    """A quarantine manifest of the wrong shape (damaged, or edited) used to make
    ``quarantine list`` fail with "unexpected AttributeError/TypeError/ValueError/
    OverflowError", hiding every other entry; a file name with ``..`` was looked up
    outside the folder. Now the entry is listed with what can be read."""
    top = after_two_runs
    qroot = top / "state" / "statewarden" / "quarantine"
    first, second = sorted(qroot.iterdir())
    (first / "manifest.json").write_text(manifest)
    r = as_user(top, '"$CTL" quarantine list --json')
    assert r.returncode == 0, r.stderr
    entries = {e["name"]: e for e in json.loads(r.stdout)["quarantine"]}
    assert set(entries) == ({first.name, second.name} if manifest != "[1, 2]" else {second.name})
    assert entries[second.name]["files"] == {"state.db": 344064}
    if first.name in entries:
        assert entries[first.name]["files"] == {}
        assert entries[first.name]["db"] in ("", str(top / "home" / "state.db"), "/etc/passwd")
    r = as_user(top, '"$CTL" quarantine list')
    assert r.returncode == 0, r.stderr
    assert second.name in r.stdout


def test_original_with_another_hard_link_keeps_its_mode(base: Path) -> None:
    """state.db with a second hard link elsewhere: the swap's quarantine step used to
    chmod the original's inode to 0600, which the other name saw (the original's
    metadata changed). Its bytes and mode now stay as they were."""
    top = user_dir(base)
    db = top / "home" / "state.db"
    os.chmod(db, 0o644)
    other = top / "other-name.db"
    os.link(db, other)
    data = other.read_bytes()
    r = as_user(
        top,
        'export HERMES_HOME="$SW_TOP/home"; '
        '"$CTL" maintenance --db "$SW_TOP/home/state.db" --action vacuum --yes',
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert other.stat().st_mode & 0o777 == 0o644
    assert other.read_bytes() == data
    assert db.stat().st_ino != other.stat().st_ino  # swapped
    assert db.stat().st_mode & 0o777 == 0o644


ROWS = """
import hashlib, sys, apsw
c = apsw.Connection(sys.argv[1], flags=apsw.SQLITE_OPEN_READONLY)
for n in ("sessions", "messages"):
    rows = c.execute(f"SELECT * FROM {n} ORDER BY rowid").fetchall()
    print(n, len(rows), hashlib.sha256(repr(rows).encode()).hexdigest())
"""


@pytest.mark.parametrize("raw", [b"\x02\x00", b"\x00\x01"])
def test_page_size_field_flipped_is_read_with_the_size_that_fits(base: Path, raw: bytes) -> None:
    """One flipped byte in the header's page-size field (512 or 65536 instead of 4096):
    ``check`` and ``recover`` used to give up ("the schema cannot be read", or a
    "truncated" file), exit 4, though every page is intact. Now the private copy is read
    with the one page size the header's page count fits, and every row comes back."""
    top = user_dir(base)
    db = top / "home" / "state.db"
    want = subprocess.run(
        [sys.executable, "-c", ROWS, str(db)], capture_output=True, text=True, check=True
    ).stdout
    with open(db, "r+b") as f:
        f.seek(16)
        f.write(raw)
    data = db.read_bytes()
    r = as_user(top, '"$CTL" check --db "$SW_TOP/home/state.db"')
    assert r.returncode == 4, r.stdout + r.stderr
    assert "does not fit the file; its 84 pages fill it exactly at 4096 bytes" in r.stdout
    assert "damage: unreadable" in r.stdout
    r = as_user(top, '"$CTL" recover --source "$SW_TOP/home/state.db" --output "$SW_TOP/out.db"')
    assert r.returncode == 0, r.stdout + r.stderr
    got = subprocess.run(
        [sys.executable, "-c", ROWS, str(top / "out.db")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert got == want
    assert db.read_bytes() == data


def test_work_folder_of_a_killed_run_is_removed_by_the_next(base: Path) -> None:
    """``check`` killed with SIGKILL mid-run (as the OOM killer or a timeout would) left
    its work folder, a whole copy of the database, for good: repeated kills filled the
    disk (one ``/dev/zero`` run left 3.7 GB). The next run in that folder now removes
    it; a folder whose run is alive (its lock held) stays."""
    top = user_dir(base)
    shutil.copyfile(built_db(TALL), top / "home" / "state.db")
    work = top / "work"
    work.mkdir()
    for p in (work, top / "home" / "state.db"):
        os.chown(p, USER, USER)
    r = as_user(
        top,
        '"$CTL" check --db "$SW_TOP/home/state.db" --work-dir "$SW_TOP/work" >/dev/null 2>&1 & '
        'until ls -d "$SW_TOP"/work/.statewarden-work-*/.lock >/dev/null 2>&1; do :; done; '
        'kill -9 $!; wait; ls -A "$SW_TOP/work"',
    )
    abandoned = r.stdout.split()
    assert len(abandoned) == 1, r.stdout + r.stderr
    assert abandoned[0].startswith(".statewarden-work-")
    live = work / ".statewarden-work-live"
    live.mkdir()
    lock = os.open(live / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    for p in (live, live / ".lock"):
        os.chown(p, USER, USER)  # the user could open it: only the held lock keeps it
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = as_user(top, '"$CTL" check --db "$SW_TOP/home/state.db" --work-dir "$SW_TOP/work"')
        assert r.returncode == 0, r.stderr
    finally:
        os.close(lock)
    assert sorted(os.listdir(work)) == [".statewarden-work-live"]


@pytest.mark.parametrize("when", ["before", "during"])
def test_quarantine_folder_replaced_by_a_symlink(base: Path, when: str) -> None:
    """The quarantine folder a symlink to another folder: nothing is ever written through
    it, but the run used to find out only at the swap and stop there, state.db left
    fenced (mode 000) and the new file beside it. Now a symlink there before the run
    fails it before anything is stopped, and one that appears during the settle period
    (the ledger's settle step starts the swap of folder for link) rolls the run back."""
    top = user_dir(base)
    db = top / "home" / "state.db"
    data, mode = db.read_bytes(), db.stat().st_mode
    config = top / "sw.yaml"
    config.write_text("maintenance:\n  settle: 5s\n")
    plant = 'rm -rf "$Q" && ln -s "$SW_TOP/elsewhere" "$Q"'
    if when == "during":
        plant = (
            f'mkdir -p "$Q" && ( until grep -qs \'"step": "settle"\' "$S"/maintenance/*/run.jsonl;'
            f" do sleep 0.05; done; {plant} ) &"
        )
    else:
        plant += ";"
    r = as_user(
        top,
        'export HERMES_HOME="$SW_TOP/home"; S="$XDG_STATE_HOME/statewarden"; Q="$S/quarantine"; '
        f'mkdir -p "$SW_TOP/elsewhere" "$S"; {plant} '
        f'"$CTL" maintenance --config "{config}" --db "$SW_TOP/home/state.db" --action vacuum --yes;'
        ' echo "rc=$?"; wait',
    )
    assert "Traceback" not in r.stderr
    assert "rc=1" in r.stdout, r.stdout + r.stderr
    if when == "before":
        assert "failed before stopping anything" in r.stdout
    else:
        assert "aborted and rolled back: the swap failed:" in r.stdout, r.stdout + r.stderr
    assert "quarantine: not a folder (a symlink?)" in r.stdout
    assert os.listdir(top / "elsewhere") == []
    assert db.read_bytes() == data
    assert db.stat().st_mode == mode
    assert not [p for p in db.parent.iterdir() if p.name.startswith(".statewarden-new")]


def test_new_file_swapped_for_a_symlink_during_the_settle_is_not_followed(base: Path) -> None:
    """Root repairs a database in a user's folder (safety rule 12). During the settle,
    the user replaced the pre-built ``.statewarden-new-*.db`` with a symlink to a file of
    root's: the swap's ``chmod`` followed it and gave root's 0600 file the original's
    mode (0644), while the run said "rolled back: the database is unchanged". Now the
    new file is proven (device, inode, size, SHA-256) before anything is done to it:
    nothing follows the link, root's file keeps its mode and bytes, the run rolls back."""
    from tests.support.maintenance import exempt_comms

    top = user_dir(base)
    db = top / "home" / "state.db"
    data, mode = db.read_bytes(), stat.S_IMODE(db.stat().st_mode)
    secret = base / "root-only"
    secret.write_bytes(b"root's own bytes\n")
    secret.chmod(0o600)
    state = base / "root-state"
    state.mkdir(mode=0o700)
    config = base / "root.yaml"
    config.write_text(
        json.dumps({"holders": {"exempt_comms": exempt_comms()}, "maintenance": {"settle": "5s"}})
    )
    env = {**os.environ, "XDG_STATE_HOME": str(state), "HERMES_HOME": str(top / "home")}
    run = subprocess.Popen(
        [
            CTL,
            "maintenance",
            "--config",
            str(config),
            "--db",
            str(db),
            "--action",
            "vacuum",
            "--yes",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + HANG_S
        while not any(
            '"step": "settle"' in p.read_text()
            for p in state.glob("statewarden/maintenance/*/run.jsonl")
        ):
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        (new,) = db.parent.glob(".statewarden-new-*.db")
        swapped = as_user(top, f'rm -f "{new}" && ln -s "{secret}" "{new}"')
        assert swapped.returncode == 0, swapped.stderr
        out, err = run.communicate(timeout=HANG_S)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert secret.read_bytes() == b"root's own bytes\n"
    assert os.stat(secret).st_uid == 0
    assert "Traceback" not in err
    assert run.returncode == 1, out + err
    assert "rolled back: the database is unchanged" in out
    assert "is no longer the new file statewarden wrote" in out, out
    assert db.read_bytes() == data
    assert stat.S_IMODE(db.stat().st_mode) == mode
    assert not list(db.parent.glob(".statewarden-*"))


def test_resume_on_a_full_disk_is_one_line(base: Path) -> None:
    """``--resume`` with the state dir's disk full (a 24 MB tmpfs) used to end in
    "unexpected OSError": the ledger could not take its first line. Now: one line that
    names the ledger and the cause, exit 1, nothing done (the fence stays up, as the
    ledger says); once there is room, ``--resume`` rolls the run back. The ledger is
    padded to a page boundary with blank lines (which a ledger reader skips), so its
    next line needs a page the full tmpfs does not have."""
    top = user_dir(base)
    db = top / "home" / "state.db"
    data, mode = db.read_bytes(), db.stat().st_mode
    (top / "state").mkdir()
    os.chown(top / "state", USER, USER)
    r = as_user(
        top,
        'export HERMES_HOME="$SW_TOP/home"; S="$XDG_STATE_HOME/statewarden"; '
        'STATEWARDEN_CRASH_AT=settle "$CTL" maintenance --db "$SW_TOP/home/state.db"'
        ' --action vacuum --yes >/dev/null; echo "crash rc=$?"; '
        'L=$(ls "$S"/maintenance/*/run.jsonl); size=$(stat -c %s "$L"); '
        'head -c $(( (4096 - size % 4096) % 4096 )) /dev/zero | tr "\\0" "\\n" >> "$L"; '
        'dd if=/dev/zero of="$XDG_STATE_HOME/filler" bs=4k 2>/dev/null; '
        '"$CTL" maintenance --db "$SW_TOP/home/state.db" --resume 2>"$SW_TOP/full.err";'
        ' echo "full rc=$?"; stat -c %a "$SW_TOP/home/state.db"; rm "$XDG_STATE_HOME/filler"; '
        '"$CTL" maintenance --db "$SW_TOP/home/state.db" --resume 2>/dev/null; echo "room rc=$?"',
        tmpfs=top / "state",
        size="24m",
    )
    assert "crash rc=137" in r.stdout, r.stdout + r.stderr
    err = (top / "full.err").read_text()
    assert "Traceback" not in err
    assert "unexpected" not in err, err
    assert len(err.splitlines()) == 1, err
    assert "run.jsonl: cannot write the run ledger: No space left on device" in err
    assert "then statewardenctl maintenance --resume" in err
    assert "full rc=1\n0\n" in r.stdout, r.stdout  # still fenced: nothing was done
    assert "rolled back: the database is unchanged" in r.stdout
    assert r.stdout.rstrip().endswith("room rc=1"), r.stdout
    assert db.read_bytes() == data
    assert db.stat().st_mode == mode
