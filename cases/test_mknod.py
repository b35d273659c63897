"""Tmknod: "create a device node ... mode ... major minor" (diod protocol.md). With mapped-xattr
the node is a plain host file whose type lives in user.virtfs.mode/rdev."""

from __future__ import annotations

import os
import stat

from fixtures.case_path import case_path
from fixtures.place import Place
from harness.p9 import wire
from harness.p9.messages import Tmknod
from harness.p9.wire import Qid


def mknod(place: Place, name: str, mode: int, major: int = 0, minor: int = 0) -> Qid:
    return place.session.rpc(Tmknod(dfid=place.fid, name=name, mode=mode, major=major, minor=minor, gid=0)).qid


@case_path("mknod/{kind}", backends=["local"], kind=["regular", "fifo", "char"])
def test_mknod(place: Place, kind: str) -> None:
    """The node exists, its qid is what a walk finds, Tgetattr reports the type, mode and (for a
    device) rdev asked for; on the host it is a regular file (mapped-xattr never makes real
    special files)."""
    mode, major, minor = {
        "regular": (stat.S_IFREG | 0o640, 0, 0),
        "fifo": (stat.S_IFIFO | 0o600, 0, 0),
        "char": (stat.S_IFCHR | 0o600, 1, 3),
    }[kind]
    qid = mknod(place, "node", mode, major, minor)
    assert qid.type == wire.QTFILE
    fid = place.session.new_fid()
    (walked,) = place.session.walk(place.fid, ["node"], fid).qids
    assert walked == qid
    attr = place.session.getattr(fid)
    assert attr.mode == mode
    if kind == "char":
        assert attr.rdev == os.makedev(major, minor)
    assert stat.S_ISREG(place.host_path("node").lstat().st_mode)
    place.session.clunk(fid)
