"""Facts about one process from ``/proc``, and what kind of Hermes process it is.

Everything here reads small ``/proc/<pid>/`` text files (``stat``, ``cmdline``,
``cgroup``, ``environ``); nothing opens a database file (docs/safety.md rule 2).
Readers raise ``OSError`` so the caller (``holders``) decides what an unreadable or
vanished entry means for the scan; classification functions are pure.

Kinds follow docs/hermes.md, "Who writes it": the Hermes command line is
recognised by argv[0]'s basename (``hermes``, ``hermes-agent``, ``hermes-acp``), by
``python -m hermes_cli.main`` / ``-m tui_gateway.entry`` / ``-m acp_adapter``, or by a
script ending in ``hermes_cli/main.py`` or ``run_agent.py``. A console script runs as
``/venv/bin/python3 /venv/bin/hermes serve``, so a Python interpreter's script argument
is treated as argv[0].
"""

from __future__ import annotations

import os

from statewarden.config_literals import HOLDER_KINDS
from statewarden.record import FrozenRecord

TYPE_CHECKING = False
if TYPE_CHECKING:  # imports that only the type checker needs
    import datetime as dt
    from collections.abc import Sequence
    from typing import Any

# The kinds of holder, in the order the docs list them; the config validates against the same type.
KINDS: tuple[str, ...] = HOLDER_KINDS
HERMES_EXECUTABLES = frozenset({"hermes", "hermes-agent", "hermes-acp"})
_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")
# Interpreter options that take a separate argument (python -X dev -W error -m ...).
_PYTHON_OPTS_WITH_ARG = frozenset({"-X", "-W", "--check-hash-based-pycs"})
_READ_BYTES = 128 * 1024
# Room for a one-record /proc file: /proc/<pid>/stat is a few hundred bytes (52 numbers
# and a name of at most 64).
_RECORD_BYTES = 4096
# Hermes' global options that take a value before the subcommand (hermes -p coder chat).
_HERMES_OPTS_WITH_ARG = frozenset({"--profile", "-p", "--home", "--config", "-c", "--model", "-m"})
# include/linux/sched.h: the task is a kernel thread. Its name (``kworker/0:1``) proves nothing.
PF_KTHREAD = 0x00200000
# include/uapi/linux/capability.h: what can open another uid's /proc/<pid>/fd (the
# listing needs the DAC ones, each descriptor in it CAP_SYS_PTRACE)
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2
CAP_SYS_PTRACE = 19


class ProcStat(FrozenRecord):
    """The fields of ``/proc/<pid>/stat`` a holder report needs."""

    __slots__ = ("comm", "flags", "pid", "ppid", "start_ticks", "state")
    pid: int
    comm: str
    state: str
    ppid: int
    start_ticks: int
    flags: int

    def __init__(
        self, *, pid: int, comm: str, state: str, ppid: int, start_ticks: int, flags: int = 0
    ) -> None:
        self._set(pid=pid, comm=comm, state=state, ppid=ppid, start_ticks=start_ticks, flags=flags)

    @property
    def kernel_thread(self) -> bool:
        """A kernel thread (``PF_KTHREAD``): it holds no files and has no /proc/<pid>/fd to read."""
        return bool(self.flags & PF_KTHREAD)


def read_file(path: str) -> bytes:
    """A whole /proc file with plain ``open``/``read``/``close`` (no buffering, no fstat).

    On a host with thousands of processes the scan is mostly these calls.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, _READ_BYTES)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_record(path: str) -> bytes:
    """A /proc file that the kernel writes as one record (``stat``), in one ``read``.

    Such a file comes whole from the first ``read`` that has room for it: a read shorter
    than the room asked for is the end, and the usual second ``read`` (to see the end) is
    spared. A record that fills the room is read on to the end.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        first = os.read(fd, _RECORD_BYTES)
        if len(first) < _RECORD_BYTES:
            return first
        chunks = [first]
        while chunk := os.read(fd, _READ_BYTES):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_stat(pid: int, proc: str = "/proc") -> ProcStat:
    raw = read_record(f"{proc}/{pid}/stat").decode("utf-8", "replace")
    # comm may contain spaces and parentheses: it ends at the last ')'.
    left = raw.index("(")
    right = raw.rindex(")")
    rest = raw[right + 2 :].split()
    return ProcStat(
        pid=pid,
        comm=raw[left + 1 : right],
        state=rest[0],
        ppid=int(rest[1]),
        start_ticks=int(rest[19]),
        flags=int(rest[6]),
    )


def has_any_capability(caps: Sequence[int], proc: str = "/proc") -> bool:
    """True if this process has one of ``caps`` in its effective set (``CapEff``)."""
    try:
        with open(f"{proc}/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"CapEff:"):
                    eff = int(line.split()[1], 16)
                    return any(eff >> cap & 1 for cap in caps)
    except (OSError, ValueError):
        return True  # unknown: try every process, as root would
    return True


def read_cmdline(pid: int, proc: str = "/proc") -> list[str]:
    raw = read_file(f"{proc}/{pid}/cmdline")
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a] if raw else []


def read_uid(pid: int, proc: str = "/proc") -> int:
    """The real uid (``Uid:`` first field of ``status``): who the process runs as."""
    with open(f"{proc}/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"Uid:"):
                return int(line.split()[1])
    raise OSError(f"{proc}/{pid}/status has no Uid line")


def read_exe(pid: int, proc: str = "/proc") -> str | None:
    try:
        return os.readlink(f"{proc}/{pid}/exe")
    except OSError:
        return None


def read_environ_var(pid: int, name: str, proc: str = "/proc") -> str | None:
    """One variable of the process's start-up environment, or None if unset or unreadable."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    prefix = name.encode() + b"="
    for item in raw.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode("utf-8", "replace")
    return None


def read_cgroup(pid: int, proc: str = "/proc") -> str:
    with open(f"{proc}/{pid}/cgroup", "rb") as f:
        return f.read().decode("utf-8", "replace")


def systemd_cgroup_path(cgroup_text: str) -> str | None:
    """The path in systemd's hierarchy: ``name=systemd`` (v1 / hybrid), else the v2 one."""
    unified = None
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[1] == "name=systemd":
            return parts[2]
        if parts[0] == "0" and parts[1] == "":
            unified = parts[2]
    return unified


def unit_from_cgroup(path: str | None) -> str | None:
    """The innermost ``.service`` or ``.scope`` on a cgroup path, or None.

    ``/user.slice/user-1000.slice/user@1000.service/app.slice/hermes-gateway.service``
    -> ``hermes-gateway.service``; ``.../session-4.scope`` -> ``session-4.scope``.
    """
    if not path:
        return None
    for part in reversed(path.strip("/").split("/")):
        if part.endswith((".service", ".scope")):
            return part
    return None


def is_user_manager(argv: Sequence[str], comm: str) -> bool:
    """A ``systemd --user`` instance (orphans of a user session are re-parented to it)."""
    return comm == "systemd" and "--user" in argv


def is_python(name: str) -> bool:
    """True for an interpreter's file name: ``python``, ``python3``, ``python3.11``,
    ``python3.13t`` (``python`` and a version, then at most one lower-case letter)."""
    if name.endswith("\n"):
        name = name[:-1]  # as a pattern's ``$`` would
    if not name.startswith("python"):
        return False
    rest = name[6:]
    if rest and rest[-1] in _LOWER:
        rest = rest[:-1]
    if not rest:
        return True
    major, dot, minor = rest.partition(".")
    return major.isdecimal() and (not dot or minor.isdecimal())


def _basename(arg: str) -> str:
    return arg.rsplit("/", 1)[-1]


def _program(argv: Sequence[str]) -> tuple[str, str | None, list[str]]:
    """(program name, python module or None, remaining arguments) for a command line.

    For a Python interpreter the program is the script (its basename) or the ``-m``
    module; the remaining arguments follow it.
    """
    if not argv:
        return "", None, []
    name = _basename(argv[0])
    if not is_python(name):
        return name, None, list(argv[1:])
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" and i + 1 < len(argv):
            return name, argv[i + 1], list(argv[i + 2 :])
        if arg.startswith("-m") and len(arg) > 2:
            return name, arg[2:], list(argv[i + 1 :])
        if arg in _PYTHON_OPTS_WITH_ARG:
            i += 2
            continue
        if arg == "-c":
            return name, None, []
        if arg.startswith("-"):
            i += 1
            continue
        return _basename(arg), None, list(argv[i + 1 :])
    return name, None, []


def _script_path(argv: Sequence[str]) -> str:
    for arg in argv[1:]:
        if not arg.startswith("-"):
            return arg
    return ""


def _hermes_subcommand(args: Sequence[str]) -> tuple[str, list[str]]:
    """The first Hermes subcommand after global options, and the arguments after it."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _HERMES_OPTS_WITH_ARG:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return arg, list(args[i + 1 :])
    return "", []


def _hermes_kind(args: Sequence[str]) -> str:
    sub, rest = _hermes_subcommand(args)
    if sub == "gateway":
        return "gateway"
    if sub == "dashboard":
        return "dashboard"
    if sub == "serve":
        return "serve-isolated" if "--isolated" in rest else "serve"
    if sub == "cron":
        return "cron"
    if sub in ("acp", "mcp"):
        return "acp"
    # `hermes`, `hermes chat` and every other subcommand (doctor, sessions, ...) is the
    # interactive CLI opening the database on the user's behalf.
    return "cli"


def classify(argv: Sequence[str]) -> str:
    """The kind of a process from its command line (one of :data:`KINDS`)."""
    program, module, rest = _program(argv)
    if module is not None:
        if module == "hermes_cli.main" or module.startswith("hermes_cli.main"):
            return _hermes_kind(rest)
        if module == "tui_gateway.entry":
            return "tui"
        if module == "acp_adapter" or module.startswith("acp_adapter."):
            return "acp"
        return "unknown"
    if program == "hermes-acp":
        return "acp"
    if program in HERMES_EXECUTABLES:
        return _hermes_kind(rest)
    script = _script_path(argv) if argv and is_python(_basename(argv[0])) else ""
    if script.endswith("hermes_cli/main.py"):
        return _hermes_kind(rest)
    if script.endswith("run_agent.py"):
        return "cli"
    if program == "sqlite3":
        return "sqlite3"
    if program == "litestream":
        return "litestream"
    return "unknown"


def short_command(argv: Sequence[str]) -> str:
    """A command line as the user knows it: ``hermes gateway run``, not the venv paths.

    ``/venv/bin/python3 /venv/bin/hermes serve`` -> ``hermes serve``;
    ``python3.11 -m hermes_cli.main gateway run`` -> ``python -m hermes_cli.main gateway run``.
    """
    program, module, rest = _program(argv)
    if module is not None:
        return " ".join(["python", "-m", module, *rest])
    return " ".join([program, *rest]) if program else ""


# What the kernel says once per process, kept (functools.cache would import collections
# on `statewardenctl holders`' path for these three).
_ONCE: dict[object, Any] = {}


def clock_ticks() -> int:
    ticks = _ONCE.get("ticks")
    if ticks is None:
        ticks = _ONCE["ticks"] = os.sysconf("SC_CLK_TCK")
    return int(ticks)


def boot_time(proc: str = "/proc") -> float:
    btime = _ONCE.get(("btime", proc))
    if btime is None:
        btime = _ONCE[("btime", proc)] = _read_boot_time(proc)
    return float(btime)


def _read_boot_time(proc: str) -> float:
    with open(f"{proc}/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    raise OSError(f"{proc}/stat has no btime line")  # pragma: no cover


def start_time(start_ticks: int) -> float:
    """Wall-clock start of a process (seconds since the epoch) from its start time in
    clock ticks since boot."""
    return boot_time() + start_ticks / clock_ticks()


def started_at(start_ticks: int) -> dt.datetime:
    """:func:`start_time` as an aware datetime (UTC)."""
    return as_datetime(start_time(start_ticks))


def as_datetime(epoch: float) -> dt.datetime:
    """Seconds since the epoch as an aware datetime (UTC); ``datetime`` is imported only
    when a report shows one (``--json``)."""
    import datetime as dt  # noqa: PLC0415

    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def human_age(seconds: float) -> str:
    """``2d 3h``, ``5h``, ``1m``, ``12s``: the two largest units, for the SINCE column."""
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m"
    return f"{s}s"


# kcmp(2) syscall numbers; KCMP_FILE compares two descriptors' open file descriptions.
_KCMP_SYSCALL = {"x86_64": 312, "aarch64": 272, "i686": 349, "armv7l": 378, "riscv64": 272}
_KCMP_FILE = 0


def _libc_syscall() -> Any:
    fn = _ONCE.get("syscall")
    if fn is None:
        import ctypes  # noqa: PLC0415 - only when two descriptors must be compared

        fn = ctypes.CDLL(None, use_errno=True).syscall
        fn.restype = ctypes.c_long
        _ONCE["syscall"] = fn
    return fn


def same_open_file(pid1: int, fd1: int, pid2: int, fd2: int) -> bool | None:
    """Whether two descriptors share one open file description (``kcmp(KCMP_FILE)``).

    None when the kernel cannot say (no kcmp, or not allowed to compare those processes).
    """
    number = _KCMP_SYSCALL.get(os.uname().machine)
    if number is None:
        return None
    try:
        answer = _libc_syscall()(number, pid1, pid2, _KCMP_FILE, fd1, fd2)
    except OSError:
        return None
    if answer < 0:
        return None
    return bool(answer == 0)
