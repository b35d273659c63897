"""Tversion: "version[s] ... msize[4]: the maximum length, in bytes, that the client will ever
generate or expect to receive in a single 9P message" (version(5), 9P2000.L)."""

from __future__ import annotations

import errno

import pytest

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from fixtures.pool import Device
from harness.p9 import wire
from harness.p9.messages import Rversion, Tversion
from harness.p9.session import Session

MSIZE_WARNING = "Client requested msize < minimum msize (4096)"


@case_path("version/basic", backends=["synth"])
def test_version_basic(p9: Session) -> None:
    """Rversion echoes the tag NOTAG, the dialect and (QEMU 7.2 does not clamp) the msize."""
    reply = p9.send(Tversion(msize=8192, version="9P2000.L")).wait()
    assert reply.message is not None
    assert reply.used_len == len(reply.frame) == 21
    assert reply.tag == wire.NOTAG
    assert reply.message == Rversion(msize=8192, version="9P2000.L")


@case_path("version/msize_refused/{msize}", backends=["synth"], msize=[0, 1, 7, 4095])
def test_msize_below_minimum(p9: Session, device: Device, msize: int) -> None:
    """QEMU refuses msize < 4096 (P9_MIN_MSIZE) with Rlerror EMSGSIZE and says so once on stderr."""
    mark = device.machine.output_mark()
    with expect_rlerror(errno.EMSGSIZE):
        p9.version(msize)
    assert device.machine.output_since(mark).count(MSIZE_WARNING) == 1
    assert p9.version(8192).msize == 8192  # a correct Tversion afterwards is served normally


@case_path("version/msize_accepted/{msize}", backends=["synth"], msize=[4096, 8192, 1 << 20])
def test_msize_accepted(p9: Session, device: Device, msize: int) -> None:
    """msize >= 4096 is accepted as asked, and a reply of up to msize bytes then fits."""
    mark = device.machine.output_mark()
    assert p9.version(msize) == Rversion(msize=msize, version="9P2000.L")
    assert MSIZE_WARNING not in device.machine.output_since(mark)
    fid = p9.new_fid()
    qid = p9.attach(fid).qid
    assert p9.getattr(fid).qid == qid
    p9.clunk(fid)


@case_path("version/unknown/{msize}", backends=["synth"], msize=[0, 8192])
def test_unknown_version(p9: Session, device: Device, msize: int) -> None:
    """An unknown dialect gets Rversion "unknown" (no Rlerror), and QEMU skips the msize check."""
    mark = device.machine.output_mark()
    reply = p9.rpc(Tversion(msize=msize, version="9P2000.X"))
    assert reply == Rversion(msize=msize, version="unknown")
    assert MSIZE_WARNING not in device.machine.output_since(mark)


@pytest.mark.needs_synth_tree
@case_path("version/drops_fids", backends=["synth"])
def test_version_drops_fids(p9: Session) -> None:
    """ "A Tversion ... aborts all outstanding I/O and clunks all fids" (version(5))."""
    p9.version()
    root = p9.new_fid()
    p9.attach(root)
    walked = p9.walk_fid(root, ["WALK0"])
    p9.version()
    for fid in (root, walked):
        with expect_rlerror(errno.ENOENT):
            p9.getattr(fid)
    # the numbers are free again: attaching with the same fid works
    fid = root
    qid = p9.attach(fid).qid
    assert qid.type == wire.QTDIR
    p9.clunk(fid)
