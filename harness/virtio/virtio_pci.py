"""virtio over PCI: the modern (virtio 1.x capabilities, BAR4 MMIO) and the legacy (BAR0 I/O)
register layouts behind one interface, and the device initialisation sequence of virtio 1.x
section 3.1.1, checked step by step.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Literal

from harness.errors import DeviceError, DeviceNotFound, NegotiationError
from harness.virtio.pci import CAP_ID_VENDOR, Bar, PCIBus, PCIDevice
from harness.virtio.virtqueue import RingLayout

VIRTIO_VENDOR = 0x1AF4
#: Transitional device IDs are 0x1000 + type - 1 (0x1009 for 9p); modern ones 0x1040 + type.
TRANSITIONAL_IDS = range(0x1000, 0x1040)
MODERN_BASE = 0x1040
DEVICE_TYPE_9P = 9

STATUS_ACKNOWLEDGE = 0x01
STATUS_DRIVER = 0x02
STATUS_DRIVER_OK = 0x04
STATUS_FEATURES_OK = 0x08
STATUS_NEEDS_RESET = 0x40
STATUS_FAILED = 0x80

F_RING_INDIRECT_DESC = 1 << 28
F_RING_EVENT_IDX = 1 << 29
F_BAD_FEATURE = 1 << 30
F_VERSION_1 = 1 << 32

# modern virtio_pci_cap cfg_type values
CAP_COMMON, CAP_NOTIFY, CAP_ISR, CAP_DEVICE = 1, 2, 3, 4

# modern common configuration offsets
C_DFSELECT, C_DF, C_GFSELECT, C_GF = 0x00, 0x04, 0x08, 0x0C
C_NUM_QUEUES, C_STATUS, C_Q_SELECT, C_Q_SIZE = 0x12, 0x14, 0x16, 0x18
C_Q_MSIX_VECTOR, C_Q_ENABLE, C_Q_NOTIFY_OFF = 0x1A, 0x1C, 0x1E
C_Q_DESC, C_Q_AVAIL, C_Q_USED = 0x20, 0x28, 0x30

# legacy I/O BAR offsets
L_HOST_FEATURES, L_GUEST_FEATURES, L_QUEUE_PFN, L_QUEUE_NUM = 0, 4, 8, 12
L_QUEUE_SEL, L_QUEUE_NOTIFY, L_STATUS, L_ISR, L_CONFIG = 14, 16, 18, 19, 20
L_MSIX_QUEUE_VECTOR = 22  # exists only while MSI-X is enabled
NO_VECTOR = 0xFFFF

Transport = Literal["modern", "legacy"]


class VirtioPCI(abc.ABC):
    """One virtio function's registers, whatever the layout."""

    modern: bool

    def __init__(self, pci: PCIDevice) -> None:
        self.pci = pci

    @abc.abstractmethod
    def get_status(self) -> int: ...

    @abc.abstractmethod
    def set_status(self, status: int) -> None: ...

    @abc.abstractmethod
    def device_features(self) -> int: ...

    @abc.abstractmethod
    def set_driver_features(self, features: int) -> None: ...

    @abc.abstractmethod
    def queue_size(self, index: int) -> int: ...

    @abc.abstractmethod
    def setup_queue(self, index: int, layout: RingLayout) -> None: ...

    @abc.abstractmethod
    def notify(self, index: int) -> None: ...

    @abc.abstractmethod
    def read_config(self, offset: int, size: int) -> bytes: ...

    @abc.abstractmethod
    def read_isr(self) -> int: ...

    @abc.abstractmethod
    def set_queue_vector(self, index: int, vector: int) -> int:
        """Point queue ``index`` at MSI-X ``vector``; returns what the device read back
        (NO_VECTOR, 0xffff, if it refused)."""


class ModernVirtioPCI(VirtioPCI):
    modern = True

    def __init__(self, pci: PCIDevice) -> None:
        super().__init__(pci)
        regions = self._find_regions()
        missing = {CAP_COMMON, CAP_NOTIFY, CAP_ISR, CAP_DEVICE} - regions.keys()
        if missing:
            raise DeviceNotFound(f"{pci!r}: virtio capabilities {sorted(missing)} missing: not a modern device")
        bars = {region.bar for region in regions.values()}
        mapped = {index: pci.map_bar(index) for index in sorted(bars)}
        self.common = _Window(mapped[regions[CAP_COMMON].bar], regions[CAP_COMMON].offset)
        self.isr = _Window(mapped[regions[CAP_ISR].bar], regions[CAP_ISR].offset)
        self.device = _Window(mapped[regions[CAP_DEVICE].bar], regions[CAP_DEVICE].offset)
        self.notify_window = _Window(mapped[regions[CAP_NOTIFY].bar], regions[CAP_NOTIFY].offset)
        self.notify_multiplier = regions[CAP_NOTIFY].multiplier
        self._notify_offsets: dict[int, int] = {}

    def _find_regions(self) -> dict[int, _Region]:
        regions: dict[int, _Region] = {}
        for cap in self.pci.capabilities():
            if cap.cap_id != CAP_ID_VENDOR:
                continue
            cfg_type = self.pci.read8(cap.offset + 3)
            if cfg_type in regions or cfg_type not in (CAP_COMMON, CAP_NOTIFY, CAP_ISR, CAP_DEVICE):
                continue  # the spec says: use the first of each type
            multiplier = self.pci.read32(cap.offset + 16) if cfg_type == CAP_NOTIFY else 0
            regions[cfg_type] = _Region(self.pci.read8(cap.offset + 4), self.pci.read32(cap.offset + 8), multiplier)
        return regions

    def get_status(self) -> int:
        return self.common.bar.read8(self.common.offset + C_STATUS)

    def set_status(self, status: int) -> None:
        self.common.bar.write8(self.common.offset + C_STATUS, status)

    def device_features(self) -> int:
        c = self.common
        c.bar.write32(c.offset + C_DFSELECT, 0)
        low = c.bar.read32(c.offset + C_DF)
        c.bar.write32(c.offset + C_DFSELECT, 1)
        return low | c.bar.read32(c.offset + C_DF) << 32

    def set_driver_features(self, features: int) -> None:
        c = self.common
        c.bar.write32(c.offset + C_GFSELECT, 0)
        c.bar.write32(c.offset + C_GF, features & 0xFFFFFFFF)
        c.bar.write32(c.offset + C_GFSELECT, 1)
        c.bar.write32(c.offset + C_GF, features >> 32)

    def queue_size(self, index: int) -> int:
        c = self.common
        c.bar.write16(c.offset + C_Q_SELECT, index)
        return c.bar.read16(c.offset + C_Q_SIZE)

    def setup_queue(self, index: int, layout: RingLayout) -> None:
        c = self.common
        c.bar.write16(c.offset + C_Q_SELECT, index)
        c.bar.write16(c.offset + C_Q_SIZE, layout.size)
        for reg, addr in ((C_Q_DESC, layout.desc), (C_Q_AVAIL, layout.avail), (C_Q_USED, layout.used)):
            c.bar.write32(c.offset + reg, addr & 0xFFFFFFFF)
            c.bar.write32(c.offset + reg + 4, addr >> 32)
        notify_off = c.bar.read16(c.offset + C_Q_NOTIFY_OFF)
        self._notify_offsets[index] = self.notify_window.offset + notify_off * self.notify_multiplier
        c.bar.write16(c.offset + C_Q_ENABLE, 1)
        if c.bar.read16(c.offset + C_Q_ENABLE) != 1:
            raise NegotiationError(f"queue {index}: queue_enable did not read back 1")

    def notify(self, index: int) -> None:
        self.notify_window.bar.write16(self._notify_offsets[index], index)

    def read_config(self, offset: int, size: int) -> bytes:
        return bytes(self.device.bar.read8(self.device.offset + offset + i) for i in range(size))

    def read_isr(self) -> int:
        return self.isr.bar.read8(self.isr.offset)

    def set_queue_vector(self, index: int, vector: int) -> int:
        c = self.common
        c.bar.write16(c.offset + C_Q_SELECT, index)
        c.bar.write16(c.offset + C_Q_MSIX_VECTOR, vector)
        return c.bar.read16(c.offset + C_Q_MSIX_VECTOR)


class LegacyVirtioPCI(VirtioPCI):
    modern = False

    def __init__(self, pci: PCIDevice) -> None:
        super().__init__(pci)
        self.io = pci.map_bar(0)
        if not self.io.is_io:
            raise DeviceNotFound(f"{pci!r}: BAR0 is not an I/O BAR: no legacy virtio interface")

    def get_status(self) -> int:
        return self.io.read8(L_STATUS)

    def set_status(self, status: int) -> None:
        self.io.write8(L_STATUS, status)

    def device_features(self) -> int:
        return self.io.read32(L_HOST_FEATURES)

    def set_driver_features(self, features: int) -> None:
        if features >> 32:
            raise NegotiationError(f"legacy virtio cannot take features above bit 31: {features:#x}")
        self.io.write32(L_GUEST_FEATURES, features)

    def queue_size(self, index: int) -> int:
        self.io.write16(L_QUEUE_SEL, index)
        return self.io.read16(L_QUEUE_NUM)

    def setup_queue(self, index: int, layout: RingLayout) -> None:
        if layout.desc % 4096:
            raise DeviceError(f"legacy virtio needs a page-aligned ring, got {layout.desc:#x}")
        if layout.size != self.queue_size(index):
            raise DeviceError(f"legacy virtio cannot resize queue {index} to {layout.size}")
        self.io.write16(L_QUEUE_SEL, index)
        self.io.write32(L_QUEUE_PFN, layout.desc // 4096)

    def notify(self, index: int) -> None:
        self.io.write16(L_QUEUE_NOTIFY, index)

    def read_config(self, offset: int, size: int) -> bytes:
        return bytes(self.io.read8(L_CONFIG + offset + i) for i in range(size))

    def read_isr(self) -> int:
        return self.io.read8(L_ISR)

    def set_queue_vector(self, index: int, vector: int) -> int:
        """Only with MSI-X enabled, when the legacy layout grows two vector registers at 20 and 22
        (and device configuration moves to 24)."""
        self.io.write16(L_QUEUE_SEL, index)
        self.io.write16(L_MSIX_QUEUE_VECTOR, vector)
        return self.io.read16(L_MSIX_QUEUE_VECTOR)


@dataclass(frozen=True)
class _Region:
    bar: int
    offset: int
    multiplier: int


@dataclass(frozen=True)
class _Window:
    bar: Bar
    offset: int


def open_virtio_pci(bus: PCIBus, device_type: int, transport: Transport) -> VirtioPCI:
    """Find the virtio function of ``device_type``, enable it and map the chosen interface."""
    ids = (*TRANSITIONAL_IDS, MODERN_BASE + device_type)
    for pci in bus.functions():
        if pci.vendor_id != VIRTIO_VENDOR or pci.device_id not in ids:
            continue
        kind = pci.subsystem_id if pci.device_id in TRANSITIONAL_IDS else pci.device_id - MODERN_BASE
        if kind != device_type:
            continue
        pci.enable()
        return ModernVirtioPCI(pci) if transport == "modern" else LegacyVirtioPCI(pci)
    raise DeviceNotFound(f"no virtio device of type {device_type} on PCI bus 0")


def negotiate(dev: VirtioPCI, wanted: int, history: list[int] | None = None) -> int:
    """Reset, ACKNOWLEDGE, DRIVER, features, FEATURES_OK: virtio 1.x 3.1.1 steps 1-5.

    Returns the negotiated features; every status read back is appended to ``history``. The
    caller sets up queues, then calls :func:`driver_ok`.
    """
    steps = history if history is not None else []
    dev.set_status(0)
    steps.append(_expect_status(dev, 0, "reset"))
    dev.set_status(STATUS_ACKNOWLEDGE)
    steps.append(_expect_status(dev, STATUS_ACKNOWLEDGE, "ACKNOWLEDGE"))
    dev.set_status(STATUS_ACKNOWLEDGE | STATUS_DRIVER)
    steps.append(_expect_status(dev, STATUS_ACKNOWLEDGE | STATUS_DRIVER, "DRIVER"))
    offered = dev.device_features()
    if dev.modern and not offered & F_VERSION_1:
        raise NegotiationError(f"modern device does not offer VERSION_1: {offered:#x}")
    features = offered & wanted
    if dev.modern:
        features |= F_VERSION_1
    else:
        features &= 0xFFFFFFFF
    dev.set_driver_features(features)
    if dev.modern:
        step = STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK
        dev.set_status(step)
        steps.append(_expect_status(dev, step, "FEATURES_OK (device refused the feature subset)"))
    return features


def driver_ok(dev: VirtioPCI, history: list[int] | None = None) -> None:
    status = dev.get_status() | STATUS_DRIVER_OK
    dev.set_status(status)
    got = _expect_status(dev, status, "DRIVER_OK")
    if history is not None:
        history.append(got)


def _expect_status(dev: VirtioPCI, want: int, step: str) -> int:
    got = dev.get_status()
    if got != want:
        raise NegotiationError(f"virtio status after {step}: read {got:#04x}, expected {want:#04x}")
    return got
