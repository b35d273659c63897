"""POSIX programs on a mount of the export (``python -m harness mount``): pjdfstest's syscall checks,
one case per ``.t`` file, under passthrough and mapped-xattr.

Each case mounts a fresh QEMU's export, runs its ``.t`` as root in a directory of its own there (as
``prove`` would), and reads the TAP. A check that fails must be one the classification in
:mod:`cases.posix_expectations` names: a difference of the bridge (what FUSE or our mapping cannot
express; ``docs/posix.md`` has the table) or a known QEMU bug (a strict xfail whose reproducer is the
9P trace of the ``.t``). A check that passes where a failure was classified fails the case too: the
table must say what is true today.

Opt-in: ``pytest cases/ -m posix`` (the family needs root, /dev/fuse and minutes).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from cases.posix_expectations import BRIDGE, MODELS, PJDFSTEST_FILES, PjdfstestFailed
from fixtures.case_path import case_path
from fixtures.mount import Mount
from harness.fuse.pjdfstest import run_file

#: a .t file's longest wall time here is under a minute (chown/00.t, sleeping for ctime)
T_TIMEOUT = 600.0


@case_path("posix/pjdfstest/{t}/{security_model}", backends=["local"], t=PJDFSTEST_FILES, security_model=MODELS)
def test_pjdfstest(t: str, security_model: str, posix_mount: Mount, pjdfstest_tree: Path) -> None:
    """pjdfstest ``tests/{t}.t`` on the mount: every planned check ran, and those that failed are the
    classified ones."""
    work = posix_mount.path / "work"
    work.mkdir(mode=0o755)
    work.chmod(0o755)
    try:
        tap = run_file(pjdfstest_tree, f"{t}.t", work, T_TIMEOUT)
    except subprocess.TimeoutExpired as err:
        raise AssertionError(f"{t}.t did not finish in {T_TIMEOUT:.0f} s") from err
    classified = BRIDGE.get((t, security_model), {})
    failed = set(tap.failed)
    if tap.planned == 0 or tap.ran != tap.planned:
        raise AssertionError(f"{t}.t planned {tap.planned} checks and ran {tap.ran}:\n{tap.output[-3000:]}")
    unexplained = {n: why for n, why in tap.failed.items() if n not in classified}
    if unexplained:
        lines = "\n".join(f"  not ok {n} - {why}" for n, why in sorted(unexplained.items()))
        raise PjdfstestFailed(f"{t}.t ({security_model}): {len(unexplained)} of {tap.planned} checks failed:\n{lines}")
    now_passing = set(classified) - failed
    assert not now_passing, (
        f"{t}.t: checks {sorted(now_passing)} pass, but cases/posix_expectations.py classifies them as failing "
        f"({'; '.join(sorted({classified[n] for n in now_passing}))}): take them out"
    )
