"""Our driver of one virtio-9p PCI function, as a guest kernel's would be.

It finds and maps the function once per QEMU, negotiates features (virtio 1.x 3.1.1, every step
read back), lays out the request queue in guest memory and owns the guest allocator.  The 9P
channel (:mod:`harness.p9.channel`) sends frames through it; the cases that drive the ring,
the interrupts or config space themselves use its public surface, documented here:

- ``function``: the PCI function's virtio registers (config, ISR, queue vectors, notify)
- ``queue``: the split virtqueue of request queue 0 (indices, free descriptors, used_event)
- ``features``, ``status_history``: what the last bring-up negotiated and read back
- ``notifications`` / ``suppressed_notifications``: kicks sent / left out under EVENT_IDX;
  ``renotifications``: notifies with nothing new (:meth:`notify_again`)
- :meth:`guest_buffer`: guest memory of one's own, freed on leaving the block
- :meth:`reset`: device reset and a new bring-up (the per-test queue reset)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from harness.errors import DeviceError
from harness.qemu.machine import Machine
from harness.qemu.qtest import QTest
from harness.virtio.guestmem import GuestAllocator, GuestMemory, SharedRam, read_ram_size
from harness.virtio.pci import PCIBus
from harness.virtio.virtio_pci import (
    DEVICE_TYPE_9P,
    F_RING_EVENT_IDX,
    F_RING_INDIRECT_DESC,
    Transport,
    VirtioPCI,
    driver_ok,
    negotiate,
    open_virtio_pci,
)
from harness.virtio.virtqueue import RingLayout, SplitVirtqueue

#: VIRTIO_9P_MOUNT_TAG: the device configuration carries the mount tag.
F_MOUNT_TAG = 1 << 0
#: What the harness asks for by default: the mount tag, and indirect tables (used only when a
#: case lays a request out that way). EVENT_IDX is opt-in (``--event-idx``), as libqos masks it.
DEFAULT_FEATURES = F_MOUNT_TAG | F_RING_INDIRECT_DESC
REQUEST_QUEUE = 0


class Driver:
    """The virtio-9p function of one QEMU (reached through ``qtest``), brought up."""

    def __init__(
        self, qtest: QTest, transport: Transport, *, features: int = DEFAULT_FEATURES, mem: GuestMemory | None = None
    ) -> None:
        #: MMIO, port I/O, and guest memory unless ``mem`` is given
        self.qtest = qtest
        #: guest memory for the ring, requests and replies: ``mem`` (shared RAM) or qtest
        self.mem: GuestMemory = mem if mem is not None else qtest
        self.transport = transport
        self.wanted_features = features
        self._ram_size = read_ram_size(qtest)
        self.function = self._discover()
        self.allocator: GuestAllocator
        self.queue: SplitVirtqueue
        self.features = 0
        self.start()

    @classmethod
    def of(cls, machine: Machine, *, features: int = DEFAULT_FEATURES) -> Driver:
        """The driver of ``machine``'s device: on its shared guest RAM where it has one."""
        ram = SharedRam(machine.guest_ram) if machine.guest_ram is not None else None
        return cls(machine.qtest, machine.config.transport, features=features, mem=ram)

    def _discover(self) -> VirtioPCI:
        """Find, enable and map the function: once per QEMU, as a guest driver probes once. A
        virtio reset leaves PCI config space (BARs, capabilities, command register) as it was."""
        return open_virtio_pci(PCIBus(self.qtest), DEVICE_TYPE_9P, self.transport)

    def start(self) -> None:
        """(Re)initialise the device from reset; any previous queue and guest buffers are forgotten."""
        if not self.function.pci.enabled():  # a system reset cleared PCI config space
            self.function = self._discover()
        self.allocator = GuestAllocator.for_ram(self._ram_size)
        self.notifications = self.suppressed_notifications = self.renotifications = 0
        #: Device status read back at each step of this bring-up: 0, 1, 3, (0xb), 0xf / 0x7.
        self.status_history: list[int] = []
        self.features = negotiate(self.function, self.wanted_features, self.status_history)
        size = self.function.queue_size(REQUEST_QUEUE)
        if size == 0:
            raise DeviceError("virtio-9p request queue 0 has size 0")
        self.ring_addr = self.allocator.alloc(RingLayout.total_bytes(size))
        self.queue = SplitVirtqueue(self.mem, RingLayout.at(self.ring_addr, size), REQUEST_QUEUE)
        self.queue.clear_rings()
        self.function.setup_queue(REQUEST_QUEUE, self.queue.layout)
        driver_ok(self.function, self.status_history)

    def reset(self, features: int | None = None) -> None:
        """Device reset and bring-up again; ``features`` (if given) is asked for from now on."""
        if features is not None:
            self.wanted_features = features
        self.start()

    def status(self) -> int:
        """The device status register."""
        return self.function.get_status()

    def mount_tag(self) -> str:
        """The mount tag from device configuration: ``tag_len[2]`` (LE) then the bytes."""
        tag_len = int.from_bytes(self.function.read_config(0, 2), "little")
        return self.function.read_config(2, tag_len).decode("utf-8", "replace")

    def kick(self, old_avail: int, new_avail: int | None = None) -> None:
        """Notify the device of chains made available since ``old_avail`` (up to ``new_avail``, by
        default the queue's avail.idx); under VIRTIO_RING_F_EVENT_IDX only when the device's
        avail_event asks for it."""
        if self.features & F_RING_EVENT_IDX:
            event = self.mem.load16(self.queue.avail_event_addr())
            new = self.queue.avail_idx if new_avail is None else new_avail
            if not self.queue.need_event(event, new, old_avail):
                self.suppressed_notifications += 1
                return
        self.function.notify(REQUEST_QUEUE)
        self.notifications += 1

    def notify_again(self) -> None:
        """Notify the device although nothing new is available (counted apart from the kicks): for a
        device that looks at the ring only when notified and left chains in it."""
        self.function.notify(REQUEST_QUEUE)
        self.renotifications += 1
        self.send()

    def send(self) -> None:
        """Send QEMU what is queued for it: the notify, and on the qtest path the request's memory
        writes. On shared RAM without EVENT_IDX that is all: the notify's answer is not waited
        for (QEMU answers only after its virtqueue handler has run, tens of microseconds per
        submission), the used ring in the mapping says what happened. Otherwise the answer is
        waited for, so that the ring, and avail_event for the next kick, are as QEMU left them."""
        if self.mem is not self.qtest and not self.features & F_RING_EVENT_IDX:
            self.qtest.send_posted()
        else:
            self.qtest.flush()

    def tend(self) -> None:
        """While waiting for completions: check the answers QEMU has already sent (a notify that
        failed is reported now, not at the next exchange)."""
        self.qtest.drain()

    def settle(self) -> None:
        """One qtest round trip: what QEMU's main loop did before it (a used-ring entry and the
        MSI-X message after it) is in guest memory. On shared RAM a completion can be seen in the
        used ring a moment before the device's message lands; on the qtest path this costs one
        exchange and changes nothing."""
        self.qtest.query("endianness")

    @contextlib.contextmanager
    def guest_buffer(self, size: int) -> Iterator[int]:
        """``with driver.guest_buffer(4096) as addr:`` guest memory of one's own, freed after."""
        addr = self.allocator.alloc(size)
        try:
            yield addr
        finally:
            self.allocator.free(addr)

    def check_idle(self) -> None:
        """Raise :class:`LeakError` if a descriptor or guest buffer is still out."""
        self.queue.check_idle()
        self.allocator.check_no_leaks(keep=frozenset({self.ring_addr}))
