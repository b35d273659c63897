"""9P frames over virtio-9p-pci: device bring-up, one request queue, submit and complete.

A request is a two-descriptor chain (the T-frame, then a writable reply buffer).  Submission
(payload, descriptors, avail ring, notify) is posted to qtest and goes out together with the
first poll of ``used.idx``; that poll also reads ahead the reply buffer of the request being
waited for, so a fast reply costs no extra round trip.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from harness.errors import DeviceError, DeviceNeedsReset, LeakError
from harness.guestmem import GuestAllocator, read_ram_size
from harness.machine import Machine
from harness.pci import PCIBus
from harness.virtio_pci import (
    DEVICE_TYPE_9P,
    STATUS_NEEDS_RESET,
    VirtioPCI,
    driver_ok,
    negotiate,
    open_virtio_pci,
)
from harness.virtqueue import Buffer, RingLayout, SplitVirtqueue, UsedElem

log = logging.getLogger(__name__)

F_MOUNT_TAG = 1 << 0
REQUEST_QUEUE = 0
#: Bytes of the awaited reply buffer read together with each poll of the used ring.
READ_AHEAD = 512
#: How often a silent wait checks the device status for DEVICE_NEEDS_RESET.
HEALTH_CHECK_INTERVAL = 0.05


@dataclass
class Request:
    """One submitted chain: where its frame and reply buffer live."""

    head: int
    out_addr: int
    in_addr: int
    in_size: int
    chain: tuple[Buffer, ...]


@dataclass(frozen=True)
class Completion:
    request: Request
    used_len: int
    reply: bytes
    #: Position of this entry in the used ring since bring-up: the order the device completed in.
    order: int


class VirtioTransport:
    """The virtio-9p-pci function of one :class:`Machine`, brought up and ready for frames."""

    def __init__(self, machine: Machine, *, features: int = F_MOUNT_TAG) -> None:
        self.machine = machine
        self.wanted_features = features
        self._ram_size: int | None = None
        self.dev: VirtioPCI
        self.alloc: GuestAllocator
        self.queue: SplitVirtqueue
        self.features = 0
        self._in_flight: dict[int, Request] = {}
        self._done: dict[int, Completion] = {}
        self._completed = 0
        self.start()

    # -- bring-up ---------------------------------------------------------------------------------

    def start(self) -> None:
        """(Re)initialise the device from reset; any previous queue and buffers are forgotten."""
        qt = self.machine.qtest
        if self._ram_size is None:
            self._ram_size = read_ram_size(qt)
        self.alloc = GuestAllocator.for_ram(self._ram_size)
        self._in_flight.clear()
        self._done.clear()
        self._completed = 0
        self.dev = open_virtio_pci(PCIBus(qt), DEVICE_TYPE_9P, self.machine.config.transport)
        self.features = negotiate(self.dev, self.wanted_features)
        size = self.dev.queue_size(REQUEST_QUEUE)
        if size == 0:
            raise DeviceError("virtio-9p request queue 0 has size 0")
        ring = self.alloc.alloc(RingLayout.total_bytes(size))
        self.ring_addr = ring
        self.queue = SplitVirtqueue(qt, RingLayout.at(ring, size), REQUEST_QUEUE)
        self.queue.clear_rings()
        self.dev.setup_queue(REQUEST_QUEUE, self.queue.layout)
        driver_ok(self.dev)

    def reset(self) -> None:
        """Per-test queue reset: device reset, queue set up again, all state dropped."""
        self.start()

    def mount_tag(self) -> str:
        """The mount tag from device configuration: ``tag_len[2]`` (LE) then the bytes."""
        tag_len = int.from_bytes(self.dev.read_config(0, 2), "little")
        return self.dev.read_config(2, tag_len).decode("utf-8", "replace")

    # -- requests ---------------------------------------------------------------------------------

    def submit(self, frame: bytes, reply_capacity: int) -> Request:
        """Place ``frame`` and an empty reply buffer in guest memory and notify the device."""
        qt = self.machine.qtest
        out_addr = self.alloc.alloc(len(frame))
        in_addr = self.alloc.alloc(reply_capacity)
        chain = (Buffer(out_addr, len(frame)), Buffer(in_addr, reply_capacity, writable=True))
        try:
            head = self.queue.add(chain)
        except DeviceError:
            self.alloc.free(out_addr)
            self.alloc.free(in_addr)
            raise
        qt.memwrite(out_addr, frame)
        self.dev.notify(REQUEST_QUEUE)
        request = Request(head, out_addr, in_addr, reply_capacity, chain)
        self._in_flight[head] = request
        return request

    def wait(self, request: Request, timeout: float) -> Completion | None:
        """Poll until ``request`` completes (others are kept); None after ``timeout`` seconds."""
        start = time.monotonic()
        next_check = start + HEALTH_CHECK_INTERVAL
        polls = 0
        while request.head not in self._done:
            if request.head not in self._in_flight:
                raise DeviceError(f"request with head {request.head} is not in flight")
            self._poll(request)
            polls += 1
            if request.head in self._done:
                break
            now = time.monotonic()
            if now - start > timeout:
                return None
            if now > next_check:
                self._check_health()
                next_check = now + HEALTH_CHECK_INTERVAL
            if polls > 100:
                time.sleep(0.0002)
        return self._done.pop(request.head)

    def poll(self) -> list[Completion]:
        """Collect whatever has completed; returns and forgets every finished request."""
        self._poll(None)
        done, self._done = list(self._done.values()), {}
        return done

    def _poll(self, awaited: Request | None) -> None:
        qt = self.machine.qtest
        spans = [(awaited.in_addr, min(READ_AHEAD, awaited.in_size))] if awaited else []
        # the writes that submit() posted go out in this same exchange
        elems, ahead = self.queue.poll(spans)
        for elem in elems:
            request = self._in_flight.pop(elem.head)
            if elem.length > request.in_size:
                raise DeviceError(
                    f"device reports {elem.length} bytes written into a {request.in_size}-byte reply buffer"
                )
            if request is awaited and elem.length <= len(ahead[0]):
                reply = ahead[0][: elem.length]
            else:
                reply = qt.memread(request.in_addr, elem.length)
            self._finish(request, elem, reply)

    def _finish(self, request: Request, elem: UsedElem, reply: bytes) -> None:
        self.alloc.free(request.out_addr)
        self.alloc.free(request.in_addr)
        self._done[request.head] = Completion(request, elem.length, reply, self._completed)
        self._completed += 1

    def _check_health(self) -> None:
        status = self.dev.get_status()
        if status & STATUS_NEEDS_RESET:
            raise DeviceNeedsReset(status, self.machine.stderr_tail())

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def check_idle(self) -> None:
        """Raise :class:`LeakError` if a request, descriptor or guest buffer is still out."""
        if self._in_flight or self._done:
            raise LeakError(
                f"{len(self._in_flight)} request(s) still in flight and {len(self._done)} completion(s) never collected"
            )
        self.queue.check_idle()
        self.alloc.check_no_leaks(keep=frozenset({self.ring_addr}))
