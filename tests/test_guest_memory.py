"""Shared guest RAM (``--guest-memory shared``) against the QEMU under test: what the harness writes
into its mapping QEMU reads, what QEMU writes the harness sees, and nothing outlives QEMU."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from fixtures.devices import QemuUnderTest
from harness.errors import GuestMemoryError
from harness.p9.messages import Tgetattr
from harness.qemu.machine import Machine, MachineConfig, SynthFs
from harness.qemu.provision import usable_config
from harness.tools.connect import connect
from harness.virtio.guestmem import SharedRam


def shared(qemu: QemuUnderTest) -> MachineConfig:
    config, _ = usable_config(qemu.binary, SynthFs())
    return dataclasses.replace(config, guest_memory="shared")


def test_the_mapping_is_the_guests_ram(qemu_under_test: QemuUnderTest) -> None:
    with Machine(shared(qemu_under_test)) as machine:
        assert machine.guest_ram is not None and any("memory-backend=v9p-ram" in arg for arg in machine.argv)
        ram = SharedRam(machine.guest_ram)
        ram.memwrite(0x200000, b"harness wrote this")
        assert machine.qtest.memread(0x200000, 18) == b"harness wrote this"
        machine.qtest.memwrite(0x300000, b"qtest wrote this")
        machine.qtest.flush()
        assert machine.qtest.memread(0x300000, 1) == b"q"  # the write is done before we look
        assert ram.memread(0x300000, 16) == b"qtest wrote this"
        with pytest.raises(GuestMemoryError, match="outside"):
            ram.memread(ram.size - 4, 8)
    with pytest.raises(GuestMemoryError, match="gone"):
        ram.memread(0x200000, 4)


def test_a_session_runs_on_it_and_leaves_nothing(qemu_under_test: QemuUnderTest) -> None:
    before = set(os.listdir("/dev/shm")) if Path("/dev/shm").is_dir() else set()
    with connect(shared(qemu_under_test)) as conn:
        assert isinstance(conn.driver.mem, SharedRam)
        pid = conn.machine.pid
        assert conn.session.rpc(Tgetattr(fid=0, request_mask=0x7FF)).qid.type == 0x80
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert "memfd:v9p-guest-ram" in maps  # QEMU's RAM is the memfd, opened again by QEMU
        conn.session.clunk(0)
    after = set(os.listdir("/dev/shm")) if Path("/dev/shm").is_dir() else set()
    assert after <= before  # no file anywhere: the memfd ended with both processes
