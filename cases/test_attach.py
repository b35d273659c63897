"""Tattach: "establishes a fid ... as the root of the file tree the client will access" (attach(5))."""

from __future__ import annotations

import errno
import stat

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from harness.p9 import wire
from harness.p9.messages import Tattach
from harness.p9.session import Session


@case_path("attach/basic", backends=["synth"])
def test_attach_basic(p9: Session) -> None:
    """The root qid is a directory, Tgetattr on the fid agrees, and the fid is real."""
    p9.version()
    fid = 0
    qid = p9.attach(fid).qid
    assert qid.type == wire.QTDIR
    attr = p9.getattr(fid)
    assert attr.qid == qid
    assert stat.S_ISDIR(attr.mode), f"root mode {attr.mode:#o}"
    assert attr.valid & wire.GETATTR_BASIC == wire.GETATTR_BASIC
    p9.clunk(fid)
    with expect_rlerror(errno.ENOENT):
        p9.getattr(fid)  # clunked: the fid is gone


@case_path("attach/second_fid", backends=["synth"])
def test_attach_twice_same_root(p9: Session) -> None:
    """Two attaches on two fids reach the same root qid."""
    p9.version()
    first = p9.new_fid()
    qid1 = p9.attach(first).qid
    second = p9.new_fid()
    qid2 = p9.attach(second).qid
    assert first != second and qid1 == qid2
    p9.clunk(first)
    p9.clunk(second)


@case_path("attach/fid_in_use", backends=["synth", "local"])
def test_attach_fid_in_use(attached: Session) -> None:
    """Tattach with a fid already in use is EINVAL, and that fid is untouched."""
    qid = attached.getattr(0).qid
    with expect_rlerror(errno.EINVAL):
        attached.rpc(Tattach(fid=0, afid=wire.NOFID, uname="", aname="", n_uname=0))
    assert attached.getattr(0).qid == qid
