"""Interrupts. "The device MUST set the [ISR] queue interrupt bit ... before sending [the] interrupt"
and "reading the ISR status ... resets it to 0 and causes the device to de-assert the
interrupt" (virtio 1.x 4.1.4.5). With qtest's irq_intercept_in on the IOAPIC the INTx line shows
as "IRQ raise/lower N" lines."""

from __future__ import annotations

import pytest

from fixtures.case_path import case_path
from fixtures.pool import Device
from harness.p9 import wire
from harness.p9.session import Session
from harness.virtio.driver import DEFAULT_FEATURES, Driver
from harness.virtio.pci import Msix, PCIBus, route_intx
from harness.virtio.virtio_pci import F_RING_EVENT_IDX, NO_VECTOR

IRQ = 11


@pytest.mark.fresh_qemu  # qtest allows one IRQ intercept per QEMU process
@pytest.mark.virtio_features(DEFAULT_FEATURES)  # an interrupt per completion: no EVENT_IDX
@case_path("irq/intx/{transport}", backends=["synth"], transport=["modern", "legacy"])
def test_intx(attached: Session, device: Device, transport: str) -> None:
    """A completion raises the INTx line; the ISR reads 1 once, then 0, and the read lowers the
    line; no completion, no interrupt."""
    qt = device.machine.qtest
    dev = device.driver.function
    route_intx(PCIBus(qt), dev.pci, IRQ)
    qt.irq_intercept_in("ioapic")
    dev.read_isr()  # clear what Tversion/Tattach left
    assert dev.read_isr() == 0
    log = len(qt.irq_log)
    attached.getattr(0, wire.GETATTR_BASIC)
    device.driver.settle()  # the IRQ line QEMU sent with the completion has been read
    assert qt.irq_log[log:] == [("raise", IRQ)]
    assert qt.irq_levels[IRQ] is True
    assert dev.read_isr() & 1 == 1
    assert qt.irq_log[log:] == [("raise", IRQ), ("lower", IRQ)]
    assert dev.read_isr() == 0
    assert qt.irq_levels[IRQ] is False
    for _ in range(3):  # reads of the root that complete one by one: one raise/lower pair each
        attached.getattr(0, wire.GETATTR_BASIC)
        assert dev.read_isr() & 1 == 1
    assert qt.irq_log[log:] == [("raise", IRQ), ("lower", IRQ)] * 4


@pytest.mark.fresh_qemu  # MSI-X stays enabled in PCI config space across a virtio reset
@pytest.mark.virtio_features(DEFAULT_FEATURES)  # an interrupt per completion: no EVENT_IDX
@case_path("irq/msix/{transport}", backends=["synth"], transport=["modern", "legacy"])
def test_msix(attached: Session, device: Device, transport: str) -> None:
    """With MSI-X enabled and queue 0 on vector 0, each completion is a message: the vector's data
    written to its address (here a guest page we watch). With the vector removed (NO_VECTOR), a
    completion sends nothing."""
    driver = device.driver
    dev = driver.function
    dev.read_isr()
    msix = Msix.find(dev.pci)
    assert msix.size >= 2
    with driver.guest_buffer(4096) as target:
        driver.mem.memwrite(target, bytes(4096))
        msix.program(0, target, 0xC0DE0000)
        msix.enable()
        assert dev.set_queue_vector(0, 0) == 0
        for n in range(1, 4):
            assert message_after_getattr(attached, driver, target), f"message {n} not written"
        assert dev.set_queue_vector(0, NO_VECTOR) == NO_VECTOR
        assert not message_after_getattr(attached, driver, target), "a message was sent for a queue without a vector"


def message_after_getattr(attached: Session, driver: Driver, target: int, used_event: int | None = None) -> bool:
    """Clear the message page, (set used_event,) complete one Tgetattr: was the vector's message
    written? Read from the page, as a guest's handler would, once QEMU's main loop is past the
    completion (on shared RAM the used entry can be seen before the message lands)."""
    driver.mem.memwrite(target, bytes(4))
    if used_event is not None:
        driver.queue.set_used_event(used_event)
    attached.getattr(0, wire.GETATTR_BASIC)
    driver.settle()
    return int.from_bytes(driver.mem.memread(target, 4), "little") == 0xC0DE0000


@pytest.mark.fresh_qemu  # MSI-X stays enabled in PCI config space across a virtio reset
@pytest.mark.virtio_features(DEFAULT_FEATURES | F_RING_EVENT_IDX)
@case_path("irq/used_event/{transport}", backends=["synth"], transport=["modern", "legacy"])
def test_used_event(attached: Session, device: Device, transport: str) -> None:
    """With VIRTIO_RING_F_EVENT_IDX the device interrupts only when used.idx passes used_event
    (virtio 1.x 2.7.10, vring_need_event): a used_event ahead of the next completion gets no
    message, one at the current index gets exactly one, one already passed gets none."""
    driver = device.driver
    dev = driver.function
    queue = driver.queue
    assert driver.features & F_RING_EVENT_IDX
    msix = Msix.find(dev.pci)
    with driver.guest_buffer(4096) as target:
        driver.mem.memwrite(target, bytes(4096))
        msix.program(0, target, 0xC0DE0000)
        msix.enable()
        assert dev.set_queue_vector(0, 0) == 0

        def completion_signalled(used_event: int) -> bool:
            return message_after_getattr(attached, driver, target, used_event)

        assert not completion_signalled(queue.last_used + 5), "interrupt before used_event was reached"
        assert completion_signalled(queue.last_used), "no interrupt when used.idx passed used_event"
        assert not completion_signalled(queue.last_used - 1), "interrupt for a used_event already passed"
        assert completion_signalled(queue.last_used), "no interrupt when asked again"
