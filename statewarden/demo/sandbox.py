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
an orphaned ``hermes serve --isolated`` running. :meth:`Sandbox.close` stops every
process started from ``bin/`` (found in ``/proc`` by its command line, so a
daemonised ``serve`` is stopped too) and removes the folder unless it is kept.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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
        self.procs["desktop"] = self._popen([str(self.bin / "hermes-desktop")], env, "desktop")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.serve_pidfile.exists():
            if self.procs["desktop"].poll() is not None or time.monotonic() > deadline:
                raise SandboxError("the desktop app look-alike did not start hermes serve")
            time.sleep(POLL_S)
        started += ["hermes-desktop, which keeps hermes serve --isolated running"]
        return started

    def _popen(self, argv: list[str], env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
        with open(self.run_dir / f"{name}.log", "ab") as log:
            return subprocess.Popen(
                argv,
                env=env,
                cwd=self.home,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )

    def _start(self, name: str, argv: list[str]) -> None:
        proc = self._popen(argv, self.env(), name)
        self.procs[name] = proc
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

    # -- cleaning up --------------------------------------------------------------

    def strays(self) -> list[int]:
        """Our processes (same uid) running a program from the sandbox's ``bin/``."""
        me, uid, marker = os.getpid(), os.geteuid(), os.fsencode(str(self.bin) + "/")
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                if entry.stat().st_uid != uid:
                    continue
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if any(a.startswith(marker) for a in argv):
                found.append(int(entry.name))
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
