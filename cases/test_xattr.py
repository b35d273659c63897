"""Txattrwalk: "prepare to read an extended attribute ... an empty name lists them"; Txattrcreate:
"prepare a fid to write an attribute ... attr_size bytes ... committed at Tclunk; attr_size 0
removes it" (diod protocol.md). QEMU caps values at 64 KiB (E2BIG) and hides its own
user.virtfs.* attributes, which carry the mapped-xattr metadata."""

from __future__ import annotations

import errno
import os

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from fixtures.place import Place
from harness.p9.messages import Tsetattr, Txattrcreate, Txattrwalk

XATTR_CREATE, XATTR_REPLACE = 1, 2


def file_fid(place: Place) -> int:
    """A fid on the case's file ``f``, which carries user.color = blue."""
    if not place.host_path("f").exists():
        place.host_path("f").write_bytes(b"x")
        os.setxattr(place.host_path("f"), "user.color", b"blue")
    return place.session.walk_fid(place.fid, ["f"])


def create(place: Place, name: str, value: bytes, flags: int = 0, size: int | None = None) -> int:
    """Txattrcreate and Twrite of ``value``; returns the xattr fid, still to be clunked."""
    fid = file_fid(place)
    place.session.rpc(Txattrcreate(fid=fid, name=name, attr_size=len(value) if size is None else size, flags=flags))
    if value:
        assert place.session.write(fid, 0, value).count == len(value)
    return fid


@case_path("xattr/walk_list", backends=["local"])
def test_xattr_list(place: Place) -> None:
    """An empty name lists the names, NUL-terminated, without QEMU's own user.virtfs.* ones."""
    p9 = place.session
    fid = file_fid(place)
    fields = {"mode": 0, "size": 0, "atime_sec": 0, "atime_nsec": 0, "mtime_sec": 0, "mtime_nsec": 0}
    p9.rpc(Tsetattr(fid=fid, valid=0x2 | 0x4, uid=1000, gid=1000, **fields))  # QEMU stores them as xattrs
    assert "user.virtfs.uid" in os.listxattr(place.host_path("f"))
    listing = p9.new_fid()
    size = p9.rpc(Txattrwalk(fid=fid, newfid=listing, name="")).size
    data = p9.read(listing, 0, 4096).data
    assert len(data) == size and data.split(b"\0")[:-1] == [b"user.color"]
    for f in (listing, fid):
        p9.clunk(f)


@case_path("xattr/walk_get", backends=["local"])
def test_xattr_get(place: Place) -> None:
    """A name reads its value; a missing one is ENODATA; QEMU's own are ENODATA too."""
    p9 = place.session
    fid = file_fid(place)
    value = p9.new_fid()
    assert p9.rpc(Txattrwalk(fid=fid, newfid=value, name="user.color")).size == 4
    assert p9.read(value, 0, 100).data == b"blue"
    for hidden in ("user.nope", "user.virtfs.mode"):
        with expect_rlerror(errno.ENODATA):
            p9.rpc(Txattrwalk(fid=fid, newfid=p9.new_fid(), name=hidden))
    for f in (value, fid):
        p9.clunk(f)


@case_path("xattr/create_{mode}", backends=["local"], mode=["new", "replace", "remove"])
def test_xattr_create(place: Place, mode: str) -> None:
    """The value is committed at Tclunk, byte for byte on the host; size 0 removes it."""
    host = place.host_path("f")
    if mode == "new":
        place.session.clunk(create(place, "user.size", b"hello", XATTR_CREATE))
        assert os.getxattr(host, "user.size") == b"hello"
    elif mode == "replace":
        place.session.clunk(create(place, "user.color", b"green", XATTR_REPLACE))
        assert os.getxattr(host, "user.color") == b"green"
    else:
        place.session.clunk(create(place, "user.color", b""))
        assert "user.color" not in os.listxattr(host)


@case_path("xattr/create_flags", backends=["local"])
def test_xattr_create_flags_are_checked_at_clunk(place: Place) -> None:
    """XATTR_CREATE on an existing name is EEXIST and XATTR_REPLACE on a missing one ENODATA, both
    at Tclunk (where QEMU commits), and neither changes anything."""
    host = place.host_path("f")
    fid = create(place, "user.color", b"red", XATTR_CREATE)
    with expect_rlerror(errno.EEXIST):
        place.session.clunk(fid)
    fid = create(place, "user.missing", b"red", XATTR_REPLACE)
    with expect_rlerror(errno.ENODATA):
        place.session.clunk(fid)
    assert os.getxattr(host, "user.color") == b"blue" and "user.missing" not in os.listxattr(host)


#: attr_size just above XATTR_SIZE_MAX; 2**32, which a size kept in 32 bits would see as 0 (and
#: accept); the largest the field holds
TOO_BIG = {"65537": 65537, "4G": 1 << 32, "max": (1 << 64) - 1}


@case_path("xattr/too_big/{size}", backends=["local"], size=list(TOO_BIG))
def test_xattr_too_big(place: Place, size: str) -> None:
    """attr_size above 64 KiB (XATTR_SIZE_MAX) is refused at once with E2BIG, up to the largest
    the u64 field holds; nothing is set and the fid stays the file's."""
    p9 = place.session
    fid = file_fid(place)
    with expect_rlerror(errno.E2BIG):
        p9.rpc(Txattrcreate(fid=fid, name="user.big", attr_size=TOO_BIG[size], flags=0))
    assert p9.getattr(fid).qid.type == 0, "the fid is still the file's after the refusal"
    assert "user.big" not in os.listxattr(place.host_path("f"))
    p9.clunk(fid)


@case_path("xattr/partial_write", backends=["local"])
def test_xattr_partial_write(place: Place) -> None:
    """Fewer bytes written than attr_size: Tclunk fails with EINVAL and nothing is set."""
    fid = create(place, "user.part", b"abc", size=10)
    with expect_rlerror(errno.EINVAL):
        place.session.clunk(fid)
    assert "user.part" not in os.listxattr(place.host_path("f"))


@case_path("xattr/wild_offset", backends=["local"])
def test_xattr_wild_offset(place: Place) -> None:
    """A write beyond attr_size is refused (QEMU: ENOSPC); one that overlaps the end is cut to fit."""
    p9 = place.session
    fid = create(place, "user.wild", b"", size=10)
    with expect_rlerror(errno.ENOSPC):
        p9.write(fid, 100, b"abc")
    assert p9.write(fid, 8, b"abcdef").count == 2
    with expect_rlerror(errno.EINVAL):  # still only 2 of 10 bytes
        p9.clunk(fid)


@case_path("xattr/protected_names", backends=["local"])
def test_xattr_cannot_forge_metadata(place: Place) -> None:
    """A client cannot write QEMU's user.virtfs.* metadata (that would forge mode or owner)."""
    fid = create(place, "user.virtfs.mode", b"\0\0\0\0")
    with expect_rlerror(errno.EACCES):
        place.session.clunk(fid)
    fid = file_fid(place)
    assert place.session.getattr(fid).mode & 0o170000 == 0o100000
    place.session.clunk(fid)


VALUE = bytes(range(256)) * 4  # 1 KiB, every byte value


@case_path("xattr/chunked/{chunk}", backends=["local"], chunk=[1, 7, 100, 512, 1024])
def test_xattr_written_in_several_twrites(place: Place, chunk: int) -> None:
    """A value written in several Twrites at consecutive offsets is committed whole at Tclunk, to
    the byte; Txattrwalk then gives its exact size and Treads in pieces read it back."""
    p9 = place.session
    fid = file_fid(place)
    p9.rpc(Txattrcreate(fid=fid, name="user.chunked", attr_size=len(VALUE), flags=0))
    for at in range(0, len(VALUE), chunk):
        assert p9.write(fid, at, VALUE[at : at + chunk]).count == len(VALUE[at : at + chunk])
    p9.clunk(fid)
    assert os.getxattr(place.host_path("f"), "user.chunked") == VALUE
    base, xfid = file_fid(place), p9.new_fid()
    assert p9.rpc(Txattrwalk(fid=base, newfid=xfid, name="user.chunked")).size == len(VALUE)
    back = b"".join(p9.read(xfid, at, chunk).data for at in range(0, len(VALUE), chunk))
    assert back == VALUE
    for f in (xfid, base):
        p9.clunk(f)


@case_path("xattr/virtfs_hidden/{path}", backends=["local"], path=["get", "remove", "replace"])
def test_virtfs_attributes_are_out_of_reach(place: Place, path: str) -> None:
    """Under mapped-xattr QEMU keeps a file's mode and owner in user.virtfs.*: no xattr path of
    the protocol reads, removes or replaces them, and the host's copy is unchanged afterwards."""
    p9 = place.session
    fid = file_fid(place)
    p9.rpc(Tsetattr(fid=fid, valid=0x1, mode=0o100640))  # makes QEMU write user.virtfs.mode
    host = place.host_path("f")
    before = os.getxattr(host, "user.virtfs.mode")
    if path == "get":
        with expect_rlerror(errno.ENODATA):  # as if there were no such attribute
            p9.rpc(Txattrwalk(fid=fid, newfid=p9.new_fid(), name="user.virtfs.mode"))
    else:  # attr_size 0 removes; a new value replaces
        xfid = create(place, "user.virtfs.mode", b"" if path == "remove" else b"\xff\xff\x00\x00")
        with expect_rlerror(errno.EACCES):
            p9.clunk(xfid)
    assert os.getxattr(host, "user.virtfs.mode") == before
    assert p9.getattr(fid).mode == 0o100640
    p9.clunk(fid)
