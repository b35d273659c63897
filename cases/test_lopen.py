"""Tlopen: "opens a file ... returns qid and iounit", iounit being the largest read or write that
is guaranteed to be done in one message (diod protocol.md, open(5))."""

from __future__ import annotations

import os

import pytest

from fixtures.qos import qos
from harness.p9 import wire
from harness.p9.session import Session


@pytest.mark.needs_synth_tree
@qos("lopen/basic", backends=["synth"])
def test_lopen_basic(attached: Session) -> None:
    """Rlopen's qid is the walked file's qid, and iounit is the largest multiple of the
    filesystem block size that fits msize - P9_IOHDRSZ (QEMU's get_iounit)."""
    p9 = attached
    fid, (qid,) = p9.walk(0, ["LOPEN"])
    assert qid["type"] == wire.QTFILE
    reply = p9.lopen(fid, os.O_WRONLY)
    assert reply.qid == qid
    bsize = p9.statfs(fid).bsize
    assert bsize > 0
    assert reply.iounit == (p9.msize - wire.IOHDRSZ) // bsize * bsize
    p9.clunk(fid)


@pytest.mark.needs_synth_tree
@qos("lopen/directory", backends=["synth"])
def test_lopen_directory(attached: Session) -> None:
    """A directory opens with O_DIRECTORY and keeps its directory qid."""
    p9 = attached
    fid, (qid,) = p9.walk(0, ["ReadDirDir"])
    assert p9.lopen(fid, os.O_DIRECTORY).qid == qid
    assert qid["type"] == wire.QTDIR
    p9.clunk(fid)
