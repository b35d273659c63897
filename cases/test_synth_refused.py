"""The synth backend (QEMU's in-memory test tree) is read-mostly: each request that would change a
node's metadata or the tree's shape reaches the backend op QEMU gives it and is answered with that
op's errno (9p-synth.c): chmod, chown, rename, renameat, unlinkat, remove EPERM; truncate ENOSYS.
Times are the exception: synth_utimensat() sets errno but returns 0, so Tsetattr of times succeeds
and nothing changes. In every case the node is as it was afterwards."""

from __future__ import annotations

import errno

import pytest

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from fixtures.place import Place
from harness.p9 import wire
from harness.p9.messages import Tremove, Trename, Trenameat, Tsetattr, Tunlinkat
from harness.p9.session import Session
from harness.qemu import versions

MODE, UID, GID, SIZE, ATIME, MTIME = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20
ATIME_SET, MTIME_SET = 0x80, 0x100

#: request -> (the Tsetattr valid bits and fields, or another request's builder), errno
SETATTR = {
    "mode": ({"valid": MODE, "mode": 0o600}, errno.EPERM),
    "uid": ({"valid": UID, "uid": 1}, errno.EPERM),
    "gid": ({"valid": GID, "gid": 1}, errno.EPERM),
    "size": ({"valid": SIZE, "size": 0}, errno.ENOSYS),
}


def snapshot(p9: Session, fid: int) -> tuple[int, int, int, int, int]:
    attr = p9.getattr(fid)
    return attr.mode, attr.uid, attr.gid, attr.size, attr.mtime_sec


@case_path("refused/setattr_{field}", backends=["synth"], field=list(SETATTR))
def test_setattr_refused(place: Place, field: str) -> None:
    """Tsetattr of mode, owner or size on a synth file: the backend's errno, the file unchanged."""
    fields, expected = SETATTR[field]
    p9 = place.session
    fid = p9.walk_fid(place.fid, ["WRITE"])
    before = snapshot(p9, fid)
    with expect_rlerror(expected):
        p9.rpc(Tsetattr(fid=fid, **fields))
    assert snapshot(p9, fid) == before
    p9.clunk(fid)


@case_path("setattr_times_ignored", backends=["synth"], times=["now", "set"])
def test_setattr_times_succeed_without_effect(place: Place, times: str) -> None:
    """Tsetattr of atime and mtime ("now", or given): answered with success (synth_utimensat()
    returns 0), and the file's times are what they were."""
    p9 = place.session
    fid = p9.walk_fid(place.fid, ["WRITE"])
    before = p9.getattr(fid)
    valid = ATIME | MTIME | (ATIME_SET | MTIME_SET if times == "set" else 0)
    p9.rpc(Tsetattr(fid=fid, valid=valid, atime_sec=1_000_000, mtime_sec=2_000_000))
    after = p9.getattr(fid)
    assert (after.atime_sec, after.mtime_sec) == (before.atime_sec, before.mtime_sec)
    p9.clunk(fid)


def _rename(p9: Session, place: Place) -> None:
    fid = p9.walk_fid(place.fid, ["WRITE"])
    try:
        p9.rpc(Trename(fid=fid, dfid=place.fid, name="moved"))
    finally:
        p9.clunk(fid)


def _unlinkat(p9: Session, place: Place) -> None:
    p9.rpc(Tunlinkat(dirfd=place.fid, name="WRITE", flags=0))


def _unlinkat_dir(p9: Session, place: Place) -> None:
    p9.rpc(Tunlinkat(dirfd=place.fid, name="ReadDirDir", flags=wire.AT_REMOVEDIR))


def _remove(p9: Session, place: Place) -> None:
    p9.rpc(Tremove(fid=p9.walk_fid(place.fid, ["WRITE"])))  # clunks the fid, removal or not


def _renameat(p9: Session, place: Place) -> None:
    p9.rpc(Trenameat(olddirfid=place.fid, oldname="WRITE", newdirfid=place.fid, newname="moved"))


#: Trename and Tremove need a path-based backend (V9FS_PATHNAME_FSCONTEXT), which synth is not:
#: QEMU refuses them before the backend
SHAPE = {
    "rename": (_rename, errno.EOPNOTSUPP),
    "unlinkat": (_unlinkat, errno.EPERM),
    "unlinkat_dir": (_unlinkat_dir, errno.EPERM),
    "remove": (_remove, errno.EOPNOTSUPP),
}


@case_path("refused/{operation}", backends=["synth"], operation=list(SHAPE))
def test_tree_cannot_change(place: Place, operation: str) -> None:
    """Trename and Tremove (EOPNOTSUPP), Tunlinkat of a file and a directory (EPERM) of synth
    nodes: refused, and every node of the tree still walks."""
    p9 = place.session
    request, expected = SHAPE[operation]
    with expect_rlerror(expected):
        request(p9, place)
    for name in ("WRITE", "ReadDirDir"):
        p9.clunk(p9.walk_fid(place.fid, [name]))
    with expect_rlerror(errno.ENOENT):
        p9.walk_fid(place.fid, ["moved"])


@pytest.mark.qemu_bug(
    fixed_in=versions.SYNTH_RENAMEAT,
    reason="QEMU 7.2 passes Trenameat to synth_renameat() (EPERM); later versions refuse it before "
    "the backend as not supported (b72d15f47c): EOPNOTSUPP",
    raises=AssertionError,
)
@case_path("refused/renameat", backends=["synth"])
def test_renameat_refused(place: Place) -> None:
    """Trenameat on synth: EOPNOTSUPP, and the node keeps its name."""
    p9 = place.session
    with expect_rlerror(errno.EOPNOTSUPP):
        _renameat(p9, place)
    p9.clunk(p9.walk_fid(place.fid, ["WRITE"]))
