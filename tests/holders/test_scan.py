"""Holders: real Hermes processes found through /proc, flagged, classified, counted."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import pytest

from lab.hermes_fixtures import TINY, holding, make_home, writer_env
from statewarden.cli.holders_cmd import coverage_line
from statewarden.holders.opens import OpenWatch
from statewarden.holders.processes import (
    PF_KTHREAD,
    classify,
    human_age,
    is_python,
    read_record,
    read_stat,
    short_command,
    started_at,
    systemd_cgroup_path,
    unit_from_cgroup,
)
from statewarden.holders.scan import Holder, HolderScan, HolderScanner, idle_workers
from tests.support.cli import run_ctl
from tests.support.fake_hermes import PIDFILE_ENV, install_fake_hermes
from tests.support.ns_holders import holders_in_a_private_pid_namespace
from tests.support.privileges import IS_ROOT, SETPRIV, needs_root
from tests.support.procs import alive
from tests.support.repo import REPO
from tests.support.waiting import WAIT_S, wait_for

# Holds the file open with a plain open(): no SQLite, no lock.
PLAIN_OPEN = "import sys; f = open(sys.argv[1], 'rb'); print('ready', flush=True); sys.stdin.read()"
# A SQLite connection in WAL mode that then opens and closes the database file outside
# SQLite: closing that descriptor drops the process's POSIX locks (docs/stories.md story 7).
DROP_LOCKS = (
    "import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
    " c.execute('select count(*) from sessions').fetchall();"
    " os.close(os.open(sys.argv[1], os.O_RDONLY)); print('ready', flush=True); sys.stdin.read()"
)


def kill_and_wait(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    wait_for(lambda: not alive(pid), f"pid {pid} to exit")


def is_kernel_thread(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return bool(int(f.read().rsplit(")", 1)[1].split()[6]) & PF_KTHREAD)
    except OSError:
        return False


def read_pid(pidfile: Path) -> int:
    try:
        return int(pidfile.read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def scan(db: Path) -> HolderScan:
    return HolderScanner([db]).scan()[0]


def holder(result: HolderScan, pid: int) -> Holder:
    found = [h for h in result.holders if h.pid == pid]
    assert found, f"pid {pid} not among holders {[h.pid for h in result.holders]}"
    return found[0]


def pids(result: HolderScan) -> set[int]:
    return {h.pid for h in result.holders}


class Helper:
    """A small real process from ``python -c CODE DB`` that prints ``ready``."""

    def __init__(self, code: str, db: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, str(db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=WAIT_S)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def helpers() -> Iterator[Callable[[str, Path], Helper]]:
    started: list[Helper] = []

    def start(code: str, db: Path) -> Helper:
        h = Helper(code, db)
        started.append(h)
        return h

    yield start
    for h in started:
        if h.proc.poll() is None:
            h.proc.kill()
            h.proc.wait()
        for pipe in (h.proc.stdin, h.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    install_fake_hermes(bin_dir)
    return bin_dir


@pytest.fixture
def daemons() -> Iterator[list[int]]:
    """Pids of daemonised processes a test started; each is killed at teardown."""
    found: list[int] = []
    yield found
    for pid in found:
        kill_and_wait(pid)


def hermes_env(home: Path, bin_dir: Path, pidfile: Path) -> dict[str, str]:
    env = writer_env(home)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    env[PIDFILE_ENV] = str(pidfile)
    return env


class TestClassify:
    @pytest.mark.parametrize(
        ("argv", "kind"),
        [
            (["/venv/bin/python3", "-m", "hermes_cli.main", "gateway", "run"], "gateway"),
            (
                ["python", "-m", "hermes_cli.main", "--profile", "coder", "gateway", "run"],
                "gateway",
            ),
            (["hermes", "dashboard"], "dashboard"),
            (["/venv/bin/python3", "/venv/bin/hermes", "serve"], "serve"),
            (["/venv/bin/python3", "/venv/bin/hermes", "serve", "--isolated"], "serve-isolated"),
            (["hermes"], "cli"),
            (["hermes", "chat"], "cli"),
            (["hermes", "-p", "work", "chat"], "cli"),
            (["hermes", "sessions", "repair"], "cli"),
            (["python3.11", "-u", "-m", "tui_gateway.entry"], "tui"),
            (["hermes", "cron", "run"], "cron"),
            (["hermes-acp"], "acp"),
            (["python", "-m", "acp_adapter"], "acp"),
            (["hermes-agent", "gateway", "run"], "gateway"),
            (["python3", "/src/hermes-agent/hermes_cli/main.py", "dashboard"], "dashboard"),
            (["python3", "/src/hermes-agent/run_agent.py", "--query", "x"], "cli"),
            (["sqlite3", "/home/u/.hermes/state.db"], "sqlite3"),
            (["/usr/local/bin/litestream", "replicate"], "litestream"),
            (["python3", "lab/hermes_writer.py", "hold"], "unknown"),
            (["bash"], "unknown"),
            ([], "unknown"),
        ],
    )
    def test_kinds(self, argv: list[str], kind: str) -> None:
        """Each command line in docs/hermes.md is recognised as its kind; anything else is unknown."""
        assert classify(argv) == kind


class TestInterpreterNames:
    # The pattern interpreter names were matched with before is_python replaced it.
    PATTERN = re.compile(r"^python(\d+(\.\d+)?)?[a-z]?$")

    @pytest.mark.parametrize(
        "name",
        [
            "python",
            "python3",
            "python3.11",
            "python3.13t",
            "pythonw",
            "python3.11d",
            "python3\n",
            "python311",
            "python3.",
            "python.3",
            "python3.1.2",
            "python3.11tt",
            "pythonab",
            "python3.11T",
            "python-3",
            "Python3",
            "xpython3",
            "python\u0663",
            "python3.\u0661",
            "python\u00b2",
            "",
            "py",
        ],
    )
    def test_the_same_names_as_the_pattern_before(self, name: str) -> None:
        """Interpreter names (``python``, a version, at most one lower-case letter) are
        told from others exactly as the regular expression did, without compiling one."""
        assert is_python(name) == bool(self.PATTERN.match(name))


class TestShortCommand:
    @pytest.mark.parametrize(
        ("argv", "text"),
        [
            (
                ["/venv/bin/python3", "/venv/bin/hermes", "serve", "--isolated"],
                "hermes serve --isolated",
            ),
            (
                ["/usr/bin/python3", "-m", "hermes_cli.main", "gateway", "run"],
                "python -m hermes_cli.main gateway run",
            ),
            (["/usr/local/bin/hermes", "dashboard"], "hermes dashboard"),
            (["sqlite3", "state.db"], "sqlite3 state.db"),
            ([], ""),
        ],
    )
    def test_command_column(self, argv: list[str], text: str) -> None:
        """The COMMAND column drops interpreter and venv paths, as in the issue's table."""
        assert short_command(argv) == text


class TestCgroupUnit:
    def test_user_service(self) -> None:
        """The innermost .service on a user manager's cgroup path is the unit."""
        path = "/user.slice/user-1000.slice/user@1000.service/app.slice/hermes-gateway.service"
        assert unit_from_cgroup(path) == "hermes-gateway.service"

    def test_session_scope(self) -> None:
        """A login session's process belongs to its .scope."""
        assert unit_from_cgroup("/user.slice/user-1000.slice/session-4.scope") == "session-4.scope"

    def test_no_unit(self) -> None:
        """The root cgroup (or a non-systemd one) names no unit."""
        assert unit_from_cgroup("/") is None
        assert unit_from_cgroup(None) is None

    def test_hybrid_prefers_name_systemd(self) -> None:
        """On hybrid hierarchies systemd's own v1 hierarchy is the one that names units."""
        text = "12:name=systemd:/system.slice/a.service\n0::/system.slice/b.service\n"
        assert systemd_cgroup_path(text) == "/system.slice/a.service"
        assert systemd_cgroup_path("0::/x.slice/c.scope\n") == "/x.slice/c.scope"


class TestHumanAge:
    @pytest.mark.parametrize(
        ("seconds", "text"),
        [
            (12, "12s"),
            (60, "1m"),
            (5 * 3600, "5h"),
            (5 * 3600 + 120, "5h 2m"),
            (2 * 86400 + 3 * 3600 + 5, "2d 3h"),
            (86400, "1d"),
            (-3, "0s"),
        ],
    )
    def test_since_column(self, seconds: int, text: str) -> None:
        """The SINCE column shows the two largest units."""
        assert human_age(seconds) == text


class TestReadRecord:
    def test_a_process_stat_comes_whole_from_one_read(self) -> None:
        """``read_record`` of this process's stat is what a read to the end gives, and
        read_stat parses it (pid, parent, name)."""
        path = f"/proc/{os.getpid()}/stat"
        whole = read_record(path)
        assert whole.split(b" ", 2)[:2] == Path(path).read_bytes().split(b" ", 2)[:2]
        assert whole.endswith(b"\n")
        st = read_stat(os.getpid())
        assert (st.pid, st.ppid) == (os.getpid(), os.getppid())
        assert st.comm == Path(f"/proc/{os.getpid()}/comm").read_text().strip()

    def test_a_file_that_fills_the_first_read_is_read_to_the_end(self, tmp_path: Path) -> None:
        """A file longer than the first read's room is not cut: the rest is read on."""
        for size in (4095, 4096, 4097, 3 * 131072 + 5):
            f = tmp_path / f"f{size}"
            data = bytes(i % 251 for i in range(size))
            f.write_bytes(data)
            assert read_record(str(f)) == data, size


class TestWriters:
    def test_two_hermes_writers_are_found_with_their_files_and_locks(
        self, hermes_home: Path
    ) -> None:
        """Two real Hermes writers: each found with 1/1/1 descriptors, -shm mapped, locks held."""
        db = hermes_home / "state.db"
        with holding(hermes_home) as a, holding(hermes_home, write_every_s=0.05) as b:
            result = scan(db)
            assert {a.pid, b.pid} <= pids(result)
            for pid in (a.pid, b.pid):
                h = holder(result, pid)
                assert h.fds == {"state.db": 1, "state.db-wal": 1, "state.db-shm": 1}
                assert h.maps == {"state.db-shm": 1}
                assert h.stale_files == []
                assert h.lock_state == "held"
                assert h.flags == []
                locks = {(lk.file, lk.kind, lk.mode) for lk in h.locks}
                steady = {("state.db", "POSIX", "READ"), ("state.db-shm", "POSIX", "READ")}
                # A writer caught mid-commit also holds the WAL write lock, a -shm byte.
                assert steady <= locks <= steady | {("state.db-shm", "POSIX", "WRITE")}
                assert h.kind == "unknown"  # lab/hermes_writer.py is not a Hermes command
                assert h.ppid == os.getpid()
                assert h.parents[0]["pid"] == os.getpid()
                assert h.uid == os.getuid()
                assert h.cmdline[1].endswith("hermes_writer.py")
                assert not h.orphan

    def test_no_holders_after_writers_exit(self, hermes_home: Path) -> None:
        """Once the writers have closed the database, no process holds it."""
        db = hermes_home / "state.db"
        with holding(hermes_home) as a:
            assert a.pid in pids(scan(db))
        assert scan(db).holders == []

    def test_one_pass_serves_several_databases(self, tmp_path: Path) -> None:
        """One scanner over two homes attributes each holder to its own database."""
        one, two = make_home(tmp_path / "one", TINY), make_home(tmp_path / "two", TINY)
        with holding(one) as a, holding(two) as b:
            r1, r2 = HolderScanner([one / "state.db", two / "state.db"]).scan()
            assert a.pid in pids(r1)
            assert a.pid not in pids(r2)
            assert b.pid in pids(r2)
            assert b.pid not in pids(r1)

    def test_scanner_opens_no_database_file(self, hermes_home: Path) -> None:
        """docs/safety.md rule 2: the scanner itself never opens state.db or its sidecars."""
        db = hermes_home / "state.db"
        with holding(hermes_home):
            result = scan(db)
        assert os.getpid() not in pids(result)
        mine = [
            os.readlink(f"/proc/self/fd/{fd}")
            for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")
        ]
        assert not [p for p in mine if "state.db" in p]

    def test_a_database_named_through_a_symlink_has_its_sidecars_found(
        self, hermes_home: Path, tmp_path: Path
    ) -> None:
        """`--db` a symlink to state.db: SQLite names -wal and -shm after the file the link
        leads to, so the scan looks there. They were reported missing, and the writer's
        descriptors on them not counted (0/0); the report still names the link."""
        link = tmp_path / "link.db"
        link.symlink_to(hermes_home / "state.db")
        with holding(hermes_home) as writer:
            result = scan(link)
        assert result.db == str(link)
        assert result.files["state.db-wal"] is not None
        assert result.files["state.db-shm"] is not None
        h = holder(result, writer.pid)
        assert h.fds == {"state.db": 1, "state.db-wal": 1, "state.db-shm": 1}
        assert h.maps == {"state.db-shm": 1}
        assert h.lock_state == "held"
        assert h.flags == []

    def test_the_files_to_watch_of_a_database_named_through_a_symlink(
        self, hermes_home: Path, tmp_path: Path
    ) -> None:
        """The open watch (the daemon's and --watch's) watches the bundle where SQLite keeps
        it: the real state.db, -wal, -shm and -journal, not names next to the link."""
        link = tmp_path / "link.db"
        link.symlink_to(hermes_home / "state.db")
        real = str((hermes_home / "state.db").resolve())
        assert HolderScanner([link], watch_opens=False).files() == [
            real + sfx for sfx in ("", "-wal", "-shm", "-journal")
        ]


class TestOrphanServeIsolated:
    def test_double_forked_serve_isolated_is_an_orphan(
        self, hermes_home: Path, fake_bin: Path, tmp_path: Path, daemons: list[int]
    ) -> None:
        """`hermes serve --isolated` daemonised to PPID 1 is kind serve-isolated, orphan, no unit."""
        pidfile = tmp_path / "serve.pid"
        env = hermes_env(hermes_home, fake_bin, pidfile)
        env["SSH_CONNECTION"] = "192.0.2.7 52144 192.0.2.1 22"  # the desktop app comes over SSH
        subprocess.run(["hermes", "serve", "--isolated"], env=env, check=True)
        wait_for(lambda: read_pid(pidfile), "the daemon's pid file")
        pid = read_pid(pidfile)
        daemons.append(pid)
        h = holder(scan(hermes_home / "state.db"), pid)
        assert h.kind == "serve-isolated"
        assert h.ppid == 1
        assert h.orphan
        assert h.cmdline[-3:] == [str(fake_bin / "hermes"), "serve", "--isolated"]
        assert h.fds == {"state.db": 1, "state.db-wal": 1, "state.db-shm": 1}
        assert h.lock_state == "held"
        assert h.ssh_connection == "192.0.2.7 52144 192.0.2.1 22"
        assert h.parents == [
            {"pid": 1, "comm": h.parents[0]["comm"], "cmdline": h.parents[0]["cmdline"]}
        ]

    def test_respawned_serve_isolated_comes_back_as_a_new_holder(
        self, hermes_home: Path, fake_bin: Path, tmp_path: Path, daemons: list[int]
    ) -> None:
        """docs/stories.md story 5: killing the desktop's serve --isolated brings a new one; the scan sees it."""
        pidfile = tmp_path / "serve.pid"
        env = hermes_env(hermes_home, fake_bin, pidfile)
        app = subprocess.Popen(
            [sys.executable, "-m", "tests.support.respawner", "hermes", "serve", "--isolated"],
            env=env,
            cwd=REPO,
        )
        try:
            wait_for(lambda: read_pid(pidfile), "the first serve --isolated")
            first = read_pid(pidfile)
            daemons.append(first)
            db = hermes_home / "state.db"
            assert holder(scan(db), first).orphan
            kill_and_wait(first)
            wait_for(lambda: read_pid(pidfile) not in (0, first), "the respawned serve")
            second = read_pid(pidfile)
            daemons.append(second)
            result = scan(db)
            assert first not in pids(result)
            h = holder(result, second)
            assert (h.kind, h.orphan, h.ppid) == ("serve-isolated", True, 1)
        finally:
            app.terminate()
            app.wait(timeout=WAIT_S)


class TestStale:
    def test_holder_of_a_deleted_wal_is_stale(self, hermes_home: Path) -> None:
        """docs/stories.md story 7: a writer still holding a -wal another process unlinked is flagged STALE."""
        db = hermes_home / "state.db"
        with holding(hermes_home) as old:
            subprocess.run(["rm", str(hermes_home / "state.db-wal")], check=True)
            result = scan(db)
            h = holder(result, old.pid)
            assert h.stale_files == ["state.db-wal"]
            assert h.stale
            assert "STALE" in h.flags
            assert h.fds["state.db-wal"] == 0  # no descriptor on the current (absent) -wal
            assert result.files["state.db-wal"] is None
            # The next writer finds no -wal and no -shm and creates both: two generations.
            subprocess.run(["rm", str(hermes_home / "state.db-shm")], check=True)
            with holding(hermes_home) as new:
                assert (hermes_home / "state.db-wal").exists()
                result = scan(db)
                assert holder(result, old.pid).stale_files == ["state.db-wal", "state.db-shm"]
                assert holder(result, old.pid).maps == {}
                fresh = holder(result, new.pid)
                assert fresh.stale_files == []
                assert fresh.fds["state.db-wal"] == 1

    def test_holder_of_a_replaced_db_is_stale(self, hermes_home: Path) -> None:
        """docs/stories.md story 6: after state.db is replaced by rename, the old writer holds the old inode."""
        db = hermes_home / "state.db"
        with holding(hermes_home) as old:
            shutil.copyfile(db, hermes_home / "new.db")
            os.replace(hermes_home / "new.db", db)
            h = holder(scan(db), old.pid)
            assert "state.db" in h.stale_files
            assert h.fds["state.db"] == 0

    def test_cli_exit_code_3_for_stale(self, hermes_home: Path) -> None:
        """A STALE holder makes `holders` exit 3 and say STALE(state.db-wal) in its row."""
        with holding(hermes_home) as old:
            os.unlink(hermes_home / "state.db-wal")
            result = run_ctl("holders", "--db", str(hermes_home / "state.db"))
        assert result.exit_code == 3
        row = next(line for line in result.stdout.splitlines() if line.startswith(f"{old.pid} "))
        assert "STALE(state.db-wal)" in row


class TestLocks:
    def test_plain_open_holds_without_lock(
        self, hermes_home: Path, helpers: Callable[[str, Path], Helper]
    ) -> None:
        """A process with the file open outside SQLite holds no lock: NO-LOCK, not LOST-LOCKS."""
        db = hermes_home / "state.db"
        with holding(hermes_home) as writer:
            plain = helpers(PLAIN_OPEN, db)
            result = scan(db)
            h = holder(result, plain.pid)
            assert h.fds == {"state.db": 1, "state.db-wal": 0, "state.db-shm": 0}
            assert (h.lock_state, h.flags, h.locks) == ("none", ["NO-LOCK"], [])
            assert holder(result, writer.pid).lock_state == "held"

    def test_connection_that_closed_a_descriptor_lost_its_locks(
        self, hermes_home: Path, helpers: Callable[[str, Path], Helper]
    ) -> None:
        """docs/stories.md story 7: a WAL connection whose process closed another fd on the db has LOST-LOCKS."""
        db = hermes_home / "state.db"
        with holding(hermes_home) as writer:
            dropper = helpers(DROP_LOCKS, db)
            result = scan(db)
            h = holder(result, dropper.pid)
            assert h.fds["state.db-shm"] == 1
            assert h.lock_state == "lost"
            assert h.flags == ["LOST-LOCKS"]
            assert [lk.file for lk in h.locks] == ["state.db-shm"]  # the -shm lock survives
            assert holder(result, writer.pid).flags == []
            cli = run_ctl("holders", "--db", str(db), "--json", "--no-systemd")
        assert cli.exit_code == 3
        data = json.loads(cli.stdout)
        (entry,) = [x for x in data["holders"] if x["pid"] == dropper.pid]
        assert entry["lock_state"] == "lost"
        assert entry["flags"] == ["LOST-LOCKS"]


def assert_a_late_open_is_found(
    db: Path, helpers: Callable[[str, Path], Helper], *, watch_opens: bool = True
) -> None:
    """A process the first scan saw holding nothing opens ``db`` afterwards: the next
    incremental scan (no rescans of cached processes) finds it."""
    code = (
        "import sys; print('ready', flush=True); sys.stdin.readline();"
        " f = open(sys.argv[1], 'rb'); print('opened', flush=True); sys.stdin.read()"
    )
    late = helpers(code, db)
    scanner = HolderScanner([db], refresh_per_scan=0, watch_opens=watch_opens)
    assert late.pid not in pids(scanner.scan()[0])
    assert late.proc.stdin is not None
    assert late.proc.stdout is not None
    late.proc.stdin.write("go\n")
    late.proc.stdin.flush()
    assert late.proc.stdout.readline().strip() == "opened"
    assert late.pid in pids(scanner.scan(full=False)[0])


class TestIncremental:
    def test_new_and_gone_holders_are_seen(self, hermes_home: Path) -> None:
        """An incremental re-scan sees a holder that started and one that exited since."""
        db = hermes_home / "state.db"
        scanner = HolderScanner([db])
        with holding(hermes_home) as first:  # keeps -wal / -shm (and their inodes) in place
            assert pids(scanner.scan()[0]) == {first.pid}
            with holding(hermes_home) as second:
                r = scanner.scan(full=False)[0]
                assert r.mode == "incremental"
                assert pids(r) == {first.pid, second.pid}
            r = scanner.scan(full=False)[0]
            assert r.mode == "incremental"
            assert pids(r) == {first.pid}

    def test_cached_process_that_opens_the_db_later_is_seen(
        self, hermes_home: Path, helpers: Callable[[str, Path], Helper]
    ) -> None:
        """A process cached as a non-holder that opens state.db later is found incrementally."""
        assert_a_late_open_is_found(hermes_home / "state.db", helpers)

    def test_replaced_files_force_a_full_rescan(self, hermes_home: Path) -> None:
        """When a target file's inode changes, cached matches are dropped: a full scan runs."""
        db = hermes_home / "state.db"
        scanner = HolderScanner([db])
        with holding(hermes_home) as old:
            scanner.scan()
            os.unlink(hermes_home / "state.db-wal")
            r = scanner.scan(full=False)[0]
            assert r.mode == "full"
            assert holder(r, old.pid).stale_files == ["state.db-wal"]


class TestOpenWatch:
    def test_an_open_fires_and_nothing_else_does(self, hermes_home: Path) -> None:
        """IN_OPEN on state.db fires for another process's open, and is quiet otherwise."""
        db = hermes_home / "state.db"
        w = OpenWatch()
        w.watch([db])
        assert w.poll() is False
        subprocess.run(
            [sys.executable, "-c", "import sys; open(sys.argv[1], 'rb').close()", str(db)],
            check=True,
        )
        assert w.poll() is True
        assert w.poll() is False
        w.close()

    def test_replaced_file_is_rearmed(self, hermes_home: Path) -> None:
        """After state.db is replaced, re-arming watches the new inode."""
        db = hermes_home / "state.db"
        w = OpenWatch()
        w.watch([db])
        shutil.copyfile(db, hermes_home / "new.db")
        os.replace(hermes_home / "new.db", db)
        assert w.poll() is True  # the old inode's watch went away (IN_IGNORED)
        w.watch([db], rearm=True)
        assert w.poll() is False
        subprocess.run(["cat", str(db)], check=True, stdout=subprocess.DEVNULL)
        assert w.poll() is True
        w.close()

    def test_without_inotify_every_incremental_scan_sweeps(
        self, hermes_home: Path, helpers: Callable[[str, Path], Helper]
    ) -> None:
        """With the watch off, a cached process that opens state.db later is still found."""
        assert_a_late_open_is_found(hermes_home / "state.db", helpers, watch_opens=False)


class TestThreads:
    def test_threaded_scan_finds_the_same(self, hermes_home: Path) -> None:
        """A scan in worker threads finds exactly what a serial scan finds."""
        db = hermes_home / "state.db"
        with holding(hermes_home) as a, holding(hermes_home) as b:
            serial = HolderScanner([db], workers=1).scan()[0]
            threaded = HolderScanner([db], workers=3, parallel_min_processes=1).scan()[0]
        assert pids(serial) >= {a.pid, b.pid}
        assert [h.to_json() for h in threaded.holders] == [h.to_json() for h in serial.holders]
        # Short-lived kernel workers may come and go between the two scans.
        assert bool(threaded.problems) == bool(serial.problems)

    def test_threads_follow_the_idle_processors(self) -> None:
        """By default a big scan takes one thread per processor the load average leaves
        idle, at least one and at most the limit (a busy host gets one: no hand-overs)."""
        cpus = os.cpu_count() or 1
        before = os.getloadavg()[0]
        found = idle_workers(64)
        after = os.getloadavg()[0]
        rounded = {max(1, min(64, int(cpus - load + 0.5))) for load in (before, after)}
        assert found in rounded
        assert idle_workers(1) == 1
        assert 1 <= idle_workers(2) <= 2


class TestFailClosed:
    def test_exempt_comms_are_listed_but_do_not_block(self) -> None:
        """other_users: fail: an exempt process that cannot be inspected is not a problem."""
        db = Path("/nonexistent/state.db")
        result = HolderScanner([db], other_users="fail").scan()[0]
        blocked = {u["comm"] for u in result.uninspectable}
        exempted = HolderScanner([db], exempt_comms=blocked, other_users="fail").scan()[0]
        assert exempted.complete
        assert {u["comm"] for u in exempted.uninspectable if u["exempt"]} == blocked
        assert result.complete == (not blocked)

    def test_kernel_threads_are_left_out(self) -> None:
        """PF_KTHREAD processes are neither inspected nor uninspectable, only counted."""
        result = HolderScanner([Path("/nonexistent/state.db")]).scan()[0]
        kthreads = {int(n) for n in os.listdir("/proc") if n.isdigit() and is_kernel_thread(int(n))}
        assert not {u["pid"] for u in result.uninspectable} & kthreads
        assert not pids(result) & kthreads
        cov = result.coverage
        assert sum(cov.values()) == result.processes - len(result.vanished)
        if kthreads:
            assert cov["kernel_threads"] > 0
        else:
            assert cov["kernel_threads"] == 0

    def test_a_flock_left_to_a_child_by_an_exited_owner_is_not_a_hidden_process(
        self, tmp_path: Path
    ) -> None:
        """/proc/locks keeps an exited pid on a FLOCK its forked child still holds: not hidden."""
        lock = tmp_path / "lock"
        code = (
            "import fcntl, os, sys, time; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX)\n"
            "if os.fork() == 0:\n"
            "    print(os.getpid(), flush=True); sys.stdin.read(); os._exit(0)\n"
            "os._exit(0)\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(lock)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            child = int(proc.stdout.readline())
            proc.wait(timeout=WAIT_S)  # the owner /proc/locks names has exited
            ino = lock.stat().st_ino
            with open("/proc/locks") as f:
                owners = [int(ln.split()[4]) for ln in f if f":{ino} " in ln]
            assert owners == [proc.pid]
            assert alive(child)
            result = HolderScanner([tmp_path / "state.db"]).scan()[0]
            assert not [p for p in result.problems if "does not list" in p]
        finally:
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
            wait_for(lambda: not alive(child), "the child to exit")

    @needs_root
    def test_complete_scan_in_a_private_pid_namespace(self, hermes_home: Path) -> None:
        """With every process inspectable, the scan is complete: exit 0 and the documented table."""
        out = holders_in_a_private_pid_namespace(
            hermes_home, "--db", str(hermes_home / "state.db"), "--no-systemd"
        )
        assert out["rc"] == 0, out
        lines = out["stdout"].splitlines()
        assert lines[0] == f"default: {hermes_home / 'state.db'}"
        assert re.fullmatch(
            r"PID +KIND +UNIT +FDS \(db/wal/shm\) +LOCKS +ORPHAN +SINCE +FLAGS +COMMAND", lines[1]
        )
        assert re.fullmatch(
            rf"{out['holder']} +unknown +\(none\) +1/1/1 +\S.* +- +\d+s +- +hermes_writer\.py hold --home /\S+\.\.\.",  # cut at 60 characters
            lines[2],
        )
        assert len(lines) == 3
        assert out["stderr"] == ""


class TestCli:
    def test_nonexistent_db(self, tmp_path: Path) -> None:
        """--db naming no file: one line, exit 2."""
        result = run_ctl("holders", "--db", str(tmp_path / "nope.db"))
        assert result.exit_code == 2
        assert (
            result.stderr == f"statewardenctl: error: --db {tmp_path / 'nope.db'}: no such file\n"
        )

    def test_directory_db(self, tmp_path: Path) -> None:
        """--db naming a directory: one line, exit 2."""
        result = run_ctl("holders", "--db", str(tmp_path))
        assert result.exit_code == 2
        assert (
            result.stderr
            == f"statewardenctl: error: --db {tmp_path}: is a directory; give the path of the state.db file\n"
        )

    def test_unknown_profile(self, hermes_home: Path) -> None:
        """An unknown --profile: one line naming the profiles found, exit 2."""
        result = run_ctl("holders", "--profile", "nope")
        assert result.exit_code == 2
        assert (
            result.stderr
            == "statewardenctl: error: no Hermes profile named 'nope' (found: default)\n"
        )

    def test_json_shape(self, hermes_home: Path) -> None:
        """--json has the documented fields for each holder; without a bus, systemd says why."""
        with holding(hermes_home) as w:
            result = run_ctl("holders", "--json")
        data = json.loads(result.stdout)
        assert data["db"] == str(hermes_home / "state.db")
        assert isinstance(data["complete"], bool)
        assert result.exit_code == (0 if data["complete"] else 1)
        (h,) = [x for x in data["holders"] if x["pid"] == w.pid]
        for key in (
            "pid",
            "ppid",
            "uid",
            "kind",
            "unit",
            "orphan",
            "stale",
            "locks",
            "fds",
            "cmdline",
            "started_at",
            "parents",
        ):
            assert key in h
        assert h["fds"] == {"state.db": 1, "state.db-wal": 1, "state.db-shm": 1}
        assert data["systemd"] == (
            "systemd user manager not reachable: no session bus ($DBUS_SESSION_BUS_ADDRESS is"
            " unset and $XDG_RUNTIME_DIR/bus does not exist); holders are still found through /proc"
        )

    def test_incomplete_scan_is_reported_and_exits_1(self, hermes_home: Path) -> None:
        """other_users: fail: problems under 'scan INCOMPLETE', the unreadable processes
        behind --verbose, exit code 1 (as root, the command runs as nobody, who cannot read
        root's processes)."""
        shared = Path(tempfile.mkdtemp(prefix="statewarden-holders-"))
        try:
            shared.chmod(0o755)
            config = shared / "config.yaml"
            config.write_text("holders:\n  other_users: fail\n")
            config.chmod(0o644)
            if not IS_ROOT:
                probe = HolderScanner([hermes_home / "state.db"], other_users="fail").scan()[0]
                if probe.complete:
                    pytest.skip("every process is inspectable here; run the suite as root")
                result = run_ctl("holders", "--no-systemd", "--config", str(config))
                code, out = result.exit_code, result.stdout
            else:
                home = make_home(shared / "home", TINY)
                for p in (home, home / "state.db"):
                    p.chmod(0o755 if p.is_dir() else 0o644)
                proc = subprocess.run(
                    [
                        *SETPRIV,
                        sys.executable,
                        "-m",
                        "statewarden.cli.ctl",
                        "holders",
                        "--db",
                        str(home / "state.db"),
                        "--no-systemd",
                        "--config",
                        str(config),
                    ],
                    capture_output=True,
                    text=True,
                    cwd=REPO,
                    check=False,
                    env={**os.environ, "HOME": "/nonexistent"},
                )
                code, out = proc.returncode, proc.stdout
        finally:
            shutil.rmtree(shared, ignore_errors=True)
        assert code == 1
        assert "scan INCOMPLETE:" in out
        assert "no holders" in out
        assert re.search(
            r"^  \d+ process\(es\) could not be inspected \(holders.other_users: fail\);"
            r" --verbose lists them$",
            out,
            re.M,
        )

    def test_watch_prints_each_scan(self, hermes_home: Path) -> None:
        """--watch --count 2 --json prints one JSON object per scan, the second incremental."""
        with holding(hermes_home) as w:
            args = ["--watch", "--count", "2", "--interval", "0.05", "--json", "--no-systemd"]
            result = run_ctl("holders", *args)
        objs = [json.loads(line) for line in result.stdout.splitlines()]
        assert [o["scan"] for o in objs] == ["full", "incremental"]
        assert [o["schema_version"] for o in objs] == [1, 1]
        assert all(w.pid in {h["pid"] for h in o["holders"]} for o in objs)


class TestCoverageLine:
    @staticmethod
    def scan_with(uids: list[int], held: int = 0) -> HolderScan:
        unread = [
            {
                "pid": 100 + i,
                "uid": uid,
                "comm": "x",
                "reason": "r",
                "exempt": False,
                "checked": "locks",
                "holds_lock": i < held,
            }
            for i, uid in enumerate(uids)
        ]
        return HolderScan(
            db="/h/state.db",
            files={},
            holders=[],
            problems=[],
            uninspectable=unread,
            vanished=[],
            processes=len(uids),
            mode="full",
        )

    @pytest.mark.parametrize(
        ("uids", "held", "line"),
        [
            ([], 0, None),
            (
                [os.geteuid() + 1] * 312,
                0,
                "312 processes of other users could not be read; none holds a lock on state.db",
            ),
            (
                [os.geteuid() + 1],
                1,
                "1 process of other users could not be read;"
                " 1 holds a lock on state.db (listed above, via locks)",
            ),
            ([os.geteuid()], 0, "1 process could not be read; none holds a lock on state.db"),
            (
                [os.geteuid(), os.geteuid() + 1, os.geteuid() + 2],
                2,
                "3 processes (2 of other users) could not be read;"
                " 2 hold a lock on state.db (listed above, via locks)",
            ),
        ],
    )
    def test_one_line_says_what_was_checked_through_locks(
        self, uids: list[int], held: int, line: str | None
    ) -> None:
        """The coverage line counts the processes that could not be read (and how many of other
        users), and how many of them hold a lock on state.db; with none, there is no line."""
        assert coverage_line(self.scan_with(uids, held)) == line

    def test_a_lock_that_names_no_owner_is_never_contradicted(self) -> None:
        """With an OFD lock /proc/locks names no owner for: the coverage line does not say
        "none holds a lock", it says none owns one by its pid and that lock may be theirs."""
        scan = self.scan_with([os.geteuid() + 1] * 3, 0)
        scan.problems.append(
            "a lock (OFDLCK READ on state.db) names no owner (an open file description lock)"
            " and a process that could not be read may hold it"
        )
        line = coverage_line(scan)
        assert line is not None
        assert "none holds a lock" not in line
        assert "the lock that names no owner (below) may be one of theirs" in line


# A SQLite connection from a process whose command line says nothing of Hermes.
WRAPPED = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]);"
    " c.execute('select count(*) from sessions').fetchall(); print('ready', flush=True);"
    " sys.stdin.read()"
)


def add_heartbeat(db: Path, pid: int, started_at: float, host: str) -> None:
    """Write a ``gateway_heartbeats`` row in the shape Hermes since schema 29 writes."""
    conn = apsw.Connection(str(db))
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS gateway_heartbeats (backend_id TEXT PRIMARY KEY,"
            " pid INTEGER, started_at REAL, last_heartbeat REAL, profile TEXT, host TEXT)"
        )
        conn.execute(
            "INSERT INTO gateway_heartbeats VALUES (?, ?, ?, ?, 'default', ?)",
            (f"b{pid}", pid, started_at, started_at + 30, host),
        )
    finally:
        conn.close()


class TestHeartbeats:
    def test_a_heartbeat_names_a_wrapped_gateway(
        self, hermes_home: Path, helpers: Callable[[str, Path], Helper]
    ) -> None:
        """gateway_heartbeats names the pid (this host, its start time): kind gateway, with
        the evidence; the file is only read."""
        db = hermes_home / "state.db"
        wrapped = helpers(WRAPPED, db)
        assert holder(scan(db), wrapped.pid).kind == "unknown"
        started = started_at(read_stat(wrapped.pid).start_ticks).timestamp()
        add_heartbeat(db, wrapped.pid, started, socket.gethostname())
        before = db.read_bytes()
        cli = run_ctl("holders", "--db", str(db), "--json", "--no-systemd")
        assert db.read_bytes() == before
        (entry,) = [h for h in json.loads(cli.stdout)["holders"] if h["pid"] == wrapped.pid]
        assert entry["kind"] == "gateway"
        assert (
            entry["kind_evidence"]
            == f"gateway_heartbeats: backend b{wrapped.pid} (pid {wrapped.pid})"
        )
        text = run_ctl("holders", "--db", str(db), "--no-systemd")
        assert f"* pid {wrapped.pid} is a gateway by gateway_heartbeats" in text.stdout

    def test_a_heartbeat_of_a_reused_pid_or_another_host_is_not_evidence(
        self, hermes_home: Path, helpers: Callable[[str, Path], Helper]
    ) -> None:
        """A heartbeat older than the process with its pid, or from another host, does not name the
        holder's kind: both stay unknown."""
        db = hermes_home / "state.db"
        wrapped = helpers(WRAPPED, db)
        started = started_at(read_stat(wrapped.pid).start_ticks).timestamp()
        add_heartbeat(db, wrapped.pid, started - 3600, socket.gethostname())  # an hour earlier
        other = helpers(WRAPPED, db)
        add_heartbeat(
            db,
            other.pid,
            started_at(read_stat(other.pid).start_ticks).timestamp(),
            "some-other-host",
        )
        data = json.loads(run_ctl("holders", "--db", str(db), "--json", "--no-systemd").stdout)
        kinds = {h["pid"]: (h["kind"], h["kind_evidence"]) for h in data["holders"]}
        assert kinds[wrapped.pid] == ("unknown", None)
        assert kinds[other.pid] == ("unknown", None)
