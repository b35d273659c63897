"""Large msize. Over virtio, a request travels in at most VIRTQUEUE_MAX_SIZE (1024) descriptors;
with 4 KiB pages, as the Linux client lays buffers out, that limits msize to (1024 - 2) * 4096 =
4,186,112 bytes. Upstream QEMU (2026, "cap negotiated msize to transport limit") answers a larger
Tversion with that limit; older servers echo any msize and then fail the request."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from fixtures.case_path import case_path
from fixtures.deviations import DOTU_RECORD_ABOVE_COUNT, REPLY_ABOVE_MSIZE
from fixtures.expect import NoReply, NotAnError, expect_a_reply, expect_an_error, expect_at_most, expect_device_error
from fixtures.model import SECURITY_MODELS
from fixtures.place import Place
from fixtures.pool import Device
from harness.errors import DeviceNeedsReset, P9Rlerror
from harness.p9 import wire
from harness.p9.channel import VIRTIO_MSIZE_LIMIT, ChainLayout
from harness.p9.messages import (
    Rerror,
    Rread,
    Tgetattr,
    Tgetlock,
    Topen,
    Tread,
    Treadlink,
    Tstat,
    Tsymlink,
    Tversion,
    Twrite,
)
from harness.p9.session import Pending, Session
from harness.p9.trace import Expectation
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


def reversion(p9: Session, msize: int, dialect: str = wire.DOTL) -> None:
    p9.clunk(0)
    reply = p9.version(msize, dialect)
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


def reversion_place(place: Place, msize: int, dialect: str = wire.DOTL) -> int:
    """A new Tversion drops every fid: attach again and walk back to the case's directory."""
    p9 = place.session
    p9.clunk(place.fid)
    reversion(p9, msize, dialect)
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


#: the smallest msize QEMU grants (P9_MIN_MSIZE; Linux's client asks for no less either)
SMALLEST = 4096
#: the longest symlink target Linux keeps (PATH_MAX less its NUL), and the longest name (NAME_MAX)
LONGEST_TARGET, LONGEST_NAME = 4095, 255
#: Every reply a field of which the server fills from its own data (a string, data, a list, a stat
#: record), and how the largest it can be meets the smallest msize: the case that makes it, or why
#: it always fits. tests/test_wire.py checks that the wire table has no other such reply.
LARGEST_REPLIES = {
    "Rreadlink": "msize/smallest/readlink/{security_model}: a target of PATH_MAX - 1 bytes",
    "Rstat": "msize/smallest/dotu_stat: a symlink with a NAME_MAX name and a PATH_MAX - 1 target",
    "Rread": "msize/smallest/dotu_read_dir/*: such a record in a 9P2000.u directory read; a file's and an "
    "xattr fid's data are as long as count says (read/count_above_msize, read/xattr_count_above_msize)",
    "Rgetlock": "msize/smallest/getlock: client_id comes back from a Tgetlock, 4 bytes longer than its reply",
    "Rreaddir": "as long as count says, which QEMU clamps to msize - 11 (readdir/count_clamp), and one entry is "
    "at most 13 + 8 + 1 + 2 + NAME_MAX = 279 bytes",
    "Rwalk": "at most MAXWELEM (16) qids: 9 + 16 * 13 bytes",
    "Rversion": 'QEMU answers the version it speaks or "unknown" (version/...)',
    "Rerror": "ename is strerror()'s text",
}
DOTU_PASSTHROUGH = pytest.mark.fsdev(security_model="passthrough", multidevs="warn")


def refused(p9: Session, request: Treadlink | Tstat) -> None:
    """``request``, whose whole answer cannot fit msize, is refused with an error (which errno is
    the server's to choose), not answered past the reply buffer (which breaks the device)."""
    __tracebackhide__ = True
    with expect_a_reply(Expectation(any_error=True)):
        reply = p9.send(request).wait().message
    expect_an_error(reply)


def longest_symlink(place: Place) -> str:
    """A symlink made on the host, named with NAME_MAX characters, to a PATH_MAX - 1 target."""
    name = "l" * LONGEST_NAME
    os.symlink("t" * LONGEST_TARGET, place.host_path(name))
    return name


@pytest.mark.qemu_bug(**REPLY_ABOVE_MSIZE, raises=NoReply)
@case_path("msize/smallest/readlink/{security_model}", backends=["local"], security_model=list(SECURITY_MODELS))
def test_smallest_msize_readlink(place: Place, security_model: str) -> None:
    """At the smallest msize, Treadlink of a link whose target (PATH_MAX - 1 bytes, made by Tsymlink
    at msize 8192) makes a 4104-byte Rreadlink is refused with an error, and the session goes on."""
    p9 = place.session
    p9.rpc(Tsymlink(fid=place.fid, name="l", symtgt="t" * LONGEST_TARGET, gid=0))
    place.fid = reversion_place(place, SMALLEST)
    fid = p9.walk_fid(place.fid, ["l"])
    refused(p9, Treadlink(fid=fid))
    assert p9.getattr(fid).qid.type == wire.QTSYMLINK
    p9.clunk(fid)


@DOTU_PASSTHROUGH
@pytest.mark.qemu_bug(**REPLY_ABOVE_MSIZE, raises=NoReply)
@case_path("msize/smallest/dotu_stat", backends=["local"], dialect=[wire.DOTU])
def test_smallest_msize_dotu_stat(place: Place, dialect: str) -> None:
    """At the smallest msize, a 9P2000.u Tstat of a symlink whose stat record (NAME_MAX name,
    PATH_MAX - 1 target as its extension) is over 4 KiB is refused with an error, and the session
    goes on."""
    p9 = place.session
    name = longest_symlink(place)
    place.fid = reversion_place(place, SMALLEST, dialect)
    fid = p9.walk_fid(place.fid, [name])
    refused(p9, Tstat(fid=fid))
    assert p9.rpc(Tstat(fid=place.fid)).stat.name == place.host_path().name
    p9.clunk(fid)


#: the symlinks whose stat record a listing at the smallest msize meets: one exactly as large as
#: the largest count a read may ask for (msize - 11), and the largest a record gets (a NAME_MAX
#: name, a PATH_MAX - 1 target)
RECORDS = ("msize-11", "largest")
#: the counts the listing asks for, by what they leave of msize: the largest that fits (msize less
#: the Rread header) and Linux's (msize - P9_IOHDRSZ)
COUNTS = {"msize-11": wire.RREAD_HEADER, "msize-24": wire.IOHDRSZ}


def record_size(place: Place, name: str) -> int:
    """The size of ``name``'s stat record in a 9P2000.u listing, as Tstat shows it."""
    fid = place.session.walk_fid(place.fid, [name])
    size = len(wire.stat_bytes(place.session.rpc(Tstat(fid=fid)).stat))
    place.session.clunk(fid)
    return size


def sized_symlink(place: Place, record: str) -> tuple[str, int]:
    """The symlink of ``record`` (RECORDS), made on the host: its name and its record's size."""
    if record == "largest":
        name = longest_symlink(place)
        return name, record_size(place, name)
    name, short = "s", 100
    os.symlink("t" * short, place.host_path(name))
    target = short + SMALLEST - wire.RREAD_HEADER - record_size(place, name)
    place.host_path(name).unlink()
    os.symlink("t" * target, place.host_path(name))
    size = record_size(place, name)
    assert size == SMALLEST - wire.RREAD_HEADER, f"a {target}-byte target makes a {size}-byte record"
    return name, size


@DOTU_PASSTHROUGH
@pytest.mark.qemu_bug(**DOTU_RECORD_ABOVE_COUNT, raises=NotAnError, when={"record": "largest"})
@pytest.mark.qemu_bug(**DOTU_RECORD_ABOVE_COUNT, raises=NotAnError, when={"record": "msize-11", "count": "msize-24"})
@case_path("msize/smallest/dotu_read_dir/{record}/count_{count}", backends=["local"], dialect=[wire.DOTU],
           record=list(RECORDS), count=list(COUNTS))  # fmt: skip
def test_smallest_msize_dotu_read_dir(place: Place, dialect: str, record: str, count: str) -> None:
    """At the smallest msize, a 9P2000.u listing at ``count`` of a directory holding a file and a
    symlink whose stat record is ``record`` bytes: a record that fits the count is listed with
    every other entry; one that does not fails the read it comes first in, after the entries before
    it in the host's order, and the session goes on. A read answering count 0 (the end of the
    directory) there would hide the symlink, and every entry after it."""
    p9 = place.session
    name, size = sized_symlink(place, record)
    place.host_path("f").write_bytes(b"")
    order = os.listdir(place.host_path())  # the host's order, which QEMU's listing follows ("." and ".." aside)
    place.fid = reversion_place(place, SMALLEST, dialect)
    fid = p9.walk_fid(place.fid, [])
    p9.rpc(Topen(fid=fid, mode=wire.OREAD))
    asked = SMALLEST - COUNTS[count]
    listed: list[str] = []
    offset, failed = 0, False
    for _ in range(5):  # the three short records fit one read, and the symlink's a read of its own
        reply = p9.send(Tread(fid=fid, offset=offset, count=asked)).wait().message
        if isinstance(reply, Rerror):
            failed = True  # refused: the client learns the listing is not whole
            break
        assert isinstance(reply, Rread), reply
        if not reply.data:
            if size > asked and name not in listed:
                expect_an_error(reply)  # the end of the directory, with the symlink not listed
            break
        listed += [stat.name for stat in wire.parse_stats(bytes(reply.data))]
        offset += len(reply.data)
    else:
        raise AssertionError(f"five reads listed {listed}, and the listing neither ended nor failed")
    names = [n for n in listed if n not in (".", "..")]
    if size <= asked:
        assert not failed and sorted(names) == sorted(order), f"a {size}-byte record at count {asked}: {listed}"
    else:
        assert failed and names == order[: order.index(name)], (listed, order)
    assert p9.rpc(Tstat(fid=place.fid)).stat.name == place.host_path().name
    p9.clunk(fid)


@case_path("msize/smallest/getlock", backends=["local"])
def test_smallest_msize_getlock(place: Place) -> None:
    """At the smallest msize, a Tgetlock filling msize with its client_id is answered with that
    client_id back (Rgetlock is 4 bytes shorter): F_UNLCK, nothing holding the file."""
    p9 = place.session
    place.host_path("f").write_bytes(b"x")
    place.fid = reversion_place(place, SMALLEST)
    fid = p9.walk_fid(place.fid, ["f"])
    p9.lopen(fid, os.O_RDWR)
    ask = Tgetlock(fid=fid, type=wire.P9_LOCK_TYPE_WRLCK, start=0, length=0, proc_id=1, client_id="")
    room = SMALLEST - len(wire.encode(ask, 0))
    reply = p9.rpc(Tgetlock(fid=fid, type=wire.P9_LOCK_TYPE_WRLCK, start=0, length=0, proc_id=1, client_id="c" * room))
    assert reply.type == wire.P9_LOCK_TYPE_UNLCK
    assert reply.client_id == "c" * room
    p9.clunk(fid)
