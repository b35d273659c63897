"""Shared guest RAM (``--guest-memory shared``) against the QEMU under test: what the harness writes
into its mapping QEMU reads, what QEMU writes the harness sees, and nothing outlives QEMU."""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.devices import QemuUnderTest
from harness.errors import GuestMemoryError, HarnessMisuse
from harness.p9.fixed_chains import keep_in_flight
from harness.p9.messages import Tgetattr
from harness.qemu import config as qemu_config
from harness.qemu.config import MachineConfig, SynthFs
from harness.qemu.machine import Machine
from harness.qemu.provision import usable_config
from harness.qemu.qemu_suite import QEMU_72_CASES
from harness.tools.connect import connect
from harness.virtio.guestmem import SharedRam
from tests.subrun import PROJECT, run_pytest


def shared(qemu: QemuUnderTest) -> MachineConfig:
    config, _ = usable_config(qemu.binary, SynthFs())
    return dataclasses.replace(config, guest_memory="shared")


@pytest.fixture
def no_memfd(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A host where memfd_create fails (the probe is asked afresh, and forgotten after)."""

    def refuse(name: str, flags: int = 0) -> int:
        raise OSError(errno.ENOSYS, "Function not implemented")

    qemu_config.shared_ram_problem.cache_clear()
    monkeypatch.setattr(os, "memfd_create", refuse)
    yield
    monkeypatch.undo()
    qemu_config.shared_ram_problem.cache_clear()


def test_shared_is_the_default_where_the_host_allows(qemu_under_test: QemuUnderTest) -> None:
    assert qemu_config.guest_memory("shared") == ("shared", "")
    assert usable_config(qemu_under_test.binary)[0].guest_memory == "shared"
    assert qemu_config.guest_memory("qtest") == ("qtest", "")


def test_no_shared_ram_is_one_message_and_the_qtest_path(
    no_memfd: None, qemu_under_test: QemuUnderTest, capsys: pytest.CaptureFixture[str]
) -> None:
    mode, note = qemu_config.guest_memory("shared")
    assert mode == "qtest"
    assert note == "guest memory: qtest, not shared (memfd_create: [Errno 38] Function not implemented)"
    for _ in range(3):  # a tool configures several machines: the note is said once
        assert usable_config(qemu_under_test.binary)[0].guest_memory == "qtest"
    assert capsys.readouterr().err.count("guest memory: qtest, not shared") <= 1
    with connect(usable_config(qemu_under_test.binary)[0]) as conn:  # and the qtest path works
        assert conn.machine.guest_ram is None and not conn.driver.mem.mapped
        conn.session.clunk(0)


def test_the_run_header_says_which_path(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """The header of a run names the guest-memory path, and a run asked for qtest gets it."""
    source = (
        "from fixtures.case_path import case_path\n"
        "@case_path('memory/path', backends=['synth'])\n"
        "def test_one(attached, device):\n    assert device.machine.guest_ram is None\n    attached.clunk(0)\n"
    )
    proc = run_pytest(tmp_path, qemu_under_test, "-v", "--guest-memory", "qtest", source=source)  # -v: the header
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "guest memory: qtest" in out


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


def test_qemus_27_cases_on_the_qtest_path(qemu_under_test: QemuUnderTest) -> None:
    """The qtest path stays whole: QEMU's own 27 cases, under their names, pass on it."""
    names = " or ".join(f"{name}]" for name in QEMU_72_CASES)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "cases/", "-q", "-p", "no:cacheprovider", "--qemu-suite", "-k", names,
         "--guest-memory", "qtest", "--qemu-binary", str(qemu_under_test.binary)],
        cwd=PROJECT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.search(rf"\b{len(QEMU_72_CASES)} passed\b", done.stdout), done.stdout[-2000:]


def test_the_asked_path_reaches_every_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """$V9P_GUEST_MEMORY (what ``python -m harness --guest-memory`` sets) is every machine's default,
    and the pytest option's default reads the same variable."""
    monkeypatch.setenv(qemu_config.GUEST_MEMORY_ENV, "qtest")
    assert MachineConfig(binary=Path("/q")).guest_memory == "qtest"
    monkeypatch.setenv(qemu_config.GUEST_MEMORY_ENV, "shared")
    assert MachineConfig(binary=Path("/q")).guest_memory == "shared"
    monkeypatch.setenv(qemu_config.GUEST_MEMORY_ENV, "both")
    with pytest.raises(HarnessMisuse, match="shared or qtest"):
        MachineConfig(binary=Path("/q"))
    assert f'os.environ.get("{qemu_config.GUEST_MEMORY_ENV}", "shared")' in (PROJECT / "fixtures/plugin.py").read_text()


def test_ring_indices_move_whole(qemu_under_test: QemuUnderTest) -> None:
    """load16/store16 of shared RAM agree with what qtest sees (little-endian), refuse what is out
    of range, and the load generator's ring, where a torn avail.idx once made QEMU serve entries
    never offered, runs every depth through index wrap-around without a stray completion."""
    with connect(shared(qemu_under_test)) as conn:
        ram = conn.driver.mem
        assert isinstance(ram, SharedRam)
        ram.store16(0x200000, 0x1234)
        assert conn.machine.qtest.memread(0x200000, 2) == b"\x34\x12" and ram.load16(0x200000) == 0x1234
        with pytest.raises(GuestMemoryError, match="outside"):
            ram.load16(ram.size - 1)
        request = Tgetattr(fid=0, request_mask=0x7FF)
        queue = conn.driver.queue
        for depth in (1, 8, 32, 8, 1, 128):  # tens of thousands of requests: used.idx wraps 65,535
            done, _ = keep_in_flight(conn.channel, request, depth, 0.25)
            assert done >= depth and queue.avail_idx == queue.last_used
        conn.session.clunk(0)
