"""The watchers on a real machine's rough edges: a log that is a FIFO or a device, no
inotify left for this user, and the files newer Hermes keeps beside state.db."""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from lab.hermes_fixtures import TINY, log_line, make_home
from statewarden.config import Config
from statewarden.incidents.signals import Found, Signal
from statewarden.inotify import limit as inotify_limit
from statewarden.inotify import unavailable
from statewarden.recovery_files import scan
from statewarden.targets import target_for_db
from statewarden.watch.files import FileWatcher
from statewarden.watch.monitor import TargetMonitor
from tests.support.cli import ctl_process, run_ctl
from tests.support.daemon import DaemonProc, daemon_env
from tests.support.privileges import needs_root
from tests.support.repo import REPO
from tests.support.waiting import wait_for as eventually

pytestmark = pytest.mark.process

WHEN = dt.datetime(2026, 9, 7, 17, 5, 28, 701000)


def free_uid() -> int:
    """A uid no process runs as now (so its inotify instances are all free)."""
    used = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            for line in status.read_text().splitlines():
                if line.startswith("Uid:"):
                    used |= {int(x) for x in line.split()[1:]}
        except OSError:
            continue
    base = 61000 + os.getpid() % 1000
    return next(u for u in range(base, base + 1000) if u not in used)


def as_uid(uid: int) -> tuple[str, ...]:
    return ("setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups")


def what_python_prints(code: str, *args: str, prefix: Sequence[str] = ()) -> str:
    """Run Python ``code`` with ``args`` from the repository (through ``prefix``, such as
    ``setpriv`` to another uid); it must succeed. Returns what it printed, stripped."""
    r = subprocess.run(
        [*prefix, sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def monitor_for(home: Path) -> TargetMonitor:
    (home / "logs").mkdir(parents=True, exist_ok=True)
    return TargetMonitor(target_for_db(home / "state.db"), Config())


def failed(found: Sequence[Found]) -> list[Signal]:
    return [s for s in found if isinstance(s, Signal) and s.kind == "watcher_failed"]


class TestLogIsNotARegularFile:
    """A FIFO (nobody writing: an open without O_NONBLOCK would hang for ever) or a link
    to /dev/zero (endless bytes) where a log should be: skipped with a one-line message
    that says what it is, never read, never blocking (the suite's per-test timeout fails
    a hang)."""

    @pytest.mark.parametrize("make", ["fifo", "dev_zero"])
    def test_skipped_with_the_right_message(self, tmp_path: Path, make: str) -> None:
        """A log that is a FIFO or a link to /dev/zero is skipped with one signal saying what it is
        and how to fix it, said once, and the other logs are still followed."""
        home = tmp_path / "home"
        m = monitor_for(home)
        m.poll()
        log = home / "logs" / "agent.log"
        if make == "fifo":
            os.mkfifo(log)
            what = f"{log} is a FIFO (named pipe), not a log file"
        else:
            log.symlink_to("/dev/zero")
            what = f"{log} is a character device (a link to /dev/zero), not a log file"
        (sig,) = failed(m.poll())
        assert sig.key == "logs/agent.log"
        assert sig.summary == (
            f"Hermes' log agent.log is skipped: {what}; statewarden reads only regular files, "
            "so nothing logged there is seen. Remove it (Hermes creates agent.log again as a "
            "regular file)"
        )
        assert "read access" not in sig.summary
        assert failed(m.poll()) == []  # said once
        # The other logs are still followed.
        errors = home / "logs" / "errors.log"
        errors.write_text(
            log_line(WHEN, "ERROR", "hermes_state", "x: database disk image is malformed")
            + "\n"
            + log_line(WHEN, "INFO", "gateway.run", "next")  # completes the record
            + "\n"
        )
        found = m.poll()
        assert [s.kind for s in found if isinstance(s, Signal)] == ["corruption"]
        # Back to a regular file: the incident clears and the log is read.
        log.unlink()
        log.write_text(log_line(WHEN, "INFO", "gateway.run", "hello") + "\n")
        (cleared,) = failed(m.poll())
        assert cleared.clears
        m.close()

    def test_fifo_with_a_writer_is_not_read(self, tmp_path: Path) -> None:
        """Even with a writer keeping the FIFO open, nothing is read from it."""
        home = tmp_path / "home"
        m = monitor_for(home)
        m.poll()
        log = home / "logs" / "gateway.log"
        os.mkfifo(log)
        rd = os.open(log, os.O_RDONLY | os.O_NONBLOCK)
        wr = os.open(log, os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(
                wr,
                (log_line(WHEN, "ERROR", "x", "database disk image is malformed") + "\n").encode(),
            )
            found = m.poll()
            assert [s.kind for s in found if isinstance(s, Signal)] == ["watcher_failed"]
            assert os.read(rd, 4096)  # the bytes are still in the pipe: never consumed
        finally:
            os.close(wr)
            os.close(rd)
            m.close()


# ------------------------------------------------------------------ recovery files


def make_capture(
    home: Path, stamp: str, pid: int, wal_bytes: int, *, partial: bool = False
) -> Path:
    """A retired-WAL capture laid out as hermes_state_dbfile.capture_retired_wal_generation
    writes it: the WAL, the -shm, the main image and manifest.json (version 1)."""
    name = f"state.db.retired-wal-{stamp}-{pid}" + (".partial" if partial else "")
    d = home / name
    d.mkdir()
    (d / "state.db-wal").write_bytes(b"\x37\x7f\x06\x82" + bytes(wal_bytes - 4))
    (d / "state.db-shm").write_bytes(bytes(32768))
    main = (home / "state.db").read_bytes()
    (d / "state.db").write_bytes(main)
    if not partial:
        manifest = {
            "version": 1,
            "database": str(home / "state.db"),
            "trigger": "write_refused",
            "pid": pid,
            "captured_at": "2026-10-01T07:24:48Z",
            "python": "3.11.9",
            "sqlite": "3.46.1",
            "wal": {
                "identity": [2049, 1234],
                "file": "state.db-wal",
                "bytes": wal_bytes,
                "sha256": "0" * 64,
            },
            "shm": {
                "identity": [2049, 1235],
                "file": "state.db-shm",
                "bytes": 32768,
                "sha256": "0" * 64,
            },
            "path_generation_at_capture": {"-wal": [2049, 2000]},
            "note": "Frames in the captured WAL were committed by the retired generation.",
            "main": {
                "identity": [2049, 1000],
                "size": len(main),
                "header": {"valid": True},
                "mode": "copied",
                "file": "state.db",
                "bytes": len(main),
                "sha256": "0" * 64,
            },
        }
        (d / "manifest.json").write_text(json.dumps(manifest, sort_keys=True))
    return d


def recovery(found: Sequence[Found]) -> list[tuple[str, str, bool]]:
    return [
        (s.key, s.effective_severity, s.clears)
        for s in found
        if isinstance(s, Signal) and s.kind == "recovery_files"
    ]


class TestRecoveryFilesScan:
    def test_each_kind_is_listed_with_its_size(self, hermes_home: Path) -> None:
        """Each kind of recovery file Hermes leaves next to state.db (retired WAL captures, partial
        ones, the pending_messages spool, emergency backups) is listed with its size and manifest
        facts; another database's capture is not."""
        make_capture(hermes_home, "20261001-072448", 3624811, 100_000)
        make_capture(hermes_home, "20261002-080000", 42, 5000, partial=True)
        (hermes_home / "pending_messages").mkdir()
        (
            hermes_home / "pending_messages" / "pending-0f1e2d3c4b5a69788796a5b4c3d2e1f0.json"
        ).write_bytes(bytes(700))
        (hermes_home / "pending_messages" / "sub").mkdir()
        (hermes_home / "pending_messages" / "sub" / "b.json").write_bytes(bytes(300))
        bak = hermes_home / "state.db.pre-update-emergency-2026-09-25T05-03-31-664Z.bak"
        bak.write_bytes(bytes(4096))
        (hermes_home / "kanban.db.retired-wal-20261001-000000-1").mkdir()  # not state.db's
        kept = scan(hermes_home / "state.db", hermes_home)
        main = (hermes_home / "state.db").stat().st_size
        by_name = {i.name: i for i in kept.items}
        assert sorted(by_name) == [
            "pending_messages",
            "state.db.pre-update-emergency-2026-09-25T05-03-31-664Z.bak",
            "state.db.retired-wal-20261001-072448-3624811",
            "state.db.retired-wal-20261002-080000-42.partial",
        ]
        cap = by_name["state.db.retired-wal-20261001-072448-3624811"]
        manifest_bytes = len((hermes_home / cap.name / "manifest.json").read_bytes())
        assert (cap.what, cap.bytes, cap.files) == (
            "retired_wal",
            100_000 + 32768 + main + manifest_bytes,
            4,
        )
        assert (cap.captured_at, cap.trigger, cap.pid, cap.main_mode, cap.problem) == (
            "2026-10-01T07:24:48Z",
            "write_refused",
            3624811,
            "copied",
            None,
        )
        partial = by_name["state.db.retired-wal-20261002-080000-42.partial"]
        assert (partial.partial, partial.problem, partial.files) == (True, None, 3)
        spool = by_name["pending_messages"]
        assert (spool.what, spool.bytes, spool.files) == ("pending_spool", 1000, 2)
        assert by_name[bak.name].bytes == 4096
        assert kept.total_bytes == sum(i.bytes for i in kept.items)

    def test_a_capture_without_manifest_says_so(self, hermes_home: Path) -> None:
        """A capture whose manifest.json is missing, or is not a regular file, is listed with that
        problem."""
        d = make_capture(hermes_home, "20261001-072448", 7, 1000)
        (d / "manifest.json").unlink()
        (item,) = scan(hermes_home / "state.db", hermes_home).items
        assert item.problem == "no manifest.json"
        (d / "manifest.json").mkdir()
        (item,) = scan(hermes_home / "state.db", hermes_home).items
        assert item.problem == "manifest.json is not a regular file"

    @needs_root
    def test_a_spool_this_user_cannot_list_says_so(self) -> None:
        """Hermes makes pending_messages/ 0700: listed by another uid, it says so."""
        base = Path(tempfile.mkdtemp(prefix="sw-spool-", dir="/tmp"))
        try:
            base.chmod(0o755)
            spool = base / "pending_messages"
            spool.mkdir(mode=0o700)
            (spool / "pending-0a.json").write_bytes(bytes(10))
            probe = (
                "import sys; from pathlib import Path; from statewarden.recovery_files import scan\n"
                "(i,) = scan(Path(sys.argv[1]) / 'state.db').items\n"
                "print(i.name, i.bytes, i.problem)\n"
            )
            said = what_python_prints(probe, str(base), prefix=as_uid(free_uid()))
            assert said == "pending_messages 0 cannot be listed: Permission denied"
        finally:
            shutil.rmtree(base, ignore_errors=True)

    def test_status_lists_them(self, hermes_home: Path, env: dict[str, str]) -> None:
        """statewardenctl status (no daemon) shows each with its size, and in --json."""
        make_capture(hermes_home, "20261001-072448", 3624811, 100_000)
        r = run_ctl("status", "--json", env=env)
        assert r.exit_code == 0, r.stderr
        (db,) = json.loads(r.stdout)["databases"]
        (item,) = db["recovery_files"]
        assert item["name"] == "state.db.retired-wal-20261001-072448-3624811"
        assert item["pid"] == 3624811
        assert db["recovery_files_bytes"] == item["bytes"]
        r = run_ctl("status", env=env)
        assert r.exit_code == 0, r.stderr
        assert "  recovery files  1, " in r.stdout
        assert (
            "state.db.retired-wal-20261001-072448-3624811  (retired WAL capture, 4 files, "
            "captured 2026-10-01T07:24:48Z, trigger write_refused, pid 3624811, main image "
            "copied)"
        ) in r.stdout


class TestRecoveryFilesWatch:
    def watcher(self, home: Path, **kw: Any) -> FileWatcher:
        kw.setdefault("recovery_scan_every_s", 10.0)
        return FileWatcher(target_for_db(home / "state.db"), **kw)

    def test_appearing_is_info_and_gone_clears(self, hermes_home: Path) -> None:
        """A recovery file appearing is an info signal at once, naming what is new; nothing new is
        no signal; when all are gone the signal is cleared."""
        w = self.watcher(hermes_home)
        assert recovery(w.poll(1000.0)) == []
        make_capture(hermes_home, "20261001-072448", 42, 1000)
        found = w.poll(1001.0)  # at once: a new name in the folder
        assert recovery(found) == [("present", "info", False)]
        (sig,) = [s for s in found if isinstance(s, Signal) and s.kind == "recovery_files"]
        assert sig.fields["new"] == ["state.db.retired-wal-20261001-072448-42"]
        assert "new: state.db.retired-wal-20261001-072448-42" in sig.summary
        assert recovery(w.poll(1002.0)) == []  # nothing new
        bak = hermes_home / "state.db.pre-update-emergency-2026-09-25T05-03-31-664Z.bak"
        bak.write_bytes(b"x")
        assert recovery(w.poll(1003.0)) == [("present", "info", False)]
        shutil.rmtree(hermes_home / "state.db.retired-wal-20261001-072448-42")
        bak.unlink()
        assert recovery(w.poll(1004.0)) == [("present", "info", True)]

    def test_present_at_start_is_reported(self, hermes_home: Path) -> None:
        """Unlike history, what is there at start is a condition: reported once."""
        make_capture(hermes_home, "20261001-072448", 42, 1000)
        w = self.watcher(hermes_home)
        assert recovery(w.poll(1000.0)) == [("present", "info", False)]
        assert recovery(w.poll(1100.0)) == []

    def test_over_the_limit_is_a_warning(self, hermes_home: Path) -> None:
        """Recovery files over recovery_warn_bytes, sized at the interval, are a size warning,
        cleared when they fall under it again."""
        w = self.watcher(hermes_home, recovery_warn_bytes=200_000)
        w.poll(1000.0)
        spool = hermes_home / "pending_messages"
        spool.mkdir()
        (spool / "pending-1a.json").write_bytes(bytes(150_000))
        assert recovery(w.poll(1001.0)) == [("present", "info", False)]
        (spool / "pending-2b.json").write_bytes(bytes(100_000))
        assert recovery(w.poll(1005.0)) == []  # the spool's content: sized at the interval
        assert recovery(w.poll(1011.0)) == [("size", "warning", False)]
        assert recovery(w.poll(1030.0)) == []
        (spool / "pending-2b.json").unlink()
        assert recovery(w.poll(1050.0)) == [("size", "warning", True)]

    def test_growing_scan_after_scan_is_a_warning(self, hermes_home: Path) -> None:
        """Under the limit but growing at each of the last N scans: warned; it clears
        once a scan sees no growth."""
        w = self.watcher(hermes_home, recovery_growth_scans=3)
        w.poll(1000.0)
        spool = hermes_home / "pending_messages"
        spool.mkdir()
        now = 1000.0
        seen = []
        for n in range(4):
            (spool / f"pending-{n:032x}.json").write_bytes(bytes(1000))
            now += 10
            seen += recovery(w.poll(now))
        assert seen == [("present", "info", False), ("size", "warning", False)]
        assert recovery(w.poll(now + 10)) == [("size", "warning", True)]


class TestRecoveryFilesDaemon:
    def test_daemon_raises_and_resolves_them(self, tmp_path: Path, hermes_home: Path) -> None:
        """The daemon as a subprocess on a real Hermes home: a capture appearing is an info
        incident, the spool growing past the configured limit a warning; status shows
        them; removing them resolves both."""
        env = daemon_env(tmp_path, hermes_home)
        cfg = Path(env["XDG_CONFIG_HOME"]) / "statewarden" / "config.yaml"
        cfg.parent.mkdir(parents=True, exist_ok=True)
        cfg.write_text("watch:\n  recovery_files_warn_bytes: 1MB\n")
        d = DaemonProc(env)
        try:
            d.wait_for_line("statewarden ready")
            assert d.incidents_of("recovery_files") == []
            make_capture(hermes_home, "20261001-072448", 3624811, 100_000)
            (inc,) = eventually(lambda: d.incidents_of("recovery_files"), what="present")
            assert (inc["key"], inc["severity"]) == ("present", "info")
            assert "state.db.retired-wal-20261001-072448-3624811" in inc["summary"]
            spool = hermes_home / "pending_messages"
            spool.mkdir()
            (spool / "pending-9c4f.json").write_bytes(bytes(2_000_000))
            size = eventually(
                lambda: [i for i in d.incidents_of("recovery_files") if i["key"] == "size"],
                what="size warning",
            )
            assert size[0]["severity"] == "warning"
            (db,) = d.ctl("status")["databases"]
            assert sorted(i["name"] for i in db["recovery_files"]) == [
                "pending_messages",
                "state.db.retired-wal-20261001-072448-3624811",
            ]
            human = run_ctl("status", env=env)
            assert human.exit_code == 0, human.stderr
            assert "  recovery files  2, " in human.stdout
            assert "  pending_messages  (pending messages spool, 1 files)" in human.stdout
            shutil.rmtree(spool)
            shutil.rmtree(hermes_home / "state.db.retired-wal-20261001-072448-3624811")
            eventually(lambda: not d.incidents_of("recovery_files"), what="resolved")
        finally:
            assert d.stop() == 0


# ------------------------------------------------------------------ no inotify left

# Opens inotify instances until the kernel refuses, says how many and why, and holds them
# until its stdin closes. Run as a uid of its own, it uses up that uid's instances
# (fs.inotify.max_user_instances counts per user) and nobody else's: the sysctl is never
# touched, so no other test or user on the machine is affected.
EXHAUST_INOTIFY = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while libc.inotify_init1(os.O_CLOEXEC) >= 0:
    n += 1
print(n, ctypes.get_errno(), flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def inotify_used_up(uid: int) -> Iterator[int]:
    """Every inotify instance of ``uid`` taken, until the block ends."""
    p = subprocess.Popen(
        [*as_uid(uid), sys.executable, "-c", EXHAUST_INOTIFY],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None
        n, err = map(int, p.stdout.readline().split())
        # The per-user instance limit, not the descriptor limit, stopped it.
        assert (n, err) == (inotify_limit("max_user_instances"), errno.EMFILE)
        yield n
    finally:
        assert p.stdin is not None
        assert p.stdout is not None
        p.stdin.close()
        p.wait(timeout=30)
        p.stdout.close()


@needs_root
class TestNoInotify:
    def test_open_watch_without_instances_says_which_limit(self) -> None:
        """OpenWatch as a uid whose instances are used up: unusable, reports "maybe
        opened" (every process is checked), and names the sysctl to raise."""
        uid = free_uid()
        probe = (
            "from statewarden.holders.opens import OpenWatch\n"
            "w = OpenWatch()\n"
            "print(w.poll(), w.degraded)\n"
        )
        limit = inotify_limit("max_user_instances")
        assert limit is not None
        with inotify_used_up(uid):
            said = what_python_prints(probe, prefix=as_uid(uid))
        assert said == (
            "True this user's inotify instances are used up (fs.inotify.max_user_instances="
            f"{limit}) (inotify_init1: Too many open files); raise it: sudo sysctl "
            f"fs.inotify.max_user_instances={max(1024, 2 * limit)}"
        )

    def test_daemon_polls_detects_and_recovers(self) -> None:
        """The daemon as a uid whose inotify instances are used up: it starts (it exited
        with "unexpected OSError: [Errno 24]"), raises watcher_degraded for file events and
        the holder open watch with the sysctl to raise, still turns a log line into an
        incident, and resolves both once instances are free again."""
        uid = free_uid()
        base = Path(tempfile.mkdtemp(prefix="sw-inotify-", dir="/tmp"))
        try:
            base.chmod(0o755)
            home = make_home(base / "hermes", TINY)
            for sub in ("state", "run", "cfg/statewarden"):
                (base / sub).mkdir(mode=0o700, parents=True)
            (base / "cfg" / "statewarden" / "config.yaml").write_text("watch: {journal: false}\n")
            subprocess.run(["chown", "-R", f"{uid}:{uid}", str(base)], check=True)
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(base),
                "HERMES_HOME": str(home),
                "XDG_STATE_HOME": str(base / "state"),
                "XDG_RUNTIME_DIR": str(base / "run"),
                "XDG_CONFIG_HOME": str(base / "cfg"),
                "PYTHONPATH": str(REPO),
            }

            def incidents(kind: str) -> list[dict[str, Any]]:
                r = ctl_process("incidents", "--json", env=env, prefix=as_uid(uid))
                assert r.returncode == 0, r.stderr
                return [i for i in json.loads(r.stdout)["incidents"] if i["kind"] == kind]

            limit = inotify_limit("max_user_instances")
            assert limit is not None
            with inotify_used_up(uid):
                d = DaemonProc(env, prefix=as_uid(uid))
                try:
                    d.wait_for_line("statewarden ready")

                    def both() -> list[dict[str, Any]] | None:
                        found = incidents("watcher_degraded")
                        return found if len(found) == 2 else None

                    degraded = eventually(both, what="two watcher_degraded incidents")
                    by_key = {i["key"]: i for i in degraded}
                    assert sorted(by_key) == ["file_events", "holder_opens"]
                    for inc in degraded:
                        assert inc["severity"] == "warning"
                        assert f"(fs.inotify.max_user_instances={limit})" in inc["summary"]
                        assert (
                            f"sudo sysctl fs.inotify.max_user_instances={max(1024, 2 * limit)}"
                            in inc["summary"]
                        )
                    assert by_key["file_events"]["summary"].startswith(
                        "file events: this user's inotify instances are used up"
                    )
                    assert by_key["holder_opens"]["summary"].startswith(
                        "holder open watch: this user's inotify instances are used up"
                    )
                    # Still detecting: a log line written now becomes an incident.
                    log_a_save_failure(
                        home / "logs" / "agent.log",
                        "state.db save failed: database disk image is malformed",
                    )
                    (corrupt,) = eventually(lambda: incidents("corruption"), what="corruption")
                    assert "database disk image is malformed" in corrupt["summary"]
                    status = ctl_process("status", "--json", env=env, prefix=as_uid(uid))
                    inotify = json.loads(status.stdout)["inotify"]
                    assert inotify["file_events"].startswith("file events: this user's inotify")
                except BaseException:
                    d.stop()
                    raise
            # Instances free again: both resolve by themselves.
            try:
                eventually(lambda: not incidents("watcher_degraded"), what="resolved")
            finally:
                assert d.stop() == 0
        finally:
            shutil.rmtree(base, ignore_errors=True)


def log_a_save_failure(log: Path, message: str) -> None:
    """Append Hermes' ERROR line ``message`` from gateway.session to ``log``, and an INFO
    line after it (the line that tells the tail the ERROR line is whole)."""
    with open(log, "a", encoding="utf-8") as f:
        f.write(log_line(dt.datetime.now(), "ERROR", "gateway.session", message) + "\n")
        f.write(log_line(dt.datetime.now(), "INFO", "gateway.run", "x") + "\n")


# A user namespace of its own has its own inotify limits (/proc/sys/user/max_inotify_*,
# set by its root): the limit is lowered there only, for the daemon alone.
def in_userns_with_watches(n: int) -> tuple[str, ...]:
    return (
        "unshare",
        "--user",
        "--map-root-user",
        "sh",
        "-c",
        f'echo {n} > /proc/sys/user/max_inotify_watches && exec "$@"',
        "sh",
    )


@needs_root
class TestNoInotifyWatches:
    def test_watches_used_up_then_raised(self, env: dict[str, str], hermes_home: Path) -> None:
        """The daemon with no inotify watch left for its user (ENOSPC): it starts, names
        max_user_watches and the sysctl to raise for file events and the holder open watch,
        still detects; once the limit is raised (in its namespace) both resolve."""
        d = DaemonProc(env, prefix=in_userns_with_watches(0))
        try:
            d.wait_for_line("statewarden ready")

            def file_events() -> list[dict[str, Any]]:
                return [i for i in d.incidents_of("watcher_degraded") if i["key"] == "file_events"]

            (inc,) = eventually(file_events, what="file_events degraded")
            assert (
                "this user's inotify watches are used up (fs.inotify.max_user_watches="
                in (inc["summary"])
            )
            assert "sudo sysctl fs.inotify.max_user_watches=" in inc["summary"]
            log_a_save_failure(
                hermes_home / "logs" / "errors.log",
                "state.db routing save failed: database disk image is malformed",
            )
            eventually(lambda: d.incidents_of("corruption"), what="corruption while degraded")
            raise_it = subprocess.run(
                [
                    "nsenter",
                    "-t",
                    str(d.proc.pid),
                    "-U",
                    "--preserve-credentials",
                    "sh",
                    "-c",
                    "echo 100000 > /proc/sys/user/max_inotify_watches",
                ],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert raise_it.returncode == 0, raise_it.stderr
            eventually(lambda: not d.incidents_of("watcher_degraded"), what="both back")
        finally:
            assert d.stop() == 0


class TestInotifyMessages:
    def test_emfile_at_the_descriptor_limit_names_that_limit(self) -> None:
        """EMFILE from a process out of descriptors is not the user's instance limit."""
        probe = (
            "import errno, os, resource\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\n"
            "fds = []\n"
            "try:\n"
            "    while True: fds.append(os.open('/dev/null', os.O_RDONLY))\n"
            "except OSError: pass\n"
            "os.close(fds.pop())\n"
            "from statewarden.inotify import unavailable\n"
            "print(unavailable(errno.EMFILE, 'inotify_init1'))\n"
        )
        assert what_python_prints(probe) == (
            "this process has no file descriptors left (RLIMIT_NOFILE) (inotify_init1)"
        )

    def test_enospc_names_the_watch_limit(self) -> None:
        """ENOSPC from inotify says the user's watches are used up, with the current
        max_user_watches and the sysctl that raises it."""
        limit = inotify_limit("max_user_watches")
        assert limit is not None
        assert unavailable(errno.ENOSPC) == (
            f"this user's inotify watches are used up (fs.inotify.max_user_watches={limit}); "
            f"raise it: sudo sysctl fs.inotify.max_user_watches={max(524288, 2 * limit)}"
        )
