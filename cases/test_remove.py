"""Tremove: "remove the file ... and clunk the fid, even if the remove fails" (remove(5))."""

from __future__ import annotations

import errno

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from fixtures.place import Place
from harness.p9.messages import Tremove


@case_path("remove/{outcome}", backends=["local"], outcome=["removed", "refused"])
def test_remove_clunks_the_fid(place: Place, outcome: str) -> None:
    """Tremove clunks its fid whether or not the removal worked; a non-empty directory stays."""
    p9 = place.session
    place.host_path("d").mkdir()
    if outcome == "refused":
        place.host_path("d", "child").write_bytes(b"")
    fid = p9.walk_fid(place.fid, ["d"])
    if outcome == "refused":
        with expect_rlerror(errno.ENOTEMPTY):
            p9.rpc(Tremove(fid=fid))
        assert place.host_path("d", "child").exists()
    else:
        p9.rpc(Tremove(fid=fid))
        assert not place.host_path("d").exists()
    assert fid not in p9.fids
    with expect_rlerror(errno.ENOENT):
        p9.getattr(fid)
