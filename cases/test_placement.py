"""New and moved names land in the directory the request names, with what it asked for: Tmkdir,
Tmknod, Tsymlink, Tlink, Tlcreate, Trename and Trenameat into a directory other than the one the
source or the session stands in, checked on the host (there, and nowhere else) and through
Tgetattr (type, mode, gid, rdev major/minor, link target, inode)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fixtures.case_path import case_path
from fixtures.place import Place
from harness.p9.messages import Tlink, Tmknod, Trename, Trenameat, Tsymlink

GID = 4321
OPERATIONS = ["mkdir", "mknod_char", "mknod_fifo", "symlink", "link", "lcreate", "rename", "renameat"]


@case_path("placement/{operation}", backends=["local"], operation=OPERATIONS)
def test_into_another_directory(place: Place, operation: str) -> None:
    p9 = place.session
    for name in ("a", "b"):
        place.host_path(name).mkdir()
    place.host_path("a", "src").write_bytes(b"source")
    inode = place.host_path("a", "src").stat().st_ino
    into, source = p9.walk_fid(place.fid, ["b"]), p9.walk_fid(place.fid, ["a", "src"])
    want_mode: int | None = None
    if operation == "mkdir":
        p9.mkdir(into, "new", 0o751, gid=GID)
        want_mode = stat.S_IFDIR | 0o751
    elif operation.startswith("mknod"):
        kind = stat.S_IFCHR if operation == "mknod_char" else stat.S_IFIFO
        p9.rpc(Tmknod(dfid=into, name="new", mode=kind | 0o640, major=4, minor=67, gid=GID))
        want_mode = kind | 0o640
    elif operation == "symlink":
        p9.rpc(Tsymlink(fid=into, name="new", symtgt="elsewhere/target", gid=GID))
    elif operation == "link":
        p9.rpc(Tlink(dfid=into, fid=source, name="new"))
    elif operation == "lcreate":
        creating = p9.walk_fid(into, [])
        p9.lcreate(creating, "new", os.O_RDWR, 0o604, gid=GID)
        p9.clunk(creating)
        want_mode = stat.S_IFREG | 0o604
    elif operation == "rename":
        p9.rpc(Trename(fid=source, dfid=into, name="new"))
    else:
        in_a = p9.walk_fid(place.fid, ["a"])
        p9.rpc(Trenameat(olddirfid=in_a, oldname="src", newdirfid=into, newname="new"))
        p9.clunk(in_a)
    landed = place.host_path("b", "new")
    assert os.path.lexists(landed), f"{operation}: nothing at b/new"
    others = [place.host_path("new"), place.host_path("a", "new")]
    assert not any(os.path.lexists(p) for p in others), f"{operation}: also made elsewhere"
    assert sorted(p.name for p in place.host_path("b").iterdir() if not p.name.startswith(".")) == ["new"]
    check_landed(place, operation, landed, inode, want_mode)
    for fid in (into, source):
        p9.clunk(fid)


def check_landed(place: Place, operation: str, landed: Path, inode: int, want_mode: int | None) -> None:
    p9 = place.session
    fid = p9.walk_fid(place.fid, ["b", "new"])
    attr = p9.getattr(fid)
    if want_mode is not None:
        assert attr.mode == want_mode, f"{operation}: mode {attr.mode:#o}"
    if operation in ("mkdir", "mknod_char", "mknod_fifo", "symlink", "lcreate"):
        assert attr.gid == GID, f"{operation}: gid {attr.gid}"
    if operation == "mknod_char":
        assert attr.rdev == os.makedev(4, 67), f"rdev {attr.rdev:#x}"
    if operation == "symlink":
        assert stat.S_ISLNK(attr.mode) and p9.readlink(fid).target == "elsewhere/target"
    if operation in ("link", "rename", "renameat"):
        assert landed.stat().st_ino == inode and landed.read_bytes() == b"source"
        source_kept = operation == "link"
        assert place.host_path("a", "src").exists() is source_kept, f"{operation}: a/src"
    p9.clunk(fid)
