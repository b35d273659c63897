"""Trename: "rename a file system object referenced by fid to name in the directory dfid";
Trenameat: "rename olddirfid/oldname to newdirfid/newname" (diod protocol.md)."""

from __future__ import annotations

import pytest

from fixtures.case_path import case_path
from fixtures.place import Place
from harness.p9.messages import Trename, Trenameat


def two_dirs(place: Place) -> tuple[int, int]:
    for name in ("a", "b"):
        place.host_path(name).mkdir()
    place.host_path("a", "file").write_bytes(b"payload")
    return place.session.walk_fid(place.fid, ["a"]), place.session.walk_fid(place.fid, ["b"])


@pytest.mark.fsdev(multidevs="warn")  # qid.path is the host inode only then (10.0: remap)
@case_path("renameat/{target}", backends=["local"], target=["new", "existing"])
def test_renameat_across_directories(place: Place, target: str) -> None:
    """The object moves with its content and inode; an existing target is replaced."""
    p9 = place.session
    a, b = two_dirs(place)
    if target == "existing":
        place.host_path("b", "moved").write_bytes(b"old")
    inode = place.host_path("a", "file").stat().st_ino
    p9.rpc(Trenameat(olddirfid=a, oldname="file", newdirfid=b, newname="moved"))
    assert not place.host_path("a", "file").exists()
    moved = place.host_path("b", "moved")
    assert moved.read_bytes() == b"payload" and moved.stat().st_ino == inode
    fid = p9.new_fid()
    (qid,) = p9.walk(b, ["moved"], fid).qids
    assert qid.path == inode
    for f in (fid, a, b):
        p9.clunk(f)


@case_path("rename/fid", backends=["local"])
def test_rename_by_fid(place: Place) -> None:
    """Trename moves the object the fid stands on, and the fid keeps working on it."""
    p9 = place.session
    a, b = two_dirs(place)
    fid = p9.walk_fid(a, ["file"])
    p9.rpc(Trename(fid=fid, dfid=b, name="renamed"))
    assert place.host_path("b", "renamed").read_bytes() == b"payload"
    p9.lopen(fid, 0)
    assert p9.read(fid, 0, 100).data == b"payload"
    for f in (fid, a, b):
        p9.clunk(f)
