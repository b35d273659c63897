"""9P2000.u, the dialect before 9P2000.L: Tversion "9P2000.u", Topen's mode byte, Tcreate of every
kind of node, Tstat and Twstat with their stat record, a directory read with Tread, and Rerror with
its string (stat(5), open(5), the 9P2000.u extension document). QEMU still serves it, and it is
where two of its recent crashes were (Twstat's rename). Every case runs on passthrough, so that the
host stat is the truth the reply and the effect are checked against."""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from fixtures.case_path import case_path
from fixtures.deviations import DOTU_LISTING_BY_PATH, READ_COUNT_ABOVE_MSIZE, SYNTH_DOT_NAMES, WSTAT_SYNC_EMPTY_REPLY
from fixtures.expect import (
    FieldNotAsWanted,
    NoReply,
    UnexpectedReply,
    expect_a_reply,
    expect_an_error,
    expect_at_most,
    expect_field,
    expect_rlerror,
)
from fixtures.model import SECURITY_MODELS
from fixtures.place import Place
from fixtures.pool import Device
from harness.errors import P9ProtocolError, P9Rlerror, QEMUExited
from harness.fault.control import Fault
from harness.p9 import wire
from harness.p9.messages import Rerror, Rlerror, Rread, Tcreate, Tread, Tstat, Twalk
from harness.p9.session import Session
from harness.p9.trace import Expectation
from harness.p9.wire import Stat
from harness.qemu import versions
from synth_tree import READDIR_DIR

DOTU = pytest.mark.fsdev(security_model="passthrough", multidevs="warn")
CONTENT = b"hello, 9P2000.u"


#: the ``dialect`` parameter the ``attached`` fixture versions the session with
DIALECT = [wire.DOTU]


def walked(place: Place, name: str) -> tuple[int, wire.Qid]:
    fid = place.session.new_fid()
    (qid,) = place.session.walk(place.fid, [name], fid).qids
    return fid, qid


def v9mode(st: os.stat_result) -> int:
    """The stat(5) mode QEMU's stat_to_v9mode() derives from a host stat."""
    mode = st.st_mode & 0o777
    kinds = [(stat.S_ISDIR, wire.DMDIR), (stat.S_ISLNK, wire.DMSYMLINK), (stat.S_ISSOCK, wire.DMSOCKET),
             (stat.S_ISFIFO, wire.DMNAMEDPIPE), (stat.S_ISCHR, wire.DMDEVICE),
             (stat.S_ISBLK, wire.DMDEVICE)]  # fmt: skip
    mode |= sum(bit for test, bit in kinds if test(st.st_mode))
    for host, bit in ((stat.S_ISUID, wire.DMSETUID), (stat.S_ISGID, wire.DMSETGID), (stat.S_ISVTX, wire.DMSETVTX)):
        mode |= bit if st.st_mode & host else 0
    return mode


def expected_extension(path: Path, st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return os.readlink(path)
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        kind = "c" if stat.S_ISCHR(st.st_mode) else "b"
        return f"{kind} {os.major(st.st_rdev)} {os.minor(st.st_rdev)}"
    if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
        return f"HARDLINKCOUNT {st.st_nlink}"
    return ""


def assert_stat_is_host(got: Stat, path: Path, qid: wire.Qid | None = None) -> None:
    """Every field of a stat record against the host's lstat of ``path``."""
    st = path.lstat()
    assert (got.type, got.dev) == (0, 0)
    assert got.qid.path == st.st_ino  # multidevs=warn: the host inode
    if qid is not None:
        assert got.qid == qid
    assert got.mode == v9mode(st)
    # a symlink's atime: QEMU's readlink for the extension, after its lstat, moves it on the host
    atime = got.atime if stat.S_ISLNK(st.st_mode) else int(st.st_atime)
    assert (got.atime, got.mtime, got.length) == (atime, int(st.st_mtime), st.st_size)
    assert got.name == path.name
    assert (got.uid, got.gid, got.muid) == ("", "", "")  # 9P2000.u: the numbers carry the owner
    assert (got.n_uid, got.n_gid, got.n_muid) == (st.st_uid, st.st_gid, 0)
    assert got.extension == expected_extension(path, st)


# -- Tversion, Rerror -------------------------------------------------------------------------------


@case_path("dotu/error_reply/{dialect}", backends=["local", "synth"], dialect=[wire.DOTL, wire.DOTU])
def test_error_reply_of_each_dialect(place: Place, dialect: str) -> None:
    """A failed request is answered in the session's dialect: 9P2000.u's Rerror carries
    strerror()'s text and the errno, 9P2000.L's Rlerror the errno alone, and the fid is not made."""
    p9 = place.session
    newfid = p9.new_fid()
    reply = p9.send(Twalk(fid=place.fid, newfid=newfid, wnames=["no-such-name"])).wait().message
    if dialect == wire.DOTU:
        assert reply == Rerror(ename=os.strerror(errno.ENOENT), errno=errno.ENOENT)
    else:
        assert reply == Rlerror(ecode=errno.ENOENT)
    assert newfid not in p9.fids
    with expect_rlerror(errno.ENOENT):
        p9.getattr(newfid) if dialect == wire.DOTL else p9.stat(newfid)


# -- Tstat ----------------------------------------------------------------------------------------

KINDS = ["file", "dir", "symlink", "fifo", "chardev", "blockdev", "setuid_file"]


def make_node(directory: Path, kind: str) -> Path:
    path = directory / kind
    if kind in ("file", "setuid_file"):
        path.write_bytes(CONTENT)
        os.chmod(path, 0o4755 if kind == "setuid_file" else 0o640)
    elif kind == "dir":
        path.mkdir(0o750)
        (path / "inner").write_bytes(b"")
    elif kind == "symlink":
        path.symlink_to("some/target/name")
    elif kind == "fifo":
        os.mkfifo(path, 0o600)
    else:
        os.mknod(path, 0o600 | (stat.S_IFCHR if kind == "chardev" else stat.S_IFBLK), os.makedev(7, 9))
    os.lchown(path, 1234, 4321)
    os.utime(path, (1_000_000_001, 2_000_000_002), follow_symlinks=False)
    return path


@DOTU
@case_path("dotu/stat/{kind}", backends=["local"], dialect=DIALECT, kind=KINDS)
def test_stat_fields_are_the_host_stat(place: Place, dialect: str, kind: str) -> None:
    """Rstat's record, field by field: the qid the walk returned, the mode with stat(5)'s DM bits,
    seconds of atime and mtime, the length, the base name, the numeric owner, and the extension
    (a symlink's target, a device's "c 7 9", a file's or directory's link count)."""
    path = make_node(place.host_path(), kind)
    fid, qid = walked(place, kind)
    assert_stat_is_host(place.session.stat(fid), path, qid)
    place.session.clunk(fid)


@pytest.mark.qemu_bug(
    fixed_in=(),
    reason='v9fs_stat() marshals Rstat as "wS" with 0 for the count: stat(5)\'s Rstat is '
    "stat[n], n the length of the record that follows (Linux reads and ignores it)",
    upstream="rstat-count",
)
@DOTU
@case_path("dotu/stat/nstat", backends=["local"], dialect=DIALECT)
def test_stat_count_is_the_record_length(place: Place, dialect: str) -> None:
    """Rstat's stat[n]: n is the record's length, its own size field included."""
    make_node(place.host_path(), "file")
    fid, _ = walked(place, "file")
    reply = place.session.rpc(Tstat(fid=fid))
    try:
        expect_field(reply, "nstat", len(wire.stat_bytes(reply.stat)))
    finally:
        place.session.clunk(fid)


# -- Twstat ---------------------------------------------------------------------------------------

#: Each change, its Twstat fields, and what the host file is afterwards.
WSTAT: dict[str, dict[str, Any]] = {
    "mode": {"mode": 0o604},
    "mode_setuid": {"mode": wire.DMSETUID | 0o750},
    "mode_setgid_sticky": {"mode": wire.DMSETGID | wire.DMSETVTX | 0o700},
    "atime": {"atime": 1_500_000_000},
    "mtime": {"mtime": 1_600_000_000},
    "times": {"atime": 1_500_000_000, "mtime": 1_600_000_000},
    "length_down": {"length": 5},
    "length_up": {"length": 100},
    "uid": {"n_uid": 2001},
    "gid": {"n_gid": 2002},
    "uid_gid": {"n_uid": 2001, "n_gid": 2002},
    "name": {"name": "renamed"},
    "all": {"mode": 0o600, "atime": 1_500_000_000, "mtime": 1_600_000_000, "n_uid": 2001, "n_gid": 2002,
            "name": "renamed"},
    "length_mtime": {"length": 3, "mtime": 1_600_000_000},
}  # fmt: skip


@pytest.mark.qemu_bug(
    fixed_in=(),
    when={"change": "length_mtime"},
    reason="v9fs_wstat() sets the times before it truncates: the truncation moves mtime to now, and "
    "the mtime the same Twstat asked for is lost (stat(5): the changes of one wstat are atomic)",
    upstream="truncate-after-times",
)
@DOTU
@case_path("dotu/wstat/{change}", backends=["local"], dialect=DIALECT, change=list(WSTAT))
def test_wstat_changes_what_it_names(place: Place, dialect: str, change: str) -> None:
    """Twstat applies each field that is not "don't touch" (stat(5)) and leaves every other
    field as it was: mode bits (setuid, setgid, sticky), either time alone, the length both ways,
    the owner and group alone or both, the name (a rename in the same directory, the fid
    following it)."""
    fields = WSTAT[change]
    path = make_node(place.host_path(), "file")
    before = path.lstat()
    fid, _ = walked(place, "file")
    place.session.wstat(fid, **fields)
    if "mtime" in fields:  # as 9P reports it first: a check replay judges
        expect_field(place.session.rpc(Tstat(fid=fid)), "stat.mtime", fields["mtime"])
    now = place.host_path(str(fields.get("name", "file")))
    if "name" in fields:
        assert not path.exists() and now.exists()
    st = now.lstat()
    assert st.st_ino == before.st_ino and stat.S_ISREG(st.st_mode)
    mode = fields.get("mode", None)
    assert stat.S_IMODE(st.st_mode) == (stat.S_IMODE(before.st_mode) if mode is None else v9mode_to_host(mode))
    assert int(st.st_atime) == fields.get("atime", int(before.st_atime))
    if "mtime" in fields or "length" not in fields:  # a truncation alone moves mtime to now
        assert int(st.st_mtime) == fields.get("mtime", int(before.st_mtime))
    else:
        assert st.st_mtime_ns != before.st_mtime_ns
    length = fields.get("length", len(CONTENT))
    assert now.read_bytes() == CONTENT[:length] + bytes(max(0, length - len(CONTENT)))
    assert (st.st_uid, st.st_gid) == (fields.get("n_uid", before.st_uid), fields.get("n_gid", before.st_gid))
    assert_stat_is_host(place.session.stat(fid), now)  # the fid names the file under its new name
    place.session.clunk(fid)


def v9mode_to_host(mode: int) -> int:
    bits = [(wire.DMSETUID, stat.S_ISUID), (wire.DMSETGID, stat.S_ISGID), (wire.DMSETVTX, stat.S_ISVTX)]
    return (mode & 0o777) | sum(host for v9, host in bits if mode & v9)


@DOTU
@case_path("dotu/wstat/type_change_refused", backends=["local"], dialect=DIALECT)
def test_wstat_cannot_change_the_type(place: Place, dialect: str) -> None:
    """A mode whose type bits are not the file's (DMDIR on a file) is refused with EIO, and the
    mode, fields given beside it, are not applied either."""
    path = make_node(place.host_path(), "file")
    before = path.lstat()
    fid, _ = walked(place, "file")
    with expect_rlerror(errno.EIO):
        place.session.wstat(fid, mode=wire.DMDIR | 0o777, length=0)
    after = path.lstat()
    assert (after.st_mode, after.st_size) == (before.st_mode, before.st_size)
    place.session.clunk(fid)


@pytest.mark.qemu_bug(**WSTAT_SYNC_EMPTY_REPLY, when={"opened": "open"}, raises=P9ProtocolError)
@pytest.mark.qemu_bug(
    fixed_in=versions.FSYNC_HANDLE_CHECK_LOCAL,
    when={"opened": "not_open"},
    reason="v9fs_wstat()'s sync path calls fsync on a fid with no open file, which on local runs on "
    "fd 0 (EINVAL) instead of refusing the fid with EBADF (fixed by either: 32cae47c33's check, or on local "
    "75893c058b's descriptor -1)",
    raises=UnexpectedReply,
)
@DOTU
@case_path("dotu/wstat/dont_touch_{opened}", backends=["local"], dialect=DIALECT, opened=["open", "not_open"])
def test_wstat_of_nothing_is_fsync(place: Place, dialect: str, opened: str) -> None:
    """A Twstat with every field "don't touch" asks for the file to be synced (stat(5)): on an
    open fid it succeeds and changes nothing; on a fid without an open file it is EBADF."""
    path = make_node(place.host_path(), "file")
    before = path.lstat()
    fid, _ = walked(place, "file")
    if opened == "open":
        place.session.open(fid, wire.OREAD)
        place.session.wstat(fid)
    else:
        with expect_rlerror(errno.EBADF):
            place.session.wstat(fid)
    after = path.lstat()
    assert (after.st_mode, after.st_size, after.st_mtime_ns, after.st_uid) == (
        before.st_mode, before.st_size, before.st_mtime_ns, before.st_uid,
    )  # fmt: skip
    place.session.clunk(fid)


@pytest.mark.qemu_bug(
    fixed_in=versions.WSTAT_SLASH_CHECK,
    reason="v9fs_wstat() passes a new name containing '/' to v9fs_complete_rename() unchecked; "
    "an assertion in the path code aborts QEMU (fixed by 7f5445e7e4: ENOENT)",
    raises=QEMUExited,
)
@DOTU
@case_path("dotu/wstat/name_with_slash", backends=["local"], dialect=DIALECT)
def test_wstat_name_with_a_slash_is_refused(place: Place, dialect: str) -> None:
    """A Twstat name is one path element: "sub/x" is refused with ENOENT, and no file moves."""
    make_node(place.host_path(), "file")
    place.host_path("sub").mkdir()
    fid, _ = walked(place, "file")
    with expect_rlerror(errno.ENOENT):
        place.session.wstat(fid, name="sub/x")
    assert place.host_path("file").exists() and not place.host_path("sub", "x").exists()
    place.session.clunk(fid)


# -- Topen ----------------------------------------------------------------------------------------

#: mode byte -> (reads allowed, writes allowed, truncated, appends)
OPEN_MODES = {
    "OREAD": (wire.OREAD, True, False, False, False),
    "OWRITE": (wire.OWRITE, False, True, False, False),
    "ORDWR": (wire.ORDWR, True, True, False, False),
    "OEXEC": (wire.OEXEC, True, False, False, False),
    "OWRITE_OTRUNC": (wire.OWRITE | wire.OTRUNC, False, True, True, False),
    "ORDWR_OAPPEND": (wire.ORDWR | wire.OAPPEND, True, True, False, True),
}


@DOTU
@case_path("dotu/open/{mode}", backends=["local"], dialect=DIALECT, mode=list(OPEN_MODES))
def test_open_mode_byte(place: Place, dialect: str, mode: str) -> None:
    """Topen's mode byte, as open(5) defines it: OREAD and OEXEC read only, OWRITE writes only,
    ORDWR both, OTRUNC empties the file, OAPPEND (QEMU's) puts every write at the end. Ropen's qid
    is the walked one and iounit is not 0; a refused read or write is EBADF and writes nothing."""
    bits, reads, writes, truncates, appends = OPEN_MODES[mode]
    p9 = place.session
    path = make_node(place.host_path(), "file")
    fid, qid = walked(place, "file")
    opened = p9.open(fid, bits)
    assert opened.qid == qid and opened.iounit > 0
    start = b"" if truncates else CONTENT
    assert path.read_bytes() == start
    if reads:
        assert p9.read(fid, 0, 100).data == start
    else:
        with expect_rlerror(errno.EBADF):
            p9.read(fid, 0, 100)
    if writes:
        assert p9.write(fid, 0, b"XY").count == 2
        assert path.read_bytes() == (start + b"XY" if appends else b"XY" + start[2:])
    else:
        with expect_rlerror(errno.EBADF):
            p9.write(fid, 0, b"XY")
        assert path.read_bytes() == start
    with expect_rlerror(errno.EINVAL):  # an open fid cannot be opened again
        p9.open(fid, wire.OREAD)
    p9.clunk(fid)


@pytest.mark.qemu_bug(
    fixed_in=(),
    reason="omode_to_uflags() drops ORCLOSE: the file survives the clunk of the fid that opened "
    "it with ORCLOSE, which open(5) says removes it",
    upstream="orclose",
)
@DOTU
@case_path("dotu/open/ORCLOSE", backends=["local"], dialect=DIALECT)
def test_open_orclose_removes_at_clunk(place: Place, dialect: str) -> None:
    """open(5): "if mode has the ORCLOSE bit set, the file is to be removed when the fid is clunked"."""
    path = make_node(place.host_path(), "file")
    fid, _ = walked(place, "file")
    place.session.open(fid, wire.ORDWR | wire.ORCLOSE)
    place.session.clunk(fid)
    with expect_rlerror(errno.ENOENT):  # as 9P sees it: a check replay judges
        place.session.walk_fid(place.fid, ["file"])
    assert not path.exists()


# -- Tcreate --------------------------------------------------------------------------------------

#: kind -> (perm, extension, host file type, the mode bits the host node gets)
CREATE = {
    "file": (0o640, "", stat.S_IFREG),
    "setgid_file": (wire.DMSETGID | 0o750, "", stat.S_IFREG),
    "dir": (wire.DMDIR | 0o750, "", stat.S_IFDIR),
    "setgid_dir": (wire.DMDIR | wire.DMSETGID | 0o750, "", stat.S_IFDIR),
    "symlink": (wire.DMSYMLINK | 0o777, "../elsewhere/target", stat.S_IFLNK),
    "chardev": (wire.DMDEVICE | 0o600, "c 7 9", stat.S_IFCHR),
    "blockdev": (wire.DMDEVICE | 0o640, "b 259 65537", stat.S_IFBLK),
    "fifo": (wire.DMNAMEDPIPE | 0o600, "", stat.S_IFIFO),
    "socket": (wire.DMSOCKET | 0o600, "", stat.S_IFSOCK),
    "hardlink": (wire.DMLINK | 0o600, "", stat.S_IFREG),
}
MKNOD_REASON = (
    "local_mknod() on passthrough makes the node, then fchmodat_nofollow() opens it through "
    "openat_file(), which the CVE-2023-2861 fix makes refuse special files: ENXIO, node removed"
)


@pytest.mark.qemu_bug(
    fixed_in=(),
    when={"kind": "setgid_file"},
    reason="v9fs_create() hands perm to open2() as the mode unconverted: DMSETGID (0x40000) is not "
    "S_ISGID, so a file created setgid (or setuid, sticky) is not",
    upstream="create-mode-bits",
)
@pytest.mark.qemu_bug(
    fixed_in=(),
    when={"kind": "setgid_dir"},
    reason="v9fs_create() makes a directory with perm & 0777: DMSETGID (and DMSETUID, DMSETVTX) lost",
    upstream="create-mode-bits",
)
@pytest.mark.qemu_bug(fixed_in=versions.MKNOD_SPECIAL, reason=MKNOD_REASON, raises=P9Rlerror, when={"kind": "fifo"})
@pytest.mark.qemu_bug(fixed_in=versions.MKNOD_SPECIAL, reason=MKNOD_REASON, raises=P9Rlerror, when={"kind": "socket"})
@pytest.mark.qemu_bug(fixed_in=versions.MKNOD_SPECIAL, reason=MKNOD_REASON, raises=P9Rlerror, when={"kind": "chardev"})
@pytest.mark.qemu_bug(fixed_in=versions.MKNOD_SPECIAL, reason=MKNOD_REASON, raises=P9Rlerror, when={"kind": "blockdev"})
@DOTU
@case_path("dotu/create/{kind}", backends=["local"], dialect=DIALECT, kind=list(CREATE))
def test_create_every_kind(place: Place, dialect: str, kind: str) -> None:
    """Tcreate of each kind perm's DM bits name, in the directory the fid names: the host node's
    type, permission bits (setgid too), a symlink's target, a device's major and minor, a hard
    link's inode; Rcreate's qid is the host node's, and the fid now names the new node (its Tstat
    is the node's); a file's fid is open as asked, a directory's open for reading."""
    perm, extension, kind_bits = CREATE[kind]
    p9 = place.session
    fid = p9.walk_fid(place.fid, [])
    if kind == "hardlink":
        source = make_node(place.host_path(), "file")
        other, _ = walked(place, "file")
        extension = str(other)
    created = p9.create(fid, kind, perm, wire.ORDWR, extension)
    if kind.startswith("setgid_"):  # the mode asked for, as 9P reports it: a check replay judges
        expect_field(p9.rpc(Tstat(fid=fid)), "stat.mode", perm)
    path = place.host_path(kind)
    st = path.lstat()
    assert stat.S_IFMT(st.st_mode) == kind_bits and created.qid.path == st.st_ino
    if kind == "symlink":
        assert os.readlink(path) == extension
    elif kind == "hardlink":
        assert st.st_ino == source.lstat().st_ino and st.st_nlink == 2
        p9.clunk(other)
    else:
        assert stat.S_IMODE(st.st_mode) == v9mode_to_host(perm)
    if kind in ("chardev", "blockdev"):
        major, minor = (int(n) for n in extension.split()[1:])
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, minor)
    assert_stat_is_host(p9.stat(fid), path)
    if kind in ("file", "setgid_file"):
        assert created.iounit > 0
        assert p9.write(fid, 0, CONTENT).count == len(CONTENT) and path.read_bytes() == CONTENT
    if kind in ("dir", "setgid_dir"):
        assert [s.name for s in read_directory(p9, fid, 8192)] == sorted([".", ".."])
    p9.clunk(fid)


@pytest.mark.qemu_bug(
    fixed_in=(),
    when={"extension": "garbage"},
    reason="v9fs_create() answers an extension sscanf() cannot read with -errno, and sscanf() sets "
    "no errno: the request completes with 0, the reply buffer comes back empty (used length 0)",
    upstream="create-device-extension",
)
@DOTU
@case_path("dotu/create/bad_device_{extension}", backends=["local"], dialect=DIALECT, extension=["x_1_2", "garbage"])
def test_create_device_with_a_bad_extension(place: Place, dialect: str, extension: str) -> None:
    """A DMDEVICE Tcreate whose extension is not "c|b MAJOR MINOR" makes nothing: an error
    (EIO for an unknown type letter), and the session goes on."""
    text = extension.replace("_", " ")
    p9 = place.session
    fid = p9.walk_fid(place.fid, [])
    reply = p9.send(Tcreate(fid=fid, name="dev", perm=wire.DMDEVICE | 0o600, mode=0,
                                            extension=text)).wait().message  # fmt: skip
    expect_an_error(reply)
    assert isinstance(reply, Rerror), f"{reply} instead of an Rerror"
    if text.startswith("x"):
        assert reply.errno == errno.EIO
    assert not place.host_path("dev").exists() and not os.path.lexists(place.host_path("dev"))
    assert p9.stat(fid).name == place.host_path().name  # the fid still names the directory
    p9.clunk(fid)


# -- Tread of a directory ------------------------------------------------------------------------


def read_directory(p9: Session, fid: int, count: int, offset: int = 0) -> list[Stat]:
    """Every stat record of an open directory fid, read ``count`` bytes at a time from ``offset``
    (0: the whole listing) on, each Tread at the offset where the last one's data ended."""
    records: list[Stat] = []
    while True:
        data = p9.rpc(Tread(fid=fid, offset=offset, count=count)).data
        if not data:
            return sorted(records, key=lambda s: s.name)
        assert len(data) <= count
        records += wire.parse_stats(data)
        offset += len(data)


@DOTU
@case_path("dotu/read_dir/count_{count}", backends=["local"], dialect=DIALECT, count=[8192, 300, 100])
def test_read_of_a_directory_is_stat_records(place: Place, dialect: str, count: int) -> None:
    """9P2000.u reads a directory with Tread: whole stat records, never one cut at the count,
    every entry once (".", ".." too) however small the count, each record the entry's stat."""
    for kind in ("file", "dir", "symlink", "fifo"):
        make_node(place.host_path(), kind)
    for n in range(12):
        place.host_path(f"f{n:02}").write_bytes(bytes(n))
    p9 = place.session
    fid = p9.walk_fid(place.fid, [])
    assert p9.open(fid, wire.OREAD).qid.type == wire.QTDIR
    records = read_directory(p9, fid, count)
    names = [s.name for s in records]
    assert names == sorted([".", "..", *os.listdir(place.host_path())])
    for record in records:
        if record.name not in (".", ".."):
            assert_stat_is_host(record, place.host_path(record.name))
    p9.clunk(fid)


@pytest.mark.qemu_bug(**SYNTH_DOT_NAMES, raises=P9Rlerror)
@pytest.mark.needs_synth_tree
@case_path("dotu/read_dir/synth_count_{count}", backends=["synth"], dialect=DIALECT, count=["msize-11", 300, 100])
def test_read_of_a_synth_directory(place: Place, dialect: str, count: int | str) -> None:
    """The synth backend's directory read with Tread as the local one is: whole records, every
    entry once (".", ".." too) however small the count, each record what Tstat of the entry says
    (the directory's for ".", its parent's for "..", under their own names)."""
    p9 = place.session
    start = place.provide(READDIR_DIR)
    fid = p9.walk_fid(start, [READDIR_DIR.name])
    assert p9.open(fid, wire.OREAD).qid.type == wire.QTDIR
    records = read_directory(p9, fid, p9.msize - wire.RREAD_HEADER if count == "msize-11" else int(count))
    assert [s.name for s in records] == sorted(READDIR_DIR.names())
    for record in records:
        entry = p9.walk_fid(fid, [] if record.name == "." else [record.name])
        assert record == dataclasses.replace(p9.stat(entry), name=record.name), record.name
        p9.clunk(entry)
    p9.clunk(fid)


@pytest.mark.qemu_bug(**READ_COUNT_ABOVE_MSIZE, raises=NoReply)
@DOTU
@case_path("dotu/read_dir/count_above_msize", backends=["local"], dialect=DIALECT, transport=["modern"])
def test_read_of_a_directory_count_above_msize(place: Place, dialect: str, transport: str) -> None:
    """A Tread of a directory whose stat records fill more than msize, for twice msize: at most
    what fits msize (less the 11-byte Rread header), in whole records, the first of the listing;
    the rest then read in parts of that size, every entry once."""
    names = [f"entry-with-a-longer-name-{n:03}" for n in range(200)]
    for name in names:
        place.host_path(name).write_bytes(b"")
    p9 = place.session
    fid = p9.walk_fid(place.fid, [])
    p9.open(fid, wire.OREAD)
    bound = p9.msize - wire.RREAD_HEADER
    with expect_a_reply(Expectation(field="data", at_most=bound)):
        reply = p9.rpc(Tread(fid=fid, offset=0, count=2 * p9.msize))
    expect_at_most(reply, "data", bound)
    first = wire.parse_stats(reply.data)  # whole records, or it raises
    assert first, "no record fits msize?"
    records = read_directory(p9, fid, bound)
    assert sorted(s.name for s in records) == sorted([".", "..", *names])
    assert {s.name for s in first} <= {s.name for s in records}
    p9.clunk(fid)


@pytest.mark.qemu_bug(
    fixed_in=(),
    reason="v9fs_do_readdir_with_stat() (a 9P2000.u Tread of a directory) drops the records it read when an "
    "entry's stat fails, and leaves the directory stream past them: the next Tread at the same offset lists "
    "from after the failed entry, so it and the entries before it in that Tread are never listed",
    raises=FieldNotAsWanted,
    upstream="dotu-read-error-position",
)
@pytest.mark.fault_injector
@DOTU
@case_path("dotu/read_dir/after_a_failed_read", backends=["local"], dialect=DIALECT)
def test_read_of_a_directory_after_a_failed_read(place: Place, device: Device, dialect: str) -> None:
    """A Tread of a directory whose second entry's stat fails on the host (once, EIO) answers
    either the error, having changed nothing (the same Tread again, at the same offset, answers
    what a listing where nothing failed answers there), or the records before that entry (the
    next Tread starting at it); either way the listing has every entry once."""
    names = [f"f{n:02}" for n in range(12)]
    for name in names:
        place.host_path(name).write_bytes(b"")
    p9 = place.session
    count = 200  # at most two records a Tread
    # a listing where nothing fails, on a fid (and a directory stream) of its own
    fresh = p9.walk_fid(place.fid, [])
    p9.open(fresh, wire.OREAD)
    first = p9.rpc(Tread(fid=fresh, offset=0, count=count)).data
    wanted = p9.rpc(Tread(fid=fresh, offset=len(first), count=count)).data
    p9.clunk(fresh)
    fid = p9.walk_fid(place.fid, [])
    p9.open(fid, wire.OREAD)
    assert p9.rpc(Tread(fid=fid, offset=0, count=count)).data == first
    fault = Fault("fstatat", errno.EIO, nth=2)  # one record read before it
    injector = device.machine.injector
    assert injector is not None
    p9.note_fault(str(fault))
    with injector.armed(fault) as armed:
        failed = p9.send(Tread(fid=fid, offset=len(first), count=count)).wait().message
    assert armed.fired, "the Tread made no second fstatat() to fail"
    if isinstance(failed, Rread):  # the records before the failed entry
        records = wire.parse_stats(first + failed.data)
        assert [s.name for s in wire.parse_stats(failed.data)] == [s.name for s in wire.parse_stats(wanted)][:1]
        offset = len(first) + len(failed.data)
    else:
        assert isinstance(failed, Rerror) and failed.errno == errno.EIO, failed
        again = p9.rpc(Tread(fid=fid, offset=len(first), count=count))
        expect_field(again, "data", wanted)
        records, offset = wire.parse_stats(first + again.data), len(first) + len(again.data)
    records += read_directory(p9, fid, count, offset)
    assert sorted(s.name for s in records) == sorted([".", "..", *names])
    p9.clunk(fid)


@pytest.mark.qemu_bug(**DOTU_LISTING_BY_PATH, raises=P9Rlerror)
@pytest.mark.fsdev(multidevs="warn")
@case_path("dotu/read_dir/after_host_swap/{security_model}", backends=["local"], dialect=DIALECT,
           security_model=list(SECURITY_MODELS))  # fmt: skip
def test_read_of_a_directory_after_host_swap(place: Place, dialect: str, security_model: str) -> None:
    """The Tread of a directory the client opened lists that directory, each entry with its own
    stat, after the host gives its name to another directory (the old one renamed aside, a new one
    in its place, holding a file of one of the old names): the same records as before the swap,
    as getdents(2) and fstatat(2) on its descriptor would give. The nodes are made through 9P, so
    that a mapped model keeps their owner, mode and symlink target its own way."""
    p9 = place.session
    fid = p9.walk_fid(place.fid, [])
    p9.create(fid, "d", wire.DMDIR | 0o750, wire.OREAD)
    for name, data in (("a", b"old a"), ("b", b"old b")):
        made = p9.walk_fid(fid, [])
        p9.create(made, name, 0o640, wire.OWRITE)
        p9.write(made, 0, data)
        p9.clunk(made)
    link = p9.walk_fid(fid, [])
    p9.create(link, "l", wire.DMSYMLINK | 0o777, wire.OREAD, "a")
    p9.clunk(link)
    before = read_directory(p9, fid, 8192)
    for record in before[:1] + before[2:]:  # each record is its node's Tstat ("." the directory's)
        walked = p9.walk_fid(place.fid, ["d"] + ([] if record.name == "." else [record.name]))
        stated = dataclasses.replace(p9.stat(walked), name=record.name)
        p9.clunk(walked)
        assert dataclasses.replace(record, atime=0) == dataclasses.replace(stated, atime=0), record.name
    place.host_edited()
    place.host_path("d").rename(place.host_path("d.old"))
    place.host_path("d").mkdir()
    place.host_path("d", "a").write_bytes(b"the new directory's a")
    after = read_directory(p9, fid, 8192)
    assert [s.name for s in after] == [".", "..", "a", "b", "l"], after

    def kept(record: Stat) -> object:  # what a listing may move: atimes; and the swap changed '..'
        if record.name == "..":  # the case's directory: one more entry and link, a new mtime
            return record.name, record.qid.path
        if record.name == "." and security_model == "mapped-file":
            # a directory's own mapped-file metadata is in its parent, by its name, which a host-side
            # rename leaves behind: "." is then what its path names, as a Tgetattr of the fid has it
            return record.name, record.qid.type
        return dataclasses.replace(record, atime=0)

    assert [kept(record) for record in after] == [kept(record) for record in before]
    p9.clunk(fid)


@case_path("dotu/read_dir/dotl_refused", backends=["local", "synth"])
def test_read_of_a_directory_in_dotl(place: Place) -> None:
    """In 9P2000.L a directory is read with Treaddir: Tread of an open directory is EOPNOTSUPP."""
    p9 = place.session
    fid = p9.walk_fid(place.fid, [])
    p9.lopen(fid, os.O_RDONLY | os.O_DIRECTORY)
    with expect_rlerror(errno.EOPNOTSUPP):
        p9.read(fid, 0, 4096)
    p9.clunk(fid)
