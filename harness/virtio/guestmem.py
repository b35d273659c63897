"""Guest physical memory: the allocator and the memory-access protocol the drivers use.

The allocator is first-fit over an address-sorted free list, page-granular, as libqos's
``guest_alloc`` is, but it is an object per device bring-up (no global state) and it can tell
what is still allocated, so every test can end with a leak check.
"""

from __future__ import annotations

import bisect
import ctypes
import mmap
from collections.abc import Sequence
from typing import Protocol

from harness.errors import GuestMemoryError, LeakError

PAGE = 4096
#: libqos leaves the first MiB alone (BIOS, real-mode structures).
ALLOC_START = 0x100000
#: Above this the PC machine maps PCI holes.
PCI_HOLE = 0xE0000000


class GuestMemory(Protocol):
    """What the virtqueue needs from guest memory.  :class:`harness.qemu.qtest.QTest` is one.

    ``mapped``: a read is a memcpy (:class:`SharedRam`), so a poller may read one field at a
    time; False where each read is a round trip and reads are best batched. ``load16`` and
    ``store16`` move a ring index (little-endian u16) whole, never a byte at a time."""

    mapped: bool

    def load16(self, addr: int) -> int: ...

    def store16(self, addr: int, value: int) -> None: ...

    def memread(self, addr: int, size: int) -> bytes: ...

    def memread_many(self, spans: list[tuple[int, int]]) -> list[bytes]: ...

    def memwrite(self, addr: int, data: bytes) -> None: ...


#: A ring index is a u16 read or written by one aligned 16-bit access, through ctypes: its
#: c_uint16 get and set are one fixed-size memcpy each, which the compiler makes a single load or
#: store. ``struct.pack_into`` is not: it first clears the field with memset, then writes the value
#: (QEMU took a torn avail.idx for 248 more entries than were offered: seen with the load
#: generator), and the standard-size formats ("<H") go a byte at a time. Host and guest are both
#: little-endian (shared RAM is for x86-64 hosts).
_U16 = ctypes.c_uint16


class SharedRam:
    """Guest RAM the harness maps itself (QEMU's memory backend is a memfd both processes map,
    ``--guest-memory shared``): a read or write is a memcpy, not a qtest round trip.

    Guest physical address = offset into the backend, which holds for the PC machine's RAM below
    the PCI hole (all the allocator hands out). Ordering, as the virtio spec asks of a driver
    (2.7.13): descriptors and payload, then the avail entry, then avail.idx; reading, used.idx before
    the used entries. Python writes the mapping with plain stores in program order, and x86-64
    (TSO) keeps store order and load order as issued, so the program order is the order QEMU sees;
    on a host with weaker ordering this path would need barriers: use the qtest path there.
    """

    mapped = True

    def __init__(self, mapping: mmap.mmap) -> None:
        self._map = mapping
        self.size = len(mapping)

    def _check(self, addr: int, size: int) -> None:
        if self._map.closed:
            raise GuestMemoryError("the shared guest RAM of a QEMU that is gone")
        if addr < 0 or size < 0 or addr + size > self.size:
            raise GuestMemoryError(f"[{addr:#x}, {addr + size:#x}) is outside the {self.size:#x} bytes of shared RAM")

    def memread(self, addr: int, size: int) -> bytes:
        self._check(addr, size)
        return self._map[addr : addr + size]

    def memread_many(self, spans: list[tuple[int, int]]) -> list[bytes]:
        return [self.memread(addr, size) for addr, size in spans]

    def memwrite(self, addr: int, data: bytes) -> None:
        self._check(addr, len(data))
        self._map[addr : addr + len(data)] = data

    def load16(self, addr: int) -> int:
        """One aligned 16-bit load (atomic on x86-64; see :data:`_U16`). A ring index must never
        tear: seen in parts, an index going from 0x00ff to 0x0100 can read as 0x01ff, which a
        driver takes for 256 new used entries and a device for 256 new available ones."""
        self._check(addr, 2)
        return _U16.from_buffer(self._map, addr).value  # a view for the one access, released at once

    def store16(self, addr: int, value: int) -> None:
        """One aligned 16-bit store (see :meth:`load16`)."""
        self._check(addr, 2)
        _U16.from_buffer(self._map, addr).value = value

    def close(self) -> None:
        self._map.close()


class Region(Protocol):
    """Guest memory a caller owns (a resident payload, a :class:`Buffer`): where, how long."""

    @property
    def addr(self) -> int: ...
    @property
    def length(self) -> int: ...


#: Resident guest memory a request points at: one region, or several (a payload in pages, as a
#: guest kernel hands its page cache to the device: one descriptor each).
Regions = Region | Sequence[Region]


def pieces(regions: Regions) -> list[Region]:
    """The regions of ``regions``, in order (a region may itself be a tuple: a Buffer is one)."""
    return [regions] if hasattr(regions, "addr") else list(regions)  # type: ignore[list-item]


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


class GuestAllocator:
    """First-fit page allocator over ``[start, end)`` of guest physical memory."""

    def __init__(self, start: int, end: int, page: int = PAGE) -> None:
        if start >= end or start % page or end % page:
            raise GuestMemoryError(f"bad allocator range [{start:#x}, {end:#x}) for page {page}")
        self.start, self.end, self.page = start, end, page
        self._free: list[tuple[int, int]] = [(start, end - start)]  # sorted (addr, size)
        self._used: dict[int, int] = {}

    @classmethod
    def for_ram(cls, ram_size: int) -> GuestAllocator:
        """The PC layout libqos uses: from 1 MiB to the end of RAM below the PCI hole."""
        return cls(ALLOC_START, min(ram_size, PCI_HOLE) // PAGE * PAGE)

    def alloc(self, size: int) -> int:
        need = align_up(max(size, 1), self.page)
        for i, (addr, free) in enumerate(self._free):
            if free >= need:
                if free == need:
                    del self._free[i]
                else:
                    self._free[i] = (addr + need, free - need)
                self._used[addr] = need
                return addr
        raise GuestMemoryError(
            f"out of guest memory: {size} bytes wanted, {self.free_bytes} free in {len(self._free)} blocks"
        )

    def free(self, addr: int) -> None:
        size = self._used.pop(addr, None)
        if size is None:
            raise GuestMemoryError(f"free of {addr:#x}, which is not an allocated block")
        i = bisect.bisect_left(self._free, (addr, 0))
        self._free.insert(i, (addr, size))
        self._coalesce(i)

    def _coalesce(self, i: int) -> None:
        if i + 1 < len(self._free):
            addr, size = self._free[i]
            nxt, nsize = self._free[i + 1]
            if addr + size == nxt:
                self._free[i] = (addr, size + nsize)
                del self._free[i + 1]
        if i > 0:
            prev, psize = self._free[i - 1]
            addr, size = self._free[i]
            if prev + psize == addr:
                self._free[i - 1] = (prev, psize + size)
                del self._free[i]

    @property
    def free_bytes(self) -> int:
        return sum(size for _, size in self._free)

    @property
    def allocated(self) -> dict[int, int]:
        """Live blocks, address to size."""
        return dict(self._used)

    def check_no_leaks(self, keep: frozenset[int] = frozenset()) -> None:
        """Raise :class:`LeakError` if any block other than those in ``keep`` is allocated."""
        leaked = {addr: size for addr, size in self._used.items() if addr not in keep}
        if leaked:
            blocks = ", ".join(f"{addr:#x}+{size:#x}" for addr, size in sorted(leaked.items()))
            raise LeakError(f"{len(leaked)} guest memory block(s) leaked: {blocks}")


FW_CFG_SELECTOR = 0x510
FW_CFG_DATA = 0x511
FW_CFG_RAM_SIZE = 0x03


class PortIO(Protocol):
    def outw(self, port: int, value: int) -> None: ...
    def inb(self, port: int) -> int: ...


def read_ram_size(io: PortIO) -> int:
    """RAM size in bytes from QEMU's fw_cfg device (key FW_CFG_RAM_SIZE, 8 bytes LE)."""
    io.outw(FW_CFG_SELECTOR, FW_CFG_RAM_SIZE)
    return int.from_bytes(bytes(io.inb(FW_CFG_DATA) for _ in range(8)), "little")
