"""Descriptor chains: "The driver MUST place any device-writable descriptor elements after any
device-readable descriptor elements" (virtio 1.x 2.7.4.2) and may split a buffer over any number
of descriptors, or put them in an indirect table (2.7.5.3). QEMU maps at most VIRTQUEUE_MAX_SIZE
(1024) scatter-gather entries per request and calls virtio_error() past that, which sets
DEVICE_NEEDS_RESET (0x40) on the modern interface; the legacy one has no such bit and goes silent."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

import pytest

import synth_tree
from fixtures.answers import answer_of
from fixtures.case_path import case_path
from fixtures.expect import expect_device_error
from fixtures.place import Place
from fixtures.pool import Device
from harness.errors import RingFull
from harness.p9 import malformed, wire
from harness.p9.channel import ChainLayout
from harness.p9.messages import Rgetattr, Rlerror, Rread, Tgetattr, Tread, Tstatfs, Twalk, Twrite, Txattrwalk
from harness.p9.session import Pending, Session
from harness.p9.wire import Message, Request
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


# -- buffer boundaries --------------------------------------------------------------------------

#: the request the reply-buffer boundaries are measured on, and its reply's length (Rgetattr's
#: fields are all fixed-width: its length is the same for every node)
GETATTR = Tgetattr(fid=0, request_mask=wire.GETATTR_BASIC)
RGETATTR_LEN = len(wire.encode(Rgetattr(valid=0, qid=wire.Qid(0, 0, 0), mode=0, uid=0, gid=0, nlink=0, rdev=0,
                                        size=0, blksize=0, blocks=0, atime_sec=0, atime_nsec=0, mtime_sec=0,
                                        mtime_nsec=0, ctime_sec=0, ctime_nsec=0, btime_sec=0, btime_nsec=0,
                                        gen=0, data_version=0), 0))  # fmt: skip
#: a reply buffer of each size that turns QEMU's code: none at all, 1, one short of the 9P header,
#: the header, one past it, one short of the reply, and the reply
REPLY_BUFFERS = {"none": 0, "1": 1, "header-1": wire.HEADER_SIZE - 1, "header": wire.HEADER_SIZE,
                 "header+1": wire.HEADER_SIZE + 1, "reply-1": RGETATTR_LEN - 1, "reply": RGETATTR_LEN}  # fmt: skip


@case_path("chains/{transport}/reply_buffer/{size}", backends=["synth"], transport=TRANSPORTS, size=list(REPLY_BUFFERS))
def test_reply_buffer_sizes(attached: Session, device: Device, transport: str, size: str) -> None:
    """A Tgetattr with a reply buffer of each size: below the 9P header QEMU refuses the request
    ("without space for the reply"), from the header to one byte short of the reply it cannot
    encode the reply (a device error either way, never a cut reply), and the whole reply fits."""
    p9 = attached
    capacity = REPLY_BUFFERS[size]
    if capacity == RGETATTR_LEN:
        reply = p9.send(GETATTR, reply_capacity=capacity).wait()
        assert isinstance(reply.message, Rgetattr) and reply.used_len == RGETATTR_LEN
        return
    line = ("The guest sent a VirtFS request without space for the reply" if capacity < wire.HEADER_SIZE
            else f"Failed to encode VirtFS reply type {Rgetattr.TYPE}")  # fmt: skip
    expect_device_error(p9, device, lambda: p9.send(GETATTR, reply_capacity=capacity), line, transport == "modern")


#: a request buffer of each size short of the 9P header (none at all: chains/zero_sized; a body cut
#: at each field: malformed/<message>/cut_before_<field>)
REQUEST_BUFFERS = {"1": 1, "header-1": wire.HEADER_SIZE - 1}


@case_path("chains/{transport}/request_buffer/{size}", backends=["synth"], transport=TRANSPORTS,
           size=list(REQUEST_BUFFERS))  # fmt: skip
def test_request_buffer_sizes(attached: Session, device: Device, transport: str, size: str) -> None:
    """A request of fewer bytes than the 9P header: QEMU refuses it ("header size is N, should be
    7"), a device error, not a request read past its end."""
    p9 = attached
    cut = wire.encode(GETATTR, 1)[: REQUEST_BUFFERS[size]]
    line = f"The guest sent a malformed VirtFS request: header size is {len(cut)}, should be 7"
    expect_device_error(p9, device, lambda: p9.send_raw(cut, reply_capacity=RGETATTR_LEN), line, transport == "modern")


#: reading requests on the synth root, each sent whole and then split into a descriptor per field
SPLIT: dict[str, Callable[[Session], Request]] = {
    "Tgetattr": lambda p9: GETATTR,
    "Tstatfs": lambda p9: Tstatfs(fid=0),
    "Twalk": lambda p9: Twalk(fid=0, newfid=p9.new_fid(), wnames=[synth_tree.ROOT.children[0].name]),
    "Txattrwalk": lambda p9: Txattrwalk(fid=0, newfid=p9.new_fid(), name=""),
}


def field_segments(request: Request) -> tuple[int, ...]:
    """The sizes of a frame's fields, header ones too (size, type, tag), but the last's: a chain
    that puts each field in a descriptor of its own."""
    body = [offset for _, offset in malformed.field_boundaries(type(request).codec(), vars(request))]
    starts = [0, 4, 5, wire.HEADER_SIZE, *(wire.HEADER_SIZE + at for at in body[1:])]
    return tuple(b - a for a, b in itertools.pairwise(starts))


@case_path("chains/{transport}/split_at_every_field/{message}", backends=["synth"], transport=TRANSPORTS,
           message=list(SPLIT))  # fmt: skip
def test_split_at_every_field(attached: Session, transport: str, message: str) -> None:
    """A request whose every field (the header's size, type and tag too) is a descriptor of its
    own is answered as the same request in one descriptor: the same answer (fixtures/answers.py)
    and the same qids. Not byte for byte: 7.2.22's synth backend fills some Rstatfs and Rgetattr
    fields from memory it never set, which differ between two replies."""
    p9 = attached
    first, second = SPLIT[message](p9), SPLIT[message](p9)
    whole = p9.send(first).wait().message
    split = p9.send(second, layout=ChainLayout(out_segments=field_segments(second))).wait().message
    assert essence(split) == essence(whole)
    for request in (first, second):  # a newfid the answer made
        if not isinstance(whole, Rlerror) and isinstance(newfid := getattr(request, "newfid", None), int):
            p9.clunk(newfid)


def essence(reply: object) -> tuple[object, ...]:
    """What a reply says that does not depend on memory the server never set: its answer and its qids."""
    assert reply is None or isinstance(reply, Message)
    return answer_of(reply), getattr(reply, "qid", None), getattr(reply, "qids", None)
