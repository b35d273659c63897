"""Tlopen: "opens a file ... returns qid and iounit", iounit being the largest read or write that
is guaranteed to be done in one message (diod protocol.md, open(5))."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from fixtures.place import Place
from fixtures.pool import Device
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
    upstream="open-directory-for-writing",
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


def host_fd_flags(device: Device, host: Path) -> int:
    """The open flags of QEMU's descriptor for ``host`` (``/proc/PID/fdinfo``): what the server
    really opened the file with."""
    pid = device.machine.pid
    assert pid is not None
    fds = [fd for fd in Path(f"/proc/{pid}/fd").iterdir() if os.path.realpath(fd) == str(host.resolve())]
    assert fds, f"QEMU holds no descriptor of {host}"
    newest = max(fds, key=lambda fd: int(fd.name))
    info = Path(f"/proc/{pid}/fdinfo/{newest.name}").read_text()
    return int(next(line.split()[1] for line in info.splitlines() if line.startswith("flags:")), 8)


#: flag name -> (Tlopen flags, bits of QEMU's own descriptor that must be set, bits that must not)
OPEN_FLAGS = {
    "O_RDONLY": (os.O_RDONLY, 0, os.O_WRONLY | os.O_RDWR),
    "O_WRONLY": (os.O_WRONLY, os.O_WRONLY, os.O_RDWR),
    "O_RDWR": (os.O_RDWR, os.O_RDWR, os.O_WRONLY),
    "O_APPEND": (os.O_WRONLY | os.O_APPEND, os.O_APPEND, 0),
    "O_DSYNC": (os.O_WRONLY | os.O_DSYNC, os.O_DSYNC, 0),
    "O_SYNC": (os.O_WRONLY | os.O_SYNC, os.O_SYNC, 0),
    "O_NOATIME": (os.O_RDONLY | os.O_NOATIME, os.O_NOATIME, 0),
    "O_NONBLOCK": (os.O_RDONLY | os.O_NONBLOCK, os.O_NONBLOCK, 0),
    # by design: "Ignore direct disk access hint until the server supports it" (get_dotl_openflags)
    "O_DIRECT": (os.O_RDWR | os.O_DIRECT, 0, os.O_DIRECT),
    # QEMU opens without O_NONBLOCK unless asked (openat_file clears the one it opened with)
    "plain": (os.O_RDWR, 0, os.O_NONBLOCK),
}


@case_path("lopen/flags/{flag}", backends=["local"], flag=list(OPEN_FLAGS))
def test_lopen_flags(place: Place, device: Device, flag: str) -> None:
    """Each open flag a Linux client sends reaches the host descriptor QEMU opens (fdinfo), and
    the access mode is enforced: what it forbids is EBADF, what it allows is done."""
    p9 = place.session
    flags, must, must_not = OPEN_FLAGS[flag]
    host = place.host_path("f")
    host.write_bytes(b"0123456789")
    fid = p9.walk_fid(place.fid, ["f"])
    p9.lopen(fid, flags)
    got = host_fd_flags(device, host)
    assert got & must == must and not got & must_not, f"{flag}: QEMU's descriptor has flags {got:#o}"
    mode = flags & os.O_ACCMODE
    if mode == os.O_WRONLY:
        with expect_rlerror(errno.EBADF):
            p9.read(fid, 0, 4)
    else:
        assert p9.read(fid, 2, 4).data == b"2345"
    if mode == os.O_RDONLY:
        with expect_rlerror(errno.EBADF):
            p9.write(fid, 0, b"x")
    else:
        assert p9.write(fid, 0, b"ab").count == 2
        # O_APPEND: pwrite(2) on Linux appends whatever the offset
        want = b"0123456789ab" if flags & os.O_APPEND else b"ab23456789"
        assert host.read_bytes() == want
    p9.clunk(fid)


@case_path("lopen/truncate", backends=["local"])
def test_lopen_truncate(place: Place) -> None:
    """O_TRUNC empties the host file at open, and a refused open (O_TRUNC on a directory) changes
    nothing."""
    p9 = place.session
    host = place.host_path("f")
    host.write_bytes(b"content")
    fid = p9.walk_fid(place.fid, ["f"])
    p9.lopen(fid, os.O_WRONLY | os.O_TRUNC)
    assert host.read_bytes() == b"" and p9.getattr(fid).size == 0
    p9.clunk(fid)
