"""Tsymlink: "create symbolic link name in directory dfid ... pointing to symtgt"; Treadlink:
"return the contents of the symbolic link" (diod protocol.md)."""

from __future__ import annotations

import stat

from fixtures.case_path import case_path
from fixtures.place import Place
from harness.p9 import wire


@case_path("symlink_file", backends=["local"])
def test_symlink_file(place: Place) -> None:
    """The link exists on the host (with mapped-xattr: a regular file holding the target), its qid
    says symlink, Treadlink gives the target back and Tgetattr reports S_IFLNK."""
    p9 = place.session
    dfid = place.make_file("05", "real_file")
    qid = p9.symlink(dfid, "symlink_file", "real_file").qid
    assert qid.type == wire.QTSYMLINK
    host = place.host_path("05", "symlink_file")
    assert host.exists()
    assert host.read_bytes() == b"real_file"  # mapped-xattr stores a symlink as a file
    link = p9.new_fid()
    (walked,) = p9.walk(dfid, ["symlink_file"], link).qids
    assert walked == qid
    assert p9.readlink(link).target == "real_file"
    assert stat.S_ISLNK(p9.getattr(link).mode)
    p9.clunk(link)
    p9.clunk(dfid)
