"""PCI on the PC machine through qtest: config space via 0xcf8/0xcfc, BAR sizing and mapping,
capability walk.  Bus 0 only, as libqos.

BAR bases come from per-bus bump allocators (I/O from 0xc000, MMIO from 0xE0000000), so one
:class:`PCIBus` object per device bring-up maps BARs at the same addresses every time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from harness.errors import DeviceError, DeviceNotFound
from harness.virtio.guestmem import align_up

CONFIG_ADDRESS = 0xCF8
CONFIG_DATA = 0xCFC

VENDOR_ID = 0x00
DEVICE_ID = 0x02
COMMAND = 0x04
STATUS = 0x06
BAR0 = 0x10
SUBSYSTEM_ID = 0x2E
CAPABILITY_LIST = 0x34

COMMAND_IO = 0x1
COMMAND_MEMORY = 0x2
COMMAND_MASTER = 0x4
ENABLED = COMMAND_IO | COMMAND_MEMORY | COMMAND_MASTER
STATUS_CAP_LIST = 0x10

CAP_ID_VENDOR = 0x09
CAP_ID_MSIX = 0x11

IO_ALLOC_START, IO_ALLOC_END = 0xC000, 0x10000
MMIO_ALLOC_START, MMIO_ALLOC_END = 0xE0000000, 0x1_0000_0000


class PortAndMemory(Protocol):
    """The qtest operations this layer uses (a :class:`harness.qemu.qtest.QTest`)."""

    def inb(self, port: int) -> int: ...
    def inw(self, port: int) -> int: ...
    def inl(self, port: int) -> int: ...
    def outb(self, port: int, value: int) -> None: ...
    def outw(self, port: int, value: int) -> None: ...
    def outl(self, port: int, value: int) -> None: ...
    def readb(self, addr: int) -> int: ...
    def readw(self, addr: int) -> int: ...
    def readl(self, addr: int) -> int: ...
    def writeb(self, addr: int, value: int) -> None: ...
    def writew(self, addr: int, value: int) -> None: ...
    def writel(self, addr: int, value: int) -> None: ...


@dataclass(frozen=True)
class Bar:
    """A mapped BAR: register accesses at ``offset`` go to port or MMIO ``base + offset``."""

    qt: PortAndMemory
    index: int
    is_io: bool
    base: int
    size: int

    def _check(self, offset: int, width: int) -> int:
        if not 0 <= offset <= self.size - width:
            raise DeviceError(f"BAR{self.index} access at {offset:#x}+{width} outside its {self.size:#x} bytes")
        return self.base + offset

    def read8(self, offset: int) -> int:
        addr = self._check(offset, 1)
        return self.qt.inb(addr) if self.is_io else self.qt.readb(addr)

    def read16(self, offset: int) -> int:
        addr = self._check(offset, 2)
        return self.qt.inw(addr) if self.is_io else self.qt.readw(addr)

    def read32(self, offset: int) -> int:
        addr = self._check(offset, 4)
        return self.qt.inl(addr) if self.is_io else self.qt.readl(addr)

    def write8(self, offset: int, value: int) -> None:
        addr = self._check(offset, 1)
        (self.qt.outb if self.is_io else self.qt.writeb)(addr, value)

    def write16(self, offset: int, value: int) -> None:
        addr = self._check(offset, 2)
        (self.qt.outw if self.is_io else self.qt.writew)(addr, value)

    def write32(self, offset: int, value: int) -> None:
        addr = self._check(offset, 4)
        (self.qt.outl if self.is_io else self.qt.writel)(addr, value)


class PCIBus:
    """Bus 0 of the PC machine, with the BAR bump allocators of one bring-up."""

    def __init__(self, qt: PortAndMemory) -> None:
        self.qt = qt
        self._io_next = IO_ALLOC_START
        self._mmio_next = MMIO_ALLOC_START

    def _select(self, devfn: int, offset: int) -> int:
        self.qt.outl(CONFIG_ADDRESS, 0x80000000 | (devfn << 8) | (offset & 0xFC))
        return CONFIG_DATA + (offset & 3)

    def read8(self, devfn: int, offset: int) -> int:
        return self.qt.inb(self._select(devfn, offset))

    def read16(self, devfn: int, offset: int) -> int:
        return self.qt.inw(self._select(devfn, offset))

    def read32(self, devfn: int, offset: int) -> int:
        return self.qt.inl(self._select(devfn, offset))

    def write8(self, devfn: int, offset: int, value: int) -> None:
        self.qt.outb(self._select(devfn, offset), value)

    def write16(self, devfn: int, offset: int, value: int) -> None:
        self.qt.outw(self._select(devfn, offset), value)

    def write32(self, devfn: int, offset: int, value: int) -> None:
        self.qt.outl(self._select(devfn, offset), value)

    def functions(self) -> Iterator[PCIDevice]:
        """Every present function on bus 0 (vendor ID other than 0xffff)."""
        for slot in range(32):
            for fn in range(8):
                devfn = slot << 3 | fn
                ids = self.read32(devfn, VENDOR_ID)
                if ids & 0xFFFF == 0xFFFF:
                    if fn == 0:
                        break
                    continue
                yield PCIDevice(self, devfn, ids & 0xFFFF, ids >> 16)

    def find(self, vendor: int, device_ids: range | tuple[int, ...]) -> PCIDevice:
        for dev in self.functions():
            if dev.vendor_id == vendor and dev.device_id in device_ids:
                return dev
        raise DeviceNotFound(f"no PCI function {vendor:#06x}:{device_ids} on bus 0")

    def _alloc(self, is_io: bool, size: int) -> int:
        if is_io:
            base = align_up(self._io_next, size)
            if base + size > IO_ALLOC_END:
                raise DeviceError(f"PCI I/O space exhausted mapping {size:#x} bytes")
            self._io_next = base + size
        else:
            base = align_up(self._mmio_next, size)
            if base + size > MMIO_ALLOC_END:
                raise DeviceError(f"PCI MMIO space exhausted mapping {size:#x} bytes")
            self._mmio_next = base + size
        return base


@dataclass(frozen=True)
class Capability:
    cap_id: int
    offset: int


class PCIDevice:
    """One PCI function on bus 0."""

    def __init__(self, bus: PCIBus, devfn: int, vendor_id: int, device_id: int) -> None:
        self.bus, self.devfn = bus, devfn
        self.vendor_id, self.device_id = vendor_id, device_id

    def __repr__(self) -> str:
        slot, fn = self.devfn >> 3, self.devfn & 7
        return f"PCIDevice(00:{slot:02x}.{fn} {self.vendor_id:04x}:{self.device_id:04x})"

    def read8(self, offset: int) -> int:
        return self.bus.read8(self.devfn, offset)

    def read16(self, offset: int) -> int:
        return self.bus.read16(self.devfn, offset)

    def read32(self, offset: int) -> int:
        return self.bus.read32(self.devfn, offset)

    def write16(self, offset: int, value: int) -> None:
        self.bus.write16(self.devfn, offset, value)

    def write32(self, offset: int, value: int) -> None:
        self.bus.write32(self.devfn, offset, value)

    @property
    def subsystem_id(self) -> int:
        return self.read16(SUBSYSTEM_ID)

    def enable(self) -> None:
        """Turn on I/O, memory decoding and bus mastering, and check that they stuck."""
        self.write16(COMMAND, self.read16(COMMAND) | ENABLED)
        got = self.read16(COMMAND)
        if got & ENABLED != ENABLED:
            raise DeviceError(f"{self!r}: PCI command reads {got:#06x} after enabling {ENABLED:#x}")

    def enabled(self) -> bool:
        """I/O, memory decoding and bus mastering are on (a system reset turns them off)."""
        return self.read16(COMMAND) & ENABLED == ENABLED

    def map_bar(self, index: int) -> Bar:
        """Size BAR ``index`` the standard way, place it, and return it."""
        reg = BAR0 + 4 * index
        original = self.read32(reg)
        is_io = bool(original & 1)
        self.write32(reg, 0xFFFFFFFF)
        mask = self.read32(reg) & (~0x3 if is_io else ~0xF) & 0xFFFFFFFF
        if mask == 0:
            raise DeviceError(f"{self!r}: BAR{index} is not implemented")
        size = mask & -mask
        base = self.bus._alloc(is_io, size)
        self.write32(reg, base)
        if not is_io and (original >> 1) & 3 == 2:  # 64-bit memory BAR: upper half
            self.write32(reg + 4, 0)
        return Bar(self.bus.qt, index, is_io, base, size)

    def capabilities(self) -> list[Capability]:
        """The capability list, in the order the device links it."""
        if not self.read16(STATUS) & STATUS_CAP_LIST:
            return []
        caps: list[Capability] = []
        offset = self.read8(CAPABILITY_LIST) & 0xFC
        while offset and len(caps) < 48:
            caps.append(Capability(self.read8(offset), offset))
            offset = self.read8(offset + 1) & 0xFC
        return caps


PIIX3_IDS = (0x8086, 0x7000)
PIIX3_PIRQ_ROUTE = 0x60  # PIRQA..D route registers at 0x60-0x63; 0x80 = disabled


def route_intx(bus: PCIBus, device: PCIDevice, irq: int) -> int:
    """Route ``device``'s INTx line to ISA ``irq`` through the PIIX3 PIRQ registers, as firmware
    would (qtest runs no BIOS, so they stay disabled). Returns the PIRQ index used.

    QEMU's piix3 maps slot S, pin P (INTA = 1) to PIRQ ((P - 1) + (S - 1)) & 3.
    """
    piix3 = next((f for f in bus.functions() if (f.vendor_id, f.device_id) == PIIX3_IDS), None)
    if piix3 is None:
        raise DeviceNotFound("no PIIX3 ISA bridge (8086:7000) to route INTx through")
    pin = device.read8(0x3D)
    if pin == 0:
        raise DeviceError(f"{device!r} has no INTx pin")
    pirq = ((pin - 1) + ((device.devfn >> 3) - 1)) & 3
    bus.write8(piix3.devfn, PIIX3_PIRQ_ROUTE + pirq, irq)
    return pirq


MSIX_ENABLE = 1 << 15
MSIX_FUNCTION_MASK = 1 << 14


@dataclass(frozen=True)
class Msix:
    """A function's MSI-X capability with its vector table mapped."""

    device: PCIDevice
    cap: int
    table: Bar
    table_offset: int
    size: int

    @classmethod
    def find(cls, device: PCIDevice) -> Msix:
        cap = next((c.offset for c in device.capabilities() if c.cap_id == CAP_ID_MSIX), None)
        if cap is None:
            raise DeviceNotFound(f"{device!r} has no MSI-X capability")
        control = device.read16(cap + 2)
        where = device.read32(cap + 4)
        table = device.map_bar(where & 7)
        return cls(device, cap, table, where & ~7, (control & 0x7FF) + 1)

    def program(self, entry: int, address: int, data: int) -> None:
        """Vector ``entry`` writes ``data`` (32 bits) to ``address`` when it fires; unmasked."""
        if not 0 <= entry < self.size:
            raise DeviceError(f"MSI-X entry {entry} outside the table of {self.size}")
        base = self.table_offset + 16 * entry
        self.table.write32(base, address & 0xFFFFFFFF)
        self.table.write32(base + 4, address >> 32)
        self.table.write32(base + 8, data)
        self.table.write32(base + 12, 0)

    def enable(self) -> None:
        control = self.device.read16(self.cap + 2)
        self.device.write16(self.cap + 2, (control | MSIX_ENABLE) & ~MSIX_FUNCTION_MASK)
        if not self.device.read16(self.cap + 2) & MSIX_ENABLE:
            raise DeviceError(f"{self.device!r}: MSI-X enable did not stick")
