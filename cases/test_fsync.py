"""Tfsync: "flush any cached data to disk" (diod protocol.md)."""

from __future__ import annotations

import os

from fixtures.case_path import case_path
from fixtures.place import Place
from harness.p9.messages import Rfsync, Tfsync


@case_path("fsync/basic", backends=["local"])
def test_fsync(place: Place) -> None:
    """Tfsync on an open fid, data and datasync alike, after a write that is then on the host."""
    p9 = place.session
    fid = p9.walk_fid(place.fid, [])
    p9.lcreate(fid, "f", os.O_RDWR, 0o600)
    p9.write(fid, 0, b"synced")
    for datasync in (0, 1):
        assert p9.rpc(Tfsync(fid=fid, datasync=datasync)) == Rfsync()
    assert place.host_path("f").read_bytes() == b"synced"
    p9.clunk(fid)
