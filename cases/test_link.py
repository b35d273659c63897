"""Tlink: "create a hard link name in directory dfid pointing to fid" (diod protocol.md)."""

from __future__ import annotations

from fixtures.case_path import case_path
from fixtures.place import Place


@case_path("hardlink_file", backends=["local"])
def test_hardlink_file(place: Place) -> None:
    """Both names are one inode on the host; the server reports nlink 2 for both and the same
    qid; data written through one name reads back through the other."""
    p9 = place.session
    dfid = place.make_file("07", "real_file")
    real = p9.new_fid()
    (real_qid,) = p9.walk(dfid, ["real_file"], real).qids
    p9.link(dfid, real, "hardlink_file")
    real_host, link_host = place.host_path("07", "real_file"), place.host_path("07", "hardlink_file")
    assert (link_host.stat().st_dev, link_host.stat().st_ino) == (real_host.stat().st_dev, real_host.stat().st_ino)
    link = p9.new_fid()
    (link_qid,) = p9.walk(dfid, ["hardlink_file"], link).qids
    assert link_qid.path == real_qid.path
    assert p9.getattr(real).nlink == p9.getattr(link).nlink == 2
    real_host.write_bytes(b"shared")
    p9.lopen(link, 0)
    assert p9.read(link, 0, 64).data == b"shared"
    for fid in (link, real, dfid):
        p9.clunk(fid)
