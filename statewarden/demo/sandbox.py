"""The demo's sandbox: a temporary folder with a damaged Hermes home and its holders.

Everything the demo makes lives under one ``mkdtemp`` folder (mode 0700): the Hermes
home (``home/.hermes``, with ``HOME`` pointing at ``home``), statewarden's config,
state, runtime and cache folders (the ``XDG_*`` variables), ``TMPDIR``, and ``bin/``
with the look-alikes of ``hermes`` and the desktop app. Commands run with
:meth:`Sandbox.env`, which also points the D-Bus session bus at a socket that does not
exist, so no command can reach the user manager of the person running the demo.

The holders are plain processes, each in a session of its own (a Ctrl-C at the
terminal reaches the demo only, which then stops them): ``hermes gateway run``,
``hermes dashboard``, the user's ``hermes chat``, and ``hermes-desktop``, which keeps
an orphaned ``hermes serve --isolated`` running. The demo's steps run with
:meth:`Sandbox.run`: each command in a session of its own too, so an interrupt reaches
it and what it started (``check``'s helper processes) as a Ctrl-C would. Every process
is started with Ctrl-C, SIGTERM and SIGHUP held (:func:`interrupts_held`): one that
came between the fork and the ``Popen`` object left a child no one knew of, running on
after the clean-up. :meth:`Sandbox.close` stops every process started from ``bin/`` or
working in the sandbox (found in ``/proc`` by its command line or its working folder,
so a daemonised ``serve`` and a step's helpers are stopped too) and removes the folder
unless it is kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from statewarden.demo import desktop_lookalike, hermes_lookalike
from statewarden.demo.damage import duplicate_cell, point_cells_at_first
from statewarden.demo.database import write_database
from statewarden.errors import SandboxError

WRITE_EVERY_S = 0.5
READY_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0
POLL_S = 0.05
# Short settle and grace periods, so the demo's maintenance run takes seconds.
CONFIG = {
    "maintenance": {
        "settle": "1s",
        "stop_grace": "3s",
        "respawn_limit": 2,
        "settle_timeout": "20s",
    },
    "alerts": {"journald": {"enabled": False}},
    "logging": {"format": "plain", "level": "warning"},
}
HOLDERS = (("gateway", ("gateway", "run")), ("dashboard", ("dashboard",)), ("chat", ("chat",)))
# The signals that unwind the demo (``run._signals_unwind``: SIGTERM and SIGHUP as Ctrl-C).
UNWINDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """The unwinding signals held while a process is started, and raised (as
    ``KeyboardInterrupt``) once the block is done: so the ``Popen`` object of a process
    started exists, and is recorded, whenever an interrupt comes."""
    held: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        held.append(signum)

    old = {s: signal.signal(s, hold) for s in UNWINDING}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, signal.SIG_DFL if h is None else h)
        if held:
            raise KeyboardInterrupt(signal.Signals(held[0]).name)


@dataclass
class Damage:
    """What the demo broke, in the words ``check`` will use."""

    phantom_rowid: int
    phantom_leaf: int
    fts_leaf: int
    fts_pointers: int

    def to_json(self) -> dict[str, int]:
        return {
            "phantom_rowid": self.phantom_rowid,
            "phantom_leaf": self.phantom_leaf,
            "fts_leaf": self.fts_leaf,
            "fts_pointers": self.fts_pointers,
        }


class Sandbox:
    """A temporary Hermes home with a phantom row, FTS damage and four holders."""

    def __init__(self, parent: Path | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="statewarden-demo-", dir=parent))
        self.home = self.root / "home"
        self.hermes_home = self.home / ".hermes"
        self.db = self.hermes_home / "state.db"
        self.bin = self.root / "bin"
        self.run_dir = self.root / "run"
        self.serve_pidfile = self.run_dir / "serve.pid"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.damage: Damage | None = None

    # -- building ---------------------------------------------------------------

    def build(self) -> Damage:
        """The Hermes home with the shipped database, damaged while no process holds it."""
        for d in (
            self.hermes_home / "logs",
            self.bin,
            self.run_dir,
            self.root / "state",
            self.root / "config" / "statewarden",
            self.root / "cache",
            self.root / "tmp",
        ):
            d.mkdir(parents=True, exist_ok=True)
        (self.root / "runtime").mkdir(mode=0o700, exist_ok=True)
        (self.root / "config" / "statewarden" / "config.yaml").write_text(json.dumps(CONFIG))
        write_database(self.db)
        leaf, rowid = duplicate_cell(self.db, "sessions")
        fts_leaf, pointers = point_cells_at_first(self.db, "messages_fts_trigram_docsize")
        self.damage = Damage(rowid, leaf, fts_leaf, pointers)
        self._install(hermes_lookalike.__file__, "hermes")
        self._install(desktop_lookalike.__file__, "hermes-desktop")
        return self.damage

    def _install(self, source: str, name: str) -> None:
        exe = self.bin / name
        exe.write_text(f"#!{sys.executable}\n" + Path(source).read_text())
        exe.chmod(0o755)

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("STATEWARDEN_", "XDG_", "HERMES_", "DEMO_"))
        }
        env.update(
            {
                "HOME": str(self.home),
                "HERMES_HOME": str(self.hermes_home),
                "XDG_CONFIG_HOME": str(self.root / "config"),
                "XDG_STATE_HOME": str(self.root / "state"),
                "XDG_CACHE_HOME": str(self.root / "cache"),
                "XDG_RUNTIME_DIR": str(self.root / "runtime"),
                "TMPDIR": str(self.root / "tmp"),
                "DBUS_SESSION_BUS_ADDRESS": f"unix:path={self.root / 'runtime' / 'no-bus'}",
                "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
                "PYTHONDONTWRITEBYTECODE": "1",
                hermes_lookalike.WRITE_EVERY_ENV: str(WRITE_EVERY_S),
            }
        )
        return env

    def start_holders(self) -> list[str]:
        """Start the four holders; return their command lines as a user would type them."""
        started = []
        for name, args in HOLDERS:
            self._start(name, [str(self.bin / "hermes"), *args])
            started.append(" ".join(["hermes", *args]))
        env = {**self.env(), hermes_lookalike.PIDFILE_ENV: str(self.serve_pidfile)}
        self._popen([str(self.bin / "hermes-desktop")], env, "desktop")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.serve_pidfile.exists():
            if self.procs["desktop"].poll() is not None or time.monotonic() > deadline:
                raise SandboxError("the desktop app look-alike did not start hermes serve")
            time.sleep(POLL_S)
        started += ["hermes-desktop, which keeps hermes serve --isolated running"]
        return started

    def _popen(self, argv: list[str], env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
        """Start a holder in a session of its own, recorded in ``procs`` as ``name``."""
        with open(self.run_dir / f"{name}.log", "ab") as log, interrupts_held():
            proc = self.procs[name] = subprocess.Popen(
                argv,
                env=env,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        return proc

    def _start(self, name: str, argv: list[str]) -> None:
        proc = self._popen(argv, self.env(), name)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line != b"ready":
            raise SandboxError(f"{' '.join(argv[1:])} did not start: see {self.run_dir}/{name}.log")

    def stop_desktop_app(self) -> None:
        """What the user does when maintenance names the desktop app: close it."""
        proc = self.procs.get("desktop")
        if proc is not None:
            _stop([proc])
        for pid in self.strays():
            _signal(pid, signal.SIGTERM)
        _wait_gone(self.strays, STOP_GRACE_S)

    # -- the steps ------------------------------------------------------------------

    def run(self, args: list[str], timeout_s: float) -> tuple[int, str]:
        """``statewardenctl ARGS`` in the sandbox, in a session of its own: its exit code
        and output (stderr with stdout). Interrupted (or past ``timeout_s``), it and what
        it started are sent SIGINT, as a Ctrl-C at the terminal would, and SIGKILL
        after ``STOP_GRACE_S``; the interrupt then goes on."""
        proc = None
        try:
            with interrupts_held():
                proc = subprocess.Popen(
                    [sys.executable, "-m", "statewarden.cli.ctl", *args],
                    env=self.env(),
                    cwd=self.home,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
            output, _ = proc.communicate(timeout=timeout_s)
        except BaseException:
            if proc is not None:
                _stop_group(proc)
            raise
        return proc.returncode, output

    # -- cleaning up --------------------------------------------------------------

    def strays(self) -> list[int]:
        """Our processes (same uid) running a program from the sandbox's ``bin/``, or
        working in the sandbox with its environment (a step's command and its helpers,
        whatever they run; a shell of the user's that went into the folder is not one)."""
        me, uid, marker = os.getpid(), os.geteuid(), os.fsencode(str(self.bin) + "/")
        root, ours = str(self.root), os.fsencode(f"HERMES_HOME={self.hermes_home}")
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                if entry.stat().st_uid != uid:
                    continue
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                if any(a.startswith(marker) for a in argv):
                    found.append(int(entry.name))
                elif _under(os.readlink(f"/proc/{entry.name}/cwd"), root):
                    with open(f"/proc/{entry.name}/environ", "rb") as f:
                        if ours in f.read().split(b"\0"):
                            found.append(int(entry.name))
            except OSError:
                continue
        return found

    def close(self, *, keep: bool = False) -> None:
        """Stop every process the demo started (the respawner first); remove the folder
        unless ``keep``. Safe to call twice."""
        desktop = self.procs.pop("desktop", None)
        if desktop is not None:
            _stop([desktop])
        _stop(list(self.procs.values()))
        self.procs.clear()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.strays():
                _signal(pid, sig)
            if _wait_gone(self.strays, STOP_GRACE_S):
                break
        if not keep:
            if self.db.exists():
                self.db.chmod(0o644)  # a fence left by an interrupted run
            shutil.rmtree(self.root, ignore_errors=True)


def _under(cwd: str, root: str) -> bool:
    """``cwd`` (as ``/proc/<pid>/cwd`` reads, `` (deleted)`` after a removed folder) is
    ``root`` or a folder in it."""
    cwd = cwd.removesuffix(" (deleted)")
    return cwd == root or cwd.startswith(root + "/")


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """A step's command and its session: SIGINT, then SIGKILL past the grace."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=STOP_GRACE_S)
            break
        except subprocess.TimeoutExpired:
            continue
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_gone(find: Callable[[], list[int]], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while find():
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.stdout is not None:
            p.stdout.close()
