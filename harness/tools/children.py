"""The pytest runs a tool starts (matrix, pipeline cells, coverage, profile, bench suite), stopped
as the tool is. ``python -m harness`` turns SIGTERM and SIGHUP into KeyboardInterrupt, as Ctrl-C
is (harness/tools/cli.py). ``subprocess.run()`` answers that by killing its child (SIGKILL), and a
pytest run killed so can neither stop its QEMUs nor remove its run directory (fixtures/plugin.py).
Here the child gets SIGTERM instead, which it takes as Ctrl-C, and :data:`STOP_GRACE` seconds for
its teardown before it is killed."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

#: how long a stopped child gets for its teardown (every QEMU stopped, every case's files removed)
#: before it is killed: more than a whole teardown takes here, which is seconds
STOP_GRACE = 60.0


def run(
    argv: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, capture: bool = True,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``subprocess.run(argv, text=True, check=False)``, its output captured with ``capture``; a
    tool stopped meanwhile, or a ``timeout`` run out, stops the child with SIGTERM first
    (:func:`stop`), then raises as ``subprocess.run()`` would."""
    pipe = subprocess.PIPE if capture else None
    with stopped_with_us(subprocess.Popen(argv, cwd=cwd, env=env, stdout=pipe, stderr=pipe, text=True)) as child:
        out, err = child.communicate(timeout=timeout)
    return subprocess.CompletedProcess(list(argv), child.returncode, out, err)


@contextmanager
def stopped_with_us(child: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """``child`` for the block; if the block raises (a stop, a timeout), :func:`stop` it first."""
    with child:
        try:
            yield child
        except BaseException:
            stop(child)
            raise


def stop(child: subprocess.Popen[str]) -> None:
    """SIGTERM to ``child``, then :data:`STOP_GRACE` seconds to end; killed after that. A child
    that got the terminal's Ctrl-C too takes the second signal as already stopping."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    try:
        child.communicate(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
