"""Tunlinkat: "unlink name from directory dirfd ... flags AT_REMOVEDIR" (diod protocol.md).
An open fid keeps working after its name is gone (QEMU local/use_after_unlink, GitLab #103)."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from fixtures.case_path import case_path
from fixtures.devices import QemuUnderTest
from fixtures.expect import expect_rlerror
from fixtures.place import Place
from harness.errors import P9Rlerror
from harness.p9 import wire
from harness.p9.messages import Rgetattr, Tsetattr
from harness.qemu import versions

SETATTR_SIZE = 0x8  # P9_SETATTR_SIZE


@case_path("unlinkat_dir", backends=["local"])
def test_unlinkat_dir(place: Place) -> None:
    """AT_REMOVEDIR removes an empty directory; refused cases change nothing: without the flag
    EISDIR, a non-empty directory ENOTEMPTY; a second removal ENOENT."""
    p9 = place.session
    p9.mkdir(place.fid, "02")
    p9.mkdir(place.fid, "full")
    full = p9.walk_fid(place.fid, ["full"])
    p9.mkdir(full, "child")
    p9.clunk(full)
    with expect_rlerror(errno.EISDIR):
        p9.unlinkat(place.fid, "02", 0)
    with expect_rlerror(errno.ENOTEMPTY):
        p9.unlinkat(place.fid, "full", wire.AT_REMOVEDIR)
    assert place.host_path("02").is_dir() and place.host_path("full", "child").is_dir()
    p9.unlinkat(place.fid, "02", wire.AT_REMOVEDIR)
    assert not place.host_path("02").exists()
    with expect_rlerror(errno.ENOENT):
        p9.walk(place.fid, ["02"], p9.new_fid())
    with expect_rlerror(errno.ENOENT):
        p9.unlinkat(place.fid, "02", wire.AT_REMOVEDIR)


@case_path("unlinkat_file", backends=["local"])
def test_unlinkat_file(place: Place) -> None:
    """The file is gone from the host and from the server's view; its directory stays."""
    p9 = place.session
    dfid = place.make_file("04", "doa_file")
    assert place.host_path("04", "doa_file").is_file()
    p9.unlinkat(dfid, "doa_file")
    assert not place.host_path("04", "doa_file").exists() and place.host_path("04").is_dir()
    with expect_rlerror(errno.ENOENT):
        p9.walk(dfid, ["doa_file"], p9.new_fid())
    p9.clunk(dfid)


@case_path("unlinkat_symlink", backends=["local"])
def test_unlinkat_symlink(place: Place) -> None:
    """Removing the link leaves its target alone."""
    p9 = place.session
    dfid = place.make_file("06", "real_file")
    p9.symlink(dfid, "symlink_file", "real_file")
    assert place.host_path("06", "symlink_file").exists()
    p9.unlinkat(dfid, "symlink_file")
    assert not place.host_path("06", "symlink_file").exists()
    assert place.host_path("06", "real_file").is_file()
    p9.clunk(dfid)


@case_path("unlinkat_hardlink", backends=["local"])
def test_unlinkat_hardlink(place: Place) -> None:
    """Removing one of two names leaves the other with its data and nlink back at 1."""
    p9 = place.session
    dfid = place.make_file("08", "real_file")
    real = p9.walk_fid(dfid, ["real_file"])
    p9.link(dfid, real, "hardlink_file")
    place.host_path("08", "real_file").write_bytes(b"kept")
    p9.unlinkat(dfid, "hardlink_file")
    assert not place.host_path("08", "hardlink_file").exists()
    assert place.host_path("08", "real_file").read_bytes() == b"kept"
    assert p9.getattr(real).nlink == 1
    p9.clunk(real)
    p9.clunk(dfid)


@case_path("use_after_unlink", backends=["local"])
def test_use_after_unlink(place: Place, qemu_under_test: QemuUnderTest) -> None:
    """A file opened before Tunlinkat: Tgetattr still works (nlink 0), a write of msize/2 bytes is
    done in full and reads back byte for byte; a fid that was only walked, not opened, is dead; on
    QEMU >= 10.1 (as upstream's case) the open file truncates to 2001 bytes through its fid. Before
    the Tgetattr fix (9.2.0, also 7.2.16, 8.2.9, 9.1.3; upstream's case came with it) the two
    Tgetattr are left out here: unlinked_open_file/getattr pins that bug."""
    p9 = place.session
    stats_fd = versions.has(qemu_under_test.probe.version, versions.GETATTR_OPEN_FID)
    dfid = place.make_file("09", "doa_file")
    opened = p9.new_fid()
    p9.walk(place.fid, ["09", "doa_file"], opened)
    walked = p9.new_fid()
    p9.walk(place.fid, ["09", "doa_file"], walked)
    p9.lopen(opened, os.O_RDWR)
    p9.unlinkat(dfid, "doa_file")
    assert not place.host_path("09", "doa_file").exists()
    if stats_fd:
        assert p9.getattr(opened, wire.GETATTR_BASIC).nlink == 0
    data = bytes(range(256)) * (p9.msize // 2 // 256)
    assert p9.write(opened, 0, data).count == len(data)
    assert p9.read(opened, 0, len(data)).data == data
    if stats_fd:
        assert p9.getattr(opened).size == len(data)
    with expect_rlerror(errno.ENOENT):
        p9.getattr(walked)
    for fid in (walked, dfid):
        p9.clunk(fid)
    if versions.has(qemu_under_test.probe.version, versions.FD_TRUNCATE):  # as upstream's case checks since then
        truncate_after_unlink(place, opened)
    else:  # pinned by unlinked_open_file/truncate, a known bug before
        p9.clunk(opened)


@pytest.mark.qemu_bug(
    fixed_in=versions.GETATTR_OPEN_FID,
    reason="v9fs_getattr() stats the fid's path (v9fs_co_lstat) even when the fid has an open handle, "
    "and the path is gone: ENOENT; since 9.2.0 (also 7.2.16, 8.2.9, 9.1.3) an open fid is fstat()ed",
    raises=P9Rlerror,
)
@case_path("unlinked_open_file/getattr", backends=["local"])
def test_getattr_after_unlink(place: Place) -> None:
    """An open, unlinked file answers Tgetattr through its fid: nlink 0, the size written through
    the fid after the unlink, the same qid path and type (its version follows mtime and size) and
    the same mode, a regular file's."""
    p9 = place.session
    opened, before = opened_then_unlinked(place, os.O_RDWR)
    try:
        assert p9.write(opened, 0, b"x" * 3001).count == 3001
        after = p9.getattr(opened)
        assert (after.nlink, after.size) == (0, 3001)
        assert (after.qid.path, after.qid.type) == (before.qid.path, before.qid.type)
        assert after.mode == before.mode and stat.S_ISREG(after.mode)
    finally:
        p9.clunk(opened)


@pytest.mark.qemu_bug(
    fixed_in=versions.FD_TRUNCATE,
    reason="v9fs_setattr() truncates by path (v9fs_co_truncate), and the path is gone: ENOENT; since "
    "10.1 an fid with an open handle is truncated with ftruncate() (upstream's use_after_unlink checks it)",
    raises=P9Rlerror,
)
@case_path("unlinked_open_file/truncate", backends=["local"])
def test_use_after_unlink_truncate(place: Place) -> None:
    """As QEMU's own local/use_after_unlink since 10.1: an open, unlinked file is truncated to 2001
    bytes through its fid, and Tgetattr says so."""
    opened, _ = opened_then_unlinked(place, os.O_WRONLY)
    assert place.session.write(opened, 0, bytes(4096)).count == 4096
    truncate_after_unlink(place, opened)


def opened_then_unlinked(place: Place, flags: int) -> tuple[int, Rgetattr]:
    """A new file's fid, opened with ``flags`` and then unlinked by name (gone from the host), and
    its Tgetattr from before the open."""
    p9 = place.session
    dfid = place.make_file("09", "doa_file")
    opened = p9.walk_fid(place.fid, ["09", "doa_file"])
    before = p9.getattr(opened)
    p9.lopen(opened, flags)
    p9.unlinkat(dfid, "doa_file")
    p9.clunk(dfid)
    assert not place.host_path("09", "doa_file").exists()
    return opened, before


def truncate_after_unlink(place: Place, opened: int) -> None:
    p9 = place.session
    try:
        p9.rpc(Tsetattr(fid=opened, valid=SETATTR_SIZE, size=2001))
        assert p9.getattr(opened, wire.GETATTR_BASIC).size == 2001
    finally:
        p9.clunk(opened)
