"""Descriptor chains: "The driver MUST place any device-writable descriptor elements after any
device-readable descriptor elements" (virtio 1.x 2.7.4.2) and may split a buffer over any number
of descriptors, or put them in an indirect table (2.7.5.3). QEMU maps at most VIRTQUEUE_MAX_SIZE
(1024) scatter-gather entries per request and calls virtio_error() past that, which sets
DEVICE_NEEDS_RESET (0x40) on the modern interface; the legacy one has no such bit and goes silent."""

from __future__ import annotations

import os

import pytest

from fixtures.case_path import case_path
from fixtures.expect import expect_device_error
from fixtures.place import Place
from fixtures.pool import Device
from harness.errors import RingFull
from harness.p9 import wire
from harness.p9.channel import ChainLayout
from harness.p9.messages import Rgetattr, Rread, Tgetattr, Tread, Twrite
from harness.p9.session import Pending, Session
from harness.virtio.virtqueue import VIRTQUEUE_MAX_SIZE, Buffer

TRANSPORTS = ["modern", "legacy"]
#: Twrite's fixed part: size, type, tag, fid, offset, count.
TWRITE_HEADER = 23
LAYOUTS = {
    # the 7-byte 9P header one byte per descriptor, the Twrite fields apart, the data in pages
    "bytewise_header": ChainLayout(out_segments=(1,) * 7 + (16,) + (4096,), in_segment=4096),
    "pages": ChainLayout(out_segments=(TWRITE_HEADER, 4096), in_segment=4096),
    "small_in": ChainLayout(out_segments=(TWRITE_HEADER,), in_segment=100),
    "indirect_pages": ChainLayout(out_segments=(TWRITE_HEADER, 4096), in_segment=4096, indirect=True),
}
DATA = (bytes(range(251)) * 33)[:8000]  # fits msize 8192 with the Twrite header; not a multiple of 4096


def open_file(place: Place) -> int:
    p9 = place.session
    fid = p9.walk_fid(place.fid, [])
    p9.lcreate(fid, "data", os.O_RDWR, 0o600)
    return fid


@case_path("chains/{transport}/{layout}", backends=["local"], transport=TRANSPORTS, layout=list(LAYOUTS))
def test_chain_layouts(place: Place, transport: str, layout: str) -> None:
    """A Twrite split over many out-descriptors lands on the host byte for byte, and a Tread whose
    reply is scattered over many in-descriptors reads it back byte for byte."""
    p9 = place.session
    chain = LAYOUTS[layout]
    fid = open_file(place)
    assert p9.send(Twrite(fid=fid, offset=0, data=DATA), layout=chain).result().count == len(DATA)
    assert place.host_path("data").read_bytes() == DATA
    reply = p9.send(Tread(fid=fid, offset=0, count=len(DATA)), layout=chain).wait()
    assert reply.message == Rread(data=DATA)
    assert reply.used_len == wire.RREADDIR_HEADER + len(DATA)
    p9.clunk(fid)


@case_path("chains/{transport}/payload_descriptor", backends=["local"], transport=TRANSPORTS)
def test_payload_in_its_own_descriptor(place: Place, device: Device, transport: str) -> None:
    """The data of a Twrite in a descriptor of its own after a 23-byte header descriptor, and a
    Tread whose data lands in a descriptor after the 11-byte Rread head (how a guest kernel passes
    page-cache pages): bytes, counts and offsets honoured, and a short read at end of file writes
    no byte past its count."""
    p9, mem = place.session, device.driver.mem
    fid = open_file(place)
    with device.driver.guest_buffer(len(DATA)) as out, device.driver.guest_buffer(len(DATA)) as back:
        mem.memwrite(out, DATA)
        mem.memwrite(back, b"\xee" * len(DATA))
        written = p9.send_resident(Twrite(fid=fid, offset=100, data=b""), Buffer(out, len(DATA))).result()
        assert written.count == len(DATA)
        assert place.host_path("data").read_bytes() == bytes(100) + DATA
        reply = p9.send_resident(Tread(fid=fid, offset=1000, count=len(DATA)), Buffer(back, len(DATA))).wait()
        assert reply.message == Rread(data=b"")  # the data went to the resident buffer
        assert reply.used_len == wire.RREAD_HEADER + 100 + len(DATA) - 1000
        assert int.from_bytes(reply.frame[7:11], "little") == 100 + len(DATA) - 1000  # Rread's count
        got = mem.memread(back, len(DATA))
        assert got == DATA[900:] + b"\xee" * 900
    p9.clunk(fid)


def send_scattered(p9: Session, descriptors: int) -> Pending[Rgetattr]:
    """Tgetattr in an indirect table of ``descriptors``: one out, the rest 8-byte in-buffers."""
    layout = ChainLayout(in_segment=8, indirect=True)
    reply_capacity = 8 * (descriptors - 1)
    return p9.send(Tgetattr(fid=0, request_mask=wire.GETATTR_ALL), layout=layout, reply_capacity=reply_capacity)


@case_path("chains/{transport}/indirect_1024", backends=["synth"], transport=TRANSPORTS)
def test_indirect_table_at_the_limit(attached: Session, transport: str) -> None:
    """1024 descriptors (1 out, 1023 in of 8 bytes) is VIRTQUEUE_MAX_SIZE exactly: served, the
    160-byte Rgetattr scattered over 20 of them."""
    p9 = attached
    pending = send_scattered(p9, 1024)
    assert len(pending.handle.chain) == 1024
    assert pending.result().qid == p9.getattr(0).qid


@case_path("chains/{transport}/indirect_1025", backends=["synth"], transport=TRANSPORTS)
def test_indirect_table_past_the_limit(attached: Session, device: Device, transport: str) -> None:
    """1025 descriptors: QEMU refuses the chain with virtio_error()."""
    p9 = attached
    expect_device_error(
        p9,
        device,
        lambda: send_scattered(p9, 1025),
        "virtio: too many write descriptors in indirect table",
        transport == "modern",
    )


@case_path("chains/{transport}/zero_sized", backends=["synth"], transport=TRANSPORTS)
def test_zero_sized_descriptor(attached: Session, device: Device, transport: str) -> None:
    """A zero-length descriptor in the chain: "virtio: zero sized buffers are not allowed"."""
    p9 = attached
    expect_device_error(
        p9,
        device,
        lambda: p9.send(Tgetattr(fid=0, request_mask=wire.GETATTR_ALL), layout=ChainLayout(out_segments=(7, 0))),
        "virtio: zero sized buffers are not allowed",
        transport == "modern",
    )


@case_path("chains/{transport}/direct_longer_than_queue", backends=["synth"], transport=TRANSPORTS)
def test_direct_chain_longer_than_the_queue(attached: Session, device: Device, transport: str) -> None:
    """One direct descriptor more than the queue has entries cannot exist: our driver refuses the
    chain with RingFull and writes nothing, and the device is untouched."""
    p9 = attached
    size = device.driver.queue.size
    avail = device.driver.queue.avail_idx
    with pytest.raises(RingFull, match=f"chain of {size + 1}"):
        request = Tgetattr(fid=0, request_mask=wire.GETATTR_ALL)
        p9.send(request, layout=ChainLayout(in_segment=64), reply_capacity=64 * size)
    assert device.driver.queue.avail_idx == avail and device.driver.queue.num_free == size
    assert p9.getattr(0).qid.type == wire.QTDIR


@case_path("chains/{transport}/looped", backends=["synth"], transport=TRANSPORTS)
def test_looped_chain(attached: Session, device: Device, transport: str) -> None:
    """The only way to hand the device a longer direct chain: a loop. QEMU stops after the table
    size with "Looped descriptor", or, in a 1024-entry queue, at VIRTQUEUE_MAX_SIZE buffers."""
    p9 = attached
    full = device.driver.queue.size >= VIRTQUEUE_MAX_SIZE
    expect_device_error(
        p9,
        device,
        lambda: p9.send(Tgetattr(fid=0, request_mask=wire.GETATTR_ALL), layout=ChainLayout(loop=True)),
        "too many write descriptors" if full else "Looped descriptor",
        transport == "modern",
    )
