"""Tlcreate: "create a regular file name in directory fid and prepare it for I/O ... fid is
changed to represent the newly created file" (diod protocol.md)."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from cases.test_lopen import host_fd_flags
from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from fixtures.place import Place
from fixtures.pool import Device
from harness.p9 import wire


@case_path("create_file", backends=["local"])
def test_create_file(place: Place) -> None:
    """A regular file on the host with the mode asked for; the fid is now the open file (a write
    through it lands in the host file byte for byte, and moves qid.version); iounit follows
    get_iounit; O_EXCL on an existing name is EEXIST and the file is untouched."""
    p9 = place.session
    p9.mkdir(place.fid, "03")
    fid = p9.walk_fid(place.fid, ["03"])
    reply = p9.lcreate(fid, "1st_file", os.O_WRONLY, 0o640)
    host = place.host_path("03", "1st_file")
    assert stat.S_ISREG(host.stat().st_mode)
    assert reply.qid.type == wire.QTFILE
    bsize = p9.statfs(fid).bsize
    assert reply.iounit == (p9.msize - wire.IOHDRSZ) // bsize * bsize
    assert p9.write(fid, 0, b"first bytes").count == 11
    assert host.read_bytes() == b"first bytes"
    attr = p9.getattr(fid)
    assert (attr.mode, attr.size) == (stat.S_IFREG | 0o640, 11)
    assert (attr.qid.type, attr.qid.path) == (reply.qid.type, reply.qid.path)
    # qid.version follows the file's mtime and size (st_mtime ^ st_size << 8): it must move
    assert attr.qid.version != reply.qid.version
    again = p9.walk_fid(place.fid, ["03"])
    with expect_rlerror(errno.EEXIST):
        p9.lcreate(again, "1st_file", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    assert host.read_bytes() == b"first bytes"
    p9.clunk(again)
    p9.clunk(fid)


@case_path("lcreate/name_{case}", backends=["local"], case=["dot", "dotdot", "empty", "slash"])
def test_lcreate_bad_names(place: Place, case: str) -> None:
    """'.' and '..' exist already (EEXIST); an empty name or one with '/' is no name (ENOENT); the
    directory is unchanged and the fid still stands on it."""
    p9 = place.session
    name, code = {"dot": (".", errno.EEXIST), "dotdot": ("..", errno.EEXIST), "empty": ("", errno.ENOENT),
                  "slash": ("a/b", errno.ENOENT)}[case]  # fmt: skip
    before = sorted(p.name for p in place.host_path().iterdir())
    fid = p9.walk_fid(place.fid, [])
    qid = p9.getattr(place.fid).qid
    with expect_rlerror(code):
        p9.lcreate(fid, name, os.O_RDWR, 0o644)
    assert sorted(p.name for p in place.host_path().iterdir()) == before
    assert p9.getattr(fid).qid == qid
    p9.clunk(fid)


@pytest.mark.fsdev(multidevs="warn")  # qid.path is the host inode only then (10.0: remap)
@case_path("lcreate/existing", backends=["local"])
def test_lcreate_existing_without_excl(place: Place) -> None:
    """Without O_EXCL an existing name is opened, not replaced: same inode, content kept."""
    p9 = place.session
    place.host_path("f").write_bytes(b"kept")
    inode = place.host_path("f").stat().st_ino
    fid = p9.walk_fid(place.fid, [])
    reply = p9.lcreate(fid, "f", os.O_RDWR, 0o600)
    assert reply.qid.path == inode
    assert p9.read(fid, 0, 10).data == b"kept"
    p9.clunk(fid)


#: flag name -> (Tlcreate flags, bits QEMU's descriptor must have, bits it must not)
CREATE_FLAGS = {
    "O_RDONLY": (os.O_RDONLY, 0, os.O_WRONLY | os.O_RDWR),
    "O_WRONLY": (os.O_WRONLY, os.O_WRONLY, os.O_RDWR),
    "O_RDWR": (os.O_RDWR, os.O_RDWR, os.O_WRONLY),
    "O_RDWR_O_APPEND": (os.O_RDWR | os.O_APPEND, os.O_RDWR | os.O_APPEND, 0),
    "O_WRONLY_O_DSYNC": (os.O_WRONLY | os.O_DSYNC, os.O_DSYNC, 0),
    "O_WRONLY_O_SYNC": (os.O_WRONLY | os.O_SYNC, os.O_SYNC, 0),
    "O_RDWR_O_EXCL": (os.O_RDWR | os.O_EXCL, os.O_RDWR, 0),
    "O_RDWR_O_TRUNC": (os.O_RDWR | os.O_TRUNC, os.O_RDWR, 0),
    "O_RDWR_O_NOATIME": (os.O_RDWR | os.O_NOATIME, os.O_NOATIME, 0),
    # by design: QEMU drops the direct-I/O hint (get_dotl_openflags)
    "O_RDWR_O_DIRECT": (os.O_RDWR | os.O_DIRECT, os.O_RDWR, os.O_DIRECT),
}


@pytest.mark.fsdev(security_model="passthrough")
@case_path("lcreate/flags/{flag}", backends=["local"], flag=list(CREATE_FLAGS))
def test_lcreate_flags(place: Place, device: Device, flag: str) -> None:
    """Each flag Linux's client sends with a create reaches the descriptor QEMU holds for the new
    file (fdinfo), the file is a new regular file with exactly the mode asked for (passthrough),
    in the directory the fid named; the access mode is enforced through the fid."""
    flags, must, must_not = CREATE_FLAGS[flag]
    p9 = place.session
    p9.mkdir(place.fid, "sub", 0o755)
    fid = p9.walk_fid(place.fid, ["sub"])
    reply = p9.lcreate(fid, "new", flags | os.O_CREAT, 0o640)
    host = place.host_path("sub", "new")
    st = host.lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640 and st.st_size == 0
    assert reply.qid.type == wire.QTFILE and not place.host_path("new").exists()
    got = host_fd_flags(device, host)
    assert got & must == must and not got & must_not, f"{flag}: QEMU's descriptor has flags {got:#o}"
    if flags & os.O_ACCMODE == os.O_RDONLY:
        with expect_rlerror(errno.EBADF):
            p9.write(fid, 0, b"x")
    else:
        assert p9.write(fid, 0, b"written").count == 7 and host.read_bytes() == b"written"
    if flags & os.O_ACCMODE == os.O_WRONLY:
        with expect_rlerror(errno.EBADF):
            p9.read(fid, 0, 4)
    elif flags & os.O_ACCMODE == os.O_RDWR:
        assert p9.read(fid, 0, 7).data == b"written"
    p9.clunk(fid)
