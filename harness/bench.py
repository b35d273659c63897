"""Benchmarks: commands that print tables, never timed tests."""

from __future__ import annotations

import time
from collections.abc import Callable

from tabulate import tabulate

from harness import provision
from harness.machine import MachineConfig
from harness.p9.connect import connect
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
    config = MachineConfig(binary=binary, transport=transport, accel=found.accel)  # type: ignore[arg-type]
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
