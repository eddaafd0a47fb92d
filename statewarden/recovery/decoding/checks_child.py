"""The child process that runs FTS5's own checks, and the b-trees' when told, apart from
the process that reads the file (``IntegrityCheck(apart=True)``, ``integrity.py``): its
script, its command line, and ``EarlyChecker``, the child started before the file it
will check exists."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Collection

# The check's error cap is set above anything a file can produce; --max-errors only
# shortens what is printed.
UNCAPPED_ERRORS = 2**31 - 1


# FTS5's own checks run in a child process (``IntegrityCheck(apart=True)``), so that no
# descriptor this process opens and closes meanwhile can drop a lock of theirs. It
# imports only apsw, checks each virtual table on a read-only connection of its own in a
# thread of its own (SQLite releases the GIL: two FTS tables, two cores) and prints one
# JSON line: {"rows": {name: [rows, abort]}, "cpu_s": its CPU seconds}. Told the b-trees
# too (``background`` as well), it checks them in a third thread as ``_check`` does here
# (no virtual-table modules) and prints first {"btrees": [rows, abort, {table: [rows,
# abort]}]} (``_checked`` makes the lines here), or {"btrees": null}. Its URI opens the
# file ``immutable`` when no ``-wal`` holds frames (a work copy is checkpointed whole:
# ``bundle.py``): the child then takes no lock at all, so it can neither hold up this
# process's connections nor be held up by them; otherwise it reads through the WAL,
# waiting out a passing lock. Its connections map the file (``PRAGMA mmap_size`` of its
# size) instead of copying each page again through ``pread``: a mapped page that cannot
# be read (an I/O error) is a SIGBUS, which kills the child, not this process; the FTS
# checks then run again in a child reading as usual (``_join_child``), the b-trees, if
# not printed, here (``_btrees_done``). It dumps no core. It ends with the process that
# started it (``PR_SET_PDEATHSIG``): a ``kill -9`` of a recover or a maintenance run
# leaves no checker behind reading the work copy. Started with the parent's pid alone,
# it loads apsw and then reads what to check from one JSON line on its stdin
# (``EarlyChecker``); at the end of its stdin, without that line, it exits 0 silently.
_CHILD_BUSY_TIMEOUT_MS = 10_000
_APART_CHECKS = """
import ctypes, json, os, resource, sys, threading, time
try:  # end with the process that started it, even after its kill -9 (PR_SET_PDEATHSIG)
    ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)
except (OSError, AttributeError):
    pass
try:  # a SIGBUS (a mapped page that cannot be read) dumps no core in the caller's folder
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
except (OSError, ValueError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(3)  # the process that started it was gone before the line above
import apsw
line = sys.argv[2] if len(sys.argv) > 2 else sys.stdin.readline()
if not line.strip():
    sys.exit(0)  # not wanted after all
told = json.loads(line)
uri, busy_ms, names = str(told["uri"]), int(told["busy_ms"]), [str(n) for n in told["names"]]
mapped, btrees = int(told["mapped"]), told["btrees"]
found, said = {}, threading.Lock()
def say(doc):
    with said:
        sys.stdout.write(json.dumps(doc) + chr(10))
        sys.stdout.flush()
def opened(modules):
    conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    conn.set_busy_timeout(busy_ms)
    if not modules:
        conn.drop_modules(None)
    if mapped:
        try:
            conn.execute("PRAGMA mmap_size = %d" % mapped)
        except apsw.Error:
            pass  # read as usual
    return conn
def pragma(conn, arg):
    rows, abort = [], None
    arg = str(arg) if isinstance(arg, int) else '"' + arg.replace('"', '""') + '"'
    try:
        for (row,) in conn.execute("PRAGMA integrity_check(" + arg + ")"):
            rows.append(str(row))
    except apsw.Error as exc:
        abort = str(exc).split(chr(10), 1)[0]
    return [rows, abort]
def check(name):
    try:
        conn = opened(True)
    except apsw.Error:
        return
    try:
        found[name] = pragma(conn, name)
    finally:
        conn.close()
def check_btrees(cap, tables):
    try:
        conn = opened(False)
    except apsw.Error:
        say({"btrees": None})
        return
    try:
        rows, abort = whole = pragma(conn, cap)
        stopped = rows != ["ok"] and abort is not None
        each = {name: pragma(conn, name) for name in tables} if stopped else {}
    finally:
        conn.close()
    say({"btrees": [*whole, each]})
threads = [threading.Thread(target=check, args=(n,)) for n in names]
if btrees is not None:
    threads.insert(0, threading.Thread(target=check_btrees, args=btrees))
for t in threads:
    t.start()
for t in threads:
    t.join()
say({"rows": found, "cpu_s": time.process_time()})
"""


def apart_checks_argv(
    uri: str,
    names: Collection[str],
    busy_ms: int = _CHILD_BUSY_TIMEOUT_MS,
    *,
    mapped: int = 0,
    btrees: list[str] | None = None,
) -> list[str]:
    """The command line of the child process that checks the FTS tables ``names``;
    ``mapped``: the bytes of the file its connections map (0: read as usual);
    ``btrees``: the b-trees are checked there too, these tables one by one if the whole
    pragma stops (``_check``)."""
    told = _told(uri, names, busy_ms, mapped, btrees)
    return [sys.executable, "-I", "-c", _APART_CHECKS, str(os.getpid()), told]


def _told(
    uri: str, names: Collection[str], busy_ms: int, mapped: int, btrees: list[str] | None
) -> str:
    """What the child is told (``apart_checks_argv``), as one line of JSON."""
    cap_and_tables = None if btrees is None else [UNCAPPED_ERRORS, btrees]
    told = {"uri": uri, "busy_ms": busy_ms, "names": list(names), "mapped": mapped}
    return json.dumps({**told, "btrees": cap_and_tables})


class EarlyChecker:
    """The child process for FTS5's own checks (``_APART_CHECKS``), started before the
    file it will check exists: ``recover`` starts it before it makes the work copy, so
    that the child's interpreter and apsw load while the copy is made (about 50 ms, on
    the way to the longest check of a recovery). ``IntegrityCheck(apart=True)`` then
    tells it the file and the tables (``take``). One not taken is told nothing: at
    ``close`` its stdin ends and it exits. Start it on the thread that will wait for
    it: its death signal follows that thread (``PR_SET_PDEATHSIG``)."""

    def __init__(self) -> None:
        self._child: subprocess.Popen[bytes] | None = None
        if not sys.executable:
            return
        try:
            self._child = subprocess.Popen(
                [sys.executable, "-I", "-c", _APART_CHECKS, str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            self._child = None  # the checks start the usual way (``IntegrityCheck._start``)

    def take(
        self,
        uri: str,
        names: Collection[str],
        *,
        mapped: int = 0,
        btrees: list[str] | None = None,
    ) -> subprocess.Popen[bytes] | None:
        """The child, told to check ``names`` in ``uri`` (mapping ``mapped`` bytes of it;
        the b-trees too with ``btrees``: ``apart_checks_argv``); None when there is none
        (never started, already taken, or gone before it could be told)."""
        child, self._child = self._child, None
        if child is None:
            return None
        told = _told(uri, names, _CHILD_BUSY_TIMEOUT_MS, mapped, btrees)
        assert child.stdin is not None
        try:
            child.stdin.write(told.encode() + b"\n")
            child.stdin.close()
        except OSError:  # it ended early (a broken pipe): started again the usual way
            child.kill()
            child.stdin = None
            child.communicate()
            return None
        child.stdin = None  # closed: ``communicate`` must not flush it
        return child

    def __enter__(self) -> EarlyChecker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End a child that was not taken (its stdin ends: it exits at once)."""
        child, self._child = self._child, None
        if child is None:
            return
        try:
            assert child.stdin is not None
            child.stdin.close()
            child.stdin = None
            child.communicate(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            child.kill()
            child.communicate()
