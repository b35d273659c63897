"""The OS side of a QEMU process, beside :class:`harness.qemu.machine.Machine`: it dies with the
harness (``PR_SET_PDEATHSIG``), under the descriptor limit its config names; its CPU time; the
UNIX sockets it connects to; the directories of machines not stopped yet, removed at exit."""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import socket
import time
from pathlib import Path


@functools.cache
def writes_coverage(binary: Path) -> bool:
    """Whether ``binary`` is a gcov build (``--enable-gcov``): its build tree has .gcno files for
    9pfs, beside it (a meson build directory) or in ``build/`` (the harness's cache layout)."""
    return any(
        (where / "libcommon.fa.p" / "hw_9pfs_9p.c.gcno").exists() for where in (binary.parent, binary.parent / "build")
    )


def die_with_parent(parent: int, nofile: int | None = None) -> None:
    """``preexec_fn`` of every QEMU the harness starts: runs in the child between fork and exec
    (and sets its open-file limit, where the config asks for one)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    if nofile is not None:
        import resource  # in the child only

        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))


def cpu_seconds(pid: int | str = "self") -> float:
    """utime + stime of process ``pid`` (all its threads, ended ones too), in seconds: the
    kernel's CPU-time clock of the process, to the nanosecond, where we may read it; else
    :func:`proc_cpu_seconds` (10 ms ticks: a bench's short row could read 0 there)."""
    if pid == "self":
        return time.process_time()
    try:
        # clock_getcpuclockid(3) is not in Python's time module; the clock id it returns is
        # ~pid << 3 | CPUCLOCK_SCHED (2): MAKE_PROCESS_CPUCLOCK in the kernel's posix-timers.h
        return time.clock_gettime((~int(pid) << 3) | 2)
    except OSError:
        return proc_cpu_seconds(pid)


def proc_cpu_seconds(pid: int | str) -> float:
    """utime + stime of process ``pid`` from /proc/PID/stat, in clock ticks' resolution."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def listen(path: Path) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        listener.listen(1)
    except BaseException:
        listener.close()
        raise
    return listener
