"""POSIX ACLs through 9P xattrs (``hw/9pfs/9p-posix-acl.c``): system.posix_acl_access on files,
system.posix_acl_default on directories. Under mapped-xattr QEMU keeps them in
``user.virtfs.system.posix_acl_*`` on the host (so the host's own permissions are untouched);
passthrough and mapped-file hand them to the host kernel, which applies them; security_model=none
refuses them (EOPNOTSUPP). Set, read back byte for byte, listed, removed, each checked on the host."""

from __future__ import annotations

import errno
import os
import stat
import struct

import pytest

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from fixtures.place import Place
from harness.p9.messages import Txattrcreate, Txattrwalk
from harness.p9.session import Session

ACCESS, DEFAULT = "system.posix_acl_access", "system.posix_acl_default"
USER_OBJ, USER, GROUP_OBJ, MASK, OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
UNDEFINED = 0xFFFFFFFF


def acl(*entries: tuple[int, int, int]) -> bytes:
    """The Linux xattr form of an ACL: version 2, then (tag, perm, id) entries in tag order."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in entries)


#: user::rw- user:1234:r-- group::r-- mask::r-- other::---
ACL = acl(
    (USER_OBJ, 6, UNDEFINED), (USER, 4, 1234), (GROUP_OBJ, 4, UNDEFINED), (MASK, 4, UNDEFINED), (OTHER, 0, UNDEFINED)
)
MAPPED = {"mapped-xattr": True, "passthrough": False, "mapped-file": False}


def set_xattr(p9: Session, fid: int, name: str, value: bytes) -> None:
    """Txattrcreate of ``name`` on a clone of ``fid``, the value in one Twrite, committed at Tclunk."""
    xfid = p9.walk_fid(fid, [])
    p9.rpc(Txattrcreate(fid=xfid, name=name, attr_size=len(value), flags=0))
    if value:
        assert p9.write(xfid, 0, value).count == len(value)
    p9.clunk(xfid)


def get_xattr(p9: Session, fid: int, name: str) -> bytes:
    xfid = p9.new_fid()
    size = p9.rpc(Txattrwalk(fid=fid, newfid=xfid, name=name)).size
    data = p9.read(xfid, 0, size).data if size else b""
    p9.clunk(xfid)
    assert len(data) == size
    return data


def host_node(place: Place, which: str) -> str:
    """A file (access ACL) or directory (default ACL) with mode 0640/0750 on the host; its ACL's name."""
    if which == "access":
        place.host_path("n").write_bytes(b"acl")
        os.chmod(place.host_path("n"), 0o640)
    else:
        place.host_path("n").mkdir(0o750)
    return ACCESS if which == "access" else DEFAULT


def node(place: Place, which: str) -> tuple[int, str]:
    """The same, walked to: its fid and its ACL's name."""
    name = host_node(place, which)
    return place.session.walk_fid(place.fid, ["n"]), name


@case_path("posix_acl/{security_model}/{which}", backends=["local"], security_model=list(MAPPED),
           which=["access", "default"])  # fmt: skip
def test_acl_round_trip(place: Place, security_model: str, which: str) -> None:
    """An ACL set through 9P reads back as the same bytes and is listed; on the host it is where
    the model keeps it (the mapped name, or the real ACL the host kernel then enforces: the group
    bits become the mask); removed, it is gone from both, and removing it again is no error."""
    p9 = place.session
    fid, name = node(place, which)
    host = place.host_path("n")
    mode_before = stat.S_IMODE(host.lstat().st_mode)
    set_xattr(p9, fid, name, ACL)
    assert get_xattr(p9, fid, name) == ACL
    stored = f"user.virtfs.{name}" if MAPPED[security_model] else name
    assert os.getxattr(host, stored, follow_symlinks=False) == ACL
    if MAPPED[security_model]:
        assert name not in os.listxattr(host) and stat.S_IMODE(host.lstat().st_mode) == mode_before
    elif which == "access":
        assert stat.S_IMODE(host.lstat().st_mode) == 0o640  # group::r-- mask::r--: the mask is the group
    set_xattr(p9, fid, name, b"")  # attr_size 0: remove
    with expect_rlerror(errno.ENODATA):
        get_xattr(p9, fid, name)
    assert stored not in os.listxattr(host)
    set_xattr(p9, fid, name, b"")  # nothing to remove: QEMU says fine
    p9.clunk(fid)


@case_path("posix_acl/{security_model}/listed", backends=["local"], security_model=list(MAPPED))
def test_acl_is_listed(place: Place, security_model: str) -> None:
    """listxattr (Txattrwalk with an empty name) names an ACL that was set, by its own name (never
    the user.virtfs.* one mapped-xattr stores it under)."""
    p9 = place.session
    fid, name = node(place, "access")
    set_xattr(p9, fid, name, ACL)
    listing = get_xattr(p9, fid, "")
    p9.clunk(fid)
    assert name.encode() + b"\0" in listing and b"user.virtfs" not in listing, listing


@case_path("posix_acl/none/{which}", backends=["local"], security_model=["none"], which=["access", "default"])
def test_acl_refused_under_none(place: Place, security_model: str, which: str) -> None:
    """security_model=none has no ACLs: reading one is EOPNOTSUPP, setting one fails at Tclunk
    with EOPNOTSUPP, and the host file gets none."""
    p9 = place.session
    fid, name = node(place, which)
    with expect_rlerror(errno.EOPNOTSUPP):
        get_xattr(p9, fid, name)
    xfid = p9.walk_fid(fid, [])
    p9.rpc(Txattrcreate(fid=xfid, name=name, attr_size=len(ACL), flags=0))
    p9.write(xfid, 0, ACL)
    with expect_rlerror(errno.EOPNOTSUPP):
        p9.clunk(xfid)
    assert not [n for n in os.listxattr(place.host_path("n")) if "posix_acl" in n]
    p9.clunk(fid)


@pytest.mark.qemu_bug(
    fixed_in=(),
    when={"security_model": "mapped-xattr"},
    reason="under mapped-xattr a real ACL on the host file is listed (mp_pacl_listxattr() names "
    "system.posix_acl_access for it) but reading that name reads user.virtfs.system.posix_acl_access "
    "instead: a listed xattr the client cannot read (ENODATA)",
    upstream="mapped-xattr-host-acl",
)
@case_path("posix_acl/{security_model}/host_acl_{which}", backends=["local"],
           security_model=["mapped-xattr", "passthrough", "mapped-file", "none"],
           which=["access", "default"])  # fmt: skip
def test_host_acl_listed_and_readable(place: Place, security_model: str, which: str) -> None:
    """A file that has an ACL on the host (set there, not through 9P): whatever the listing
    names, the client can read, and what it reads is the ACL (passthrough, mapped-file); under none ACLs are
    hidden from the listing and refused, removal included (EOPNOTSUPP)."""
    p9 = place.session
    name = host_node(place, which)
    os.setxattr(place.host_path("n"), name, ACL)  # before the first 9P request: a reproducer has it
    fid = p9.walk_fid(place.fid, ["n"])
    listed = [n for n in get_xattr(p9, fid, "").split(b"\0") if n]
    for listed_name in listed:
        assert get_xattr(p9, fid, listed_name.decode()) is not None
    if security_model in ("passthrough", "mapped-file"):  # (mapped-file maps no xattr: the host's own)
        assert name.encode() in listed and get_xattr(p9, fid, name) == ACL
    if security_model == "none":
        assert name.encode() not in listed
        with expect_rlerror(errno.EOPNOTSUPP):
            set_xattr(p9, fid, name, b"")  # a removal: refused at Tclunk
        assert os.getxattr(place.host_path("n"), name) == ACL
    p9.clunk(fid)
