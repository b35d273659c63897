"""Large msize. Over virtio, a request travels in at most VIRTQUEUE_MAX_SIZE (1024) descriptors;
with 4 KiB pages, as the Linux client lays buffers out, that limits msize to (1024 - 2) * 4096 =
4,186,112 bytes. Upstream QEMU (2026, "cap negotiated msize to transport limit") answers a larger
Tversion with that limit; older servers echo any msize and then fail the request."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from fixtures.case_path import case_path
from fixtures.expect import expect_at_most, expect_device_error
from fixtures.place import Place
from fixtures.pool import Device
from harness.errors import DeviceNeedsReset, P9Rlerror
from harness.p9 import wire
from harness.p9.channel import VIRTIO_MSIZE_LIMIT, ChainLayout
from harness.p9.messages import Tgetattr, Tread, Tversion, Twrite
from harness.p9.session import Pending, Session
from harness.p9.wire import RMessage
from harness.qemu import versions

SIZES = [512 * 1024, 1 << 20, 2 << 20, VIRTIO_MSIZE_LIMIT]
PAGES = ChainLayout(out_segments=(wire.IOHDRSZ - 1,) + (4096,) * 1100, in_segment=4096, indirect=True)


def payload(size: int) -> bytes:
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def full_circle(p9: Session, place: Place, layout: ChainLayout | None) -> None:
    """Twrite and Tread of msize - 24 bytes: checked on the host and byte for byte."""
    data = payload(p9.msize - wire.IOHDRSZ)
    fid = p9.walk_fid(place.fid, [])
    p9.lcreate(fid, "big", os.O_RDWR, 0o600)
    if layout is None:
        assert p9.write(fid, 0, data).count == len(data)
        assert place.host_path("big").read_bytes() == data
        assert p9.read(fid, 0, len(data)).data == data
    else:  # like Linux: the Twrite's small reply gets one page, the Rread's data goes in pages
        assert p9.send(Twrite(fid=fid, offset=0, data=data), layout=layout, reply_capacity=4096).result().count == len(
            data
        )
        assert place.host_path("big").read_bytes() == data
        assert bytes(p9.send(Tread(fid=fid, offset=0, count=len(data)), layout=layout).result().data) == data
    p9.clunk(fid)


def reversion(p9: Session, msize: int) -> None:
    p9.clunk(0)
    reply = p9.version(msize)
    assert reply.msize == msize, f"Rversion msize {reply.msize} for {msize}"
    p9.attach(0)


@case_path("msize/large/{transport}/{msize}", backends=["local"], transport=["modern", "legacy"], msize=SIZES)
def test_large_msize(place: Place, transport: str, msize: int) -> None:
    """Up to the virtio limit the msize asked for is granted, and a full-msize payload goes out and
    comes back byte for byte, in single descriptors."""
    p9 = place.session
    place.fid = reversion_place(place, msize)
    full_circle(p9, place, None)


@case_path(
    "msize/pages/{transport}/{msize}",
    backends=["local"],
    transport=["modern", "legacy"],
    msize=[1 << 20, VIRTIO_MSIZE_LIMIT],
)
def test_large_msize_in_pages(place: Place, transport: str, msize: int) -> None:
    """The same with every buffer in 4 KiB pages in an indirect table (Linux's layout): at the
    limit a request takes exactly 1024 descriptors."""
    p9 = place.session
    place.fid = reversion_place(place, msize)
    full_circle(p9, place, PAGES)


@pytest.mark.qemu_bug(
    fixed_in=versions.MSIZE_CAP,
    reason="Rversion echoes any msize; a full-msize request in 4 KiB pages then needs more than 1024 "
    'descriptors ("virtio: too many write descriptors in indirect table"); upstream caps msize at '
    "the transport limit since 2026",
    raises=(AssertionError, DeviceNeedsReset),
)
@case_path("msize/above_limit", backends=["local"], transport=["modern"])
def test_msize_above_the_virtio_limit(place: Place, transport: str) -> None:
    """Asked for 8 MiB, the server grants at most 4,186,112, and a full-msize payload in pages then
    works."""
    p9 = place.session
    p9.clunk(place.fid)
    p9.clunk(0)
    expect_at_most(p9.version(8 << 20), "msize", VIRTIO_MSIZE_LIMIT)  # checked on Rversion: replay judges it too
    p9.attach(0)
    place.fid = p9.walk_fid(0, [place.host_path().name])
    full_circle(p9, place, PAGES)


@pytest.mark.qemu_bug(
    fixed_in=(),
    reason="v9fs_version() reads msize into V9fsState's int32_t msize: an msize of 2^31 or more is negative "
    'there, below P9_MIN_MSIZE, and refused with EMSGSIZE ("Client requested msize < minimum msize") where '
    "the transport's limit would be granted",
    raises=P9Rlerror,
    upstream="msize-sign",
)
@case_path("msize/largest/{msize}", backends=["synth"], transport=["modern"], msize=[1 << 31, 0xFFFFFFFF])
def test_msize_largest(p9: Session, transport: str, msize: int) -> None:
    """Asked for an msize past a signed 32-bit int, up to the largest a u32 holds, the server
    grants at most the transport's limit, and the session then attaches."""
    expect_at_most(p9.version(msize), "msize", VIRTIO_MSIZE_LIMIT)
    fid = p9.new_fid()
    assert p9.attach(fid).qid.type == wire.QTDIR
    p9.clunk(fid)


def reversion_place(place: Place, msize: int) -> int:
    """A new Tversion drops every fid: attach again and walk back to the case's directory."""
    p9 = place.session
    p9.clunk(place.fid)
    reversion(p9, msize)
    fid = p9.walk_fid(0, [place.host_path().name])
    return fid


@case_path("msize/reply_too_big/{transport}/{message}", backends=["synth"], transport=["modern", "legacy"],
     message=["Tgetattr", "Tversion"])  # fmt: skip
def test_reply_larger_than_the_buffer(attached: Session, device: Device, transport: str, message: str) -> None:
    """A reply that does not fit the in-buffer the driver gave is a device error, not a truncated
    or overflowing reply: QEMU says which reply needed how much."""
    p9 = attached
    send: Callable[[], Pending[RMessage]]
    if message == "Tgetattr":
        send, line = (
            (lambda: p9.send(Tgetattr(fid=0, request_mask=wire.GETATTR_ALL), reply_capacity=64)),
            ("Failed to encode VirtFS reply type 25"),
        )
    else:
        send, line = (
            (lambda: p9.send(Tversion(msize=8192, version="9P2000.L"), reply_capacity=8)),
            ("Failed to encode VirtFS reply type 101"),
        )
    expect_device_error(p9, device, send, line, transport == "modern")
