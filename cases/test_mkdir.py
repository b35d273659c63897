"""Tmkdir: "create a directory ... mode ... gid"; returns the new directory's qid (diod protocol.md)."""

from __future__ import annotations

import errno
import stat

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from fixtures.place import Place
from harness.p9 import wire


@case_path("create_dir", backends=["local"])
def test_create_dir(place: Place) -> None:
    """The directory exists on the host, Rmkdir's qid is the one a walk finds, the mode asked for
    is the mode reported (mapped-xattr keeps it in user.virtfs.mode), and a second Tmkdir of the
    same name is EEXIST and changes nothing."""
    p9 = place.session
    qid = p9.mkdir(place.fid, "01", 0o750).qid
    host = place.host_path("01")
    assert stat.S_ISDIR(host.stat().st_mode)
    assert qid.type == wire.QTDIR
    fid = p9.new_fid()
    (walked,) = p9.walk(place.fid, ["01"], fid).qids
    assert walked == qid
    attr = p9.getattr(fid)
    assert attr.mode == stat.S_IFDIR | 0o750, oct(attr.mode)
    assert attr.nlink == 2 and attr.qid == qid
    with expect_rlerror(errno.EEXIST):
        p9.mkdir(place.fid, "01", 0o700)
    assert p9.getattr(fid).mode == stat.S_IFDIR | 0o750
    p9.clunk(fid)
