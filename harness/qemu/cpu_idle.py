"""Idle CPUs that poll instead of halting, while QEMU is measured or tested.

A 9P request that QEMU's 9pfs serves wakes three threads in turn: QEMU's main loop (the notify),
a worker of its thread pool (the filesystem call) and the main loop again (the reply). When the
CPU a thread wakes on has halted, the wake-up waits for that CPU to come out of its idle state;
on a virtual machine it is a trip through the hypervisor. On this project's 2-vCPU VM that
waiting was most of a sequential request: the load generator's Tgetattr at one in flight went
from 10,000-13,000/s to 16,000-22,000/s with idle CPUs polling.

Linux's CPU latency QoS (``/dev/cpu_dma_latency``) does this without changing anything that
outlives the process: a request for 0 µs of exit latency holds while the file stays open, and
lapses when it is closed, by the kernel, however the process ends (as cyclictest and tuned's
latency-performance profile use it). Writing it needs root; reading it says what every holder
together asks for.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from pathlib import Path

LATENCY_QOS = Path("/dev/cpu_dma_latency")
CPUIDLE = Path("/sys/devices/system/cpu/cpuidle")
#: how long an idle vCPU polls before it halts, under the haltpoll driver (0: it halts at once)
HALT_POLL_NS = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
_VALUE = struct.Struct("<i")


@contextlib.contextmanager
def cpus_kept_awake(wanted: bool = True, device: Path = LATENCY_QOS) -> Iterator[str | None]:
    """While inside: idle CPUs poll rather than halt (``wanted`` False: nothing is asked).
    Yields None when the request holds, else why it does not (no such file, not root)."""
    if not wanted:
        yield "not asked for"
        return
    try:
        fd = os.open(device, os.O_WRONLY | os.O_CLOEXEC)  # not inherited: QEMU does not hold it
    except OSError as err:
        yield f"{device}: {err.strerror}"
        return
    try:
        try:
            os.write(fd, _VALUE.pack(0))
        except OSError as err:
            yield f"{device}: {err.strerror}"
            return
        yield None
    finally:
        os.close(fd)


def state(device: Path = LATENCY_QOS) -> str:
    """What the bench header says of idle CPUs: held polling (by us or anyone), or allowed to
    halt; empty where the request cannot be read (not root, no such file)."""
    try:
        with device.open("rb") as qos:
            (microseconds,) = _VALUE.unpack(qos.read(_VALUE.size))
    except (OSError, struct.error):
        return ""
    if microseconds == 0:
        return "idle CPUs kept polling (CPU latency QoS 0 µs)"
    return "idle CPUs may halt"


def how_cpus_idle(cpuidle: Path = CPUIDLE, halt_poll_ns: Path = HALT_POLL_NS) -> str:
    """The idle driver and, under haltpoll (a VM guest's), how long a vCPU polls before halting:
    what ``doctor`` shows, since it decides what a wake-up costs here."""
    try:
        driver = (cpuidle / "current_driver").read_text().strip()
    except OSError:
        return "no cpuidle driver"
    if driver == "haltpoll":
        with contextlib.suppress(OSError, ValueError):
            driver += f", polling {int(halt_poll_ns.read_text())} ns before halting"
    return driver
