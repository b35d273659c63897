"""Treaddir: "reads directory entries ... offset is ... the offset field of the last entry of the
previous Rreaddir"; "count ... the maximum number of bytes returned"; the end of the directory is
an Rreaddir with count 0 (diod protocol.md). QEMU packs entries "until the next entry would not
fit" and clamps a count above msize - 11 (hw/9pfs/9p.c v9fs_readdir)."""

from __future__ import annotations

import errno
import itertools
import os
from pathlib import Path

import pytest

from fixtures.case_path import case_path
from fixtures.deviations import READDIR_BY_PATH_REASON
from fixtures.expect import expect_rlerror
from fixtures.model import SECURITY_MODELS
from fixtures.place import Place
from fixtures.pool import Device
from harness.errors import P9Rlerror, QEMUExited
from harness.p9 import wire
from harness.p9.messages import Rreaddir, Tclunk, Twalk, Txattrcreate
from harness.p9.session import Session
from harness.p9.wire import Dirent
from harness.qemu import versions
from synth_tree import READDIR_DIR, Node, readdir_dir

#: the fids readdir/ lists no directory through: a file's, and an xattr fid's that was written to
NOT_DIRECTORY_FIDS = ("on_file_fid", "on_written_xattr_fid")
#: Walks in flight at once when checking a listing's qids (two descriptors each: 64 ring slots).
WALKS_IN_FLIGHT = 32
DT_UNKNOWN, DT_DIR, DT_REG = 0, 4, 8
CLAMP_WARNING = "9p: bad client: T_readdir with count > msize - 11"

#: The longest entry of ReadDirDir: "ReadDirFile99" (13 bytes) plus the fixed 24.
LARGEST = wire.READDIRHDRSZ + len("ReadDirFile99")
SPLIT_COUNTS = [
    512,
    256,
    128,
    LARGEST,  # the smallest count that always fits one entry
    2 * LARGEST,  # ends exactly on an entry boundary (two ReadDirFileNN entries)
    2 * LARGEST - 1,  # one byte short of it
    3 * LARGEST,
    8192 - wire.RREADDIR_HEADER,  # msize - 11: everything at once
]


def size_of(entry: Dirent) -> int:
    return wire.READDIRHDRSZ + len(entry.name.encode("utf-8", "surrogateescape"))


def open_dir(place: Place, node: Node) -> int:
    p9 = place.session
    fid = p9.new_fid()
    (qid,) = p9.walk(place.provide(node), [node.name], fid).qids
    assert qid.type == wire.QTDIR
    p9.lopen(fid, os.O_DIRECTORY)
    return fid


def check_listing(place: Place, node: Node, replies: list[Rreaddir]) -> list[Dirent]:
    """Every name exactly once, nothing extra, the end marked by an empty reply; on synth the
    exact order QEMU's synth backend lists in."""
    assert replies[-1].entries == [], "the listing did not end with an Rreaddir of count 0"
    assert all(reply.entries for reply in replies[:-1]), "an empty Rreaddir before the end"
    entries = [entry for reply in replies for entry in reply.entries]
    names = [entry.name for entry in entries]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    assert not duplicates, f"listed more than once: {duplicates}"
    assert set(names) == node.names(), f"missing {node.names() - set(names)}, extra {set(names) - node.names()}"
    if place.backend == "synth":
        assert names == node.listing()
    return entries


@pytest.mark.needs_synth_tree
@case_path("readdir/basic")
def test_readdir_basic(place: Place) -> None:
    """One Treaddir with count msize - 11 returns the whole of ReadDirDir (102 entries with '.' and
    '..'); the next one, at the last offset, returns count 0. Each entry's qid.path is what a walk
    to that name finds, and a known d_type agrees with the walked qid type (the walks go 32 at a
    time, as a guest's parallel lookups would)."""
    p9 = place.session
    fid = open_dir(place, READDIR_DIR)
    first = p9.readdir(fid, 0, p9.msize - wire.RREADDIR_HEADER)
    assert len(first.entries) == len(READDIR_DIR.children) + 2
    replies = [first, p9.readdir(fid, first.entries[-1].offset, p9.msize - wire.RREADDIR_HEADER)]
    entries = check_listing(place, READDIR_DIR, replies)
    dir_fid = p9.walk_fid(place.fid, [READDIR_DIR.name])
    named = [entry for entry in entries if entry.name not in (".", "..")]
    for at in range(0, len(named), WALKS_IN_FLIGHT):
        chunk = named[at : at + WALKS_IN_FLIGHT]
        fids = [p9.new_fid() for _ in chunk]
        with p9.batch():
            walks = [p9.send(Twalk(fid=dir_fid, newfid=f, wnames=[e.name])) for f, e in zip(fids, chunk, strict=True)]
        walked = [pending.result() for pending in walks]
        with p9.batch():
            clunks = [p9.send(Tclunk(fid=f)) for f in fids]
        for pending in clunks:
            pending.result()
        for entry, reply in zip(chunk, walked, strict=True):
            (qid,) = reply.qids
            assert entry.qid.path == qid.path, entry.name
            if entry.type != DT_UNKNOWN:
                assert (entry.type == DT_DIR) == bool(qid.type & wire.QTDIR), entry
    p9.clunk(dir_fid)
    p9.clunk(fid)


@pytest.mark.needs_synth_tree
@case_path("readdir/offsets")
def test_readdir_offsets_continue(place: Place) -> None:
    """Each entry's offset, passed back as Treaddir's offset, continues right after that entry."""
    p9 = place.session
    fid = open_dir(place, READDIR_DIR)
    entries = p9.readdir(fid, 0).entries
    for here, following in itertools.pairwise(entries):
        (got, *_) = p9.readdir(fid, here.offset, LARGEST).entries
        assert got.name == following.name, f"offset {here.offset} of {here.name!r}"
    assert p9.readdir(fid, entries[-1].offset).entries == []
    p9.clunk(fid)


@pytest.mark.needs_synth_tree
@case_path("readdir/split_{count}", count=SPLIT_COUNTS)
def test_readdir_split(place: Place, count: int) -> None:
    """Read with a small count, each next Treaddir at the last entry's offset: the same listing as
    in one go; no reply above count; and each reply is full: the entry that starts the next reply
    would not have fitted."""
    p9 = place.session
    fid = open_dir(place, READDIR_DIR)
    replies = p9.readdir_all(fid, count)
    check_listing(place, READDIR_DIR, replies)
    for reply, following in itertools.pairwise(replies):
        used = sum(size_of(entry) for entry in reply.entries)
        assert used <= count, f"{used} bytes of entries for count {count}"
        if following.entries:
            nxt = following.entries[0]
            assert used + size_of(nxt) > count, f"room for {nxt.name!r} was left unused"
    p9.clunk(fid)


@pytest.mark.needs_synth_tree
@pytest.mark.fresh_qemu  # QEMU warns once per process
@case_path("readdir/count_clamp")
def test_readdir_count_clamp(
    p9: Session, device: Device, backend: str, local_export: Path, request: pytest.FixtureRequest
) -> None:
    """A count above msize - 11 is served as msize - 11 (never a reply bigger than the buffer), and
    QEMU's stderr says "bad client" once. On local the directory is big enough for it to bite."""
    p9.version(4096)
    p9.attach(0)
    place = Place.open(p9, backend, local_export, request.node.name)
    node = readdir_dir(300) if backend == "local" else READDIR_DIR
    fid = open_dir(place, node)
    limit = p9.msize - wire.RREADDIR_HEADER
    mark = device.machine.output_mark()
    first = p9.readdir(fid, 0, 0xFFFFFFFF).entries
    second = p9.readdir(fid, 0, 0xFFFFFFFF).entries
    used = sum(size_of(entry) for entry in first)
    assert used <= limit
    assert first == second
    if backend == "local":
        following = p9.readdir(fid, first[-1].offset, limit).entries[0]
        assert used + size_of(following) > limit, "the clamped reply was not filled to msize - 11"
    assert device.machine.output_since(mark).count(CLAMP_WARNING) == 1
    p9.clunk(fid)
    place.close(passed=True)
    p9.clunk(0)


@pytest.mark.qemu_bug(
    fixed_in=versions.READDIR_DIR_FID,
    reason="v9fs_readdir() checks only that the fid's open state has a directory stream, a union with a file's "
    "descriptor and an xattr fid's count of bytes written: that number is taken for a DIR*, and QEMU dies of "
    "SIGSEGV in rewinddir()",
    raises=QEMUExited,
    when={"fid": NOT_DIRECTORY_FIDS},  # (each of them: named on the known-bugs page, not "readdir/*")
)
@pytest.mark.fresh_qemu  # QEMU warns once per process
@case_path("readdir/{fid}", backends=["local"], fid=list(NOT_DIRECTORY_FIDS))
def test_readdir_on_a_file(place: Place, device: Device, fid: str) -> None:
    """Treaddir on a fid opened as a file, or on an xattr fid written to (Txattrcreate, Twrite), is
    an error (ENOTDIR), never a crash (QEMU crashed here before 9.2.0 and the backports 7.2.15,
    8.2.8, 9.0.4, 9.1.2), with QEMU's "bad client" warning; the file still reads, and the xattr
    fid's clunk still sets what was written."""
    p9 = place.session
    place.host_path("f").write_bytes(b"data")
    subject = p9.walk_fid(place.fid, ["f"])
    if fid == "on_file_fid":
        p9.lopen(subject, os.O_RDONLY)
    else:  # 2 bytes: the xattr's length shares its place with a directory's protocol version, and 2 is
        # 9P2000.L's, so that a QEMU without the check takes the lock it made and rewinddir()s "DIR* 2"
        p9.rpc(Txattrcreate(fid=subject, name="user.t", attr_size=2, flags=0))
        p9.write(subject, 0, b"ok")
    mark = device.machine.output_mark()
    with expect_rlerror(errno.ENOTDIR):
        p9.readdir(subject)
    assert "T_readdir on non-directory stream" in device.machine.output_since(mark)
    if fid == "on_file_fid":
        assert p9.read(subject, 0, 10).data == b"data"
    p9.clunk(subject)
    if fid == "on_written_xattr_fid":
        assert os.getxattr(place.host_path("f"), "user.t") == b"ok"


@pytest.mark.qemu_bug(fixed_in=(), when={"multidevs": "remap"}, reason=READDIR_BY_PATH_REASON, raises=P9Rlerror,
                      upstream="listing-remap-cost")  # fmt: skip
@case_path("readdir/after_host_swap/{security_model}/{multidevs}", backends=["local"],
           security_model=list(SECURITY_MODELS), multidevs=["warn", "remap"])  # fmt: skip
def test_readdir_after_host_swap(place: Place, security_model: str, multidevs: str) -> None:
    """A directory the client opened lists its own entries after the host gives its name to another
    directory (a release or deploy swap: the old one renamed aside, a new one in its place), as
    getdents(2) on a directory descriptor does: '.', '..', and the files it held, each once."""
    p9 = place.session
    old = place.host_path("d")
    old.mkdir()
    for name in ("a", "b"):
        (old / name).write_bytes(name.encode())
    fid = p9.walk_fid(place.fid, ["d"])
    p9.lopen(fid, os.O_RDONLY | os.O_DIRECTORY)
    place.host_edited()
    old.rename(place.host_path("d.old"))
    place.host_path("d").mkdir()
    place.host_path("d", "c").write_bytes(b"c")
    names = [entry.name for reply in p9.readdir_all(fid, p9.msize - wire.RREADDIR_HEADER) for entry in reply.entries]
    assert sorted(names) == [".", "..", "a", "b"], names
    p9.clunk(fid)
