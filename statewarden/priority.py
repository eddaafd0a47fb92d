"""Idle CPU and I/O priority for background reads (verification, snapshots).

Linux keeps both the nice value and the I/O scheduling class per thread, so
:func:`idle_priority` lowers the calling thread alone (``setpriority`` and
``ioprio_set`` on its native thread id); in a freshly forked child (a ``preexec_fn``)
that is the whole process.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading

IDLE_NICE = 19
IOPRIO_WHO_PROCESS = 1  # with a thread id: that thread alone
IOPRIO_CLASS_IDLE = 3
IOPRIO_CLASS_SHIFT = 13
SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "i686": 289, "armv7l": 314, "riscv64": 30}
SYS_IOPRIO_GET = {"x86_64": 252, "aarch64": 31, "i686": 290, "armv7l": 315, "riscv64": 31}


def idle_priority() -> str:
    """The calling thread to nice 19 and the idle I/O class; says what it runs at."""
    tid = threading.get_native_id()
    said = []
    try:
        os.setpriority(os.PRIO_PROCESS, tid, IDLE_NICE)
        said.append(f"nice {os.getpriority(os.PRIO_PROCESS, tid)}")
    except OSError as exc:
        said.append(f"nice unchanged ({exc.strerror})")
    nr = SYS_IOPRIO_SET.get(platform.machine())
    if nr is None:
        said.append("I/O priority unchanged (unknown architecture)")
        return ", ".join(said)
    libc = ctypes.CDLL(None, use_errno=True)
    value = IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT
    if libc.syscall(nr, IOPRIO_WHO_PROCESS, tid, value) == 0:
        said.append("idle I/O")
    else:
        said.append(f"I/O priority unchanged ({os.strerror(ctypes.get_errno())})")
    return ", ".join(said)


def io_class_of(tid: int) -> int | None:
    """The I/O scheduling class of thread ``tid`` (3: idle), or None if unknown."""
    nr = SYS_IOPRIO_GET.get(platform.machine())
    if nr is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    value = int(libc.syscall(nr, IOPRIO_WHO_PROCESS, tid))
    return None if value < 0 else value >> IOPRIO_CLASS_SHIFT
