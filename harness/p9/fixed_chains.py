"""Fixed chains: the channel's second way onto the ring, for load. One 9P request is kept ``depth``
times in flight in chains that stay put: each slot's frame (its own tag) and reply buffer are
written into guest memory once, the idle request queue is lent to them
(:class:`~harness.virtio.virtqueue.Lease`), and a completed chain goes back on the ring as one avail
entry, a batch of them for one notify. No session is involved: the benchmarks use it to measure the
server rather than the harness, whose session path costs tens of microseconds per request
(encoding, decoding, the trace, fid tracking), more than QEMU spends on a Tgetattr. Every reply
is still checked: its size, type and tag from its header, and every ``DECODE_EVERY``-th one decoded
whole.
"""

from __future__ import annotations

import contextlib
import struct
import time
from collections.abc import Callable
from typing import Any

from harness.errors import DeviceError, P9ProtocolError
from harness.p9 import wire
from harness.p9.channel import SLEEP_SECONDS, SPIN_SECONDS, Channel
from harness.p9.messages import Rlerror
from harness.p9.wire import Request
from harness.virtio.guestmem import align_up
from harness.virtio.virtqueue import Buffer, Lease, UsedElem

#: Replies decoded whole, one in this many (the others: size, type and tag from the header).
DECODE_EVERY = 256
#: Room for each slot's reply (a Tgetattr's is 160 bytes).
REPLY_CAPACITY = 4096
_HEAD = struct.Struct("<IBH")


def keep_in_flight(
    channel: Channel,
    request: Request,
    depth: int,
    seconds: float,
    timed: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> tuple[int, float]:
    """Keep ``request`` ``depth`` times in flight for ``seconds`` (then let the last ones finish);
    returns the requests completed and their rate per second. The channel must be idle.
    ``timed()`` is entered around the stretch the rate is of, and nothing else (a bench's CPU
    window: what it measures is then per request of this rate)."""
    if channel.in_flight:
        raise DeviceError(f"the load generator needs an idle queue; {channel.in_flight} request(s) in flight")
    driver = channel.driver
    frames = [wire.encode(request, tag) for tag in range(depth)]  # one length: only the tag differs
    table_at = align_up(REPLY_CAPACITY + len(frames[0]), 16)  # reply buffer, frame, indirect table
    blocks = [driver.allocator.alloc(table_at + 32) for _ in frames]
    try:
        for block, frame in zip(blocks, frames, strict=True):
            driver.mem.memwrite(block + REPLY_CAPACITY, frame)
        tables = [block + table_at for block in blocks]
        chains = [
            [Buffer(block + REPLY_CAPACITY, len(frames[0])), Buffer(block, REPLY_CAPACITY, writable=True)]
            for block in blocks
        ]
        lease = Lease(driver.queue, tables, chains)
        try:
            with timed():
                result = _run(channel, lease, blocks, request.reply_class().TYPE, seconds)
        except BaseException:
            channel.abandon()  # the device may still hold chains of the lease: no reuse of this queue
            raise
        lease.close()
        return result
    finally:
        for block in blocks:
            driver.allocator.free(block)


def channel_timeout(seconds: float) -> float:
    """How long the generator waits for the next completion before it calls the server stuck."""
    return max(10.0, seconds)


def _run(channel: Channel, lease: Lease, blocks: list[int], reply_type: int, seconds: float) -> tuple[int, float]:
    driver = channel.driver
    start = time.perf_counter()
    deadline, done, idle_since = start + seconds, 0, start
    driver.kick(lease.offer(list(range(len(blocks)))), lease.avail_idx)
    driver.send()
    while lease.out:
        elems = lease.reap()
        now = time.perf_counter()
        if not elems:
            if now - idle_since > channel_timeout(seconds):
                raise DeviceError(f"no completion in {channel_timeout(seconds)} s with {lease.out} request(s) out")
            if now - idle_since > SPIN_SECONDS:
                driver.tend()
                time.sleep(SLEEP_SECONDS)
            continue
        idle_since = now
        _check(channel, blocks, elems, reply_type, done)
        done += len(elems)
        if now < deadline:
            driver.kick(lease.offer([elem.head for elem in elems]), lease.avail_idx)
            driver.send()
    elapsed = time.perf_counter() - start
    return done, done / elapsed


def _check(channel: Channel, blocks: list[int], elems: list[UsedElem], reply_type: int, done: int) -> None:
    """Each reply's header says its own size, the expected type and its slot's tag (= head)."""
    mem = channel.driver.mem
    heads = mem.memread_many([(blocks[elem.head], wire.HEADER_SIZE) for elem in elems])
    for n, (elem, head) in enumerate(zip(elems, heads, strict=True)):
        size, kind, tag = _HEAD.unpack(head)
        whole = (done + n) % DECODE_EVERY == 0
        if kind != reply_type or size != elem.length or tag != elem.head or whole:
            frame = mem.memread(blocks[elem.head], min(elem.length, REPLY_CAPACITY))
            reply = wire.decode(frame)  # raises on a malformed reply
            if isinstance(reply, Rlerror) or kind != reply_type or tag != elem.head or size != elem.length:
                raise P9ProtocolError(f"slot {elem.head}: reply {reply} (tag {tag}, {elem.length} bytes used)")
