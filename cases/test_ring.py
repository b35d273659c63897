"""The request virtqueue at its limits. QEMU's virtio-9p serves 128 requests at once (MAX_REQ PDUs;
handle_9p_output pops while a PDU is free) from a queue of 128 entries (7.2, 11.1) or 1024
(10.0: the queue size the driver reads); the cases read the size from the device. A driver must
be able to fill the ring on purpose, be refused cleanly when it is full, and get every request
back (virtio 1.x 2.7)."""

from __future__ import annotations

import errno
import os
import time
from typing import Any

import pytest

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from fixtures.pool import Device, MachinePool
from harness.errors import QEMUError, RingFull
from harness.p9 import wire
from harness.p9.channel import SIMPLE, ChainLayout
from harness.p9.messages import Rflush, Rgetattr, Rwrite, Tflush, Tgetattr, Twrite
from harness.p9.session import Pending, Session
from harness.p9.wire import RMessage
from harness.qemu.config import MachineConfig
from harness.virtio.driver import DEFAULT_FEATURES
from harness.virtio.virtio_pci import F_RING_EVENT_IDX

TRANSPORTS = ["modern", "legacy"]
INDIRECT = ChainLayout(indirect=True)
#: The server's request slots (MAX_REQ in hw/9pfs/9p.h), whatever the queue size.
SLOTS = 128
#: how long a plain build gets for a reset that must end 128 blocked requests (it takes
#: milliseconds), before QEMU is called wedged (Machine.wedge_bound stretches it for sanitizers)
RESET_BOUND = 0.5
#: (layout, requests in flight) that leave room for Tflush in a 128-entry queue: two-descriptor
#: chains hold 64 requests in 128 descriptors, indirect ones 128.
PARTIAL = [
    "direct_1",
    "direct_2",
    "direct_63",
    "indirect_1",
    "indirect_2",
    "indirect_63",
    "indirect_64",
    "indirect_127",
]


def queue_status(device: Device) -> dict[str, Any]:
    machine = device.machine
    path = machine.qmp("x-query-virtio")[0]["path"]  # type: ignore[index]
    return machine.qmp("x-query-virtio-queue-status", path=path, queue=0)  # type: ignore[return-value]


def wait_in_use(device: Device, count: int, timeout: float = 5.0) -> dict[str, Any]:
    """QEMU pops requests asynchronously: wait until it holds ``count`` of them."""
    deadline = time.monotonic() + timeout
    while (status := queue_status(device))["inuse"] != count and time.monotonic() < deadline:
        time.sleep(0.002)
    return status


def block(p9: Session, count: int, layout: ChainLayout) -> tuple[int, list[Pending[Rwrite]]]:
    """``count`` writes of byte 1 to the synth FLUSH file: each blocks until it is flushed."""
    fid = p9.walk_fid(0, ["FLUSH"])
    p9.lopen(fid, os.O_WRONLY)
    return fid, [p9.send(Twrite(fid=fid, offset=0, data=b"\x01"), layout=layout) for _ in range(count)]


def flush_one_by_one(p9: Session, blocked: list[Pending[Rwrite]], layout: ChainLayout) -> None:
    """Tflush each blocked request: its buffer returns empty, then its Rflush arrives."""
    for pending in blocked:
        flush = p9.send(Tflush(oldtag=pending.tag), layout=layout)
        flushed, answer = pending.wait(), flush.wait()
        assert (flushed.used_len, flushed.message) == (0, None), f"tag {pending.tag}"
        assert answer.message == Rflush()
        assert flushed.order < answer.order


@pytest.mark.needs_synth_tree
@case_path("ring/exhaust/{transport}/{fill}", backends=["synth"], transport=TRANSPORTS, fill=PARTIAL)
def test_ring_partly_filled(attached: Session, device: Device, transport: str, fill: str) -> None:
    """n blocked requests: QEMU holds all n (x-query-virtio-queue-status "inuse", and its
    last-avail-idx is our avail.idx), and each is freed by its own Tflush."""
    p9 = attached
    mode, count = fill.split("_")
    layout = INDIRECT if mode == "indirect" else SIMPLE
    fid, blocked = block(p9, int(count), layout)
    status = wait_in_use(device, int(count))
    assert status["inuse"] == int(count)
    assert status["last-avail-idx"] == device.driver.queue.avail_idx
    flush_one_by_one(p9, blocked, layout)
    assert wait_in_use(device, 0)["inuse"] == 0
    p9.clunk(fid)


@pytest.mark.needs_synth_tree
@pytest.mark.fresh_qemu  # its blocked requests can only end with the process
@case_path(
    "ring/exhaust/{transport}/{mode}_full", backends=["synth"], transport=TRANSPORTS, mode=["direct", "indirect"]
)
def test_ring_full_is_refused_by_the_driver(attached: Session, device: Device, transport: str, mode: str) -> None:
    """Two-descriptor chains for half the queue size, or one indirect chain per entry, fill the
    ring. QEMU takes as many as it has request slots (all of them in a 128-entry queue: its PDU
    free-list off-by-one once dropped the 128th), and the next submission, even a Tflush, is
    refused by our driver with RingFull, writing nothing to the ring."""
    p9 = attached
    size = device.driver.queue.size
    layout = INDIRECT if mode == "indirect" else SIMPLE
    capacity = size if mode == "indirect" else size // 2
    _, blocked = block(p9, capacity, layout)
    taken = min(capacity, SLOTS)
    assert wait_in_use(device, taken)["inuse"] == taken
    avail = device.driver.queue.avail_idx
    with pytest.raises(RingFull):
        p9.send(Tflush(oldtag=blocked[0].tag), layout=INDIRECT)
    assert device.driver.queue.avail_idx == avail
    assert queue_status(device)["last-avail-idx"] == avail - (capacity - taken)  # the rest wait for a slot
    assert device.driver.queue.num_free == 0
    p9.close(check=False)  # the blocked requests end with this QEMU
    device.abandon()


@pytest.mark.slow
@pytest.mark.needs_synth_tree
@pytest.mark.fresh_qemu
@pytest.mark.qemu_bug(
    fixed_in=(),
    reason="a virtio reset while 9P requests are blocked in the server never returns: v9fs_reset() "
    "waits for the in-flight PDUs, which the synth FLUSH write only ends when cancelled, so QEMU's "
    "main loop wedges (a guest can hang QEMU this way)",
    raises=QEMUError,
    upstream="reset-wedge",
)
@case_path("ring/exhaust/{transport}/reset", backends=["synth"], transport=TRANSPORTS)
def test_ring_full_then_reset(attached: Session, device: Device, transport: str) -> None:
    """All 128 request slots blocked: a device reset must bring back a clean device."""
    p9 = attached
    block(p9, SLOTS, INDIRECT)
    assert wait_in_use(device, SLOTS)["inuse"] == SLOTS
    p9.close(check=False)
    # a reset that must cancel 128 blocked requests takes milliseconds; not done in half a second
    # (longer for a sanitizer build), QEMU is wedged
    device.machine.qtest.set_timeout(device.machine.wedge_bound(RESET_BOUND))
    device.reset()
    assert queue_status(device)["inuse"] == 0
    assert Session(device.channel).version().msize == 8192


@pytest.mark.slow
@pytest.mark.qemu_bug(
    fixed_in=(),
    reason="requests beyond the 128 the server serves at once wait for another notification: "
    "handle_9p_output stops popping when no PDU is free, and a finished PDU does not make it look at "
    "the ring again (hw/9pfs/virtio-9p-device.c), so chains made available with one notification "
    "are never served if the driver has nothing more to send",
    upstream="ring-beyond-slots",
)
@case_path("ring/beyond_slots/{transport}", backends=["synth"], transport=TRANSPORTS)
def test_ring_beyond_slots(attached: Session, device: Device, transport: str) -> None:
    """128 + 16 Tgetattr made available together, with one notification, in a queue with room for
    them: the device was told of every one (virtio 1.x 2.7.13), so every one completes, with no
    further notification from the driver."""
    p9 = attached
    extra = 16
    if device.driver.queue.size < SLOTS + extra:
        pytest.skip(f"a queue of {device.driver.queue.size} entries holds no more than the server's {SLOTS} slots")
    with p9.batch():
        burst = [
            p9.send(Tgetattr(fid=0, request_mask=wire.GETATTR_BASIC), layout=INDIRECT) for _ in range(SLOTS + extra)
        ]
    kicks = device.driver.notifications
    # with at most 128 in flight it never notifies again: the rest are left once it has been
    # silent for half a second (a server still answering gets the whole 2 s)
    left = device.channel.collect(grace=2.0, quiet=0.5, keep=True)
    assert device.driver.notifications == kicks and device.driver.renotifications == 0
    if left:
        device.driver.notify_again()  # what a driver with more to send would do: the rest then come
        assert device.channel.collect(grace=5.0, keep=True) == 0
    assert left == 0, f"{left} of {len(burst)} requests never served after their one notification"
    root = burst[0].result(timeout=0).qid
    assert all(pending.result(timeout=0).qid == root for pending in burst)  # each one a Rgetattr of fid 0


@pytest.mark.slow
@case_path("ring/recycle/{transport}", backends=["synth"], transport=TRANSPORTS)
def test_ring_recycle(attached: Session, device: Device, transport: str) -> None:
    """Sequential requests in one session, ten times 128 and at least twice round the queue:
    descriptors come back from the used ring every time (libqos runs out after 64)."""
    p9 = attached
    queue = device.driver.queue
    rounds = max(10 * SLOTS, 2 * queue.size)
    root = p9.getattr(0).qid
    for _ in range(rounds):
        assert p9.getattr(0, wire.GETATTR_BASIC).qid == root
    assert queue.num_free == queue.size and queue.in_flight == 0
    assert queue.avail_idx == queue.last_used >= rounds


@pytest.mark.needs_synth_tree
@case_path("ring/out_of_order/{transport}", backends=["synth"], transport=TRANSPORTS)
def test_ring_out_of_order(attached: Session, transport: str) -> None:
    """A blocked write, then fast requests: the fast replies come first and each is matched to its
    request by descriptor head and tag; the write comes back last, flushed."""
    p9 = attached
    fid, (write,) = block(p9, 1, SIMPLE)
    fast = [p9.send(Tgetattr(fid=0, request_mask=wire.GETATTR_BASIC)) for _ in range(8)]
    everything: list[Pending[RMessage]] = [write, *fast]
    assert len({p.head for p in everything}) == len({p.tag for p in everything}) == 9
    replies = [p.wait() for p in fast]
    for pending, reply in zip(fast, replies, strict=True):
        assert isinstance(reply.message, Rgetattr)
        assert reply.tag == pending.tag
    flush = p9.send(Tflush(oldtag=write.tag))
    flushed, answer = write.wait(), flush.wait()
    assert flushed.used_len == 0
    assert max(r.order for r in replies) < flushed.order < answer.order
    p9.clunk(fid)


@case_path("ring/reset/{transport}", backends=["synth"], transport=TRANSPORTS)
def test_per_test_reset(machine_pool: MachinePool, machine_config: MachineConfig, transport: str) -> None:
    """The per-test queue reset, proven: a session leaves fids open and the ring full of completions
    the driver never collected; the pool's reset for the next case keeps the same QEMU, walks the
    device status 0, 1, 3, (0xb,) DRIVER_OK again, forgets the fids, and serves requests."""
    device = machine_pool.get(machine_config)
    pid = device.machine.pid
    old = Session(device.channel)
    old.version()
    old.attach(0)
    walked = old.new_fid()
    old.walk(0, [], walked)  # a clone of the root: a fid the reset must forget
    size = device.driver.queue.size
    for _ in range(size // 2):  # two-descriptor chains: every descriptor in use
        old.send(Tgetattr(fid=walked, request_mask=wire.GETATTR_BASIC))
    assert device.driver.queue.num_free == 0
    old.close(check=False)
    again = machine_pool.get(machine_config)
    assert again is device and again.machine.pid == pid
    modern = transport == "modern"
    assert again.driver.status_history == [0, 1, 3, *([0xB] if modern else []), 0xF if modern else 0x7]
    assert again.driver.queue.num_free == size
    fresh = Session(again.channel)
    fresh.version()
    fresh.attach(0)
    with expect_rlerror(errno.ENOENT):
        fresh.getattr(walked)
    fresh.clunk(0)


@pytest.mark.virtio_features(DEFAULT_FEATURES | F_RING_EVENT_IDX)
@case_path("ring/event_idx/{transport}", backends=["synth"], transport=TRANSPORTS)
def test_event_idx(attached: Session, device: Device, transport: str) -> None:
    """With VIRTIO_RING_F_EVENT_IDX the driver notifies only when avail_event asks for it
    (vring_need_event), and no request is lost for a skipped notification: bursts of 32 pipelined
    requests all complete. ``--event-idx`` runs the whole suite this way."""
    p9 = attached
    driver = device.driver
    assert driver.features & F_RING_EVENT_IDX
    root = p9.getattr(0).qid
    before = driver.notifications + driver.suppressed_notifications
    for _ in range(20):
        burst = [p9.send(Tgetattr(fid=0, request_mask=wire.GETATTR_BASIC)) for _ in range(32)]
        assert all(p.result().qid == root for p in burst)
    submitted = driver.notifications + driver.suppressed_notifications - before
    assert submitted == 20 * 32
    assert driver.notifications >= 1


@case_path("ring/burst/{transport}", backends=["synth"], transport=TRANSPORTS)
def test_ring_burst(attached: Session, transport: str) -> None:
    """128 requests in one socket write, four times: each answered under its own tag with its own
    reply (QEMU pops entries while the write is still arriving: a driver that published an entry
    before filling its buffer got "type 0" Rlerrors here)."""
    p9 = attached
    root = p9.getattr(0).qid
    for _ in range(4):
        with p9.batch():
            burst = [p9.send(Tgetattr(fid=0, request_mask=wire.GETATTR_BASIC), layout=INDIRECT) for _ in range(128)]
        for pending in burst:
            reply = pending.result()
            assert pending.wait().tag == pending.tag and reply.qid == root
