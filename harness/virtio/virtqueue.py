"""Split virtqueue in guest memory (virtio 1.x, section 2.7), driver side.

Unlike libqos, descriptors are recycled: a free list is refilled from every used-ring entry,
so a queue of 128 serves any number of sequential requests.  Completion is found by polling
``used.idx`` (never by the read-to-clear ISR byte, which can hide completions), and entries may
complete in any order: each is matched by its head descriptor.

The layout is the legacy one (used ring aligned to 4096), which the modern transport accepts too.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from harness.errors import DeviceError, LeakError, RingFull
from harness.virtio.guestmem import GuestMemory, align_up

#: Buffers QEMU maps for one request at most (VIRTQUEUE_MAX_SIZE, include/hw/virtio/virtio.h),
#: direct or in an indirect table: a longer chain stops the device ("too many write descriptors
#: in indirect table").
VIRTQUEUE_MAX_SIZE = 1024

DESC_F_NEXT = 1
DESC_F_WRITE = 2
DESC_F_INDIRECT = 4

_DESC = struct.Struct("<QIHH")  # addr, len, flags, next
_U16 = struct.Struct("<H")
_USED_ELEM = struct.Struct("<II")  # id, len


def ring_runs(first: int, count: int, size: int) -> list[tuple[int, int]]:
    """Ring positions ``first .. first + count - 1`` (free-running 16-bit indices) as at most two
    ``(slot, length)`` runs of adjacent slots: one write each."""
    start = first % size
    head = min(count, size - start)
    return [(start, head)] + ([(0, count - head)] if count > head else [])


def make_available(mem: GuestMemory, layout: RingLayout, old: int, heads: Sequence[int]) -> int:
    """Put ``heads`` in the avail ring from index ``old`` on, then move ``avail.idx`` past them
    (the order virtio 1.x 2.7.13 asks for); returns the new index."""
    done = 0
    for start, run in ring_runs(old, len(heads), layout.size):
        mem.memwrite(layout.avail_slot(start), struct.pack(f"<{run}H", *heads[done : done + run]))
        done += run
    new = (old + len(heads)) & 0xFFFF
    mem.store16(layout.avail + 2, new)
    return new


def used_entries(mem: GuestMemory, layout: RingLayout, first: int, count: int) -> bytes:
    """The raw used-ring entries ``first .. first + count - 1``, read in one or two spans."""
    runs = ring_runs(first, count, layout.size)
    return b"".join(mem.memread_many([(layout.used_elem(slot), 8 * n) for slot, n in runs]))


class Buffer(NamedTuple):
    """One guest buffer of a chain; ``writable`` buffers are for the device to fill.

    Named tuples, as the other per-request records: immutable, and built 2-3 times faster than a
    frozen dataclass (a few of them per request add up at 20,000 requests a second)."""

    addr: int
    length: int
    writable: bool = False


class UsedElem(NamedTuple):
    """A used-ring entry: the chain's head descriptor and the bytes the device wrote."""

    head: int
    length: int


@dataclass(frozen=True)
class RingLayout:
    size: int
    desc: int
    avail: int
    used: int

    @classmethod
    def at(cls, base: int, size: int, align: int = 4096) -> RingLayout:
        if size <= 0 or size & (size - 1) or size > 32768:
            raise DeviceError(f"virtqueue size {size} is not a power of 2 in 1..32768")
        avail = base + 16 * size
        used = align_up(avail + 6 + 2 * size, align)
        return cls(size, base, avail, used)

    @staticmethod
    def total_bytes(size: int, align: int = 4096) -> int:
        return align_up(16 * size + 6 + 2 * size, align) + 6 + 8 * size

    def avail_slot(self, index: int) -> int:
        return self.avail + 4 + 2 * (index % self.size)

    def used_elem(self, index: int) -> int:
        return self.used + 4 + 8 * (index % self.size)


class SplitVirtqueue:
    """Driver state of one split virtqueue whose rings live at ``layout`` in guest memory."""

    def __init__(self, mem: GuestMemory, layout: RingLayout, index: int = 0) -> None:
        self.mem = mem
        self.layout = layout
        self.index = index
        self._free: deque[int] = deque(range(layout.size))
        self._chains: dict[int, list[int]] = {}
        #: heads added but not yet in the avail ring (see :meth:`publish`)
        self._unpublished: list[int] = []
        #: avail.idx as published to the device
        self.avail_idx = 0
        self.last_used = 0

    @property
    def size(self) -> int:
        return self.layout.size

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def in_flight(self) -> int:
        return len(self._chains)

    def clear_rings(self) -> None:
        """Zero the descriptor table and both rings (posted, goes out with the next query)."""
        self.mem.memwrite(self.layout.desc, bytes(RingLayout.total_bytes(self.size)))

    def add(
        self, chain: Sequence[Buffer], *, indirect_table: int | None = None, loop: bool = False, publish: bool = True
    ) -> int:
        """Write ``chain`` as descriptors, publish its head in the avail ring, return the head.

        With ``publish=False`` the head waits for :meth:`publish`, which makes several chains
        available in one write of their ring slots and one of ``avail.idx``.

        With ``indirect_table`` (a guest address with room for ``16 * len(chain)`` bytes) the chain
        goes into that table and takes a single ring descriptor flagged INDIRECT (the device must
        have VIRTIO_RING_F_INDIRECT_DESC). Raises :class:`RingFull` (writing nothing) if the free
        list is too short. ``loop`` makes the chain malformed on purpose: its last descriptor links
        back to its first device-writable one. The caller notifies the device.
        """
        if not chain:
            raise DeviceError("an empty descriptor chain cannot be submitted")
        needed = 1 if indirect_table is not None else len(chain)
        if needed > len(self._free):
            raise RingFull(
                f"queue {self.index}: chain of {needed} descriptor(s), {len(self._free)} free "
                f"of {self.size} ({self.in_flight} chains in flight)"
            )
        ids = [self._free.popleft() for _ in range(needed)]
        if indirect_table is None:
            self._write_chain(self.layout.desc, ids, chain, loop)
        else:
            self._write_chain(indirect_table, list(range(len(chain))), chain, loop)
            entry = _DESC.pack(indirect_table, 16 * len(chain), DESC_F_INDIRECT, 0)
            self.mem.memwrite(self.layout.desc + 16 * ids[0], entry)
        head = ids[0]
        self._chains[head] = ids
        self._unpublished.append(head)
        if publish:
            self.publish()
        return head

    def publish(self) -> int:
        """Put the added heads in the avail ring, then move ``avail.idx`` past them (the order
        virtio 1.x 2.7.13 asks for); returns the index before, for :meth:`need_event`."""
        old, heads = self.avail_idx, self._unpublished
        if not heads:
            return old
        self._unpublished = []
        self.avail_idx = make_available(self.mem, self.layout, old, heads)
        return old

    def _write_chain(self, table: int, ids: list[int], chain: Sequence[Buffer], loop: bool = False) -> None:
        """Descriptors ``ids`` of ``table`` linked in order (the last back to the first with
        ``loop``); adjacent ones go in one write."""
        # a loop goes back to the first device-writable descriptor, so the order stays valid
        back = next((pos for pos, buf in enumerate(chain) if buf.writable), 0)
        run_start, run = ids[0], bytearray()
        for pos, (desc_id, buf) in enumerate(zip(ids, chain, strict=True)):
            last = pos == len(ids) - 1 and not loop
            flags = (0 if last else DESC_F_NEXT) | (DESC_F_WRITE if buf.writable else 0)
            if desc_id != run_start + len(run) // 16:  # not adjacent: write out the run so far
                self.mem.memwrite(table + 16 * run_start, bytes(run))
                run_start, run = desc_id, bytearray()
            nxt = ids[back] if pos == len(ids) - 1 else ids[pos + 1]
            run += _DESC.pack(buf.addr, buf.length, flags, 0 if last else nxt)
        self.mem.memwrite(table + 16 * run_start, bytes(run))

    def set_used_event(self, index: int) -> None:
        """Ask for an interrupt once ``used.idx`` passes ``index`` (VIRTIO_RING_F_EVENT_IDX: the
        avail ring's last field, used_event); posted."""
        self.mem.store16(self.layout.avail_slot(0) + 2 * self.size, index & 0xFFFF)

    def used_idx_addr(self) -> int:
        """Where the device publishes used.idx (a guest-memory word a bench can read alone)."""
        return self.layout.used + 2

    def avail_event_addr(self) -> int:
        """Where the device publishes avail_event (VIRTIO_RING_F_EVENT_IDX)."""
        return self.layout.used + 4 + 8 * self.size

    @staticmethod
    def need_event(event: int, new: int, old: int) -> bool:
        """vring_need_event(): has the ring crossed ``event`` going from ``old`` to ``new``?"""
        return (new - event - 1) & 0xFFFF < (new - old) & 0xFFFF

    def poll(self, also_read: Sequence[tuple[int, int]] = ()) -> tuple[list[UsedElem], list[bytes]]:
        """Read ``used.idx`` and return the new entries in ring order.

        The next used entry and the ``also_read`` spans are read in the same exchange, *after*
        ``used.idx``, so when the index shows a completion they already hold its data.
        """
        layout = self.layout
        if self.mem.mapped:  # the index alone first (the common case of a spinning wait: nothing new)
            used_idx = self.mem.load16(layout.used + 2)
            if used_idx == self.last_used:
                return [], []
            first, *extra = self.mem.memread_many([(layout.used_elem(self.last_used), 8), *also_read])
        else:
            idx_raw, first, *extra = self.mem.memread_many(
                [(layout.used + 2, 2), (layout.used_elem(self.last_used), 8), *also_read]
            )
            used_idx = _U16.unpack(idx_raw)[0]
        count = (used_idx - self.last_used) & 0xFFFF
        if count == 0:
            return [], extra
        if count > self.in_flight:
            raise DeviceError(
                f"queue {self.index}: used.idx moved by {count} with only {self.in_flight} chains in flight"
            )
        raws = first
        if count > 1:  # the other new entries, in one or two spans of the ring
            raws += used_entries(self.mem, layout, self.last_used + 1, count - 1)
        elems = [self._retire(*elem) for elem in _USED_ELEM.iter_unpack(raws)]
        self.last_used = used_idx
        return elems, extra

    def _retire(self, head: int, length: int) -> UsedElem:
        ids = self._chains.pop(head, None)
        if ids is None:
            raise DeviceError(f"queue {self.index}: used ring returned head {head}, which is not in flight")
        self._free.extend(ids)
        return UsedElem(head, length)

    def check_idle(self) -> None:
        """Raise :class:`LeakError` if any chain is still in flight or descriptors went missing."""
        if self._unpublished:
            raise LeakError(f"queue {self.index}: heads {self._unpublished} were added but never published")
        if self._chains or len(self._free) != self.size:
            raise LeakError(
                f"queue {self.index}: {len(self._chains)} chain(s) in flight (heads {sorted(self._chains)}), "
                f"{len(self._free)} of {self.size} descriptors free"
            )


class Lease:
    """An idle queue lent to a fast path: fixed chains, each in an indirect table written once, made
    available again as they come back, as a guest driver with pre-posted buffers does (fio's
    iodepth over a ring). Per request only the avail entry is written; ``avail.idx`` and the used
    ring are read and written once per batch. The queue's own bookkeeping is untouched meanwhile;
    :meth:`close` (every chain back) hands the ring back at the indices the lease left it at.
    """

    def __init__(self, queue: SplitVirtqueue, tables: Sequence[int], chains: Sequence[Sequence[Buffer]]) -> None:
        if queue.in_flight or queue._unpublished:
            raise DeviceError(f"queue {queue.index}: lent with {queue.in_flight} chain(s) in flight")
        if len(chains) > queue.size:
            raise DeviceError(f"queue {queue.index}: {len(chains)} chains in a ring of {queue.size}")
        self.queue, self.mem, self.layout = queue, queue.mem, queue.layout
        for head, (table, chain) in enumerate(zip(tables, chains, strict=True)):
            queue._write_chain(table, list(range(len(chain))), chain)
            self.mem.memwrite(self.layout.desc + 16 * head, _DESC.pack(table, 16 * len(chain), DESC_F_INDIRECT, 0))
        self.avail_idx, self.last_used = queue.avail_idx, queue.last_used
        self.out = 0  # chains the device holds

    def offer(self, heads: Sequence[int]) -> int:
        """Make ``heads`` available (entries, then ``avail.idx``); returns the index before, for a kick."""
        old = self.avail_idx
        self.avail_idx = make_available(self.mem, self.layout, old, heads)
        self.out += len(heads)
        return old

    def reap(self) -> list[UsedElem]:
        """The used entries since the last reap, in ring order."""
        used = self.layout.used
        count = (self.mem.load16(used + 2) - self.last_used) & 0xFFFF
        if count == 0:
            return []
        if count > self.out:
            raise DeviceError(f"queue {self.queue.index}: used.idx moved by {count} with {self.out} chains out")
        raw = used_entries(self.mem, self.layout, self.last_used, count)
        self.last_used = (self.last_used + count) & 0xFFFF
        self.out -= count
        return [UsedElem(*elem) for elem in _USED_ELEM.iter_unpack(raw)]

    def close(self) -> None:
        """Give the ring back; every chain must have come back."""
        if self.out:
            raise LeakError(f"queue {self.queue.index}: lease ended with {self.out} chain(s) still out")
        self.queue.avail_idx, self.queue.last_used = self.avail_idx, self.last_used
