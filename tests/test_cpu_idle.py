"""Idle CPUs kept polling (harness/qemu/cpu_idle.py): the request is 0 µs, held exactly while
inside, and a host that refuses it is said, never raised."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from fixtures.devices import QemuUnderTest
from harness.qemu.cpu_idle import LATENCY_QOS, cpus_kept_awake, how_cpus_idle, state
from tests.subrun import run_pytest


def open_fds_on(path: Path) -> int:
    return sum(1 for fd in Path("/proc/self/fd").iterdir() if os.path.realpath(fd) == str(path))


def test_the_request_is_zero_microseconds_held_while_inside(tmp_path: Path) -> None:
    device = tmp_path / "cpu_dma_latency"
    device.write_bytes(struct.pack("<i", 2_000_000_000))
    with cpus_kept_awake(device=device) as unheld:
        assert unheld is None
        assert device.read_bytes() == struct.pack("<i", 0)
        assert open_fds_on(device) == 1
        assert state(device).startswith("idle CPUs kept polling")
    assert open_fds_on(device) == 0


def test_a_host_without_the_request_is_said_not_raised(tmp_path: Path) -> None:
    with cpus_kept_awake(device=tmp_path / "none") as unheld:
        assert unheld is not None and "No such file" in unheld
    assert state(tmp_path / "none") == ""
    with cpus_kept_awake(False, device=tmp_path / "none") as unheld:
        assert unheld == "not asked for"
    assert not (tmp_path / "none").exists()


@pytest.mark.skipif(not os.access(LATENCY_QOS, os.W_OK), reason=f"needs root and {LATENCY_QOS}")
def test_on_this_host_idle_cpus_poll_inside() -> None:
    with cpus_kept_awake() as unheld:
        assert unheld is None
        assert state() == "idle CPUs kept polling (CPU latency QoS 0 µs)"


@pytest.mark.skipif(not os.access(LATENCY_QOS, os.W_OK), reason=f"needs root and {LATENCY_QOS}")
def test_a_run_with_the_option_says_it_holds(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    source = "def test_nothing() -> None:\n    pass\n"
    for args, env, said in (
        (("--keep-cpus-awake",), {}, True),
        ((), {"V9P_KEEP_CPUS_AWAKE": "1"}, True),
        ((), {"V9P_KEEP_CPUS_AWAKE": "0"}, False),
    ):
        run = run_pytest(tmp_path, qemu_under_test, "-v", *args, source=source, env=env)
        output, _ = run.communicate(timeout=60)
        assert run.returncode == 0, output
        assert ("idle CPUs kept polling" in output) == said, output


def test_how_idle_cpus_wait_is_read_from_sysfs(tmp_path: Path) -> None:
    (tmp_path / "current_driver").write_text("haltpoll\n")
    (tmp_path / "poll_ns").write_text("0\n")
    assert how_cpus_idle(tmp_path, tmp_path / "poll_ns") == "haltpoll, polling 0 ns before halting"
    (tmp_path / "current_driver").write_text("intel_idle\n")
    assert how_cpus_idle(tmp_path, tmp_path / "poll_ns") == "intel_idle"
    assert how_cpus_idle(tmp_path / "none") == "no cpuidle driver"
