"""The split virtqueue driver against a fake device in a bytearray: recycling, exhaustion, order."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import DeviceError, LeakError, RingFull
from harness.virtio.virtqueue import DESC_F_NEXT, DESC_F_WRITE, Buffer, RingLayout, SplitVirtqueue
from tests.fakes import FakeMemory, FakeVirtioDevice

BASE = 0x10000


def make(size: int = 8) -> tuple[FakeMemory, SplitVirtqueue, FakeVirtioDevice]:
    mem = FakeMemory(0x40000)
    layout = RingLayout.at(BASE, size)
    queue = SplitVirtqueue(mem, layout)
    queue.clear_rings()
    return mem, queue, FakeVirtioDevice(mem, layout)


def chain(n: int = 2) -> list[Buffer]:
    return [Buffer(0x30000 + 0x100 * i, 0x40, writable=i == n - 1) for i in range(n)]


def test_layout_matches_libqos_for_128() -> None:
    layout = RingLayout.at(0x100000, 128)
    assert layout.avail == 0x100000 + 2048
    assert layout.used == 0x101000
    assert RingLayout.total_bytes(128) == 4096 + 6 + 8 * 128


@pytest.mark.parametrize("size", [0, 3, 65536])
def test_bad_sizes_are_refused(size: int) -> None:
    with pytest.raises(DeviceError):
        RingLayout.at(BASE, size)


def test_ten_times_the_queue_size_sequentially() -> None:
    _, queue, device = make(8)
    for i in range(80):
        head = queue.add(chain())
        assert device.take() == 1
        device.complete(reply=b"r%d" % i)
        (elem,), _ = queue.poll()
        assert elem.head == head and elem.length == len(b"r%d" % i)
    queue.check_idle()


def test_exhaustion_raises_and_writes_nothing() -> None:
    mem, queue, device = make(8)
    for _ in range(4):
        queue.add(chain())
    snapshot, writes = bytes(mem.data), mem.writes
    with pytest.raises(RingFull, match=r"2 descriptor\(s\), 0 free"):
        queue.add(chain())
    assert bytes(mem.data) == snapshot and mem.writes == writes
    device.take()
    device.complete()
    queue.poll()
    queue.add(chain())  # one chain's descriptors came back


def test_out_of_order_completion_is_matched_by_head() -> None:
    _, queue, device = make(8)
    heads = [queue.add(chain()) for _ in range(3)]
    device.take()
    device.complete(position=2)
    device.complete(position=0)
    elems, _ = queue.poll()
    assert [e.head for e in elems] == [heads[2], heads[0]]
    assert queue.in_flight == 1
    with pytest.raises(LeakError):
        queue.check_idle()


def test_unknown_head_from_device_is_an_error() -> None:
    _, queue, device = make(8)
    queue.add(chain())
    device.take()
    device.pending[0] = (5, device.pending[0][1])  # the device lies about the head
    device.complete()
    with pytest.raises(DeviceError, match="head 5"):
        queue.poll()


def test_also_read_spans_come_back() -> None:
    mem, queue, _ = make(8)
    mem.memwrite(0x30000, b"abc")
    elems, extra = queue.poll([(0x30000, 3)])
    assert elems == [] and extra == [b"abc"]


def test_used_index_wraps_at_65536() -> None:
    _, queue, device = make(4)
    queue.avail_idx = queue.last_used = device.last_avail = device.used_idx = 0xFFFE
    for _ in range(4):
        queue.add(chain(1))
        device.take()
        device.complete()
        assert len(queue.poll()[0]) == 1
    assert queue.last_used == 2


def test_deferred_publication_across_the_ring_end_in_two_slot_writes() -> None:
    mem, queue, device = make(4)
    for _ in range(2):  # the next slots are 2, 3, then 0
        queue.add(chain(1))
        device.take()
        device.complete()
        queue.poll()
    heads = [queue.add(chain(1), publish=False) for _ in range(3)]
    assert device.take() == 0  # written, not yet available
    with pytest.raises(LeakError, match="never published"):
        queue.check_idle()
    writes = mem.writes
    assert queue.publish() == 2 and queue.avail_idx == 5
    assert mem.writes == writes + 3  # slots 2-3, slot 0, then avail.idx
    assert device.take() == 3 and [head for head, _ in device.pending] == heads
    for _ in heads:
        device.complete()
    elems, _ = queue.poll()
    assert [e.head for e in elems] == heads
    queue.check_idle()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4), st.integers(0, 100)), max_size=120))
def test_random_submit_complete_orders_keep_the_free_list_exact(ops: list[tuple[int, int, int]]) -> None:
    mem, queue, device = make(8)
    outside = bytes(mem.data[:BASE]) + bytes(mem.data[BASE + RingLayout.total_bytes(8) : 0x30000])
    live: dict[int, int] = {}
    for action, length, pick in ops:
        if action == 0:
            try:
                head = queue.add(chain(length))
            except RingFull:
                assert queue.num_free < length
                continue
            live[head] = length
            device.take()
        elif device.pending:
            device.complete(position=pick % len(device.pending))
        for elem in queue.poll()[0]:
            del live[elem.head]
        assert queue.num_free + sum(live.values()) == 8
    while device.pending:
        device.complete()
    queue.poll()
    queue.check_idle()
    # nothing outside the ring and the buffers was touched
    assert bytes(mem.data[:BASE]) + bytes(mem.data[BASE + RingLayout.total_bytes(8) : 0x30000]) == outside


def test_indirect_chain_takes_one_ring_descriptor() -> None:
    _, queue, device = make(8)
    table = 0x38000
    chain = [Buffer(0x30000, 7), Buffer(0x30100, 100), *(Buffer(0x31000 + 0x100 * i, 64, True) for i in range(20))]
    head = queue.add(chain, indirect_table=table)
    assert queue.num_free == 7
    device.take()
    (_, seen) = device.pending[0]
    assert [(a, n, bool(f & DESC_F_WRITE)) for a, n, f in seen] == [(b.addr, b.length, b.writable) for b in chain]
    device.complete(reply=b"x" * 5)
    (elem,), _ = queue.poll()
    assert elem.head == head and queue.num_free == 8


def test_indirect_full_ring_holds_queue_size_chains() -> None:
    _, queue, _ = make(8)
    for i in range(8):
        queue.add([Buffer(0x30000, 7), Buffer(0x30100, 64, True)], indirect_table=0x38000 + 32 * i)
    with pytest.raises(RingFull):
        queue.add([Buffer(0x30000, 7)], indirect_table=0x39000)


@pytest.mark.parametrize(
    ("event", "new", "old", "notify"),
    [(0, 1, 0, True), (5, 1, 0, False), (0, 5, 1, False), (3, 5, 1, True), (0xFFFF, 1, 0xFFFE, True)],
)
def test_need_event(event: int, new: int, old: int, notify: bool) -> None:
    assert SplitVirtqueue.need_event(event, new, old) is notify


def test_loop_links_the_last_descriptor_back_to_the_first_writable_one() -> None:
    mem, queue, _ = make(8)
    head = queue.add([Buffer(0x30000, 7), Buffer(0x30100, 64, True), Buffer(0x30200, 64, True)], loop=True)
    table = [struct.unpack_from("<QIHH", mem.data, BASE + 16 * i) for i in range(3)]
    assert [t[3] for t in table] == [head + 1, head + 2, head + 1]
    assert all(t[2] & DESC_F_NEXT for t in table)
