"""Hot-unplug of the virtio-9p device (QMP ``device_del`` and the guest's ACPI eject, as libqos
does it): the device goes away with DEVICE_DELETED while fids are open, QEMU lives on, and it stops
cleanly afterwards. Device unrealize (v9fs_device_unrealize_common) is where QEMU's hot-unplug
use-after-free was; run it under an ASan build to see one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fixtures.case_path import case_path
from fixtures.pool import Device
from harness.errors import QEMUError
from harness.p9.messages import Twrite, Txattrwalk
from harness.p9.session import Session
from harness.qemu import versions

#: how long a plain build gets for the whole unplug (device_del to DEVICE_DELETED) before QEMU is
#: called wedged: an order of magnitude above what an unplug with a request in flight takes where
#: the case passes (7.2.22), for a CI host that takes back part of the CPU time
#: (Machine.wedge_bound stretches it for sanitizers)
UNPLUG_BOUND = 2.5


def pci_slots(device: Device) -> set[int]:
    """The PCI slots QEMU's bus 0 has devices in (QMP query-pci)."""
    buses = device.machine.qmp("query-pci")
    assert isinstance(buses, list)
    return {entry["slot"] for bus in buses for entry in bus["devices"]}


@pytest.mark.fresh_qemu  # the device is gone afterwards
@case_path("hotplug/unplug_with_open_fids", backends=["local", "synth"])
def test_unplug_with_open_fids(device: Device, backend: str, local_export: Path) -> None:
    """Unplugged while it holds a root fid, an open file, an open directory and an xattr fid: the
    device leaves the bus (DEVICE_DELETED, slot 4 empty), QEMU keeps running and answering QMP,
    the export's files are as they were, and QEMU then quits with status 0."""
    p9 = Session(device.channel)
    p9.version(8192)
    p9.attach(0)
    name = "WRITE" if backend == "synth" else "unplug-file"
    if backend == "local":
        (local_export / name).write_bytes(b"kept")
    opened = p9.walk_fid(0, [name])
    p9.lopen(opened, os.O_RDONLY)
    directory = p9.walk_fid(0, [])
    p9.lopen(directory, os.O_RDONLY | os.O_DIRECTORY)
    xattr = p9.new_fid()
    p9.send(Txattrwalk(fid=0, newfid=xattr, name="")).wait()
    assert 4 in pci_slots(device)
    device.machine.unplug()
    p9.forget()
    p9.forget()  # the device and its requests are gone
    assert device.machine.is_running() and 4 not in pci_slots(device)
    assert device.machine.shutdown(timeout=5) == 0, device.machine.output_tail()
    if backend == "local":
        assert (local_export / name).read_bytes() == b"kept"
    assert device.machine.shutdown() == 0, device.machine.output_tail()


@pytest.mark.slow
@pytest.mark.qemu_bug(
    introduced_in=versions.UNPLUG_DRAIN,
    fixed_in=(),
    reason="the use-after-free fix makes unrealize wait for every request in flight, and a blocked "
    "one (only a Tflush ends it) never finishes: QEMU's main loop wedges (no DEVICE_DELETED, qtest "
    "and QMP unanswered), as a virtio reset with a blocked request does",
    raises=QEMUError,
    upstream="reset-wedge",
)
@pytest.mark.needs_synth_tree
@pytest.mark.fresh_qemu
@case_path("hotplug/unplug_with_request_in_flight", backends=["synth"])
def test_unplug_with_request_in_flight(device: Device) -> None:
    """Unplugged while a request (the synth FLUSH file's blocking write) is in the server: the
    device still goes away (DEVICE_DELETED), QEMU stays responsive and then stops cleanly.
    (Before 210701c82e, 7.2 included, this passes while unrealize frees the device under the
    running request: a use-after-free only an ASan build shows.)"""
    p9 = Session(device.channel)
    p9.version(8192)
    p9.attach(0)
    fid = p9.walk_fid(0, ["FLUSH"])
    p9.lopen(fid, os.O_WRONLY)
    p9.send(Twrite(fid=fid, offset=0, data=b"\x01"))  # blocks until flushed
    try:
        device.machine.unplug(timeout=device.machine.wedge_bound(UNPLUG_BOUND))
    except QEMUError:
        device.abandon()  # wedged: it is killed, not asked
        raise
    p9.forget()  # the device and its requests are gone
    assert device.machine.is_running() and 4 not in pci_slots(device)
    assert device.machine.shutdown(timeout=5) == 0, device.machine.output_tail()
