"""One call from a QEMU configuration to a 9P session: for tools (doctor, bench, REPL)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from harness.p9.channel import Channel
from harness.p9.session import Session
from harness.qemu.config import MachineConfig
from harness.qemu.machine import Machine
from harness.virtio.driver import Driver


@dataclass
class Connection:
    machine: Machine
    driver: Driver
    channel: Channel
    session: Session


@contextlib.contextmanager
def connect(config: MachineConfig, *, msize: int | None = 8192, attach: bool = True) -> Iterator[Connection]:
    """Start QEMU, bring up the device; with ``msize`` send Tversion, with ``attach`` Tattach fid 0."""
    with Machine(config) as machine:
        channel = Channel.of(machine)
        session = Session(channel)
        if msize is not None:
            session.version(msize)
            if attach:
                session.attach(0)
        yield Connection(machine, channel.driver, channel, session)
