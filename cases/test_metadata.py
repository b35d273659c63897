"""What a security model keeps of a node shows as the node's own, wherever the model keeps it (on the
node under passthrough and none, in xattrs on it under mapped-xattr, in ``.virtfs_metadata``
beside it under mapped-file): a change of a node's mode or owner moves its ctime, as chmod(2) and
chown(2) do, for each kind of node, made through 9P or on the host; and a directory's link count
is 2 and one for each subdirectory its listing shows, whatever made the names in it."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from fixtures.case_path import case_path
from fixtures.deviations import MAPPED_FILE_CTIME, MAPPED_FILE_NLINK
from fixtures.expect import FieldNotAsWanted, expect_field
from fixtures.model import SECURITY_MODELS
from fixtures.place import Place
from harness.p9 import wire
from harness.p9.messages import Tmknod, Tsetattr, Twstat, twstat
from harness.p9.session import Session

MODELS = list(SECURITY_MODELS)
#: longer than a host's timestamp granularity (Linux's coarse clock: a jiffy, 10 ms at HZ=100),
#: so that a ctime a change moves is later than the one read before it; an export on a file
#: system that keeps coarser times (ext4 with 128-byte inodes: seconds) fails these cases under
#: every model
TICK = 0.025


def make(p9: Session, dfid: int, host: Path, kind: str, name: str = "node") -> None:
    """``kind`` called ``name`` in the directory ``dfid`` (``host`` on the host): through 9P, or
    on the host (``host_…``)."""
    if kind == "host_file":
        (host / name).write_bytes(b"data")
    elif kind == "host_dir":
        (host / name).mkdir()
    elif kind == "host_symlink":
        (host / name).symlink_to("the/target")
    elif kind == "file":
        fid = p9.walk_fid(dfid, [])
        p9.lcreate(fid, name, os.O_RDWR, 0o640, gid=0)
        p9.clunk(fid)
    elif kind == "dir":
        p9.mkdir(dfid, name, 0o750, gid=0)
    elif kind == "symlink":
        p9.symlink(dfid, name, "the/target", gid=0)
    else:
        assert kind == "regular_mknod", kind
        p9.rpc(Tmknod(dfid=dfid, name=name, mode=stat.S_IFREG | 0o640, major=0, minor=0, gid=0))


#: change -> (Tsetattr valid, its fields) (the mode's type bits: the node's own, as Linux sends them)
SETATTR = {"mode": (wire.SETATTR_MODE, {"mode": 0o705}), "uid": (wire.SETATTR_UID, {"uid": 3001}),
           "gid": (wire.SETATTR_GID, {"gid": 3002}),
           "uid_gid": (wire.SETATTR_UID | wire.SETATTR_GID, {"uid": 3001, "gid": 3002})}  # fmt: skip
#: the 9P2000.u Twstat changes: its fields
WSTAT = {"mode": {"mode": 0o705}, "n_uid": {"n_uid": 3001}, "n_gid": {"n_gid": 3002}}
#: the kinds each change is asked of; a symlink's mode is left out (Linux has no lchmod(2), and
#: QEMU refuses a mode on one under passthrough)
KINDS = ["file", "dir", "symlink", "regular_mknod", "host_file", "host_dir", "host_symlink"]
OWNED_ONLY = ("symlink", "host_symlink")


def kind_of(p9: Session, dfid: int, name: str) -> int:
    """The mode Tgetattr shows of ``name`` in the directory ``dfid``."""
    fid = p9.walk_fid(dfid, [name])
    mode = p9.getattr(fid).mode
    p9.clunk(fid)
    return mode


def ctime(p9: Session, fid: int) -> int:
    attr = p9.getattr(fid)
    return attr.ctime_sec * 10**9 + attr.ctime_nsec


def unowned(kind: str, security_model: str) -> None:
    """Skip where the model cannot keep an owner for ``kind`` at all."""
    if kind == "host_symlink" and security_model == "mapped-xattr":
        pytest.skip("Linux keeps no user.* xattr on a symlink: mapped-xattr refuses an owner for one the host "
                    "made (EPERM), so there is no change whose ctime to look at")  # fmt: skip


def moved(p9: Session, fid: int, change: str, send: Tsetattr | Twstat) -> None:
    """The ctime of ``fid``'s node before and after ``send`` (a request), which must move it."""
    before = ctime(p9, fid)
    time.sleep(TICK)
    p9.rpc(send)
    after = ctime(p9, fid)
    assert after > before, f"a {change} change left the ctime at {before} ns (now {after} ns)"


def _pairs(changes: Iterable[str]) -> list[tuple[str, str]]:
    return [(change, kind) for change in changes for kind in KINDS if not (change == "mode" and kind in OWNED_ONLY)]


@pytest.mark.qemu_bug(**MAPPED_FILE_CTIME, raises=AssertionError, when={"security_model": "mapped-file"})
@case_path("metadata/ctime/{change_kind}/{security_model}", backends=["local"], security_model=MODELS,
           change_kind=[f"{change}/{kind}" for change, kind in _pairs(SETATTR)])  # fmt: skip
def test_setattr_moves_the_ctime(place: Place, change_kind: str, security_model: str) -> None:
    """A Tsetattr of a mode or an owner moves the node's ctime (Tgetattr's, as a client sees it),
    and sets what it asked."""
    change, kind = change_kind.split("/")
    unowned(kind, security_model)
    p9 = place.session
    make(p9, place.fid, place.host_path(), kind)
    fid = p9.walk_fid(place.fid, ["node"])
    valid, fields = SETATTR[change]
    if change == "mode":
        fields = {"mode": stat.S_IFMT(p9.getattr(fid).mode) | fields["mode"]}
    moved(p9, fid, change, Tsetattr(fid=fid, valid=valid, **fields))
    attr = p9.getattr(fid)
    assert {name: getattr(attr, name) for name in fields} == fields
    p9.clunk(fid)


@pytest.mark.qemu_bug(**MAPPED_FILE_CTIME, raises=AssertionError, when={"security_model": "mapped-file"})
@case_path("metadata/ctime/{change_kind}/{security_model}", backends=["local"], dialect=[wire.DOTU],
           security_model=MODELS,
           change_kind=[f"wstat/{change}/{kind}" for change, kind in _pairs(WSTAT)])  # fmt: skip
def test_wstat_moves_the_ctime(place: Place, change_kind: str, security_model: str, dialect: str) -> None:
    """9P2000.u: a Twstat of a mode or an owner moves the node's ctime."""
    _, change, kind = change_kind.split("/")
    unowned(kind, security_model)
    p9 = place.session
    make(p9, place.fid, place.host_path(), kind)
    fid = p9.walk_fid(place.fid, ["node"])
    fields = dict(WSTAT[change])
    if change == "mode" and kind.endswith("dir"):
        fields["mode"] |= wire.DMDIR  # (a mode without its node's type is EIO)
    moved(p9, fid, change, twstat(fid, **fields))
    record = p9.stat(fid)
    assert {name: getattr(record, name) & (0o777 if name == "mode" else ~0) for name in fields} == {
        name: value & (0o777 if name == "mode" else ~0) for name, value in fields.items()}  # fmt: skip
    p9.clunk(fid)


#: what a directory holds: a name of each kind made through 9P, one made on the host, one the
#: host's that 9P changed (a mode set), one made through 9P and removed, or nothing
CHILDREN = ["nothing", "file", "dir", "symlink", "regular_mknod", "host_file", "host_dir", "host_file_chmod",
            "file_removed", "dir_removed"]  # fmt: skip
#: the children after which mapped-file keeps a .virtfs_metadata in the directory
METADATA_KEPT = ("file", "dir", "symlink", "regular_mknod", "host_file_chmod", "file_removed", "dir_removed")


@pytest.mark.qemu_bug(**MAPPED_FILE_NLINK, raises=FieldNotAsWanted,
                      when={"security_model": "mapped-file", "child": METADATA_KEPT})  # fmt: skip
@case_path("metadata/nlink/{child}/{security_model}", backends=["local"], security_model=MODELS, child=CHILDREN)
def test_directory_nlink_counts_the_listed_subdirectories(place: Place, child: str, security_model: str) -> None:
    """A directory's link count (Tgetattr's nlink) is 2 and one for each directory its Treaddir
    lists, after a child of each kind is made in it, or made and removed."""
    probe = place.host_path("probe")
    probe.mkdir()
    counted = probe.stat().st_nlink
    probe.rmdir()
    if counted != 2:  # (btrfs counts no links of a directory: 1 for every one)
        pytest.skip(f"the export's file system gives a new directory nlink {counted}, not 2")
    p9 = place.session
    p9.mkdir(place.fid, "d", 0o755, gid=0)
    d = p9.walk_fid(place.fid, ["d"])
    kind = child.removesuffix("_removed").removesuffix("_chmod")
    if child != "nothing":
        make(p9, d, place.host_path("d"), kind, "child")
    if child == "host_file_chmod":
        fid = p9.walk_fid(d, ["child"])
        p9.rpc(Tsetattr(fid=fid, valid=wire.SETATTR_MODE, mode=stat.S_IFREG | 0o600))
        p9.clunk(fid)
    if child.endswith("_removed"):
        p9.unlinkat(d, "child", wire.AT_REMOVEDIR if kind == "dir" else 0)
    listed = p9.walk_fid(d, [])
    p9.lopen(listed, os.O_RDONLY | os.O_DIRECTORY)
    listing = [e for reply in p9.readdir_all(listed) for e in reply.entries if e.name not in (".", "..")]
    # (each entry's kind from its Tgetattr: a mapped model lists every d_type as DT_UNKNOWN, and
    # under multidevs=warn, the default before 10.0, every qid's type is 0)
    subdirectories = [e.name for e in listing if stat.S_ISDIR(kind_of(p9, d, e.name))]
    expect_field(p9.getattr(d), "nlink", 2 + len(subdirectories))
    for fid in (listed, d):
        p9.clunk(fid)
