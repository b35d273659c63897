"""The mount's watcher: ``python -m harness.fuse.watcher MOUNTPOINT RUNDIR``, started by the mount
in a session of its own with a pipe on stdin. When the pipe ends (the mount exited, however:
cleanly, by a signal, by SIGKILL) and MOUNTPOINT is still mounted, it unmounts it lazily (a FUSE
mount whose server is gone answers ENOTCONN for ever and is in every later ``mount`` listing);
then it removes RUNDIR, the mount's directory (QEMU's sockets and log, a scratch export).

It ignores SIGINT and SIGHUP (Ctrl-C reaches the whole foreground process group) and does nothing
else: no harness import, so nothing that can fail before the pipe ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys


def mounted(mountpoint: str | os.PathLike[str]) -> bool:
    """Whether ``mountpoint`` is in this process's mount table (the mount asks it too)."""
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == str(mountpoint) for line in mounts if len(line.split()) > 1)


def main(mountpoint: str, rundir: str) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while os.read(0, 4096):
        pass
    try:
        return unmount(mountpoint)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)


def unmount(mountpoint: str) -> int:
    if not mounted(mountpoint):
        return 0
    for command in (["fusermount3", "-u", "-z", mountpoint], ["umount", "-l", mountpoint]):
        try:
            if subprocess.run(command, capture_output=True, timeout=30).returncode == 0:
                print(f"harness watcher: {mountpoint} was left mounted; unmounted it (lazily)", file=sys.stderr)
                return 0
        except (OSError, subprocess.TimeoutExpired):
            continue
    print(f"harness watcher: could not unmount {mountpoint}: umount -l {mountpoint}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1]), sys.argv[2]))
