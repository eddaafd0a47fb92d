"""statewarden under attack, on real parts: a second local user (uid 65534 through
``setpriv``), a small tmpfs in a private mount namespace, a real FIFO, a real
``ulimit -n``, a real journald in both storage modes, a real pipe closed early.

Each test reproduces one fault that once broke statewarden and pins what it does now
(README, "Reliability").
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lab.hermes_fixtures import TINY, log_line, make_home
from statewarden.atomic import write_atomic
from statewarden.cli.ctl import main as ctl
from statewarden.daemon.control import ControlServer
from statewarden.incidents.book import IncidentBook
from statewarden.incidents.signals import Signal
from statewarden.incidents.timeline import Timeline
from statewarden.watch.logtail import LogTailer
from tests.support.cli import ctl_process
from tests.support.daemon import DaemonProc, daemon_env
from tests.support.privileges import needs_root
from tests.support.waiting import wait_for as eventually

NOBODY = 65534
AS_NOBODY = ("setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups")
# Root without the DAC override: file modes bind it as they bind a normal user.
NO_DAC = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")
SECRET_TOKEN = "123456789:AAHfakefakefakefakefakefakefake0123"
SECRET_KEY = "sk-proj-ABCDEFGHIJKLMNOPQRSTUV0123"


def run_ctl(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(ctl, list(args))
    return r.exit_code, r.stdout, r.stderr


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def corruption_line(text: str = "database disk image is malformed") -> str:
    return log_line(dt.datetime.now(), "ERROR", "gateway.session", f"state.db save failed: {text}")


def daemon_run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``statewarden run`` (plain log lines) with exactly ``env``: for a start that must
    be refused, so it is ended after 60 s."""
    return subprocess.run(
        [sys.executable, "-m", "statewarden.cli.daemon_cmd", "run", "--log-format", "plain"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def source_and_shared_folder(open_base: Path, mode: int) -> tuple[Path, str, Path]:
    """A Hermes state.db in ``open_base``, its digest, and a folder ``shared`` of ``mode``
    beside it where another user can plant names."""
    source = make_home(open_base / "hermes", TINY) / "state.db"
    shared = open_base / "shared"
    shared.mkdir()
    shared.chmod(mode)
    return source, sha(source), shared


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A folder under /tmp that uid 65534 can reach (pytest's tmp_path is root-only)."""
    base = Path(tempfile.mkdtemp(prefix="sw-hostile-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ item 1: redirected writes


@needs_root
class TestPlantedNames:
    def test_report_tmp_symlink_to_the_source_cannot_overwrite_it(self, open_base: Path) -> None:
        """Another user plants ``R.tmp`` -> the source in a shared folder: the source
        keeps every byte, the report is a new regular file, the planted link is untouched."""
        # writable by everyone, sticky like /tmp (without it: refused)
        source, before, shared = source_and_shared_folder(open_base, 0o1777)
        report = shared / "report.json"
        planted = shared / "report.json.tmp"
        subprocess.run([*AS_NOBODY, "ln", "-s", str(source), str(planted)], check=True)
        code, _out, err = run_ctl(
            "recover",
            "--source",
            str(source),
            "--output",
            str(shared / "new.db"),
            "--report",
            str(report),
            "--json",
        )
        assert code == 0, err
        assert sha(source) == before
        assert stat.S_ISREG(os.lstat(report).st_mode)
        assert json.loads(report.read_text())["verified"] is True
        assert os.readlink(planted) == str(source)
        assert stat.S_IMODE(os.stat(report).st_mode) == 0o600

    def test_report_name_planted_as_symlink_is_refused(self, open_base: Path) -> None:
        """The report name itself planted as a symlink to the source: refused (exit 2)
        before any work; the source unchanged."""
        source, before, shared = source_and_shared_folder(open_base, 0o777)
        report = shared / "report.json"
        subprocess.run([*AS_NOBODY, "ln", "-s", str(source), str(report)], check=True)
        code, _out, err = run_ctl(
            "recover",
            "--source",
            str(source),
            "--output",
            str(shared / "new.db"),
            "--report",
            str(report),
        )
        assert code == 2
        assert "already exists; refusing to overwrite it" in err
        assert sha(source) == before
        assert not (shared / "new.db").exists()

    def test_state_file_temporary_names_cannot_be_planted(self, tmp_path: Path) -> None:
        """A symlink planted at the old fixed ``<name>.tmp`` is never written through:
        the state file is replaced, the link target keeps its bytes."""
        victim = tmp_path / "victim"
        victim.write_text("precious")
        state = tmp_path / "state"
        state.mkdir(mode=0o700)
        (state / "incidents.json.tmp").symlink_to(victim)
        write_atomic(state / "incidents.json", "{}")
        assert victim.read_text() == "precious"
        assert (state / "incidents.json").read_text() == "{}"
        assert stat.S_IMODE(os.stat(state / "incidents.json").st_mode) == 0o600

    def test_timeline_symlink_planted_is_not_followed(self, tmp_path: Path) -> None:
        """A timeline file replaced by a symlink to a user file: the append fails (kept
        in memory, reported), the user file keeps its bytes."""
        victim = tmp_path / "victim"
        victim.write_text("precious")
        tl = Timeline(tmp_path / "timeline")
        tl.add("/db", "note", "first")
        path = tl.path_for("/db")
        path.unlink()
        path.symlink_to(victim)
        tl.add("/db", "note", "second")
        assert victim.read_text() == "precious"
        assert tl.write_error is not None


# ------------------------------------------------------------------ item 10: foreign folders


@needs_root
class TestForeignFolders:
    def test_state_dir_owned_by_another_uid_is_refused(self, tmp_path: Path) -> None:
        """A state folder owned by uid 65534: `statewarden run` exits 2 with one line."""
        home = make_home(tmp_path / "hermes", TINY)
        env = daemon_env(tmp_path, home)
        sdir = Path(env["XDG_STATE_HOME"]) / "statewarden"
        sdir.mkdir(parents=True, mode=0o700)
        os.chown(sdir, NOBODY, NOBODY)
        r = daemon_run(env)
        assert r.returncode == 2
        assert f"{sdir}: owned by uid {NOBODY}, not by you (uid 0)" in r.stderr
        assert "Traceback" not in r.stderr
        assert os.listdir(sdir) == []

    def test_state_dir_writable_by_group_is_refused(self, tmp_path: Path) -> None:
        """A state folder with mode 0770: refused (exit 2), nothing written in it."""
        home = make_home(tmp_path / "hermes", TINY)
        env = daemon_env(tmp_path, home)
        sdir = Path(env["XDG_STATE_HOME"]) / "statewarden"
        sdir.mkdir(parents=True)
        sdir.chmod(0o770)
        r = daemon_run(env)
        assert r.returncode == 2
        assert "writable by its group (mode 0770)" in r.stderr
        assert os.listdir(sdir) == []


# ------------------------------------------------------------------ item 3: two daemons


class TestOneDaemon:
    def test_second_daemon_on_the_same_state_dir_exits_5(
        self, daemon: DaemonProc, env: dict[str, str]
    ) -> None:
        """A second `statewarden run` on the same state folder exits 5 with one line
        naming the first one's pid; the first keeps serving."""
        r = daemon_run(env)
        assert r.returncode == 5
        err = [x for x in r.stderr.splitlines() if "error" in x]
        assert len(err) == 1
        assert f"another statewarden daemon (pid {daemon.proc.pid}) is already running" in err[0]
        assert daemon.ctl_raw("status")["daemon"]["pid"] == daemon.proc.pid

    def test_lock_dies_with_a_killed_daemon(self, env: dict[str, str]) -> None:
        """kill -9 of the first daemon frees the state folder at once for the next."""
        d = DaemonProc(env)
        d.wait_for_line("statewarden ready")
        d.stop(signal.SIGKILL)
        d2 = DaemonProc(env)
        try:
            d2.wait_for_line("statewarden ready")
        finally:
            assert d2.stop() == 0


# ------------------------------------------------------------------ item 5: hostile configs


class TestHostileConfig:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("a: &a [*a]\n", "an alias refers to a value that contains it (recursive alias)"),
            ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
            ("a: " + "[" * 40 + "]" * 40 + "\n", "nested more than 32 levels deep"),
            (
                "a: &a [x,x,x,x,x,x,x,x,x,x]\n"
                + "".join(
                    f"{n}: &{n} [{','.join(['*' + p] * 10)}]\n"
                    for p, n in zip("abcdefgh", "bcdefghi", strict=True)
                ),
                "expands to more than 100000 values (aliases repeat too much)",
            ),
        ],
        ids=["recursive-alias", "deep-nesting", "nesting-over-limit", "billion-laughs"],
    )
    def test_bounded_yaml(self, tmp_path: Path, text: str, expected: str) -> None:
        """Recursive aliases, deep nesting and alias bombs: one line, exit 2, at once."""
        f = tmp_path / "config.yaml"
        f.write_text(text)
        code, out, err = run_ctl("config", "check", "--config", str(f))
        assert code == 2
        assert out == ""
        assert expected in err
        assert len(err.splitlines()) == 1

    def test_fifo_and_device_are_refused_without_blocking(self, tmp_path: Path) -> None:
        """A FIFO (nobody writing) and /dev/zero as the config: refused, never read."""
        fifo = tmp_path / "config.fifo"
        os.mkfifo(fifo)
        for path in (fifo, Path("/dev/zero")):
            code, _out, err = run_ctl("config", "check", "--config", str(path))
            assert code == 2
            assert (
                err == f"statewardenctl: error: {path}: not a regular file, expected a YAML file\n"
            )

    def test_oversized_file_is_refused(self, tmp_path: Path) -> None:
        """A 2 MiB config (comments) is refused by its size."""
        f = tmp_path / "config.yaml"
        f.write_text("#" * (2 << 20) + "\n{}\n")
        code, _out, err = run_ctl("config", "check", "--config", str(f))
        assert code == 2
        assert "too large" in err

    def test_sighup_with_a_fifo_config_keeps_the_daemon(
        self, tmp_path: Path, env: dict[str, str]
    ) -> None:
        """SIGHUP after the config became a FIFO: reload fails with one line, the
        running config is kept and the daemon still answers."""
        config = tmp_path / "config.yaml"
        config.write_text("{}\n")
        d = DaemonProc(env, "--config", str(config))
        try:
            d.wait_for_line("statewarden ready")
            config.unlink()
            os.mkfifo(config)
            d.proc.send_signal(signal.SIGHUP)
            line = d.wait_for_line("config reload failed")
            assert "not a regular file" in line
            assert d.ctl_raw("status")["daemon"]["pid"] == d.proc.pid
        finally:
            assert d.stop() == 0

    def test_reload_changing_paths_says_it_needs_a_restart(
        self, tmp_path: Path, env: dict[str, str]
    ) -> None:
        """A reload that changes paths.state_dir says it takes effect after a restart;
        the daemon keeps its state where it was."""
        config = tmp_path / "config.yaml"
        config.write_text("{}\n")
        d = DaemonProc(env, "--config", str(config))
        try:
            d.wait_for_line("statewarden ready")
            config.write_text(f"paths:\n  state_dir: {tmp_path / 'elsewhere'}\n")
            d.proc.send_signal(signal.SIGHUP)
            d.wait_for_line("paths.* changed; that takes effect after a restart")
            d.wait_for_line("config reloaded")
            assert not (tmp_path / "elsewhere").exists()
        finally:
            assert d.stop() == 0


# ------------------------------------------------------------------ items 6 and 13: the socket


class TestControlLimits:
    def _server(self, tmp_path: Path, **kw: Any) -> ControlServer:
        async def handler(req: dict[str, Any]) -> Any:
            return {"echo": req["cmd"]}

        return ControlServer(tmp_path / "run" / "control.sock", handler, **kw)

    def _serve(self, server: ControlServer, client: Any) -> Any:
        import asyncio

        async def main() -> Any:
            await server.start()
            try:
                return await asyncio.to_thread(client)
            finally:
                await server.close()

        return asyncio.run(main())

    @staticmethod
    def _connect(path: Path) -> socket.socket:
        def attempt() -> socket.socket | None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(30)
            try:
                s.connect(str(path))
            except BlockingIOError:  # the listen backlog is full for a moment
                s.close()
                return None
            return s

        return eventually(attempt, what="connected")

    @staticmethod
    def _line(s: socket.socket) -> dict[str, Any]:
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return dict(json.loads(buf)) if buf else {}

    def test_deeply_nested_json_is_an_error_reply(self, tmp_path: Path) -> None:
        """100,000 nested brackets: an error reply, no traceback, the connection usable."""
        server = self._server(tmp_path)

        def client() -> tuple[dict[str, Any], dict[str, Any]]:
            with self._connect(server.path) as s:
                s.sendall(b"[" * 60_000 + b"\n")
                first = self._line(s)
                s.sendall(b'{"cmd": "ping"}\n')
                return first, self._line(s)

        first, second = self._serve(server, client)
        assert first == {"ok": False, "error": "request is nested too deeply"}
        assert second == {"ok": True, "result": {"echo": "ping"}}

    def test_connections_over_the_cap_are_refused(self, tmp_path: Path) -> None:
        """With 4 connections each in the middle of a request (cap 4), a fifth gets a
        one-line refusal; once they close, requests work again."""
        server = self._server(tmp_path, max_connections=4)

        def client() -> tuple[dict[str, Any], dict[str, Any]]:
            held = [self._connect(server.path) for _ in range(4)]
            for s in held:  # each is served, and its next request is under way (one read)
                s.sendall(b'{"cmd": "x"}\n{"cmd": ')
                assert self._line(s)["ok"] is True
            with self._connect(server.path) as extra:
                refused = self._line(extra)
            for s in held:
                s.close()

            def answered() -> dict[str, Any] | None:
                with self._connect(server.path) as s:
                    s.sendall(b'{"cmd": "again"}\n')
                    reply = self._line(s)
                return reply if reply.get("ok") else None

            return refused, eventually(answered, what="served again")

        refused, again = self._serve(server, client)
        assert refused == {"ok": False, "error": "too many connections (at most 4); try again"}
        assert again["result"] == {"echo": "again"}

    def test_idle_connections_never_lock_the_others_out(self, tmp_path: Path) -> None:
        """10 idle connections (cap 4, the idle timeout a minute): every one of 10 requests
        that follow is served, each by closing the connection idle longest, which reads
        end-of-file; none is refused."""
        server = self._server(tmp_path, max_connections=4)

        def client() -> tuple[list[dict[str, Any]], list[bytes]]:
            idle = [self._connect(server.path) for _ in range(10)]
            replies = []
            for i in range(10):
                with self._connect(server.path) as s:
                    s.sendall(json.dumps({"cmd": f"n{i}"}).encode() + b"\n")
                    replies.append(self._line(s))
            ends = []
            for s in idle[:6]:  # the first ones were idle longest: closed for the others
                s.settimeout(5)
                ends.append(s.recv(10))
            for s in idle:
                s.close()
            return replies, ends

        replies, ends = self._serve(server, client)
        assert [r["result"] for r in replies] == [{"echo": f"n{i}"} for i in range(10)]
        assert ends == [b""] * 6
        assert server.evicted >= 6

    def test_idle_and_slow_connections_are_closed(self, tmp_path: Path) -> None:
        """A connection that sends nothing, and one that drips half a request, are closed
        by the daemon (the read returns end-of-file)."""
        server = self._server(tmp_path, idle_timeout_s=0.2, request_timeout_s=0.2)

        def client() -> tuple[bytes, bytes]:
            with self._connect(server.path) as idle, self._connect(server.path) as slow:
                slow.sendall(b'{"cmd": ')
                return idle.recv(10), slow.recv(10)

        assert self._serve(server, client) == (b"", b"")

    @needs_root
    def test_idle_flood_under_a_real_ulimit(self, env: dict[str, str], hermes_home: Path) -> None:
        """Under `ulimit -n 256`, 400 idle connections: the excess is refused, the daemon
        keeps detecting (a corruption line opens an incident) and answers once they go."""
        d = DaemonProc(env, prefix=("prlimit", "--nofile=256:256"))
        socks: list[socket.socket] = []
        try:
            d.wait_for_line("statewarden ready")
            path = Path(env["XDG_RUNTIME_DIR"]) / "statewarden" / "control.sock"
            for _ in range(400):
                socks.append(self._connect(path))
            with (hermes_home / "logs" / "agent.log").open("a") as f:
                f.write(corruption_line() + "\n")
            d.wait_for_line("incident opened")
            for s in socks:
                s.close()
            socks.clear()
            (inc,) = eventually(lambda: d.incidents_of("corruption"), what="incident listed")
            assert inc["severity"] == "critical"
            bad = [x for x in d.lines if "out of system resource" in x or "Traceback" in x]
            assert not bad, d.lines
        finally:
            for s in socks:
                s.close()
            assert d.stop() == 0


# ------------------------------------------------------------------ item 11: incident bursts


class TestBurst:
    def test_burst_of_distinct_incidents_is_linear(self, tmp_path: Path) -> None:
        """3,000 distinct incidents flushed in batches of 100: the whole book is written
        a handful of times, not 3,000; every incident survives a reload."""
        book = IncidentBook(tmp_path / "incidents.json")
        for i in range(3000):
            book.record(Signal("corruption", "/db", f"distinct {i}", key=str(i), source="log:x"))
            if i % 100 == 99:
                book.flush()
        book.flush()
        assert book.compactions <= 5
        again = IncidentBook(tmp_path / "incidents.json")
        assert len(again.open_incidents()) == 3000

    def test_changes_survive_kill_before_compaction(self, tmp_path: Path) -> None:
        """An opening appended but never compacted (the process died) is read back."""
        book = IncidentBook(tmp_path / "incidents.json")
        book.record(Signal("corruption", "/db", "only in the change log", source="log:x"))
        again = IncidentBook(tmp_path / "incidents.json")
        (inc,) = again.open_incidents()
        assert inc.summary == "only in the change log"


# ------------------------------------------------------------------ item 12: NUL runs


class TestLongLines:
    def test_record_after_a_run_of_nuls_keeps_its_start(self, tmp_path: Path) -> None:
        """100 KB of NULs (a file extended over a hole) then a record on the same line:
        the record's text survives the long-line cut."""
        logs = tmp_path / "logs"
        logs.mkdir()
        tailer = LogTailer(logs, tmp_path / "offsets.json", start_at_end=False)
        line = corruption_line()
        (logs / "agent.log").write_bytes(b"\x00" * 100_000 + line.encode() + b"\n")
        records = tailer.poll() + tailer.flush()
        assert [r.text for r in records] == [line]


# ------------------------------------------------------------------ item 7: restarts


class TestRestart:
    def test_state_incident_cleared_while_down_resolves_after_restart(
        self, env: dict[str, str], hermes_home: Path
    ) -> None:
        """An open stale_holder incident from the last run, with no such holder now,
        resolves once the first holder scan after the restart finds none."""
        db = str(hermes_home / "state.db")
        sdir = Path(env["XDG_STATE_HOME"]) / "statewarden"
        sdir.mkdir(parents=True, mode=0o700)
        book = IncidentBook(sdir / "incidents.json")
        book.record(
            Signal(
                "stale_holder",
                db,
                "pid 4242 holds a deleted state.db-wal",
                key="4242",
                source="holders",
            )
        )
        book.record(Signal("stale_holder", db, "from a log line", key="log", source="log:x"))
        book.flush(force=True)
        d = DaemonProc(env)
        try:
            d.wait_for_line("statewarden ready")
            (left,) = eventually(
                lambda: list(d.incidents_of("stale_holder")) or None, what="listing"
            )
            assert left["key"] == "log"  # a log-raised one waits for its quiet period
            shown = d.ctl_raw("incident", id=1)["incident"]
            assert shown["state"] == "resolved"
            assert "evaluated afresh after a restart" in shown["resolution"]
        finally:
            assert d.stop() == 0

    def test_log_raised_state_kind_resolves_when_quiet(self) -> None:
        """stale_holder raised from a log line resolves after the quiet period."""
        book = IncidentBook(None, quiet_resolve_s=60)
        book.record(Signal("stale_holder", "/db", "log said so", at=1000.0, source="log:a"))
        book.record(
            Signal("stale_holder", "/db", "scan said so", at=1000.0, key="1", source="holders")
        )
        resolved = book.tick(now=2000.0)
        assert [u.incident.source for u in resolved] == ["log:a"]


# ------------------------------------------------------------------ item 8: secrets


class TestSecrets:
    def test_secrets_never_stored_and_files_private(
        self, daemon: DaemonProc, env: dict[str, str], hermes_home: Path
    ) -> None:
        """A corruption line carrying a bot token and an api key: the incident on the
        socket, incidents.json and the timeline hold neither; files 0600, folders 0700."""
        text = f"malformed; retry with api_key={SECRET_KEY} via bot{SECRET_TOKEN}/send"
        line = corruption_line(f"database disk image is malformed ({text})")
        with (hermes_home / "logs" / "agent.log").open("a") as f:
            f.write(line + "\n")
        (inc,) = eventually(lambda: daemon.incidents_of("corruption"), what="incident")
        shown = json.dumps(daemon.ctl("incidents", "show", str(inc["id"])))
        sdir = Path(env["XDG_STATE_HOME"]) / "statewarden"
        daemon.stop()
        stored = [p for p in sdir.rglob("*") if p.is_file()]
        assert stored
        for blob in [shown, *(p.read_text(errors="replace") for p in stored)]:
            assert SECRET_KEY not in blob
            assert SECRET_TOKEN not in blob
        assert "***redacted***" in shown
        for p in [sdir, *sdir.rglob("*")]:
            mode = stat.S_IMODE(p.stat().st_mode)
            assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))
        run_dir = Path(env["XDG_RUNTIME_DIR"]) / "statewarden"
        assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700


# ------------------------------------------------------------------ item 13: smaller


@needs_root
class TestSmaller:
    def test_recover_into_read_only_folder_fails_first(self, tmp_path: Path) -> None:
        """--output in a folder that cannot be written: exit 2 at once, naming that
        folder, never an internal work path."""
        home = make_home(tmp_path / "hermes", TINY)
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        cmd = [
            *NO_DAC,
            sys.executable,
            "-m",
            "statewarden.cli.ctl",
            "recover",
            "--source",
            str(home / "state.db"),
            "--output",
            str(ro / "new.db"),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 2
        assert r.stderr == (
            f"statewardenctl: error: {ro}: cannot write there for --output: Permission denied\n"
        )

    def test_recover_report_folder_checked_before_work(self, tmp_path: Path) -> None:
        """--report in a read-only folder: refused before any work, no output left."""
        home = make_home(tmp_path / "hermes", TINY)
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        out = tmp_path / "new.db"
        cmd = [
            *NO_DAC,
            sys.executable,
            "-m",
            "statewarden.cli.ctl",
            "recover",
            "--source",
            str(home / "state.db"),
            "--output",
            str(out),
            "--report",
            str(ro / "r.json"),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 2
        assert f"{ro}: cannot write there for --report" in r.stderr
        assert not out.exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".statewarden-work-")]

    def test_status_into_a_closed_pipe_is_quiet(self, hermes_home: Path) -> None:
        """`statewardenctl status | <reader that already left>`: no traceback, no
        'unexpected' line; the exit code is 141 (as a SIGPIPE'd tool's)."""
        ctl_cmd = f"{sys.executable} -m statewarden.cli.ctl status"
        r = subprocess.run(
            ["bash", "-c", f'{ctl_cmd} | true; echo "rc=${{PIPESTATUS[0]}}" >&2'],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert r.stderr.strip().splitlines()[-1] == "rc=141"
        assert "BrokenPipe" not in r.stderr
        assert "unexpected" not in r.stderr


# ------------------------------------------------------------------ item 2: full disk


def _nsenter(pid: int, *cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nsenter", "-t", str(pid), "-m", *cmd],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@needs_root
class TestFullDisk:
    def test_full_state_disk_never_silences_an_incident(
        self, env: dict[str, str], hermes_home: Path
    ) -> None:
        """The state folder on a 256 KiB tmpfs (private mount namespace), filled up: a
        corruption line still opens its incident (announced from memory, listed on the
        socket), a state_unwritable incident says why; freed, the book is written."""
        sdir = Path(env["XDG_STATE_HOME"]) / "statewarden"
        sdir.mkdir(parents=True, mode=0o700)
        mount = 'mount -t tmpfs -o size=256k,mode=0700 tmpfs "$SW_STATE" && exec "$@"'
        d = DaemonProc(
            {**env, "SW_STATE": str(sdir)},
            prefix=("unshare", "-m", "--propagation", "private", "sh", "-c", mount, "sh"),
        )
        try:
            d.wait_for_line("statewarden ready")
            _nsenter(d.proc.pid, "dd", "if=/dev/zero", f"of={sdir}/filler", "bs=4k")
            # Full (this kernel says ENOSPC, some sandboxes EIO): nothing can be written.
            assert _nsenter(d.proc.pid, "sh", "-c", f"echo x > {sdir}/probe").returncode != 0
            with (hermes_home / "logs" / "agent.log").open("a") as f:
                f.write(corruption_line() + "\n")
            (inc,) = eventually(lambda: d.incidents_of("corruption"), what="corruption incident")
            (full,) = eventually(lambda: d.incidents_of("state_unwritable"), what="unwritable")
            assert f"cannot write its state in {sdir}" in full["summary"]
            d.wait_for_line("state_unwritable")
            # The two announcements come in either order: read on until the corruption's.
            while not [x for x in d.lines if "incident opened" in x and "corruption" in x]:
                d.wait_for_line("incident opened")
            _nsenter(d.proc.pid, "rm", "-f", f"{sdir}/filler")
            eventually(lambda: not d.incidents_of("state_unwritable"), what="unwritable resolved")
            book = _nsenter(d.proc.pid, "cat", f"{sdir}/incidents.json").stdout
            assert inc["id"] in [i["id"] for i in json.loads(book)["incidents"]]
        finally:
            assert d.stop() == 0

    def test_book_under_a_real_descriptor_limit(self, tmp_path: Path) -> None:
        """With no descriptor left (RLIMIT_NOFILE at the count in use), recording still
        works in memory and says why; with descriptors back, one flush writes it all."""
        script = f"""
import os, resource
from pathlib import Path
from statewarden.incidents.book import IncidentBook
from statewarden.incidents.signals import Signal
book = IncidentBook(Path({str(tmp_path / "incidents.json")!r}))
used = len(os.listdir("/proc/self/fd"))
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (used - 1, hard))
update = book.record(Signal("corruption", "/db", "while out of descriptors", source="log:x"))
print(update.change, book.write_error)
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
book.flush()
print(book.write_error)
"""
        r = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
        )
        assert r.returncode == 0, r.stderr
        first, second = r.stdout.splitlines()
        assert first.startswith("opened ")
        assert "Too many open files" in first
        assert second == "None"
        (inc,) = IncidentBook(tmp_path / "incidents.json").open_incidents()
        assert inc.summary == "while out of descriptors"


# ------------------------------------------------------------------ item 9: unreadable logs


@needs_root
class TestUnreadableLogs:
    def test_unreadable_logs_folder_is_an_incident_until_readable(
        self, env: dict[str, str], hermes_home: Path
    ) -> None:
        """chmod 000 on the logs folder (daemon without the DAC override): a
        watcher_failed incident per log with the remedy, shown in status; chmod back
        resolves them."""
        d = DaemonProc(env, prefix=NO_DAC)
        logs = hermes_home / "logs"
        try:
            d.wait_for_line("statewarden ready")
            logs.chmod(0)
            failed = eventually(
                lambda: [
                    i for i in d.incidents_of("watcher_failed") if i["key"] == "logs/agent.log"
                ],
                what="watcher_failed for agent.log",
            )
            assert "Permission denied" in failed[0]["summary"]
            assert "chmod u+rx" in failed[0]["summary"]
            (db,) = d.ctl_raw("status")["databases"]
            (logs_watcher,) = [w for w in db["watchers"] if w["watcher"] == "logs"]
            assert "agent.log" in logs_watcher["problems"]
            logs.chmod(0o755)
            eventually(lambda: not d.incidents_of("watcher_failed"), what="resolved")
        finally:
            logs.chmod(0o755)
            assert d.stop() == 0

    def test_unreadable_log_file_at_start(self, env: dict[str, str], hermes_home: Path) -> None:
        """agent.log mode 000 when the daemon starts: a watcher_failed incident, not silence."""
        log = hermes_home / "logs" / "agent.log"
        log.write_text(corruption_line() + "\n")
        log.chmod(0)
        d = DaemonProc(env, prefix=NO_DAC)
        try:
            d.wait_for_line("statewarden ready")
            (inc,) = eventually(lambda: d.incidents_of("watcher_failed"), what="watcher_failed")
            assert inc["key"] == "logs/agent.log"
        finally:
            assert d.stop() == 0


# ------------------------------------------------------------------ item 9: unreadable journal


@pytest.mark.systemd
class TestUnreadableJournal:
    def test_volatile_journal_is_an_incident_and_persistent_clears_it(
        self, open_base: Path
    ) -> None:
        """The daemon as uid 65534 against a real journald: with volatile storage only,
        journalctl reads nothing ("insufficient permissions") and a watcher_failed
        incident gives the remedy; once journald keeps persistent storage (group
        systemd-journal, 2755, flushed) the user's journal is followed and it resolves."""
        from tests.support.systemd_harness import unavailable_reason, user_systemd

        reason = unavailable_reason()
        if reason:
            pytest.skip(reason)
        home = make_home(open_base / "hermes", TINY)
        config = open_base / "config.yaml"
        config.write_text(f"targets:\n  - home: {home}\n    gateway_unit: hermes-gateway.service\n")
        for sub in ("state", "run", "cfg"):
            (open_base / sub).mkdir(mode=0o700)
        subprocess.run(["chown", "-R", f"{NOBODY}:{NOBODY}", str(open_base)], check=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(open_base),
            "HERMES_HOME": str(home),
            "XDG_STATE_HOME": str(open_base / "state"),
            "XDG_RUNTIME_DIR": str(open_base / "run"),
            "XDG_CONFIG_HOME": str(open_base / "cfg"),
        }
        with user_systemd(open_base / "manager") as manager:
            ns = ("nsenter", "-t", str(manager.manager_pid), "-m")

            def incidents() -> list[dict[str, Any]]:
                r = ctl_process("incidents", "--json", env=env, prefix=(*ns, *AS_NOBODY))
                assert r.returncode == 0, r.stderr
                return [i for i in json.loads(r.stdout)["incidents"] if i["key"] == "journal"]

            d = DaemonProc(env, "--config", str(config), prefix=(*ns, *AS_NOBODY))
            try:
                d.wait_for_line("statewarden ready")
                (inc,) = eventually(incidents, what="journal watcher_failed")
                assert inc["kind"] == "watcher_failed"
                assert "insufficient permissions" in inc["summary"]
                assert "persistent storage" in inc["summary"]
                assert "systemd-journal group" in inc["summary"]
                persistent = (
                    "chgrp systemd-journal /var/log/journal && chmod 2755 /var/log/journal"
                    " && journalctl --flush"
                )
                r = subprocess.run(
                    [*ns, "sh", "-c", persistent],
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
                assert r.returncode == 0, r.stderr
                eventually(lambda: not incidents(), timeout_s=120, what="resolved")
            finally:
                assert d.stop() == 0


class TestSecretsInConfig:
    def test_rejected_secret_is_not_echoed(self) -> None:
        """A secret-typed key given a wrong value: the error names the key, never the value."""
        from statewarden.config import Secret, _convert, _Ctx
        from statewarden.errors import ConfigError

        with pytest.raises(ConfigError) as caught:
            _convert(Secret, 123456789, ("alerts", "telegram", "token"), _Ctx("c.yaml", {}))
        assert "123456789" not in str(caught.value)
        assert "alerts.telegram.token" in str(caught.value)


@needs_root
class TestForeignRuntimeFolder:
    def test_runtime_dir_writable_by_others_gets_no_socket(
        self, env: dict[str, str], hermes_home: Path
    ) -> None:
        """A runtime folder with mode 0777: no socket is made there (the refusal is
        logged as one line); the daemon keeps watching."""
        rdir = Path(env["XDG_RUNTIME_DIR"]) / "statewarden"
        rdir.mkdir(parents=True)
        rdir.chmod(0o777)
        d = DaemonProc(env)
        try:
            line = d.wait_for_line("control socket unavailable")
            assert "writable by others (mode 0777)" in line
            d.wait_for_line("statewarden ready")
            assert not (rdir / "control.sock").exists()
        finally:
            assert d.stop() == 0
