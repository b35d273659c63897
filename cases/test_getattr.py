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


FIELDS = ["mode", "uid", "gid", "nlink", "rdev", "size", "blksize", "blocks", "atime", "mtime", "ctime", "ino"]


@pytest.mark.fsdev(security_model="passthrough", multidevs="warn")  # the host's own owner, mode, inode
@case_path("getattr/field/{field}", backends=["local"], field=FIELDS)
def test_getattr_field_is_the_host_stat(place: Place, field: str) -> None:
    """Every field of Rgetattr (all asked for) is the host file's stat, times to the nanosecond,
    on a file whose owner, mode, size, links and times are none of the defaults."""
    host = place.host_path("f")
    host.write_bytes(bytes(12345))
    os.link(host, place.host_path("g"))
    os.chown(host, 1234, 4321)
    os.chmod(host, 0o640)
    os.utime(host, ns=(1_000_000_001_123_456_789, 2_000_000_002_987_654_321))
    fid = place.session.walk_fid(place.fid, ["f"])
    attr = place.session.getattr(fid, wire.GETATTR_ALL)
    st = host.stat()
    got, want = {
        "mode": (attr.mode, st.st_mode),
        "uid": (attr.uid, st.st_uid),
        "gid": (attr.gid, st.st_gid),
        "nlink": (attr.nlink, st.st_nlink),
        "rdev": (attr.rdev, st.st_rdev),
        "size": (attr.size, st.st_size),
        "blksize": (attr.blksize, st.st_blksize),
        "blocks": (attr.blocks, st.st_blocks),
        "atime": (attr.atime_sec * 10**9 + attr.atime_nsec, st.st_atime_ns),
        "mtime": (attr.mtime_sec * 10**9 + attr.mtime_nsec, st.st_mtime_ns),
        "ctime": (attr.ctime_sec * 10**9 + attr.ctime_nsec, st.st_ctime_ns),
        "ino": (attr.qid.path, st.st_ino),
    }[field]
    assert got == want, f"{field}: Rgetattr {got}, host {want}"
    assert attr.valid & wire.GETATTR_BASIC == wire.GETATTR_BASIC
    place.session.clunk(fid)
