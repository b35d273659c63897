"""security_model=mapped-file: QEMU keeps each node's client-visible owner, mode and rdev in
``.virtfs_metadata/NAME`` beside it (``virtfs.uid=…`` lines; the export root's in
``.virtfs_metadata_root``), and the host node stays a plain file or directory owned by QEMU's
user. Each operation is checked three ways: the reply, the metadata file, and the host node;
renames and unlinks must carry or drop the metadata with the node."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from fixtures.case_path import case_path
from fixtures.deviations import MAPPED_FILE_HARD_LINKS, MAPPED_FILE_MOVE, MAPPED_FILE_SETATTR_REMOVED
from fixtures.expect import FieldNotAsWanted, UnexpectedReply, expect_field, expect_rlerror
from fixtures.place import Place
from harness.errors import P9Rlerror
from harness.p9 import wire
from harness.p9.messages import Tmknod, Tremove, Trename, Trenameat, Tsetattr, Txattrcreate, twstat
from harness.p9.session import Session

MAPPED_FILE = pytest.mark.fsdev(security_model="mapped-file")
META = ".virtfs_metadata"


def metadata(node: Path) -> dict[str, int]:
    """The ``virtfs.*`` values QEMU stored for ``node``."""
    text = (node.parent / META / node.name).read_text()
    return {k.removeprefix("virtfs."): int(v) for k, v in (line.split("=") for line in text.splitlines())}


def create(p9: Session, place: Place, kind: str) -> int:
    """Make ``kind`` called "node" in the case's directory with owner 1001:1002 where 9P lets the
    request say so; a fid of it."""
    if kind == "file":
        fid = p9.walk_fid(place.fid, [])
        p9.lcreate(fid, "node", os.O_RDWR, 0o640, gid=1002)
        p9.clunk(fid)
    elif kind == "dir":
        p9.mkdir(place.fid, "node", 0o750, gid=1002)
    elif kind == "symlink":
        p9.symlink(place.fid, "node", "the/target", gid=1002)
    else:
        mode = {"chardev": stat.S_IFCHR, "blockdev": stat.S_IFBLK, "fifo": stat.S_IFIFO, "socket": stat.S_IFSOCK}
        p9.rpc(Tmknod(dfid=place.fid, name="node", mode=mode[kind] | 0o604, major=10, minor=200, gid=1002))
    return p9.walk_fid(place.fid, ["node"])


#: kind -> (the mode the client sees, its rdev)
KINDS = {
    "file": (stat.S_IFREG | 0o640, 0),
    "dir": (stat.S_IFDIR | 0o750, 0),
    "symlink": (stat.S_IFLNK | 0o777, 0),
    "chardev": (stat.S_IFCHR | 0o604, os.makedev(10, 200)),
    "blockdev": (stat.S_IFBLK | 0o604, os.makedev(10, 200)),
    "fifo": (stat.S_IFIFO | 0o604, os.makedev(10, 200)),
    "socket": (stat.S_IFSOCK | 0o604, os.makedev(10, 200)),
}


@MAPPED_FILE
@case_path("models/mapped-file/create/{kind}", backends=["local"], kind=list(KINDS))
def test_created_node_metadata(place: Place, kind: str) -> None:
    """Each kind of node: the client sees the type, mode, gid and rdev it asked for; the metadata
    file says the same; the host node is a plain directory (0700) or file (0600) holding, for a
    symlink, the target."""
    p9 = place.session
    mode, rdev = KINDS[kind]
    fid = create(p9, place, kind)
    attr = p9.getattr(fid)
    assert (attr.mode, attr.gid, attr.rdev) == (mode, 1002, rdev)
    stored = metadata(place.host_path("node"))
    assert (stored["mode"], stored["gid"]) == (mode, 1002)
    assert stored.get("rdev", 0) == rdev
    host = place.host_path("node").lstat()
    if kind == "dir":
        assert (stat.S_IFMT(host.st_mode), stat.S_IMODE(host.st_mode)) == (stat.S_IFDIR, 0o700)
    else:
        assert (stat.S_IFMT(host.st_mode), stat.S_IMODE(host.st_mode)) == (stat.S_IFREG, 0o600)
    if kind == "symlink":
        assert place.host_path("node").read_bytes() == b"the/target" and p9.readlink(fid).target == "the/target"
    assert host.st_uid == os.getuid()  # the client's owner lives in the metadata only
    p9.clunk(fid)


#: Tsetattr change -> (valid, fields, the metadata afterwards)
SETATTR = {
    # the mode as Linux sends it, type bits included (without: setattr/mode/mapped-file)
    "mode": (0x1, {"mode": stat.S_IFREG | 0o604}, {"mode": stat.S_IFREG | 0o604}),
    "uid": (0x2, {"uid": 3001}, {"uid": 3001}),
    "gid": (0x4, {"gid": 3002}, {"gid": 3002}),
    "uid_gid": (0x6, {"uid": 3001, "gid": 3002}, {"uid": 3001, "gid": 3002}),
    "mode_setuid": (0x1, {"mode": stat.S_IFREG | 0o4755}, {"mode": stat.S_IFREG | 0o4755}),
}


@MAPPED_FILE
@case_path("models/mapped-file/setattr/{change}", backends=["local"], change=list(SETATTR))
def test_setattr_writes_the_metadata(place: Place, change: str) -> None:
    """Tsetattr of mode or owner rewrites the metadata file with the new value and keeps every
    other one; Tgetattr shows it; the host file's own mode and owner stay QEMU's."""
    valid, fields, expected = SETATTR[change]
    p9 = place.session
    fid = create(p9, place, "file")
    before = metadata(place.host_path("node"))
    host_before = place.host_path("node").lstat()
    p9.rpc(Tsetattr(fid=fid, valid=valid, **fields))
    assert metadata(place.host_path("node")) == {**before, **expected}
    attr = p9.getattr(fid)
    assert (attr.mode, attr.uid, attr.gid) == (
        expected.get("mode", before["mode"]), expected.get("uid", before.get("uid", 0)), expected.get("gid", 1002),
    )  # fmt: skip
    host = place.host_path("node").lstat()
    assert (host.st_mode, host.st_uid, host.st_gid) == (host_before.st_mode, host_before.st_uid, host_before.st_gid)
    p9.clunk(fid)


@MAPPED_FILE
@case_path("models/mapped-file/move/{how}", backends=["local"], how=["rename", "renameat", "renameat_other_dir"])
def test_metadata_follows_a_rename(place: Place, how: str) -> None:
    """A renamed node takes its metadata along, into the other directory's ``.virtfs_metadata``
    too; nothing stays under the old name, and the client still sees its mode and owner."""
    p9 = place.session
    fid = create(p9, place, "file")
    p9.rpc(Tsetattr(fid=fid, valid=0x3, mode=stat.S_IFREG | 0o604, uid=3001))
    stored = metadata(place.host_path("node"))
    p9.mkdir(place.fid, "other", 0o755)
    other = p9.walk_fid(place.fid, ["other"])
    target = place.host_path("other" if how == "renameat_other_dir" else "", "moved")
    if how == "rename":
        p9.rpc(Trename(fid=fid, dfid=place.fid, name="moved"))
    else:
        newdir = other if how == "renameat_other_dir" else place.fid
        p9.rpc(Trenameat(olddirfid=place.fid, oldname="node", newdirfid=newdir, newname="moved"))
    assert target.exists() and not place.host_path("node").exists()
    assert metadata(target) == stored
    assert not (place.host_path(META) / "node").exists()
    moved = p9.walk_fid(place.fid, [*target.relative_to(place.host_path()).parts])
    attr = p9.getattr(moved)
    assert (attr.mode, attr.uid) == (stat.S_IFREG | 0o604, 3001)
    for f in (fid, other, moved):
        p9.clunk(f)


#: where the moved node's metadata is before the move: its directory has none (every node in it
#: the host's own), has some (another node's), or the node has its own
SOURCES = ["bare_dir", "dir_with_metadata", "node_with_metadata"]


def to_move(place: Place, kind: str, source: str) -> tuple[Path, Path, int, int]:
    """``src/node`` of ``kind`` beside the file ``src/sibling``, and ``dst``, made on the host; a
    mode and owner set through 9P where ``source`` (:data:`SOURCES`) puts metadata; ``src`` and
    ``dst``, and fids on ``src`` and on the node."""
    src, dst = place.host_path("src"), place.host_path("dst")
    src.mkdir()
    dst.mkdir()
    if kind == "dir":
        (src / "node").mkdir()
    else:
        (src / "node").write_bytes(b"data")
    (src / "sibling").write_bytes(b"")
    p9 = place.session
    src_fid = p9.walk_fid(place.fid, ["src"])
    fid = p9.walk_fid(src_fid, ["node"])
    if source != "bare_dir":
        name = "node" if source == "node_with_metadata" else "sibling"
        target = fid if name == "node" else p9.walk_fid(src_fid, [name])
        p9.rpc(Tsetattr(fid=target, valid=0x3, mode=stat.S_IFMT((src / name).lstat().st_mode) | 0o604, uid=3001))
        if target != fid:
            p9.clunk(target)
    return src, dst, src_fid, fid


@MAPPED_FILE
@pytest.mark.qemu_bug(**MAPPED_FILE_MOVE, raises=P9Rlerror, when={"source": "bare_dir", "dest": "other_dir"})
@case_path("models/mapped-file/carried/{op}/{kind}/{source}/{dest}", backends=["local"],
           op=["rename", "renameat", "link"], kind=["file", "dir"], source=SOURCES, dest=["same_dir", "other_dir"],
           unless=lambda op, kind, **_: op == "link" and kind == "dir")  # fmt: skip  # (a directory: no hard link)
def test_metadata_carried(place: Place, op: str, kind: str, source: str, dest: str) -> None:  # fmt: skip
    """Trename, Trenameat and Tlink of a node to another name in its directory or in another one,
    from each place its metadata can be: the request succeeds; the new name is the node (its
    inode); a rename leaves nothing at the old name, a link leaves it as it was; the metadata file
    comes along exactly where there was one (a link's is a hard link of it), so the client sees the
    same mode and owner at the new name; and a rename leaves no metadata for the old name."""
    src, dst, src_fid, fid = to_move(place, kind, source)
    node, p9 = src / "node", place.session
    seen = p9.getattr(fid)
    stored = metadata(node) if source == "node_with_metadata" else None
    inode = node.lstat().st_ino
    dst_fid = p9.walk_fid(place.fid, ["dst"]) if dest == "other_dir" else p9.walk_fid(src_fid, [])
    if op == "rename":
        p9.rpc(Trename(fid=fid, dfid=dst_fid, name="moved"))
    elif op == "renameat":
        p9.rpc(Trenameat(olddirfid=src_fid, oldname="node", newdirfid=dst_fid, newname="moved"))
    else:
        p9.link(dst_fid, fid, "moved")
    moved = (dst if dest == "other_dir" else src) / "moved"
    assert moved.lstat().st_ino == inode
    assert os.path.lexists(node) == (op == "link")
    assert ((moved.parent / META / "moved").exists(), (src / META / "node").exists()) == (
        stored is not None, stored is not None and op == "link")  # fmt: skip
    if stored is not None:
        assert metadata(moved) == stored
        if op == "link":  # one metadata file for the two names
            assert (src / META / "node").samefile(moved.parent / META / "moved")
    again = p9.walk_fid(dst_fid, ["moved"])
    after = p9.getattr(again)
    assert (after.mode, after.uid, after.gid) == (seen.mode, seen.uid, seen.gid)
    for f in (again, dst_fid, fid, src_fid):
        p9.clunk(f)


@MAPPED_FILE
@pytest.mark.qemu_bug(**MAPPED_FILE_MOVE, raises=(P9Rlerror, AssertionError),
                      when={"source": ("bare_dir", "dir_with_metadata")})  # fmt: skip
@case_path("models/mapped-file/carried_over/{op}/{source}/{dest}", backends=["local"], op=["rename", "renameat"],
           source=SOURCES, dest=["same_dir", "other_dir"],
           unless=lambda source, dest, **_: source == "bare_dir" and dest == "same_dir")  # fmt: skip
def test_metadata_carried_over_a_file(place: Place, op: str, source: str, dest: str) -> None:
    """(The 9P-made file a bare directory would replace gives it metadata: no such case.) Trename
    and Trenameat of a file onto a file that has metadata of its own (made through 9P, with another
    mode and owner), in its directory or another: the request succeeds, and the client sees the
    moved file's mode and owner at the name, not the replaced one's; the name's metadata file is the
    moved file's where it had one, else there is none."""
    src, dst, src_fid, fid = to_move(place, "file", source)
    node, p9 = src / "node", place.session
    dst_fid = p9.walk_fid(place.fid, ["dst"]) if dest == "other_dir" else p9.walk_fid(src_fid, [])
    replaced = p9.walk_fid(dst_fid, [])
    p9.lcreate(replaced, "moved", os.O_RDWR, 0o640, gid=4002)
    p9.rpc(Tsetattr(fid=replaced, valid=0x2, uid=4001))
    p9.clunk(replaced)
    seen = p9.getattr(fid)
    stored = metadata(node) if source == "node_with_metadata" else None
    if op == "rename":
        p9.rpc(Trename(fid=fid, dfid=dst_fid, name="moved"))
    else:
        p9.rpc(Trenameat(olddirfid=src_fid, oldname="node", newdirfid=dst_fid, newname="moved"))
    moved = (dst if dest == "other_dir" else src) / "moved"
    assert moved.read_bytes() == b"data" and not os.path.lexists(node)
    again = p9.walk_fid(dst_fid, ["moved"])
    after = p9.getattr(again)
    assert (after.mode, after.uid, after.gid) == (seen.mode, seen.uid, seen.gid), "the replaced file's mode and owner"
    assert (metadata(moved) if (moved.parent / META / "moved").exists() else None) == stored
    for f in (again, dst_fid, fid, src_fid):
        p9.clunk(f)


#: the Tsetattr changes kept in the metadata file: valid, fields
KEPT = {change: SETATTR[change][:2] for change in ("mode", "uid", "gid", "uid_gid")}


@MAPPED_FILE
@pytest.mark.qemu_bug(**MAPPED_FILE_SETATTR_REMOVED, raises=UnexpectedReply)
@case_path("models/mapped-file/setattr_of_removed/{change}/{removed}", backends=["local"], change=list(KEPT),
           removed=["through_9p", "on_host"])  # fmt: skip
def test_setattr_of_a_removed_node(place: Place, change: str, removed: str) -> None:
    """A Tsetattr of a mode or an owner by a fid whose file is gone (unlinked through 9P by another
    fid, or on the host) answers ENOENT, as chmod(2) and chown(2) do, and leaves no metadata for
    the name: the node the name names next (a hard link of another file made through 9P, or a
    file the host makes) shows its own mode and owner."""
    node, other = place.host_path("node"), place.host_path("other")
    node.write_bytes(b"data")
    other.write_bytes(b"other")
    p9 = place.session
    fid = p9.walk_fid(place.fid, ["node"])
    if removed == "through_9p":
        p9.unlinkat(place.fid, "node", 0)
    else:
        node.unlink()
    valid, fields = KEPT[change]
    with expect_rlerror(errno.ENOENT):
        p9.rpc(Tsetattr(fid=fid, valid=valid, **fields))
    assert not (place.host_path(META) / "node").exists()
    if removed == "through_9p":
        other_fid = p9.walk_fid(place.fid, ["other"])
        p9.link(place.fid, other_fid, "node")
        p9.clunk(other_fid)
    else:
        node.write_bytes(b"new")
    again = p9.walk_fid(place.fid, ["node"])
    attr, host = p9.getattr(again), node.lstat()
    assert (attr.mode, attr.uid, attr.gid) == (host.st_mode, host.st_uid, host.st_gid)
    for f in (again, fid):
        p9.clunk(f)


#: the 9P2000.u Twstat owner changes, and a mode (which v9fs_wstat() looks the node up for first)
WSTAT_KEPT = {"n_uid": {"n_uid": 3001}, "n_gid": {"n_gid": 3002}, "n_uid_n_gid": {"n_uid": 3001, "n_gid": 3002},
              "mode": {"mode": 0o604}}  # fmt: skip


@MAPPED_FILE
@pytest.mark.qemu_bug(**MAPPED_FILE_SETATTR_REMOVED, raises=UnexpectedReply,
                      when={"change": ("n_uid", "n_gid", "n_uid_n_gid")})  # fmt: skip
@case_path("models/mapped-file/wstat_of_removed/{change}/{removed}", backends=["local"], dialect=[wire.DOTU],
           change=list(WSTAT_KEPT), removed=["through_9p", "on_host"])  # fmt: skip
def test_wstat_of_a_removed_node(place: Place, dialect: str, change: str, removed: str) -> None:
    """9P2000.u: a Twstat of an owner or a mode by a fid whose file is gone (removed by another
    fid's Tremove, or on the host) answers ENOENT and leaves no metadata for the name."""
    place.host_path("node").write_bytes(b"data")
    p9 = place.session
    fid = p9.walk_fid(place.fid, ["node"])
    if removed == "through_9p":
        p9.rpc(Tremove(fid=p9.walk_fid(place.fid, ["node"])))
    else:
        place.host_path("node").unlink()
    with expect_rlerror(errno.ENOENT):
        p9.rpc(twstat(fid, **WSTAT_KEPT[change]))
    assert not (place.host_path(META) / "node").exists()
    p9.clunk(fid)


#: how a node comes to have two names: (who made it, who linked it)
LINKS = {
    "host_node_host_link": ("host", "host"), "host_node_9p_link": ("host", "9p"),
    "9p_node_9p_link": ("9p", "9p"), "9p_node_host_link": ("9p", "host"),
}  # fmt: skip


@MAPPED_FILE
@pytest.mark.qemu_bug(**MAPPED_FILE_HARD_LINKS, raises=FieldNotAsWanted,
                      when={"links": ("host_node_host_link", "host_node_9p_link", "9p_node_host_link")})  # fmt: skip
@case_path("models/mapped-file/hard_link/{links}/{change}/through_{through}", backends=["local"], links=list(LINKS),
           change=list(KEPT), through=["first", "link"])  # fmt: skip
def test_hard_links_show_one_mode_and_owner(place: Place, links: str, change: str, through: str) -> None:
    """Two names of one node (a hard link, made through 9P or on the host, of a node made either
    way) show the same mode and owner, and a Tsetattr of a mode or owner through either shows
    through the other, as the inode's mode and owner do under chmod(2) and chown(2)."""
    made, linked = LINKS[links]
    p9 = place.session
    if made == "host":
        place.host_path("node").write_bytes(b"data")
        first = p9.walk_fid(place.fid, ["node"])
    else:
        first = create(p9, place, "file")
    if linked == "host":
        os.link(place.host_path("node"), place.host_path("alias"))
    else:
        p9.link(place.fid, first, "alias")
    alias = p9.walk_fid(place.fid, ["alias"])
    names = {"first": first, "link": alias}
    one, other = names[through], names["link" if through == "first" else "first"]
    before = p9.getattr(one)
    for field in ("mode", "uid", "gid"):  # one node: the same through either name
        expect_field(p9.getattr(other), field, getattr(before, field))
    valid, fields = KEPT[change]
    p9.rpc(Tsetattr(fid=one, valid=valid, **fields))
    after = p9.getattr(one)
    assert all(getattr(after, name) == value for name, value in fields.items())  # through the name it was set by
    for field in ("mode", "uid", "gid"):
        expect_field(p9.getattr(other), field, getattr(after, field))
    for f in (alias, first):
        p9.clunk(f)


@MAPPED_FILE
@case_path("models/mapped-file/unlink/{kind}", backends=["local"], kind=["file", "dir"])
def test_unlink_drops_the_metadata(place: Place, kind: str) -> None:
    """Tunlinkat removes the node and its metadata file; a directory's own ``.virtfs_metadata``
    (made for its children) does not keep it from being removed once they are gone."""
    p9 = place.session
    fid = create(p9, place, kind)
    if kind == "dir":
        p9.mkdir(fid, "child", 0o700)
        with expect_rlerror(39):  # ENOTEMPTY while the child is there
            p9.unlinkat(place.fid, "node", wire.AT_REMOVEDIR)
        p9.unlinkat(fid, "child", wire.AT_REMOVEDIR)
    p9.clunk(fid)
    p9.unlinkat(place.fid, "node", wire.AT_REMOVEDIR if kind == "dir" else 0)
    assert not os.path.lexists(place.host_path("node"))
    assert not (place.host_path(META) / "node").exists()


@MAPPED_FILE
@case_path("models/mapped-file/xattr", backends=["local"])
def test_user_xattrs_are_the_hosts(place: Place) -> None:
    """Under mapped-file a user.* xattr is stored on the host file as it is (no user.virtfs.*
    mapping), and read back through Txattrwalk."""
    p9 = place.session
    fid = create(p9, place, "file")
    xfid = p9.walk_fid(fid, [])
    p9.rpc(Txattrcreate(fid=xfid, name="user.note", attr_size=5, flags=0))
    p9.write(xfid, 0, b"hello")
    p9.clunk(xfid)
    assert os.getxattr(place.host_path("node"), "user.note") == b"hello"
    assert not [n for n in os.listxattr(place.host_path("node")) if n.startswith("user.virtfs")]
    p9.clunk(fid)


@MAPPED_FILE
@case_path("models/mapped-file/link", backends=["local"])
def test_hard_link_gets_the_metadata(place: Place) -> None:
    """Tlink under mapped-file: the new name is the same host inode, and it has metadata of its own
    equal to the file's, so the client sees the same owner and mode through both names."""
    p9 = place.session
    fid = create(p9, place, "file")
    p9.rpc(Tsetattr(fid=fid, valid=0x3, mode=stat.S_IFREG | 0o604, uid=3001))
    p9.link(place.fid, fid, "alias")
    assert place.host_path("alias").stat().st_ino == place.host_path("node").stat().st_ino
    assert metadata(place.host_path("alias")) == metadata(place.host_path("node"))
    alias = p9.walk_fid(place.fid, ["alias"])
    attr = p9.getattr(alias)
    assert (attr.mode, attr.uid, attr.nlink) == (stat.S_IFREG | 0o604, 3001, 2)
    for f in (alias, fid):
        p9.clunk(f)


@pytest.mark.fresh_qemu  # the export root's metadata is the export's, not the case's directory's
@MAPPED_FILE
@case_path("models/mapped-file/export_root", backends=["local"])
def test_export_root_metadata(place: Place, local_export: Path) -> None:
    """The export root has no parent to keep its metadata in: QEMU uses
    ``.virtfs_metadata_root`` beside it. Tsetattr of the root's mode and owner writes it (read
    back by Tgetattr); the root directory on the host keeps its own mode."""
    p9 = place.session
    root_file = local_export / ".virtfs_metadata_root"
    host_mode = stat.S_IMODE(local_export.stat().st_mode)
    try:
        p9.rpc(Tsetattr(fid=0, valid=0x3, mode=stat.S_IFDIR | 0o751, uid=3001))
        stored = dict(line.split("=") for line in root_file.read_text().splitlines())
        assert (int(stored["virtfs.mode"]), int(stored["virtfs.uid"])) == (stat.S_IFDIR | 0o751, 3001)
        attr = p9.getattr(0)
        assert (attr.mode, attr.uid) == (stat.S_IFDIR | 0o751, 3001)
        assert stat.S_IMODE(local_export.stat().st_mode) == host_mode
    finally:
        root_file.unlink(missing_ok=True)
