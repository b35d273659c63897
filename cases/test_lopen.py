"""Tlopen: "opens a file ... returns qid and iounit", iounit being the largest read or write that
is guaranteed to be done in one message (diod protocol.md, open(5))."""

from __future__ import annotations

import errno
import os

import pytest

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from fixtures.place import Place
from harness.p9 import wire
from harness.p9.session import Session


@pytest.mark.needs_synth_tree
@case_path("lopen/basic", backends=["synth"])
def test_lopen_basic(attached: Session) -> None:
    """Rlopen's qid is the walked file's qid, and iounit is the largest multiple of the
    filesystem block size that fits msize - P9_IOHDRSZ (QEMU's get_iounit)."""
    p9 = attached
    fid = p9.new_fid()
    (qid,) = p9.walk(0, ["LOPEN"], fid).qids
    assert qid.type == wire.QTFILE
    reply = p9.lopen(fid, os.O_WRONLY)
    assert reply.qid == qid
    bsize = p9.statfs(fid).bsize
    assert bsize > 0
    assert reply.iounit == (p9.msize - wire.IOHDRSZ) // bsize * bsize
    p9.clunk(fid)


@pytest.mark.needs_synth_tree
@case_path("lopen/directory", backends=["synth"])
def test_lopen_directory(attached: Session) -> None:
    """A directory opens with O_DIRECTORY and keeps its directory qid."""
    p9 = attached
    fid = p9.new_fid()
    (qid,) = p9.walk(0, ["ReadDirDir"], fid).qids
    assert p9.lopen(fid, os.O_DIRECTORY).qid == qid
    assert qid.type == wire.QTDIR
    p9.clunk(fid)


@case_path("lopen/flags", backends=["local"])
def test_lopen_flags_are_enforced(place: Place) -> None:
    """A fid opened O_RDONLY reads but cannot write (EBADF); O_WRONLY writes but cannot read."""
    p9 = place.session
    place.host_path("f").write_bytes(b"0123456789")
    reader = p9.walk_fid(place.fid, ["f"])
    p9.lopen(reader, os.O_RDONLY)
    assert p9.read(reader, 2, 3).data == b"234"
    with expect_rlerror(errno.EBADF):
        p9.write(reader, 0, b"x")
    writer = p9.walk_fid(place.fid, ["f"])
    p9.lopen(writer, os.O_WRONLY)
    assert p9.write(writer, 0, b"ab").count == 2
    with expect_rlerror(errno.EBADF):
        p9.read(writer, 0, 3)
    assert place.host_path("f").read_bytes() == b"ab23456789"
    for fid in (reader, writer):
        p9.clunk(fid)


@case_path("lopen/twice", backends=["local"])
def test_lopen_twice(place: Place) -> None:
    """A fid is opened once: a second Tlopen is EINVAL and the first open keeps working."""
    p9 = place.session
    place.host_path("f").write_bytes(b"data")
    fid = p9.walk_fid(place.fid, ["f"])
    p9.lopen(fid, os.O_RDONLY)
    with expect_rlerror(errno.EINVAL):
        p9.lopen(fid, os.O_RDWR)
    assert p9.read(fid, 0, 10).data == b"data"
    p9.clunk(fid)


@pytest.mark.qemu_bug(
    fixed_in=(),
    reason="v9fs_open() opens any directory with opendir() whatever the flags, so O_WRONLY on a "
    "directory succeeds (open(2) says EISDIR)",
)
@case_path("lopen/directory_for_writing", backends=["local"])
def test_lopen_directory_for_writing(place: Place) -> None:
    """Opening a directory for writing is EISDIR, as open(2)."""
    p9 = place.session
    place.host_path("d").mkdir()
    fid = p9.walk_fid(place.fid, ["d"])
    try:
        with expect_rlerror(errno.EISDIR):
            p9.lopen(fid, os.O_WRONLY)
    finally:
        p9.clunk(fid)
