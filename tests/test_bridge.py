"""The FUSE bridge against a fake 9P session (the layer below it): which requests each FUSE call
becomes, with whose identity; and the pieces of the posix family that need no mount."""

from __future__ import annotations

import errno
import stat
from collections.abc import Coroutine
from types import SimpleNamespace
from typing import Any

import pytest

pyfuse3 = pytest.importorskip("pyfuse3", reason="pyfuse3 is not installed (make venv installs it)")

from harness.errors import P9Rlerror, QEMUExited  # noqa: E402
from harness.fuse.bridge import Bridge  # noqa: E402
from harness.fuse.convert import setattr_request  # noqa: E402
from harness.p9 import wire  # noqa: E402
from harness.p9.messages import (  # noqa: E402
    Rattach,
    Rclunk,
    Rgetattr,
    Rlopen,
    Rmkdir,
    Rsetattr,
    Rwalk,
    Rwrite,
    Tattach,
    Tgetattr,
    Tmkdir,
    Tsetattr,
    Twalk,
    Twrite,
)
from harness.qemu.pjdfstest import read_tap  # noqa: E402


def qid(path: int, kind: int = wire.QTFILE) -> wire.Qid:
    return wire.Qid(kind, 0, path)


class FakeSession:
    """Answers as a server with one directory ``d`` (0o2775, gid 50: set-group-ID) under the root and
    one file ``f`` (0o4755); records every request."""

    msize = 8192

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.fid_uid: dict[int, int] = {}
        self.fid_path: dict[int, str] = {}
        self.modes = {"": stat.S_IFDIR | 0o755, "d": stat.S_IFDIR | 0o2775, "f": stat.S_IFREG | 0o4755}
        self._next = 100

    def new_fid(self) -> int:
        self._next += 1
        return self._next

    def clunk(self, fid: int) -> Rclunk:
        self.sent.append(("Tclunk", fid))
        return Rclunk()

    def write(self, fid: int, offset: int, data: bytes) -> Rwrite:
        self.sent.append(Twrite(fid=fid, offset=offset, data=data))
        return Rwrite(count=len(data))

    def rpc(self, request: Any) -> Any:
        self.sent.append(request)
        if isinstance(request, Tattach):
            self.fid_uid[request.fid], self.fid_path[request.fid] = request.n_uname, ""
            return Rattach(qid=qid(1, wire.QTDIR))
        if isinstance(request, Twalk):
            path = "/".join(filter(None, [self.fid_path[request.fid], *request.wnames]))
            if path not in self.modes:
                raise P9Rlerror(str(request), errno.ENOENT)
            self.fid_uid[request.newfid], self.fid_path[request.newfid] = self.fid_uid[request.fid], path
            return Rwalk(qids=[qid(len(path))] * len(request.wnames))
        if isinstance(request, Tgetattr):
            path = self.fid_path[request.fid]
            return getattr_reply(len(path) + 1, self.modes[path], gid=50 if path == "d" else 0)
        if isinstance(request, Tmkdir):
            return Rmkdir(qid=qid(9, wire.QTDIR))
        if isinstance(request, Tsetattr):
            return Rsetattr()
        return Rlopen(qid=qid(2), iounit=0)


def getattr_reply(path: int, mode: int, gid: int = 0) -> Rgetattr:
    return Rgetattr(
        valid=wire.GETATTR_BASIC, qid=qid(path), mode=mode, uid=0, gid=gid, nlink=1, rdev=0, size=0, blksize=4096,
        blocks=0, atime_sec=0, atime_nsec=0, mtime_sec=0, mtime_nsec=0, ctime_sec=0, ctime_nsec=0, btime_sec=0,
        btime_nsec=0, gen=0, data_version=0,
    )  # fmt: skip


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """A handler's result: they await nothing, so one step runs them to the end."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the handler awaited something")


@pytest.fixture
def bridge() -> tuple[Bridge, FakeSession]:
    session = FakeSession()
    made = Bridge(session, lambda err: None)  # type: ignore[arg-type]
    made.attach_root()
    return made, session


def ctx(uid: int, gid: int, umask: int = 0o022) -> Any:
    return SimpleNamespace(uid=uid, gid=gid, umask=umask, pid=1)


def test_a_user_creates_through_its_own_attach(bridge: tuple[Bridge, FakeSession]) -> None:
    """mkdir by uid 1000 in a set-group-ID directory: Tattach n_uname=1000, the directory walked from
    that attach, Tmkdir through it with the directory's gid and S_ISGID, the umask applied."""
    made, session = bridge
    d = run(made.lookup(pyfuse3.ROOT_INODE, b"d", ctx(0, 0)))
    with pytest.raises(pyfuse3.FUSEError):  # the fake has no "d/n" to walk to afterwards: fine
        run(made.mkdir(d.st_ino, b"n", 0o777, ctx(1000, 1000)))
    attach = [r for r in session.sent if isinstance(r, Tattach)]
    assert [a.n_uname for a in attach] == [0, 1000]
    mkdir = next(r for r in session.sent if isinstance(r, Tmkdir))
    assert session.fid_uid[mkdir.dfid] == 1000 and session.fid_path[mkdir.dfid] == "d"
    assert (mkdir.name, mkdir.mode, mkdir.gid) == ("n", stat.S_ISGID | 0o755, 50)


def test_root_creates_through_the_inodes_own_fid(bridge: tuple[Bridge, FakeSession]) -> None:
    made, session = bridge
    with pytest.raises(pyfuse3.FUSEError):
        run(made.mkdir(pyfuse3.ROOT_INODE, b"n", 0o700, ctx(0, 7, umask=0)))
    mkdir = next(r for r in session.sent if isinstance(r, Tmkdir))
    assert (mkdir.dfid, mkdir.mode, mkdir.gid) == (made.roots[0], 0o700, 7)
    assert [r.n_uname for r in session.sent if isinstance(r, Tattach)] == [0]


def test_a_users_write_drops_set_id_bits_first(bridge: tuple[Bridge, FakeSession]) -> None:
    """As the kernel's file_remove_privs: S_ISUID goes before a non-root write, the type bits stay
    (mapped-xattr stores the mode it is given)."""
    made, session = bridge
    f = run(made.lookup(pyfuse3.ROOT_INODE, b"f", ctx(0, 0)))
    info = run(made.open(f.st_ino, 1, ctx(1000, 1000)))
    assert run(made.write(info.fh, 0, b"x")) == 1
    setattr_sent = [r for r in session.sent if isinstance(r, Tsetattr)]
    assert [(r.valid, r.mode) for r in setattr_sent] == [(wire.SETATTR_MODE, stat.S_IFREG | 0o755)]
    assert isinstance(session.sent[-1], Twrite) and session.sent.index(setattr_sent[0]) < len(session.sent) - 1


def test_roots_write_keeps_them(bridge: tuple[Bridge, FakeSession]) -> None:
    made, session = bridge
    f = run(made.lookup(pyfuse3.ROOT_INODE, b"f", ctx(0, 0)))
    run(made.write(run(made.open(f.st_ino, 1, ctx(0, 0))).fh, 0, b"x"))
    assert not [r for r in session.sent if isinstance(r, Tsetattr)]


def test_a_missing_name_is_enoent_and_an_inode_keeps_its_number(bridge: tuple[Bridge, FakeSession]) -> None:
    made, session = bridge
    with pytest.raises(pyfuse3.FUSEError) as missing:
        run(made.lookup(pyfuse3.ROOT_INODE, b"nope", ctx(0, 0)))
    assert missing.value.errno == errno.ENOENT
    first = run(made.lookup(pyfuse3.ROOT_INODE, b"f", ctx(0, 0))).st_ino
    assert run(made.lookup(pyfuse3.ROOT_INODE, b"f", ctx(0, 0))).st_ino == first != pyfuse3.ROOT_INODE
    assert sum(1 for r in session.sent if isinstance(r, tuple) and r[0] == "Tclunk") == 1  # the older fid


def test_every_operation_fails_through_one_place() -> None:
    """An Rlerror is the program's errno and the mount stays; a harness failure (QEMU gone) is EIO
    and ends the mount; a bug of the bridge is EIO, counted as a defect, and the mount stays."""
    session = FakeSession()
    ended: list[BaseException] = []
    made = Bridge(session, ended.append)  # type: ignore[arg-type]
    made.attach_root()
    causes: list[Exception] = [P9Rlerror("Treadlink", errno.EINVAL), QEMUExited("QEMU died"), KeyError("bug")]
    answered = []
    for cause in causes:

        def broken(request: Any, cause: Exception = cause) -> Any:
            raise cause

        session.rpc = broken  # type: ignore[method-assign]
        with pytest.raises(pyfuse3.FUSEError) as failed:
            run(made.readlink(pyfuse3.ROOT_INODE, ctx(0, 0)))
        assert failed.value.__cause__ is cause
        answered.append(failed.value.errno)
    assert answered == [errno.EINVAL, errno.EIO, errno.EIO]
    assert ended == [causes[1]] and made.defects == 1


def test_setattr_request_carries_what_fuse_asked() -> None:
    attr = pyfuse3.EntryAttributes()
    attr.st_mode, attr.st_uid, attr.st_gid, attr.st_size = stat.S_IFREG | 0o600, 5, 6, 7
    attr.st_atime_ns, attr.st_mtime_ns = 1_500_000_000, 2_000_000_001
    # pyfuse3 makes SetattrFields itself from the kernel's request: a stand-in with its fields
    fields: Any = SimpleNamespace(update_mode=True, update_uid=False, update_gid=True, update_size=True,
                             update_atime=True, update_mtime=False, update_ctime=False)  # fmt: skip
    request = setattr_request(3, attr, fields)
    bits = wire.SETATTR_MODE | wire.SETATTR_GID | wire.SETATTR_SIZE | wire.SETATTR_ATIME | wire.SETATTR_ATIME_SET
    assert (request.fid, request.valid) == (3, bits)
    assert (request.mode, request.uid, request.gid, request.size) == (stat.S_IFREG | 0o600, 0, 6, 7)
    assert (request.atime_sec, request.atime_nsec, request.mtime_sec) == (1, 500_000_000, 0)


def test_tap_is_read_as_prove_reads_it() -> None:
    tap = read_tap("1..5\nok 1\nnot ok 2 - tried 'x', expected 0, got EPERM\nok 3 # SKIP no\nnot ok 4 # TODO later\n")
    assert (tap.planned, tap.passed, tap.failed, tap.ran, tap.ok) == (
        5,
        3,
        {2: "tried 'x', expected 0, got EPERM"},
        4,
        False,
    )
    assert read_tap("1..2\nok 1\nok 2\n").ok and not read_tap("").ok
