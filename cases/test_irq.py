"""Interrupts. "The device MUST set the [ISR] queue interrupt bit ... before sending [the] interrupt"
and "reading the ISR status ... resets it to 0 and causes the device to de-assert the
interrupt" (virtio 1.x 4.1.4.5). With qtest's irq_intercept_in on the IOAPIC the INTx line shows
as "IRQ raise/lower N" lines."""

from __future__ import annotations

import pytest

from fixtures.pool import Device
from fixtures.qos import qos
from harness.p9 import wire
from harness.p9.session import Session
from harness.pci import PCIBus, route_intx

IRQ = 11


@pytest.mark.fresh_qemu  # qtest allows one IRQ intercept per QEMU process
@qos("irq/intx/{transport}", backends=["synth"], transport=["modern", "legacy"])
def test_intx(attached: Session, device: Device, transport: str) -> None:
    """A completion raises the INTx line; the ISR reads 1 once, then 0, and the read lowers the
    line; no completion, no interrupt."""
    qt = device.machine.qtest
    dev = device.transport.dev
    route_intx(PCIBus(qt), dev.pci, IRQ)
    qt.irq_intercept_in("ioapic")
    dev.read_isr()  # clear what Tversion/Tattach left
    assert dev.read_isr() == 0
    log = len(qt.irq_log)
    attached.getattr(0, wire.GETATTR_BASIC)
    qt.flush()
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
