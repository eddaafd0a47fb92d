"""Holders as a normal user: other users' processes through /proc/locks, kernel threads
left out, a restricted /proc never complete.

Everything runs for real as root: a second, unprivileged uid (65534) through
``setpriv`` owns a Hermes home and runs a writer and the scan; root runs a writer
through a real ``hermes_state.SessionDB`` connection, an idle process and a holder
with an open file description lock; a private PID and mount namespace gets a /proc
mounted ``hidepid=2``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lab.hermes_fixtures import TINY, WRITER, hermes_python, holding, make_home, writer_env
from statewarden.holders.processes import PF_KTHREAD
from tests.support.ns_holders import holders_in_a_private_pid_namespace
from tests.support.privileges import SETPRIV, USER
from tests.support.repo import REPO

PROC_GROUP = 4321  # the group a hidepid mount exempts (gid=), in the second uid's groups
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root (setpriv / unshare); run the suite as root, as CI does"
)
# Holds the file open and takes an open file description lock on it: /proc/locks shows
# such a lock with pid -1, so its owner cannot be named from there.
OFD_LOCK = (
    "import fcntl, struct, sys; f = open(sys.argv[1], 'rb');"
    " fcntl.fcntl(f, fcntl.F_OFD_SETLK, struct.pack('hhqqi4x', fcntl.F_RDLCK, 0, 0, 0, 0));"
    " print('ready', flush=True); sys.stdin.read()"
)


@dataclass
class Home:
    home: Path
    db: Path
    config_dir: Path


@pytest.fixture
def user_home() -> Iterator[Home]:
    """A Hermes home owned by the second uid, in a folder everyone can search."""
    shared = Path(tempfile.mkdtemp(prefix="statewarden-users-"))
    try:
        shared.chmod(0o755)
        home = make_home(shared / "home", TINY)
        for p in [home, *home.rglob("*")]:
            os.chown(p, USER, USER)
        config_dir = shared / "config"
        config_dir.mkdir(mode=0o755)
        yield Home(home, home / "state.db", config_dir)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


class Proc:
    """A real process that prints ``ready`` once it holds what it should."""

    def __init__(
        self, cmd: list[str], env: dict[str, str] | None = None, ready: str = "ready"
    ) -> None:
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != ready:
            self.proc.kill()
            raise AssertionError(f"{cmd[:3]} did not start (said {line!r})")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop()


def user_writer(h: Home) -> Proc:
    """A Hermes writer of the second uid holding its own state.db."""
    return Proc(
        [*SETPRIV, hermes_python(), str(WRITER), "hold", "--home", str(h.home)],
        env=writer_env(h.home),
    )


def idle_root() -> Proc:
    """A root process that holds nothing of the database."""
    return Proc([sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"])


def holders_as_user(
    h: Home,
    *args: str,
    config: str | None = None,
    command: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``statewardenctl holders --db`` run as the second uid, a whole process: through the
    click group, or ``command`` (the installed launcher); ``env`` added to its own."""
    full_env = {**os.environ, "HOME": "/nonexistent", "XDG_CONFIG_HOME": str(h.config_dir)}
    full_env.pop("STATEWARDEN_CONFIG", None)
    full_env.update(env or {})
    extra = ["--config", config] if config else []
    return subprocess.run(
        [
            *SETPRIV,
            *(command or [sys.executable, "-m", "statewarden.cli.ctl"]),
            "holders",
            "--db",
            str(h.db),
            "--no-systemd",
            *extra,
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        env=full_env,
    )


def json_of_python_as_user(code: str, h: Home) -> Any:
    """Run Python ``code`` as the second uid with the database path as its argument; it
    must succeed, and what it printed is read as JSON."""
    proc = subprocess.run(
        [*SETPRIV, sys.executable, "-c", code, str(h.db)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        env={**os.environ, "HOME": "/nonexistent"},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def fail_config(h: Home) -> str:
    path = h.config_dir / "fail.yaml"
    path.write_text("holders:\n  other_users: fail\n")
    path.chmod(0o644)
    return str(path)


def is_kernel_thread(pid: int) -> bool | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return bool(int(rest[6]) & PF_KTHREAD)


def kernel_threads_now() -> int:
    return sum(1 for n in os.listdir("/proc") if n.isdigit() and is_kernel_thread(int(n)))


def by_pid(data: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {h["pid"]: h for h in data["holders"]}


LOCK = r"(posix|ofd) [RW] (db|wal|shm)"


class TestOtherUsers:
    def test_complete_as_a_normal_user_with_a_root_holder_found_through_locks(
        self, user_home: Home, procs: list[Proc]
    ) -> None:
        """The user's writer by its descriptors, root's SessionDB by its locks; complete, exit 0."""
        procs.append(mine := user_writer(user_home))
        with holding(user_home.home) as root_writer:
            procs.append(idle := idle_root())
            proc = holders_as_user(user_home, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        data = json.loads(proc.stdout)
        assert data["complete"] is True
        assert data["problems"] == []
        assert data["other_users"] == "locks"
        found = by_pid(data)
        assert set(found) == {mine.pid, root_writer.pid}
        assert found[mine.pid]["via"] == "descriptors"
        assert found[mine.pid]["uid"] == USER
        assert found[mine.pid]["fds"] == {"state.db": 1, "state.db-wal": 1, "state.db-shm": 1}
        root = found[root_writer.pid]
        assert root["via"] == "locks"
        assert root["uid"] == 0
        assert root["comm"] == "python"
        assert root["cmdline"][1].endswith("hermes_writer.py")
        assert root["lock_state"] == "held"
        assert {lk["file"] for lk in root["locks"]} >= {"state.db", "state.db-shm"}
        assert root["fds"] == {}
        assert root["flags"] == []
        assert root["exe"] is None  # another user's: not readable, and not guessed
        assert root["parents"][0]["pid"] == os.getpid()
        unread = {u["pid"]: u for u in data["uninspectable"]}
        # Root's holding nothing: counted, checked, not listed as a holder.
        assert unread[idle.pid]["checked"] == "locks"
        assert unread[idle.pid]["holds_lock"] is False
        assert unread[root_writer.pid]["holds_lock"] is True
        assert mine.pid not in unread
        cov = data["coverage"]
        assert cov["uncovered"] == 0
        assert cov["read"] >= 2  # the writer and the scan itself
        assert cov["locks_only"] == len(unread)
        assert sum(cov.values()) == data["processes"] - len(data["vanished"])

    def test_the_installed_command_as_a_user_imports_no_re_nor_pathlib(
        self, user_home: Home, procs: list[Proc]
    ) -> None:
        """The installed `statewardenctl holders --db` as the second uid, with its writer and
        root's: both found (root's through its locks), and neither re nor pathlib nor enum
        imported on the way (the launcher, the hidepid look at the mounts, the heartbeats
        read): together they were a quarter of the command's CPU time next to fuser's."""
        procs.append(mine := user_writer(user_home))
        launcher = str(Path(sys.executable).with_name("statewardenctl"))
        with holding(user_home.home) as root_writer:
            proc = holders_as_user(
                user_home, command=[launcher], env={"PYTHONPROFILEIMPORTTIME": "1"}
            )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        listed = {
            int(line.split()[0]) for line in proc.stdout.splitlines()[2:] if line[:1].isdigit()
        }
        assert {mine.pid, root_writer.pid} <= listed, proc.stdout
        modules = {
            line.rsplit("|", 1)[1].strip()
            for line in proc.stderr.splitlines()
            if line.startswith("import time:")
        }
        assert "statewarden.mounts" in modules  # the user's path: is /proc mounted hidepid?
        assert sorted({"re", "pathlib", "enum", "functools", "urllib.parse"} & modules) == []

    def test_kernel_threads_are_left_out(self, user_home: Home) -> None:
        """Kernel threads are neither read nor unreadable: only counted as kernel_threads."""
        proc = holders_as_user(user_home, "--json")
        data = json.loads(proc.stdout)
        assert proc.returncode == 0, data["problems"]
        assert not [u for u in data["uninspectable"] if is_kernel_thread(u["pid"])]
        if kernel_threads_now() == 0:
            pytest.skip("this /proc shows no kernel threads (a PID namespace)")
        assert data["coverage"]["kernel_threads"] > 0

    def test_text_says_coverage_in_one_line_and_lists_behind_verbose(
        self, user_home: Home, procs: list[Proc]
    ) -> None:
        """One coverage line; the unreadable processes only with --verbose."""
        with holding(user_home.home) as root_writer:
            procs.append(idle := idle_root())
            plain = holders_as_user(user_home)
            verbose = holders_as_user(user_home, "--verbose")
        assert plain.returncode == 0, plain.stdout + plain.stderr
        # A process of the machine's may exit while it is read: said on a line of its own.
        lines = [ln for ln in plain.stdout.splitlines() if "exited during the scan" not in ln]
        assert re.fullmatch(
            # Found via locks, so its LOCKS column names at least one of them.
            rf"{root_writer.pid} +unknown +\(none\) +\? \(locks\)"
            rf" +{LOCK}(, {LOCK})* +- +\d+s +- +hermes_writer\.py hold .*",
            lines[2],
        )
        assert re.fullmatch(
            r"\d+ processes of other users could not be read; 1 holds a lock on state\.db"
            r" \(listed above, via locks\)",
            lines[3],
        )
        assert len(lines) == 4
        assert f"pid {idle.pid} " not in plain.stdout
        assert verbose.returncode == 0
        assert "processes that could not be read:" in verbose.stdout
        assert (
            f"  pid {idle.pid} (python, uid 0): /proc/{idle.pid}/fd: Permission denied;"
            " holds no lock on state.db"
        ) in verbose.stdout.splitlines()

    def test_a_user_with_capabilities_reads_every_process(
        self, user_home: Home, procs: list[Proc]
    ) -> None:
        """Given CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE, the user reads root's writer as root does."""
        with holding(user_home.home) as root_writer:
            proc = subprocess.run(
                [
                    "setpriv",
                    "--reuid",
                    str(USER),
                    "--regid",
                    str(USER),
                    "--clear-groups",
                    "--inh-caps",
                    "+sys_ptrace,+dac_read_search",
                    "--ambient-caps",
                    "+sys_ptrace,+dac_read_search",
                    sys.executable,
                    "-m",
                    "statewarden.cli.ctl",
                    "holders",
                    "--db",
                    str(user_home.db),
                    "--no-systemd",
                    "--json",
                ],
                capture_output=True,
                text=True,
                cwd=REPO,
                check=False,
                env={
                    **os.environ,
                    "HOME": "/nonexistent",
                    "XDG_CONFIG_HOME": str(user_home.config_dir),
                },
            )
        data = json.loads(proc.stdout)
        root = by_pid(data)[root_writer.pid]
        assert root["via"] == "descriptors"
        assert root["fds"] == {"state.db": 1, "state.db-wal": 1, "state.db-shm": 1}
        assert root_writer.pid not in {u["pid"] for u in data["uninspectable"]}

    def test_a_hostile_process_name_reaches_the_terminal_escaped(
        self, user_home: Home, procs: list[Proc]
    ) -> None:
        """Another user names its process with escapes and a newline: --verbose shows them inert."""
        code = (
            "import sys; open('/proc/self/comm', 'w').write('\\x1b]0;pwn\\x07\\nX');"
            " print('ready', flush=True); sys.stdin.read()"
        )
        third = str(USER - 1)
        procs.append(
            evil := Proc(
                [
                    "setpriv",
                    "--reuid",
                    third,
                    "--regid",
                    third,
                    "--clear-groups",
                    sys.executable,
                    "-c",
                    code,
                ]
            )
        )
        out = holders_as_user(user_home, "--verbose").stdout
        assert "\x1b" not in out
        line = next(ln for ln in out.splitlines() if ln.startswith(f"  pid {evil.pid} "))
        assert line.startswith(f"  pid {evil.pid} (\\x1b]0;pwn\\x07\\nX, uid {third}):")

    def test_policy_fail_keeps_the_strict_meaning(self, user_home: Home, procs: list[Proc]) -> None:
        """other_users: fail: the unreadable root holder makes the scan incomplete, exit 1."""
        with holding(user_home.home) as root_writer:
            proc = holders_as_user(user_home, "--json", config=fail_config(user_home))
            text = holders_as_user(user_home, config=fail_config(user_home))
        assert proc.returncode == 1, proc.stderr
        data = json.loads(proc.stdout)
        assert data["complete"] is False
        assert data["other_users"] == "fail"
        assert (
            f"pid {root_writer.pid} (python, uid 0) could not be inspected:"
            f" /proc/{root_writer.pid}/fd: Permission denied"
        ) in data["problems"]
        assert data["coverage"]["locks_only"] == 0
        assert data["coverage"]["uncovered"] == len(data["uninspectable"])
        assert text.returncode == 1
        assert "scan INCOMPLETE:" in text.stdout
        assert re.search(
            r"^  \d+ process\(es\) could not be inspected \(holders.other_users: fail\);"
            r" --verbose lists them$",
            text.stdout,
            re.M,
        )
        assert f"pid {root_writer.pid} (python" not in text.stdout

    def test_an_ofd_lock_nobody_can_name_is_not_complete(
        self, user_home: Home, procs: list[Proc]
    ) -> None:
        """A root holder whose lock /proc/locks shows with pid -1: never "none holds a lock"."""
        procs.append(Proc([sys.executable, "-c", OFD_LOCK, str(user_home.db)]))
        proc = holders_as_user(user_home, "--json")
        assert proc.returncode == 1, proc.stderr
        data = json.loads(proc.stdout)
        assert data["complete"] is False
        assert (
            "a lock (OFDLCK READ on state.db) names no owner (an open file description lock)"
            " and a process that could not be read may hold it"
        ) in data["problems"]

    def test_a_scan_that_only_counts_the_unreadable_still_names_holders_and_skips_kthreads(
        self, user_home: Home, procs: list[Proc]
    ) -> None:
        """With ``name_unreadable=False`` (text without --verbose) kernel threads are still left
        out, root's holder through locks still has its name, parent and start time, the
        processes holding nothing keep "?", and the scan is as complete as a named one."""
        code = (
            "import json, sys\n"
            "from pathlib import Path\n"
            "from statewarden.holders.scan import HolderScanner\n"
            "out = {}\n"
            "for names in (False, True):\n"
            "    r = HolderScanner([Path(sys.argv[1])], name_unreadable=names).scan()[0]\n"
            "    out[str(names)] = {'complete': r.complete, 'coverage': r.coverage,\n"
            "        'holders': [[h.pid, h.via, h.comm, h.ppid, h.start_ticks] for h in r.holders],\n"
            "        'uninspectable': [[u['pid'], u['comm'], u['holds_lock']]"
            " for u in r.uninspectable]}\n"
            "print(json.dumps(out))\n"
        )
        with holding(user_home.home) as root_writer:
            procs.append(idle := idle_root())
            out = json_of_python_as_user(code, user_home)
            start = int(
                Path(f"/proc/{root_writer.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
            )
        quick, named = out["False"], out["True"]
        assert quick["complete"] is named["complete"] is True
        assert [root_writer.pid, "locks", "python", os.getpid(), start] in quick["holders"]
        assert quick["holders"] == named["holders"]
        unread = {pid: (comm, held) for pid, comm, held in quick["uninspectable"]}
        assert unread[idle.pid] == ("?", False)
        assert unread[root_writer.pid] == ("python", True)
        assert {pid: c for pid, c, _ in named["uninspectable"]}[idle.pid] == "python"
        assert not [pid for pid in unread if is_kernel_thread(pid)]
        if kernel_threads_now():
            assert quick["coverage"]["kernel_threads"] > 0
        assert quick["coverage"]["uncovered"] == 0

    def test_a_scan_that_cannot_read_other_users_runs_in_one_thread(
        self, user_home: Home, procs: list[Proc]
    ) -> None:
        """As the user, where most processes get one stat, the scan starts no threads even
        above ``parallel_min_processes``, and finds what it finds with them (root's holder
        through locks, complete)."""
        code = (
            "import json, sys\n"
            "from pathlib import Path\n"
            "from statewarden.holders.scan import HolderScanner\n"
            "s = HolderScanner([Path(sys.argv[1])], workers=3, parallel_min_processes=1)\n"
            "r = s.scan()[0]\n"
            "print(json.dumps({'complete': r.complete, 'threads': 'concurrent.futures' in"
            " sys.modules, 'holders': [[h.pid, h.via] for h in r.holders]}))\n"
        )
        with holding(user_home.home) as root_writer:
            out = json_of_python_as_user(code, user_home)
        assert out["threads"] is False
        assert out["complete"] is True
        assert [root_writer.pid, "locks"] in out["holders"]

    def test_the_watcher_sees_the_root_holder_the_same_way(
        self, user_home: Home, procs: list[Proc]
    ) -> None:
        """As the user, the daemon's holder watcher raises unexpected_holder and multi_writer."""
        code = (
            "import json, sys\n"
            "from pathlib import Path\n"
            "from statewarden.watch.holders import HolderWatcher\n"
            "w = HolderWatcher([Path(sys.argv[1])], max_writers=1, expected_kinds=('gateway',))\n"
            "scans = w.scan()\n"
            "found = [f for f in w.diff(scans) if hasattr(f, 'kind')]\n"
            "print(json.dumps({'complete': scans[0].complete,"
            " 'signals': [[f.kind, f.key, f.summary] for f in found]}))\n"
        )
        procs.append(mine := user_writer(user_home))
        with holding(user_home.home) as root_writer:
            out = json_of_python_as_user(code, user_home)
        assert out["complete"] is True
        kinds = {(k, key) for k, key, _ in out["signals"]}
        assert ("unexpected_holder", str(root_writer.pid)) in kinds
        assert ("unexpected_holder", str(mine.pid)) in kinds
        (many,) = [s for k, _, s in out["signals"] if k == "multi_writer"]
        assert many.startswith("2 processes hold state.db at once")
        assert f"pid {root_writer.pid} (unknown" in many


class TestReload:
    def test_a_reloaded_policy_applies_to_the_next_scan(self, user_home: Home) -> None:
        """The daemon's holder scans, as the user: fail, then locks after a reload."""
        code = (
            "import json, sys\n"
            "from pathlib import Path\n"
            "from statewarden.config import Config, HoldersConfig\n"
            "from statewarden.daemon.holders import HolderScans\n"
            "h = HolderScans(Config(holders=HoldersConfig(other_users='fail')), lambda f: None)\n"
            "h.set_dbs([Path(sys.argv[1])])\n"
            "before = h.watcher.scan()[0]\n"
            "h.reconfigure(Config())\n"
            "after = h.watcher.scan()[0]\n"
            "print(json.dumps([before.complete, after.complete, after.coverage]))\n"
        )
        with holding(user_home.home):
            before, after, coverage = json_of_python_as_user(code, user_home)
        assert before is False
        assert after is True
        assert coverage["uncovered"] == 0
        assert coverage["locks_only"] > 0


SCANNER = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "from statewarden.holders.scan import HolderScanner\n"
    "s = HolderScanner([Path(sys.argv[1])])\n"
    "s.scan()\n"
    "print('scanned', flush=True); sys.stdin.readline()\n"
    "r = s.scan()[0]\n"
    "print(json.dumps(r.to_json()), flush=True)\n"
)


def second_scan(scanner: Proc) -> dict[str, Any]:
    """Let a running ``SCANNER`` make its second scan and return it."""
    assert scanner.proc.stdin is not None
    assert scanner.proc.stdout is not None
    scanner.proc.stdin.write("go\n")
    scanner.proc.stdin.flush()
    return dict(json.loads(scanner.proc.stdout.readline()))


def replace_db(h: Home) -> None:
    """A new state.db takes the place of the old one (as a careless restore does)."""
    fresh = h.db.with_name("state.db.new")
    shutil.copyfile(h.db, fresh)
    os.chown(fresh, USER, USER)
    os.replace(fresh, h.db)


class TestStaleThroughLocks:
    def test_an_old_inode_nothing_readable_holds_is_not_matched(
        self, user_home: Home, procs: list[Proc]
    ) -> None:
        """Root still on a replaced state.db, which no readable process holds: its old inode
        number cannot be shown to be that file any more (numbers are reused), so root is
        found through its lock on the current -shm, and not called STALE."""
        with holding(user_home.home) as root_writer:
            procs.append(
                scanner := Proc(
                    [*SETPRIV, sys.executable, "-c", SCANNER, str(user_home.db)], ready="scanned"
                )
            )
            replace_db(user_home)
            data = second_scan(scanner)
        assert data["complete"] is True
        root = by_pid(data)[root_writer.pid]
        assert root["via"] == "locks"
        assert root["stale_files"] == []
        assert {lk["file"] for lk in root["locks"]} == {"state.db-shm"}

    def test_an_old_inode_a_readable_process_holds_names_root_stale(
        self, user_home: Home, procs: list[Proc]
    ) -> None:
        """The user's own process still has the replaced state.db open: that proves the
        old inode is that file, so root's lock on it makes root STALE too."""
        keep = (
            "import sys; f = open(sys.argv[1], 'rb'); print('ready', flush=True); sys.stdin.read()"
        )
        with holding(user_home.home) as root_writer:
            procs.append(mine := Proc([*SETPRIV, sys.executable, "-c", keep, str(user_home.db)]))
            replace_db(user_home)
            proc = holders_as_user(user_home, "--json")
        assert proc.returncode == 3, proc.stderr  # STALE holders
        data = json.loads(proc.stdout)
        assert data["complete"] is True
        assert by_pid(data)[mine.pid]["stale_files"] == ["state.db"]
        root = by_pid(data)[root_writer.pid]
        assert root["via"] == "locks"
        assert root["stale_files"] == ["state.db"]
        assert root["flags"] == ["STALE"]

    def test_a_strangers_file_on_a_reused_inode_is_not_a_holder(
        self, small_ext4: Path, procs: list[Proc]
    ) -> None:
        """The user's -wal and -shm are deleted at the last close; the filesystem hands
        their inode numbers to a stranger's new files, which the stranger locks. The
        scanner saw those numbers before: it must not take the stranger for a holder."""
        home = make_home(small_ext4 / "home", TINY)
        for p in [home, *home.rglob("*")]:
            os.chown(p, USER, USER)
        h = Home(home, home / "state.db", small_ext4)
        stranger = small_ext4 / "stranger"
        stranger.mkdir(mode=0o755)
        os.chown(stranger, STRANGER, STRANGER)
        with holding(home, prefix=tuple(SETPRIV)):
            old = {os.stat(f"{h.db}{sfx}").st_ino for sfx in ("-wal", "-shm")}
            procs.append(
                scanner := Proc(
                    [*SETPRIV, sys.executable, "-c", SCANNER, str(h.db)], ready="scanned"
                )
            )
        assert not Path(f"{h.db}-wal").exists()
        assert not Path(f"{h.db}-shm").exists()
        procs.append(
            Proc(
                [
                    *STRANGER_SETPRIV,
                    sys.executable,
                    "-c",
                    REUSE_INODE,
                    str(stranger),
                    ",".join(map(str, old)),
                ]
            )
        )
        data = second_scan(scanner)
        assert data["complete"] is True, data["problems"]
        assert data["holders"] == []


STRANGER = 65533
STRANGER_SETPRIV = ["setpriv", "--reuid", str(STRANGER), "--regid", str(STRANGER), "--clear-groups"]
# Creates files until one gets an inode number of the given list, then locks it.
REUSE_INODE = (
    "import fcntl, os, sys\n"
    "wanted = {int(n) for n in sys.argv[2].split(',')}\n"
    "for i in range(200):\n"
    "    f = open(os.path.join(sys.argv[1], f'mine-{i}'), 'w+b')\n"
    "    if os.fstat(f.fileno()).st_ino in wanted:\n"
    "        fcntl.lockf(f, fcntl.LOCK_SH | fcntl.LOCK_NB)\n"
    "        break\n"
    "else:\n"
    "    sys.exit('no inode number was reused')\n"
    "print('ready', flush=True); sys.stdin.read()\n"
)


@pytest.fixture
def small_ext4() -> Iterator[Path]:
    """A 4 MiB ext4 with 32 inodes, loop-mounted: a freed inode number is the next one
    handed out, as on a busy shared disk."""
    base = Path(tempfile.mkdtemp(prefix="statewarden-ext4-"))
    image, mnt = base / "fs.img", base / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(4 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-N", "32", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        mnt.chmod(0o755)
        base.chmod(0o755)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
        shutil.rmtree(base, ignore_errors=True)


# Opens the file, takes an OFD read lock on SQLite's SHARED range and forks: parent and
# child hold one open file description between them, so one lock.
FORK_OFD = (
    "import fcntl, os, struct, sys\n"
    "f = open(sys.argv[1], 'rb')\n"
    "fcntl.fcntl(f, fcntl.F_OFD_SETLK, struct.pack('hhqqi4x', fcntl.F_RDLCK, 0, 0x40000002, 510, 0))\n"
    "child = os.fork()\n"
    "if child == 0:\n"
    "    sys.stdin.read(); os._exit(0)\n"
    "print('ready', flush=True); sys.stdin.read(); os.waitpid(child, 0)\n"
)
# A root process with an OFD read lock on the same range, its own open file description.
ROOT_OFD = (
    "import fcntl, struct, sys; f = open(sys.argv[1], 'rb');"
    " fcntl.fcntl(f, fcntl.F_OFD_SETLK, struct.pack('hhqqi4x', fcntl.F_RDLCK, 0, 0x40000002, 510, 0));"
    " print('ready', flush=True); sys.stdin.read()"
)
OFD_SHARED = {
    "file": "state.db",
    "kind": "OFDLCK",
    "mode": "READ",
    "start": 1073741826,
    "end": "1073742335",
}
OFD_DMS = {"file": "state.db-shm", "kind": "OFDLCK", "mode": "READ", "start": 128, "end": "128"}


class TestOfdLocks:
    """Hermes since 0.20 adds open file description locks, which /proc/locks shows with
    pid -1: they are found on the holder's descriptors (fdinfo), with other users about."""

    def test_a_writer_with_ofd_locks_is_complete_and_named(
        self, user_home: Home, procs: list[Proc]
    ) -> None:
        """As a normal user, with other users' processes about, a writer holding OFD locks is found
        through its descriptors with its locks held and no flag, and the scan is complete."""
        procs.append(idle_root())
        with holding(user_home.home, ofd_guard=True, prefix=tuple(SETPRIV)) as writer:
            proc = holders_as_user(user_home, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        data = json.loads(proc.stdout)
        assert data["complete"] is True
        assert data["problems"] == []
        assert data["coverage"]["locks_only"] > 0  # other users' processes were about
        me = by_pid(data)[writer.pid]
        assert me["via"] == "descriptors"
        assert me["lock_state"] == "held"
        assert me["flags"] == []
        assert OFD_SHARED in me["locks"]
        assert OFD_DMS in me["locks"]

    def test_ofd_locks_keep_a_writer_that_dropped_its_posix_locks_held(
        self, user_home: Home
    ) -> None:
        """A stray open/close drops the process's POSIX locks on state.db; the OFD lock
        still covers the SHARED range, so it has not lost its locks (no LOST-LOCKS)."""
        with holding(
            user_home.home, ofd_guard=True, drop_posix_locks=True, prefix=tuple(SETPRIV)
        ) as writer:
            proc = holders_as_user(user_home, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        me = by_pid(json.loads(proc.stdout))[writer.pid]
        assert me["lock_state"] == "held"
        assert me["flags"] == []
        assert [lk for lk in me["locks"] if lk["file"] == "state.db"] == [OFD_SHARED]

    def test_two_writers_with_the_same_ofd_locks_are_both_attributed(self, user_home: Home) -> None:
        """Two writers holding the same OFD locks are both found, and the scan is complete."""
        with (
            holding(user_home.home, ofd_guard=True, prefix=tuple(SETPRIV)) as one,
            holding(user_home.home, ofd_guard=True, prefix=tuple(SETPRIV)) as two,
        ):
            proc = holders_as_user(user_home, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        data = json.loads(proc.stdout)
        assert data["complete"] is True
        assert {one.pid, two.pid} <= set(by_pid(data))

    def test_a_description_shared_by_fork_counts_once(
        self, user_home: Home, procs: list[Proc]
    ) -> None:
        """Parent and child carry one OFD lock between them: it covers one /proc/locks
        entry, not two, so root's own identical lock stays ownerless (incomplete)."""
        procs.append(Proc([*SETPRIV, sys.executable, "-c", FORK_OFD, str(user_home.db)]))
        alone = holders_as_user(user_home, "--json")
        assert alone.returncode == 0, alone.stdout + alone.stderr
        assert json.loads(alone.stdout)["complete"] is True
        procs.append(Proc([sys.executable, "-c", ROOT_OFD, str(user_home.db)]))
        proc = holders_as_user(user_home, "--json")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        data = json.loads(proc.stdout)
        assert data["complete"] is False
        assert data["problems"] == [
            "a lock (OFDLCK READ on state.db) names no owner (an open file description lock)"
            " and a process that could not be read may hold it"
        ]


def scan_as_user_under_hidepid(h: Home, hidepid: str, groups: str | None = None) -> dict[str, Any]:
    """``holders --json`` as the second uid (in ``groups`` if given) in a private PID
    namespace whose /proc is mounted ``hidepid=<hidepid>``, beside a root holder."""
    groups_env = {"NS_GROUPS": groups} if groups else {}
    return holders_in_a_private_pid_namespace(
        h.home,
        "--db",
        str(h.db),
        "--json",
        "--no-systemd",
        own_mounts=True,
        env={
            **os.environ,
            "NS_HIDEPID": hidepid,
            "NS_UID": str(USER),
            **groups_env,
            "HOME": "/nonexistent",
            "XDG_CONFIG_HOME": str(h.config_dir),
        },
    )


class TestRestrictedProc:
    def test_hidepid_is_never_complete(self, user_home: Home) -> None:
        """/proc mounted hidepid=2: root's holder is hidden; the scan says so and exits 1.

        Both signs are reported on their own: the mount option, and a lock owner in
        /proc/locks that /proc does not list (what remains when the option is not seen).
        """
        out = scan_as_user_under_hidepid(user_home, "2")
        assert out["rc"] == 1, out
        data = json.loads(out["stdout"])
        assert data["complete"] is False
        assert data["holders"] == []  # what it cannot see, it does not pretend to
        problems = data["problems"]
        assert (
            "/proc is mounted with hidepid=invisible: other users' processes are hidden from"
            " this scan, so a holder may be missed"
        ) in problems
        assert (
            f"/proc does not list pid(s) {out['holder']}, which own locks in /proc/locks:"
            " this /proc hides processes, so a holder may be missed"
        ) in problems

    def test_hidepid_exempts_its_gid_group(self, user_home: Home) -> None:
        """hidepid=2,gid=G: a member of G sees every process, so the scan can be complete."""
        out = scan_as_user_under_hidepid(user_home, f"2,gid={PROC_GROUP}", groups=str(PROC_GROUP))
        data = json.loads(out["stdout"])
        assert out["rc"] == 0, data["problems"]
        assert data["complete"] is True
        assert by_pid(data)[out["holder"]]["via"] == "locks"
