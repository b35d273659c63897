"""Tread: "count[4] ... the number of bytes to read"; "msize ... the maximum length, in bytes,
that the client will ever ... expect to receive in a single 9P message" (read(5), version(5)).
A server must never answer with more than msize bytes, whatever count says."""

from __future__ import annotations

import os

import pytest

from fixtures.case_path import case_path
from fixtures.deviations import READ_COUNT_ABOVE_MSIZE
from fixtures.expect import NoReply, expect_a_reply, expect_at_most
from fixtures.place import Place
from harness.p9 import wire
from harness.p9.messages import Txattrcreate, Txattrwalk
from harness.p9.session import Session
from harness.p9.trace import Expectation

DATA = bytes(range(256)) * 64  # 16 KiB: more than an 8 KiB msize can carry


def file_with_data(place: Place) -> tuple[int, int]:
    """A fid opened O_RDONLY on a file holding DATA, and the iounit Rlopen gave."""
    place.host_path("data").write_bytes(DATA)
    fid = place.session.walk_fid(place.fid, ["data"])
    return fid, int(place.session.lopen(fid, os.O_RDONLY).iounit)


@case_path("read/basic", backends=["local"])
def test_read_basic(place: Place) -> None:
    """Reads at offsets return exactly the host bytes; past EOF returns count 0."""
    p9 = place.session
    fid, _ = file_with_data(place)
    assert p9.read(fid, 0, 4096).data == DATA[:4096]
    assert p9.read(fid, 12345, 100).data == DATA[12345:12445]
    assert p9.read(fid, len(DATA) - 10, 100).data == DATA[-10:]
    assert p9.read(fid, len(DATA), 100).data == b""
    assert p9.read(fid, 10 * len(DATA), 100).data == b""
    p9.clunk(fid)


def read_all_at_once(p9: Session, fid: int, held: bytes) -> None:
    """A Tread of ``fid`` for all it holds, more than fits msize, gets at most what fits (msize less
    the 11-byte Rread header), its first bytes; then the fid is clunked."""
    bound = p9.msize - wire.RREAD_HEADER
    assert len(held) > bound
    with expect_a_reply(Expectation(field="data", at_most=bound)):
        reply = p9.read(fid, 0, len(held))
    expect_at_most(reply, "data", bound)
    assert len(reply.data) > 0
    assert reply.data == held[: len(reply.data)]
    p9.clunk(fid)


@pytest.mark.qemu_bug(**READ_COUNT_ABOVE_MSIZE, raises=NoReply)
@case_path("read/count_above_msize", backends=["local"], transport=["modern"])
def test_read_count_above_msize(place: Place, transport: str) -> None:
    """A count above what fits msize gets at most what fits (msize less the 11-byte Rread header),
    the first bytes of the file. (read(5)'s msize - IOHDRSZ is what a client should ask for; a
    server clamping to it would cut 13 bytes off each of Linux's zero-copy reads, whose reply
    buffer is the header and exactly the count asked.)"""
    fid, _ = file_with_data(place)
    read_all_at_once(place.session, fid, DATA)


#: how an xattr fid comes to hold a buffer for Tread (v9fs_xattr_read(), a path of its own beside a
#: file's): Txattrcreate makes it attr_size bytes of zeros, Txattrwalk reads the host's value into it
XATTR_FIDS = ("created", "walked")


@pytest.mark.qemu_bug(**READ_COUNT_ABOVE_MSIZE, raises=NoReply)
@case_path("read/xattr_count_above_msize/{fid}", backends=["local"], fid=list(XATTR_FIDS))
def test_read_xattr_count_above_msize(place: Place, fid: str) -> None:
    """An xattr fid holding more than fits msize, read with a count above that, gets at most what
    fits: the buffer's first bytes (zeros for a created fid, nothing written yet; the host's
    value for a walked one). A value that large needs a host file system that takes it: tmpfs
    (Linux 6.6 and later), xfs and btrfs do; ext4 takes at most about a block."""
    p9 = place.session
    place.host_path("f").write_bytes(b"x")
    if fid == "walked":
        try:
            os.setxattr(place.host_path("f"), "user.big", DATA)
        except OSError as err:
            pytest.skip(f"the export's host file system refused a {len(DATA)}-byte xattr value ({err.strerror}): "
                        "run with TMPDIR on tmpfs, xfs or btrfs")  # fmt: skip
    xattr = p9.walk_fid(place.fid, ["f"])
    held = DATA
    if fid == "created":
        p9.rpc(Txattrcreate(fid=xattr, name="user.big", attr_size=len(DATA), flags=0))
        held = bytes(len(DATA))
    else:
        source, xattr = xattr, p9.new_fid()
        assert p9.rpc(Txattrwalk(fid=source, newfid=xattr, name="user.big")).size == len(DATA)
        p9.clunk(source)
    read_all_at_once(p9, xattr, held)


@pytest.mark.slow
@case_path("read/above_iounit", backends=["local"])
def test_read_above_iounit(place: Place) -> None:
    """iounit only promises what is atomic: a Tread above it but within msize - 24 is served in
    full, byte for byte."""
    p9 = place.session
    fid, iounit = file_with_data(place)
    count = p9.msize - wire.IOHDRSZ
    assert count > iounit
    assert p9.read(fid, 0, count).data == DATA[:count]
    p9.clunk(fid)
