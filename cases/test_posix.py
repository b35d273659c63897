"""POSIX programs on a mount of the export (``python -m harness mount``): pjdfstest's syscall checks,
one case per ``.t`` file, under passthrough, mapped-xattr and mapped-file.

Each case mounts a fresh QEMU's export, runs its ``.t`` as root in a directory of its own there (as
``prove`` would), and reads the TAP. A check that fails must be one the classification in
:mod:`cases.posix_expectations` names: a difference of the bridge (what FUSE or our mapping cannot
express; ``docs/posix.md`` has the table) or a known QEMU bug (a strict xfail whose reproducer is the
9P trace of the ``.t``). A check that passes where a failure was classified fails the case too: the
table must say what is true today.

Opt-in: ``pytest cases/ -m posix`` (the family needs root, /dev/fuse and minutes).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cases.posix_expectations import (
    BRIDGE,
    CTIME_PJDFSTEST,
    GETATTR_PJDFSTEST,
    GETATTR_REASON,
    GETATTR_STRESSORS,
    MKNOD_PJDFSTEST,
    MKNOD_REASON,
    MODELS,
    NLINK_PJDFSTEST,
    PJDFSTEST_FILES,
    PjdfstestFailed,
)
from fixtures.case_path import case_path
from fixtures.deviations import MAPPED_FILE_CTIME, MAPPED_FILE_NLINK
from fixtures.mount import Mount
from harness.qemu import versions
from harness.qemu.pjdfstest import run_file

#: a .t file's longest wall time here is under a minute (chown/00.t, sleeping for ctime)
T_TIMEOUT = 600.0


@pytest.mark.qemu_bug(
    fixed_in=versions.MKNOD_SPECIAL, reason=MKNOD_REASON, raises=PjdfstestFailed,
    when={"t": MKNOD_PJDFSTEST, "security_model": "passthrough"},
)  # fmt: skip
@pytest.mark.qemu_bug(
    fixed_in=versions.GETATTR_OPEN_FID, reason=GETATTR_REASON, raises=PjdfstestFailed, when={"t": GETATTR_PJDFSTEST},
)  # fmt: skip
@pytest.mark.qemu_bug(**MAPPED_FILE_CTIME, raises=PjdfstestFailed,
                      when={"t": CTIME_PJDFSTEST, "security_model": "mapped-file"})  # fmt: skip
@pytest.mark.qemu_bug(**MAPPED_FILE_NLINK, raises=PjdfstestFailed,
                      when={"t": NLINK_PJDFSTEST, "security_model": "mapped-file"})  # fmt: skip
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


# -- stress-ng and fio --------------------------------------------------------------------------------

#: stress-ng's filesystem stressors, each run alone (one worker) with --verify where it has one
STRESSORS = ["dir", "dentry", "rename", "link", "symlink", "xattr", "lockf", "open", "seek", "hdd"]
METRIC = re.compile(r"metrc: \[\d+\] (\w+)\s+(\d+)\s")


#: stressors one of whose bogo operations takes seconds to minutes through the mount (xattr: ~7 s;
#: link, symlink: 8,192 links made and removed): in a short run they count none, so only their
#: verdict is judged, not that they counted work
SLOW_OPERATIONS = {"xattr", "link", "symlink"}
#: a stress case's mount keeps the end of its 9P conversation only: the whole is millions of messages
STRESS_TRACE = 20000


def stress_ng(stressor: str, where: Path, seconds: float) -> subprocess.CompletedProcess[str]:
    argv = ["stress-ng", f"--{stressor}", "1", "--temp-path", str(where), "--seed", "1", "--verify", "--metrics-brief",
            "--timeout", f"{seconds:g}s"]  # fmt: skip
    # stress-ng ends an operation it is in before it stops: link's takes minutes here
    return subprocess.run(argv, capture_output=True, text=True, timeout=seconds * 4 + 900, check=False)


def bogo_ops(output: str, stressor: str) -> int:
    return sum(int(m.group(2)) for m in METRIC.finditer(output) if m.group(1) == stressor)


@pytest.mark.slow
@pytest.mark.trace_limit(STRESS_TRACE)
@pytest.mark.qemu_bug(
    fixed_in=versions.GETATTR_OPEN_FID, reason=GETATTR_REASON, raises=AssertionError,
    when={"stressor": GETATTR_STRESSORS},
)  # fmt: skip
@case_path("posix/stress/stress-ng/{stressor}/{security_model}", backends=["local"], stressor=STRESSORS,
           security_model=MODELS)  # fmt: skip
def test_stress_ng(stressor: str, security_model: str, posix_mount: Mount, request: pytest.FixtureRequest,
                   tmp_path: Path) -> None:  # fmt: skip
    """stress-ng's ``--{stressor}`` on the mount, seed 1, verifying: it must do work and end as it
    does on the host's own filesystem (where a failure there too is stress-ng's, not the server's)."""
    require_tool("stress-ng")
    seconds = request.config.getoption("--stress-seconds")
    work = posix_mount.path / "work"
    work.mkdir()
    done = stress_ng(stressor, work, seconds)
    output = done.stdout + done.stderr
    if done.returncode == 0 and " fail: " not in output:
        assert "successful run completed" in output and "skipp" not in output, output[-2000:]
        if stressor not in SLOW_OPERATIONS:
            assert bogo_ops(output, stressor) > 0, f"stress-ng --{stressor} did nothing on the mount:\n{output[-2000:]}"
        return
    host = stress_ng(stressor, tmp_path, seconds)
    if host.returncode != 0:
        pytest.skip(f"stress-ng --{stressor} fails on the host's filesystem too (status {host.returncode}): "
                    f"{(host.stdout + host.stderr)[-300:]}")  # fmt: skip
    status = done.returncode
    raise AssertionError(
        f"stress-ng --{stressor} failed on the mount (status {status}), not on the host:\n{output[-3000:]}"
    )


FIO_SIZE = "8M"


@pytest.mark.slow
@pytest.mark.trace_limit(STRESS_TRACE)
@case_path("posix/stress/fio/{rw}/{bs}/msize_{msize}", backends=["local"], rw=["write", "randwrite"],
           bs=["4k", "64k", "1m"], msize=[8192, 512 << 10])  # fmt: skip
def test_fio_verify(rw: str, bs: str, msize: int, posix_mount: Mount, request: pytest.FixtureRequest) -> None:
    """fio writes {FIO_SIZE} in blocks of ``bs`` (``rw``: in order or at random, seed 1), then reads it
    all back checking each block's crc32c: any block the server stored or returned wrong fails it."""
    require_tool("fio")
    work = posix_mount.path / "work"
    work.mkdir()
    argv = ["fio", "--name=v9p", f"--directory={work}", f"--size={FIO_SIZE}", f"--bs={bs}", f"--rw={rw}",
            "--ioengine=psync", "--verify=crc32c", "--verify_fatal=1", "--do_verify=1", "--randseed=1",
            "--randrepeat=1", "--output-format=json"]  # fmt: skip
    seconds = request.config.getoption("--stress-seconds")
    # in its directory on the mount: fio writes its verify state file (local-v9p-0-verify.state)
    # into the working directory, which was the checkout's
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds * 4 + 300, check=False, cwd=work)
    assert done.returncode == 0, f"fio failed (status {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    job = json.loads(done.stdout[done.stdout.index("{") :])["jobs"][0]
    assert job["error"] == 0 and job["write"]["io_bytes"] == parse_size(FIO_SIZE), job["write"]
    assert job["read"]["io_bytes"] == parse_size(FIO_SIZE), f"fio verified {job['read']['io_bytes']} bytes"


def parse_size(text: str) -> int:
    return int(text[:-1]) << {"k": 10, "M": 20}[text[-1]]


def require_tool(name: str) -> None:
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed (Debian's {name}; `make tools` installs it)")
