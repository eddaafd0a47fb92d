"""What the idle daemon holds: the modules it loads and the heap a verification freed.

The daemon idled at 52-55 MiB (RSS) on a Hermes home: rich and pygments came in through
structlog's console renderer, which the daemon never uses, prometheus-client with metrics
off, and a verification's freed heap stayed with the process until the next one, a day
later. Invariants: the daemon loads no module it does not use (read from the real
daemon's ``PYTHONPROFILEIMPORTTIME`` lines: no timing), and the heap a check freed goes
back to the system. Memory figures are the bench's (bench/idle.py), not asserted here.
"""

from __future__ import annotations

import ctypes
import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from statewarden.daemon.verify import give_back
from tests.support.daemon import DaemonProc

# Never in a daemon with the default config; a name covers its submodules. The daemon
# runs maintenance as a child (``statewardenctl maintenance --here``), so the recover
# engine's building floor is never its own.
NEVER = (
    "rich",
    "pygments",
    "prometheus_client",
    "statewarden.recovery.building",
    "statewarden.recovery.recover",
)


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` (or their submodules) are in ``modules``."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


# ``statewarden run`` as its entry point runs it, writing the modules it holds at exit
# (``-X importtime`` would not do: it names failed imports too, and structlog tries rich).
MODULES_AT_EXIT = """
import atexit, json, sys
path = sys.argv[1]
def write():
    with open(path, "w") as out:
        json.dump(sorted(name for name, m in sys.modules.items() if m is not None), out)
atexit.register(write)
sys.argv = ["statewarden", *sys.argv[2:]]
from statewarden.cli.daemon_cmd import main
main()
"""


class ReportingDaemon(DaemonProc):
    """A real ``statewarden run`` that writes the modules it held, at exit, to ``out``."""

    def __init__(self, env: dict[str, str], out: Path) -> None:
        self.env = env
        self.proc = subprocess.Popen(
            [sys.executable, "-c", MODULES_AT_EXIT, str(out), "run", "--log-format", "plain"],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines = []
        self._after_stop = []


def test_running_daemon_loads_neither_rich_nor_prometheus(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A real ``statewarden run`` through its start, its first verification and its
    stop holds structlog (it logs) and the check (it verified) but not rich, pygments
    or prometheus-client (metrics are off by default), nor the recover engine's build."""
    out = tmp_path / "modules.json"
    d = ReportingDaemon(env, out)
    try:
        d.wait_for_line("statewarden ready")
        d.wait_for_line("database verified")
    finally:
        assert d.stop() == 0
    modules = set(json.loads(out.read_text()))
    assert {"structlog", "structlog.dev", "apsw", "statewarden.recovery.check"} <= modules
    assert loaded(modules, NEVER) == []


CONSOLE_THEN_RICH = """
import io, json, sys
from statewarden import logs
stream = io.StringIO()
logs.configure("info", "console", stream=stream)
logs.get_logger().info("hello", db="/x/state.db")
before = sorted(m for m in sys.modules if m.split(".")[0] == "rich")
import rich.progress
print(json.dumps({"line": stream.getvalue(), "rich_before": before,
                  "progress": rich.progress.Progress.__name__}))
"""


def test_console_logs_render_without_rich_and_rich_still_imports_after() -> None:
    """The console renderer (``statewardenctl`` on a terminal) renders an event with
    rich hidden from structlog, and a command that draws a progress bar still imports
    rich after the logs are set up."""
    out = subprocess.run(
        [sys.executable, "-c", CONSOLE_THEN_RICH], capture_output=True, text=True, check=True
    )
    doc = json.loads(out.stdout)
    assert doc["rich_before"] == []
    assert "hello" in doc["line"]
    assert "db=/x/state.db" in doc["line"]
    assert doc["progress"] == "Progress"


def rss_anon_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_give_back_returns_freed_heap_to_the_system() -> None:
    """32 MiB of small heap blocks freed below one still in use stay resident (glibc
    can shrink the heap only from its top); ``give_back`` returns them."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = []
    for _ in range(32 * 1024):
        block = libc.malloc(1024)
        ctypes.memset(block, 1, 1024)  # touched: resident
        blocks.append(block)
    kept = libc.malloc(1024)  # above the others: the heap's top stays in use
    for block in blocks:
        libc.free(block)
    try:
        held = rss_anon_kib()
        assert give_back() is True
        assert held - rss_anon_kib() > 16 * 1024, "freed heap still resident"
    finally:
        libc.free(kept)
