"""The max_xattr fsdev option (upstream QEMU, 2026): a cap on the xattr fids a client may hold
open at once, so that a guest cannot pin unbounded server memory with Txattrwalk/Txattrcreate.
QEMU 7.2 has no such option: there these cases skip, saying so."""

from __future__ import annotations

import pytest

from fixtures.case_path import case_path
from fixtures.place import Place
from harness.errors import P9Rlerror
from harness.p9.messages import Txattrwalk
from harness.p9.session import Session

LIMIT = 100


def open_xattr_fids(p9: Session, fid: int, count: int) -> list[int]:
    """Txattrwalk (list all: empty name) ``count`` times without clunking; the fids that opened."""
    opened = []
    for _ in range(count):
        newfid = p9.new_fid()
        try:
            p9.rpc(Txattrwalk(fid=fid, newfid=newfid, name=""))
        except P9Rlerror:
            break
        opened.append(newfid)
    return opened


@pytest.mark.fsdev(max_xattr=LIMIT)
@case_path("xattr_limit/custom", backends=["local"])
def test_xattr_limit_custom(place: Place) -> None:
    """With max_xattr=100, 100 xattr fids open and the 101st is refused; clunking one makes room."""
    p9 = place.session
    opened = open_xattr_fids(p9, place.fid, LIMIT + 1)
    assert len(opened) == LIMIT
    p9.clunk(opened.pop())
    assert len(open_xattr_fids(p9, place.fid, 1)) == 1
    for fid in list(p9.fids - {0, place.fid}):
        p9.clunk(fid)


@pytest.mark.fsdev(max_xattr=0)
@case_path("xattr_limit/unlimited", backends=["local"])
def test_xattr_limit_unlimited(place: Place) -> None:
    """max_xattr=0 means no cap: three times the custom limit all open."""
    p9 = place.session
    opened = open_xattr_fids(p9, place.fid, 3 * LIMIT)
    assert len(opened) == 3 * LIMIT
    for fid in opened:
        p9.clunk(fid)
