"""Benchmarks: commands that print tables, never timed tests."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tabulate import tabulate

from harness import provision
from harness.errors import HarnessError, ProvisionError
from harness.machine import MachineConfig
from harness.p9.connect import connect
from harness.qemu_suite import QEMU_72_CASES, QOS_PREFIX, firmware_wrapper, keyword_expression
from harness.virtio_pci import Transport


def _rate(seconds: float, step: Callable[[], int]) -> tuple[int, float]:
    """Run ``step`` (which returns how many operations it did) for ``seconds``; ops and ops/s."""
    step()  # warm-up
    done = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        done += step()
    return done, done / elapsed


def bench_rtt(explicit: str | None, transport: Transport, seconds: float) -> int:
    binary, _ = provision.find_qemu(explicit)
    found = provision.probe(binary)
    found.require_usable()
    config = MachineConfig(binary=binary, transport=transport, accel=found.accel)
    with connect(config) as conn:
        qt, session = conn.machine.qtest, conn.session
        status_addr = conn.transport.queue.layout.used + 2

        def qtest_one() -> int:
            qt.readw(status_addr)
            return 1

        def qtest_batch() -> int:
            qt.exchange([f"readw {status_addr:#x}"] * 100)
            return 100

        def getattr_one() -> int:
            session.getattr(0)
            return 1

        rows = []
        for name, step in (
            ("qtest readw, sequential", qtest_one),
            ("qtest readw, 100 pipelined", qtest_batch),
            ("9P Tgetattr on the root, sequential", getattr_one),
        ):
            before = qt.round_trips
            count, rate = _rate(seconds, step)
            per_op = (qt.round_trips - before) / count
            rows.append((name, count, f"{rate:,.0f}", f"{1e6 / rate:.1f}", f"{per_op:.2f}"))
        session.clunk(0)
    print(f"QEMU {found.version} ({binary}), transport {transport}, accel {found.accel}")
    print(tabulate(rows, headers=("measurement", "ops", "ops/s", "µs/op", "socket writes/op"), tablefmt="github"))
    return 0


PROJECT = Path(__file__).resolve().parent.parent


def _timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str, int]:
    start = time.perf_counter()
    run = subprocess.run(argv, cwd=PROJECT, env=env, capture_output=True, text=True, check=False, timeout=600)
    return time.perf_counter() - start, run.stdout + run.stderr, run.returncode


def _passed(runner: str, output: str) -> int:
    if runner == "qos-test":
        return len(re.findall(r"^ok ", output, flags=re.MULTILINE))
    found = re.search(r"(\d+) passed", output)
    return int(found.group(1)) if found else 0


def bench_suite(explicit: str | None, rounds: int) -> int:
    """QEMU's 27 cases: our whole pytest process against QEMU's qos-test, same binary, same run."""
    binary, _ = provision.find_qemu(explicit)
    qos_test = provision.qos_test_for(binary)
    if qos_test is None:
        raise ProvisionError(f"no qos-test beside {binary}: run `python -m harness qemu build --with-qos-test`")
    wrapper = firmware_wrapper(binary)
    pytest = [sys.executable, "-m", "pytest", "cases/", "-q", "--qemu-binary", str(binary), "-k", keyword_expression()]
    runners = {
        "qos-test (QEMU's C suite)": ([str(qos_test), "-m", "slow", "-r", QOS_PREFIX],
                                      {**os.environ, "QTEST_QEMU_BINARY": str(wrapper)}),
        "ours, pytest": (pytest, None),
        "ours, pytest -n 2": ([*pytest, "-n", "2"], None),
    }  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in runners}
    try:
        for _ in range(rounds):
            for name, (argv, env) in runners.items():
                seconds, output, status = _timed(argv, env)
                passed = _passed("qos-test" if name.startswith("qos") else "pytest", output)
                if status != 0 or passed != len(QEMU_72_CASES):
                    raise HarnessError(
                        f"{name}: exit {status}, {passed} of {len(QEMU_72_CASES)} passed:\n{output[-3000:]}"
                    )
                times[name].append(seconds)
    finally:
        shutil.rmtree(wrapper.parent, ignore_errors=True)
    theirs = statistics.median(times["qos-test (QEMU's C suite)"])
    rows = [
        (
            name,
            len(QEMU_72_CASES),
            f"{min(t):.3f}",
            f"{statistics.median(t):.3f}",
            f"{statistics.median(t) / theirs:.2f}",
        )
        for name, t in times.items()
    ]
    print(f"QEMU's 27 virtio-9p cases on {binary}, {rounds} rounds each, interleaved; whole-process wall time")
    print(tabulate(rows, headers=("runner", "cases", "min s", "median s", "median / qos-test"), tablefmt="github"))
    return 0
