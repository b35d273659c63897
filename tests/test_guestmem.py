"""The guest allocator: first fit, page rounding, coalescing, misuse, leaks; and a model check."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import GuestMemoryError, LeakError
from harness.virtio.guestmem import PAGE, GuestAllocator


def test_rounds_to_pages_and_fits_first() -> None:
    a = GuestAllocator(0x100000, 0x110000)
    x = a.alloc(1)
    y = a.alloc(PAGE + 1)
    assert (x, y) == (0x100000, 0x101000)
    assert a.allocated == {x: PAGE, y: 2 * PAGE}
    a.free(x)
    assert a.alloc(PAGE) == x  # the freed hole is reused first


def test_coalesces_neighbours() -> None:
    a = GuestAllocator(0x100000, 0x104000)
    blocks = [a.alloc(PAGE) for _ in range(4)]
    for addr in (blocks[1], blocks[3], blocks[2], blocks[0]):
        a.free(addr)
    assert a.alloc(4 * PAGE) == 0x100000


def test_out_of_memory_and_bad_free() -> None:
    a = GuestAllocator(0x100000, 0x102000)
    a.alloc(2 * PAGE)
    with pytest.raises(GuestMemoryError, match="out of guest memory"):
        a.alloc(1)
    with pytest.raises(GuestMemoryError, match="not an allocated block"):
        a.free(0x101000)


def test_leak_check_names_blocks() -> None:
    a = GuestAllocator.for_ram(128 << 20)
    ring = a.alloc(8192)
    a.check_no_leaks(keep=frozenset({ring}))
    lost = a.alloc(100)
    with pytest.raises(LeakError, match=hex(lost)):
        a.check_no_leaks(keep=frozenset({ring}))


def test_pc_layout() -> None:
    a = GuestAllocator.for_ram(128 << 20)
    assert (a.start, a.end) == (0x100000, 128 << 20)
    assert GuestAllocator.for_ram(8 << 30).end == 0xE0000000


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5 * PAGE), st.integers(0, 1000)), max_size=60))
def test_never_overlaps_and_conserves_memory(ops: list[tuple[bool, int, int]]) -> None:
    a = GuestAllocator(0x100000, 0x100000 + 64 * PAGE)
    live: dict[int, int] = {}
    for is_alloc, size, pick in ops:
        if is_alloc or not live:
            try:
                addr = a.alloc(size)
            except GuestMemoryError:
                continue
            assert addr % PAGE == 0 and a.start <= addr and addr + size <= a.end
            live[addr] = -(-size // PAGE) * PAGE
        else:
            addr = sorted(live)[pick % len(live)]
            a.free(addr)
            del live[addr]
        spans = sorted(live.items())
        for (a1, s1), (a2, _) in itertools.pairwise(spans):
            assert a1 + s1 <= a2, "allocations overlap"
        assert a.free_bytes + sum(live.values()) == a.end - a.start
