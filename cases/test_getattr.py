"""Tgetattr: "request_mask ... valid: a bitmask indicating which fields are valid in the response"
(diod protocol.md). QEMU 7.2 fills P9_STATS_BASIC (0x7ff) always, plus GEN (0x1000) when asked."""

from __future__ import annotations

import os
import stat

import pytest

from fixtures.case_path import case_path
from fixtures.place import Place
from harness.p9 import wire

GEN = 0x1000


@case_path("getattr/valid_{mask}", backends=["local"], mask=[0, 0x1, wire.GETATTR_BASIC, GEN, wire.GETATTR_ALL])
def test_getattr_valid_mask(place: Place, mask: int) -> None:
    """Whatever is asked, BASIC comes back; GEN only when asked for."""
    place.host_path("f").write_bytes(b"x")
    fid = place.session.walk_fid(place.fid, ["f"])
    valid = place.session.getattr(fid, mask).valid
    assert valid == wire.GETATTR_BASIC | (mask & GEN)
    place.session.clunk(fid)


@pytest.mark.fsdev(multidevs="warn")  # qid.path is the host inode only then (10.0: remap)
@case_path("getattr/fields", backends=["local"])
def test_getattr_fields_match_the_host(place: Place) -> None:
    """size, nlink, blocks, mtime and the inode (qid.path) are the host file's; the qid is the one
    the walk returned."""
    host = place.host_path("f")
    host.write_bytes(bytes(5000))
    os.link(host, place.host_path("g"))
    fid = place.session.new_fid()
    (qid,) = place.session.walk(place.fid, ["f"], fid).qids
    attr = place.session.getattr(fid)
    st = host.stat()
    assert attr.qid == qid and attr.qid.path == st.st_ino
    assert (attr.size, attr.nlink, attr.blocks) == (5000, 2, st.st_blocks)
    assert (attr.mtime_sec, attr.mtime_nsec) == (int(st.st_mtime), st.st_mtime_ns % 10**9)
    assert stat.S_ISREG(attr.mode)
    place.session.clunk(fid)
