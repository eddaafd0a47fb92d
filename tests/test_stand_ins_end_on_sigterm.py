"""The Hermes and Litestream stand-ins the tests start end on SIGTERM, whenever it comes.

The demo's Hermes look-alike set a ``threading.Event`` from its SIGTERM handler while its
write loop waited on that event; a handler run while the wait held the event's lock
waited for it for ever, and the process never ended (2 of 3,000 SIGTERMs). The fake
``hermes``, the fake ``litestream`` and ``lab/hermes_writer.py hold`` were written the same
way. Invariant: none of them handles SIGTERM in the middle of its loop: it is blocked
from the start and taken by the loop's own wait (``sigtimedwait``), so the running
process has no handler for it (``/proc/<pid>/status``: SigCgt clear) and ends
with exit 0, not killed by it, stopped after any number of writes.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.hermes_fixtures import TINY, hermes_python, make_home, writer_env
from tests.support.fake_hermes import WRITE_EVERY_ENV, install_fake_hermes
from tests.support.fake_litestream import install_fake_litestream
from tests.support.repo import REPO

pytestmark = pytest.mark.process
TERM = 1 << (signal.SIGTERM - 1)
WRITER = REPO / "lab" / "hermes_writer.py"


def handled(pid: int) -> int:
    """The signals ``pid`` has a handler for (SigCgt). (Its SigBlk says nothing here: a
    thread in sigtimedwait has the signals it waits for unblocked while it waits.)"""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["SigCgt"], 16)


def argv_of(kind: str, tmp_path: Path, home: Path) -> tuple[list[str], dict[str, str]]:
    env = writer_env(home)
    if kind == "hermes":
        env[WRITE_EVERY_ENV] = "0.001"
        return [str(install_fake_hermes(tmp_path / "bin", python=hermes_python())), "chat"], env
    if kind == "litestream":
        exe = install_fake_litestream(tmp_path / "bin", python=sys.executable)
        return [str(exe), "replicate", str(home / "state.db"), f"file://{tmp_path / 'r'}"], env
    argv = [hermes_python(), str(WRITER), "hold", "--home", str(home), "--write-every", "0.001"]
    return argv, env


@pytest.mark.parametrize("kind", ["hermes", "litestream", "hermes_writer"])
def test_sigterm_is_taken_by_the_loop_and_ends_it(kind: str, tmp_path: Path) -> None:
    """Each stand-in, ready and at work, has no SIGTERM handler; five of them, each
    stopped at its own moment, end with exit 0 (with no handler, only its own wait can
    have taken the signal: the default action would have killed it)."""
    for moment in range(5):
        home = make_home(tmp_path / f"h{moment}", TINY)
        argv, env = argv_of(kind, tmp_path / f"b{moment}", home)
        proc = subprocess.Popen(
            argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        assert proc.stdin is not None
        try:
            assert proc.stdout.readline().strip() == "ready"
            caught = handled(proc.pid)
            time.sleep(0.003 * moment)  # a different moment in its loop for each
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stdin.close()
        assert caught & TERM == 0, f"{kind}: a SIGTERM handler runs wherever the loop is"
        assert code == 0, f"{kind} ended with {code}"
