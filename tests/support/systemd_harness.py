"""A real, private ``systemd --user`` manager and journald, for tests run as root.

The recipe, verified on Debian 12 with systemd 252 and hybrid cgroups:

* ``unshare -m --propagation private``; inside: tmpfs on ``/run/systemd`` (plus
  ``/run/systemd/system``, without which the manager refuses to run), on ``/run/log``
  and on ``/var/log/journal``; ``systemd-journald`` started there as root.
* ``user.slice/user-U.slice/user@U.service`` made under **every** cgroup hierarchy and
  the manager's pid written into each ``cgroup.procs`` *before* it execs
  ``systemd --user``. Never the root cgroup: a manager started there moves every
  process of the machine, PID 1 included, into its ``init.scope``.
* A private ``XDG_RUNTIME_DIR`` (0700) and ``DBUS_SESSION_BUS_ADDRESS`` pointing at
  ``$XDG_RUNTIME_DIR/bus`` (``dbus.socket`` of dbus-user-session serves it).
* Ready when ``$XDG_RUNTIME_DIR/systemd/private`` exists,
  ``systemctl --user is-system-running --wait`` returns, and (after starting
  ``dbus.service``, unless the test wants a bus not activated yet)
  ``org.freedesktop.systemd1`` has an owner on the user bus; torn down with
  ``systemctl --user exit``, then journald is stopped and the cgroup folders removed.

The manager runs as root (uid 0): these tests need no second uid. A lock file makes
concurrent harnesses on one machine take turns, since they share the cgroup path.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.procs import alive
from tests.support.waiting import wait_for

CGROUP_ROOT = Path("/sys/fs/cgroup")
LOCK_PATH = Path("/run/lock/statewarden-systemd-harness.lock")
READY_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 30.0
HOW_TO_RUN = (
    "run as root on a machine with systemd installed (packaging/setup-dev.sh installs it),"
    " e.g. sudo .venv/bin/python -m pytest -m systemd"
)

_NS_SCRIPT = textwrap.dedent(
    """\
    set -eu
    mount -t tmpfs tmpfs /run/systemd
    mkdir -p /run/systemd/system
    mkdir -p /run/log /var/log/journal
    mount -t tmpfs tmpfs /run/log
    mount -t tmpfs tmpfs /var/log/journal
    /lib/systemd/systemd-journald &
    journald=$!
    echo $journald > "$HARNESS_DIR/journald.pid"
    for i in $(seq 1 400); do
        [ -S /run/systemd/journal/socket ] && break
        sleep 0.05
    done
    (
        for d in $HARNESS_CGROUPS; do echo "$BASHPID" > "$d/cgroup.procs"; done
        if [ "$HARNESS_UID" = 0 ]; then
            exec /usr/lib/systemd/systemd --user
        fi
        exec setpriv --reuid="$HARNESS_UID" --regid="$HARNESS_UID" --clear-groups \
            /usr/lib/systemd/systemd --user
    ) &
    echo $! > "$HARNESS_DIR/manager.pid"
    wait $! || true
    kill -TERM $journald
    wait $journald || true
    """
)


class HarnessUnavailable(Exception):
    """The private manager could not be started here; the reason says why."""


def cgroup_hierarchies() -> list[Path]:
    """The hierarchies a manager must be placed in: v1 ``systemd`` + ``unified``, or v2."""
    found = [
        CGROUP_ROOT / name
        for name in ("systemd", "unified")
        if (CGROUP_ROOT / name / "cgroup.procs").exists()
    ]
    if not found and (CGROUP_ROOT / "cgroup.procs").exists():
        found = [CGROUP_ROOT]
    return found


class UserSystemd:
    """A running private manager: its environment, unit folder, and helpers."""

    def __init__(self, base: Path, uid: int = 0, *, activate_bus: bool = True) -> None:
        self.base = base
        self.uid = uid
        self.activate_bus = activate_bus
        self.runtime_dir = base / "runtime"
        self.home = base / "home"
        self.unit_dir = self.home / ".config" / "systemd" / "user"
        self.bus_address = f"unix:path={self.runtime_dir / 'bus'}"
        self.cgroups = [
            h / "user.slice" / f"user-{uid}.slice" / f"user@{uid}.service"
            for h in cgroup_hierarchies()
        ]
        self._wrapper: subprocess.Popen[bytes] | None = None
        self._created: list[Path] = []

    # -- environment -------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DBUS_", "XDG_"))}
        env.update(
            HOME=str(self.home),
            XDG_RUNTIME_DIR=str(self.runtime_dir),
            XDG_CONFIG_HOME=str(self.home / ".config"),
            DBUS_SESSION_BUS_ADDRESS=self.bus_address,
            HARNESS_DIR=str(self.base),
            HARNESS_CGROUPS=" ".join(str(c) for c in self.cgroups),
            HARNESS_UID=str(self.uid),
        )
        return env

    def as_user(self, argv: list[str]) -> list[str]:
        """``argv`` run as the manager's uid (as is, when the manager runs as root)."""
        if self.uid == 0:
            return argv
        who = str(self.uid)
        return ["setpriv", f"--reuid={who}", f"--regid={who}", "--clear-groups", "--", *argv]

    @property
    def manager_pid(self) -> int:
        return int((self.base / "manager.pid").read_text())

    def _in_ns(
        self, argv: list[str], timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in the manager's mount namespace (systemctl, journalctl)."""
        return subprocess.run(
            ["nsenter", "-t", str(self.manager_pid), "-m", *argv],
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Any command in the manager's mount namespace (its journal, its /run/systemd)."""
        return self._in_ns(list(argv), timeout=READY_TIMEOUT_S)

    def systemctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._in_ns(self.as_user(["systemctl", "--user", *args]), timeout=READY_TIMEOUT_S)

    def journal(self, unit: str) -> str:
        """The manager's journal for ``unit`` (as root: ``_SYSTEMD_USER_UNIT``)."""
        self._in_ns(["journalctl", "--flush"], timeout=READY_TIMEOUT_S)
        return self._in_ns(
            ["journalctl", "--no-pager", "-o", "cat", f"_SYSTEMD_USER_UNIT={unit}"],
            timeout=READY_TIMEOUT_S,
        ).stdout

    def write_unit(self, name: str, text: str) -> Path:
        self.unit_dir.mkdir(parents=True, exist_ok=True)
        path = self.unit_dir / name
        path.write_text(text)
        return path

    def daemon_reload(self) -> None:
        r = self.systemctl("daemon-reload")
        if r.returncode:
            raise RuntimeError(f"daemon-reload failed: {r.stderr.strip()}")

    # -- life cycle ----------------------------------------------------------------

    def start(self) -> None:
        if not self.cgroups:
            raise HarnessUnavailable("no cgroup hierarchy found under /sys/fs/cgroup")
        self.runtime_dir.mkdir(parents=True, mode=0o700)
        self.runtime_dir.chmod(0o700)
        self.unit_dir.mkdir(parents=True)
        for cg in self.cgroups:
            for part in (cg.parent.parent, cg.parent, cg):
                if not part.exists():
                    part.mkdir()
                    self._created.append(part)
        if self.uid != 0:
            # The user's own folders and its manager's cgroup belong to the user; the
            # folders above them must let the user through.
            for top in (self.home, self.runtime_dir):
                for dirpath, _dirs, files in os.walk(top):
                    os.chown(dirpath, self.uid, self.uid)
                    for f in files:
                        os.chown(os.path.join(dirpath, f), self.uid, self.uid)
            self.base.chmod(0o755)
            for cg in self.cgroups:
                for dirpath, _dirs, files in os.walk(cg):
                    os.chown(dirpath, self.uid, self.uid)
                    for f in files:
                        with contextlib.suppress(OSError):
                            os.chown(os.path.join(dirpath, f), self.uid, self.uid)
        self._wrapper = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "bash", "-c", _NS_SCRIPT],
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        private = self.runtime_dir / "systemd" / "private"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not private.exists():
            if self._wrapper.poll() is not None:
                err = self._wrapper.stderr.read().decode() if self._wrapper.stderr else ""
                raise HarnessUnavailable(f"the manager exited early: {err.strip()[-300:]}")
            if time.monotonic() > deadline:
                raise HarnessUnavailable("the manager did not create systemd/private in time")
            time.sleep(0.05)
        # The socket file exists once bound, a moment before the manager listens on
        # it; systemctl then falls back to the user bus, not up yet either ("Failed
        # to connect to bus"). Ask again until the manager answers.
        while True:
            r = self.systemctl("is-system-running", "--wait")
            if r.stdout.strip() or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if r.stdout.strip() not in ("running", "degraded"):
            raise HarnessUnavailable(f"manager state {r.stdout.strip()!r}: {r.stderr.strip()}")
        if not self.activate_bus:
            return  # dbus.socket listens; dbus-daemon starts with the first client
        # The bus socket is up before dbus-daemon runs (socket activation), and the
        # manager takes its name on the bus only once dbus.service is active.
        r = self.systemctl("start", "dbus.service")
        if r.returncode:
            raise HarnessUnavailable(f"dbus.service did not start: {r.stderr.strip()}")
        while not self._systemd_on_bus():
            if time.monotonic() > deadline:
                raise HarnessUnavailable("systemd did not take org.freedesktop.systemd1 on the bus")
            time.sleep(0.05)

    def _systemd_on_bus(self) -> bool:
        r = self._in_ns(
            self.as_user(
                [
                    "busctl",
                    "--user",
                    "call",
                    "org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus",
                    "NameHasOwner",
                    "s",
                    "org.freedesktop.systemd1",
                ]
            ),
            timeout=READY_TIMEOUT_S,
        )
        return r.stdout.strip() == "b true"

    def stop(self) -> None:
        """Tear everything down; safe to call twice and after a failed start."""
        with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
            if (self.base / "manager.pid").exists() and alive(self.manager_pid):
                self.systemctl("exit")
                _wait_gone(self.manager_pid, EXIT_TIMEOUT_S)
        if self._wrapper is not None:
            # The script stops journald itself once the manager has exited.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._wrapper.wait(timeout=EXIT_TIMEOUT_S)
        for name in ("manager.pid", "journald.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int((self.base / name).read_text())
                if alive(pid):
                    os.kill(pid, signal.SIGTERM)
                    if not _wait_gone(pid, EXIT_TIMEOUT_S):
                        os.kill(pid, signal.SIGKILL)
                        _wait_gone(pid, EXIT_TIMEOUT_S)
        if self._wrapper is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._wrapper.pid, signal.SIGKILL)
            self._wrapper.wait()
            if self._wrapper.stderr:
                self._wrapper.stderr.close()
        for cg in self.cgroups:
            _kill_cgroup_tree(cg)
        for path in reversed(self._created):
            _rmdir_tree(path)
        self._created.clear()


def _wait_gone(pid: int, timeout_s: float) -> bool:
    try:
        wait_for(lambda: not alive(pid), f"pid {pid} to exit", timeout_s)
    except AssertionError:
        return False
    return True


def _kill_cgroup_tree(root: Path) -> None:
    """SIGKILL anything still in ``root`` or below (a unit that ignored the manager's exit)."""
    if not root.exists():
        return
    for folder, _dirs, _files in os.walk(root):
        with contextlib.suppress(OSError):
            for line in Path(folder, "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(line), signal.SIGKILL)
                    _wait_gone(int(line), EXIT_TIMEOUT_S)


def _rmdir_tree(root: Path) -> None:
    """Remove a cgroup folder and the sub-cgroups systemd made in it, deepest first."""
    if not root.exists():
        return
    for folder, _dirs, _files in os.walk(root, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def unavailable_reason() -> str | None:
    """Why the harness cannot run here, or None."""
    if os.geteuid() != 0:
        return f"needs root to start a private systemd --user and journald; {HOW_TO_RUN}"
    for tool in ("unshare", "nsenter", "systemctl", "journalctl", "busctl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed; {HOW_TO_RUN}"
    for path in (
        "/usr/lib/systemd/systemd",
        "/lib/systemd/systemd-journald",
        "/usr/lib/systemd/user/dbus.socket",
    ):
        if not os.path.exists(path):
            return f"{path} is missing (systemd, dbus-user-session); {HOW_TO_RUN}"
    if not cgroup_hierarchies():
        return f"no writable cgroup hierarchy; {HOW_TO_RUN}"
    return None


@contextlib.contextmanager
def user_systemd(base: Path, uid: int = 0, *, activate_bus: bool = True) -> Iterator[UserSystemd]:
    """Start a private manager under ``base``, as ``uid`` (root by default); always torn
    down, even on failure. For another uid, ``base`` and the folders above it must let
    that uid through. With ``activate_bus=False`` the user bus is left as a login leaves
    it: ``dbus.socket`` listening, no ``dbus-daemon`` yet, nothing on the bus."""
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_PATH, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manager = UserSystemd(base, uid, activate_bus=activate_bus)
        try:
            manager.start()
            yield manager
        finally:
            manager.stop()
