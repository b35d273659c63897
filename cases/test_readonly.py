"""``readonly=on`` exports: every request that would change the tree is refused with EROFS before
its handler runs (pdu_submit's is_read_only_op()), an open for writing, appending or truncating
too (v9fs_open), in both dialects; nothing on the host changes; and every reading request still
works."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from fixtures.case_path import case_path
from fixtures.expect import UnexpectedReply, expect_rlerror
from fixtures.mirror import Mirror
from fixtures.model import Server
from fixtures.place import Place
from fixtures.refusal import Refusal, refused
from fixtures.subjects import Targets
from harness.p9 import wire
from harness.p9.messages import (
    Tclunk,
    Tcreate,
    Tfsync,
    Tgetattr,
    Tgetlock,
    Tlcreate,
    Tlink,
    Tlock,
    Tlopen,
    Tmkdir,
    Tmknod,
    Topen,
    Tread,
    Treaddir,
    Treadlink,
    Tremove,
    Trename,
    Trenameat,
    Tsetattr,
    Tstat,
    Tstatfs,
    Tsymlink,
    Tunlinkat,
    Twalk,
    Twrite,
    Txattrcreate,
    Txattrwalk,
    twstat,
)
from harness.p9.session import Session
from harness.qemu import versions

READONLY = pytest.mark.fsdev(readonly="on", security_model="passthrough")
CONTENT = b"read-only content"


def populate(host: Path) -> None:
    (host / "f").write_bytes(CONTENT)
    os.setxattr(host / "f", "user.kept", b"value")
    (host / "d").mkdir()
    (host / "d" / "inner").write_bytes(b"inner")
    (host / "l").symlink_to("f")


#: 9P2000.L requests that change the tree, each aimed at the export's files.
DOTL_REFUSED: dict[str, Refusal] = {
    "Tlcreate": Refusal(lambda t: Tlcreate(fid=t.dir_clone, name="new", flags=os.O_RDWR, mode=0o644, gid=0)),
    "Tsymlink": Refusal(lambda t: Tsymlink(fid=t.dir, name="new", symtgt="f", gid=0)),
    "Tmknod": Refusal(lambda t: Tmknod(dfid=t.dir, name="new", mode=stat.S_IFREG | 0o600, major=0, minor=0, gid=0)),
    "Tmkdir": Refusal(lambda t: Tmkdir(dfid=t.dir, name="new", mode=0o755, gid=0)),
    "Tlink": Refusal(lambda t: Tlink(dfid=t.dir, fid=t.file, name="new")),
    "Trename": Refusal(lambda t: Trename(fid=t.file, dfid=t.dir, name="new")),
    "Trenameat": Refusal(lambda t: Trenameat(olddirfid=t.dir, oldname="f", newdirfid=t.dir, newname="new")),
    "Tunlinkat": Refusal(lambda t: Tunlinkat(dirfd=t.dir, name="f", flags=0)),
    "Tunlinkat_dir": Refusal(lambda t: Tunlinkat(dirfd=t.dir, name="d", flags=wire.AT_REMOVEDIR)),
    "Tsetattr_mode": Refusal(lambda t: Tsetattr(fid=t.file, valid=0x1, mode=0o600)),
    "Tsetattr_owner": Refusal(lambda t: Tsetattr(fid=t.file, valid=0x2 | 0x4, uid=1, gid=1)),
    "Tsetattr_size": Refusal(lambda t: Tsetattr(fid=t.file, valid=0x8, size=0)),
    "Tsetattr_times": Refusal(lambda t: Tsetattr(fid=t.file, valid=0x10 | 0x20, atime_sec=1, mtime_sec=1)),
    "Txattrcreate": Refusal(lambda t: Txattrcreate(fid=t.file_clone, name="user.new", attr_size=1, flags=0)),
    "Txattrcreate_remove": Refusal(lambda t: Txattrcreate(fid=t.file_clone, name="user.kept", attr_size=0, flags=0)),
    "Twrite": Refusal(lambda t: Twrite(fid=t.open_file, offset=0, data=b"X")),
    "Tlopen_O_WRONLY": Refusal(lambda t: Tlopen(fid=t.file_clone, flags=os.O_WRONLY)),
    "Tlopen_O_RDWR": Refusal(lambda t: Tlopen(fid=t.file_clone, flags=os.O_RDWR)),
    "Tlopen_O_APPEND": Refusal(lambda t: Tlopen(fid=t.file_clone, flags=os.O_RDONLY | os.O_APPEND)),
    "Tlopen_O_TRUNC": Refusal(lambda t: Tlopen(fid=t.file_clone, flags=os.O_RDONLY | os.O_TRUNC)),
}
#: 9P2000.u's own: Tcreate, Twstat, and Topen for writing or truncating (the mode byte).
DOTU_REFUSED: dict[str, Refusal] = {
    "Tcreate": Refusal(lambda t: Tcreate(fid=t.dir_clone, name="new", perm=0o644, mode=wire.ORDWR, extension="")),
    "Tcreate_dir": Refusal(
        lambda t: Tcreate(fid=t.dir_clone, name="new", perm=wire.DMDIR | 0o755, mode=0, extension="")
    ),
    "Twstat_mode": Refusal(lambda t: twstat(t.file, mode=0o600)),
    "Twstat_name": Refusal(lambda t: twstat(t.file, name="new")),
    "Twstat_length": Refusal(lambda t: twstat(t.file, length=0)),
    "Topen_OWRITE": Refusal(lambda t: Topen(fid=t.file_clone, mode=wire.OWRITE)),
    "Topen_ORDWR": Refusal(lambda t: Topen(fid=t.file_clone, mode=wire.ORDWR)),
    "Topen_OREAD_OTRUNC": Refusal(lambda t: Topen(fid=t.file_clone, mode=wire.OREAD | wire.OTRUNC)),
    "Topen_OREAD_OAPPEND": Refusal(lambda t: Topen(fid=t.file_clone, mode=wire.OREAD | wire.OAPPEND)),
    "Twrite": Refusal(lambda t: Twrite(fid=t.open_file, offset=0, data=b"X")),
    "Tremove": Refusal(lambda t: Tremove(fid=t.file_clone)),
}


@READONLY
@case_path("readonly/refused/{dialect}/{message}", backends=["local"], dialect=[wire.DOTL],
           message=list(DOTL_REFUSED))  # fmt: skip
def test_modifying_request_is_refused(mirror: Mirror, dialect: str, message: str) -> None:
    """EROFS, and the export exactly as it was: no node made, moved, removed, resized, chmodded,
    chowned, retimed or written, no xattr set or removed."""
    refused(mirror, DOTL_REFUSED[message], populate)


TRUNC_BYPASS = (
    "v9fs_open() checks a read-only export's write flags against Topen's raw mode byte instead of "
    "the converted open flags: OTRUNC (0x10) and OAPPEND (0x80) are not O_TRUNC/O_APPEND, so a "
    "9P2000.u client truncates a file on a read-only export"
)


@pytest.mark.qemu_bug(fixed_in=versions.READONLY_DOTU_OPEN, reason=TRUNC_BYPASS, when={"message": "Topen_OREAD_OTRUNC"})
@pytest.mark.qemu_bug(
    fixed_in=versions.READONLY_DOTU_OPEN, reason=TRUNC_BYPASS, when={"message": "Topen_OREAD_OAPPEND"}
)
@READONLY
@case_path("readonly/refused/{dialect}/{message}", backends=["local"], dialect=[wire.DOTU],
           message=list(DOTU_REFUSED))  # fmt: skip
def test_modifying_dotu_request_is_refused(mirror: Mirror, dialect: str, message: str) -> None:
    """The same for 9P2000.u's requests, Topen's mode byte included (OTRUNC alone, with OREAD,
    is a write)."""
    refused(mirror, DOTU_REFUSED[message], populate)


@pytest.mark.qemu_bug(
    fixed_in=(),
    reason="pdu_submit() answers Tremove on a read-only export with EROFS without running "
    "v9fs_remove(), so the fid stays: remove(5) clunks the fid even when the remove fails, and a "
    "client (Linux) that relies on it leaks one fid per refused remove",
    upstream="readonly-remove-clunk",
)
@READONLY
@case_path("readonly/remove_clunks_fid", backends=["local"])
def test_refused_remove_still_clunks(place: Place) -> None:
    """Tremove refused with EROFS; the file stays, and the fid is clunked all the same."""
    p9 = place.session
    populate(place.host_path())
    fid = p9.walk_fid(place.fid, ["f"])
    with expect_rlerror(errno.EROFS):
        p9.rpc(Tremove(fid=fid))
    assert place.host_path("f").read_bytes() == CONTENT
    try:
        with expect_rlerror(errno.ENOENT):  # the fid is gone, as QEMU answers an unknown one
            p9.send(Tgetattr(fid=fid, request_mask=wire.GETATTR_BASIC)).result()
    except UnexpectedReply:
        p9.send(Tclunk(fid=fid)).wait()  # QEMU still holds it: let it go
        raise


#: Reading requests, each with what its reply must show.
def _read_file(p9: Session, f: Targets) -> None:
    assert p9.rpc(Tread(fid=f.open_file, offset=0, count=100)).data == CONTENT


def _readdir(p9: Session, f: Targets) -> None:
    p9.lopen(f.dir_clone, os.O_RDONLY | os.O_DIRECTORY)
    names = sorted(e.name for e in p9.rpc(Treaddir(fid=f.dir_clone, offset=0, count=4000)).entries)
    assert names == [".", "..", "d", "f", "l"]


def _walk_getattr(p9: Session, f: Targets) -> None:
    newfid = p9.new_fid()
    (qid,) = p9.rpc(Twalk(fid=f.dir, newfid=newfid, wnames=["d"])).qids
    assert qid.type == wire.QTDIR and p9.rpc(Tgetattr(fid=newfid, request_mask=wire.GETATTR_ALL)).qid == qid


def _readlink(p9: Session, f: Targets) -> None:
    link = p9.walk_fid(f.dir, ["l"])
    assert p9.rpc(Treadlink(fid=link)).target == "f"


def _statfs(p9: Session, f: Targets) -> None:
    assert p9.rpc(Tstatfs(fid=f.dir)).bsize > 0


def _xattr_get(p9: Session, f: Targets) -> None:
    xfid = p9.new_fid()
    assert p9.rpc(Txattrwalk(fid=f.file, newfid=xfid, name="user.kept")).size == 5
    assert p9.rpc(Tread(fid=xfid, offset=0, count=5)).data == b"value"


def _fsync(p9: Session, f: Targets) -> None:
    p9.rpc(Tfsync(fid=f.open_file))


def _lock(p9: Session, f: Targets) -> None:
    assert p9.rpc(Tlock(fid=f.open_file, type=0, flags=0, start=0, length=0, proc_id=1, client_id="c")).status == 0
    got = p9.rpc(Tgetlock(fid=f.open_file, type=0, start=0, length=0, proc_id=1, client_id="c"))
    assert got.type == 2  # F_UNLCK: nobody else holds it


def _stat_u(p9: Session, f: Targets) -> None:
    record = p9.rpc(Tstat(fid=f.file)).stat
    assert (record.name, record.length) == ("f", len(CONTENT))


def _open_read_u(p9: Session, f: Targets) -> None:
    p9.rpc(Topen(fid=f.file_clone, mode=wire.OREAD))
    assert p9.rpc(Tread(fid=f.file_clone, offset=0, count=100)).data == CONTENT


def _read_dir_u(p9: Session, f: Targets) -> None:
    p9.rpc(Topen(fid=f.dir_clone, mode=wire.OREAD))
    names = sorted(s.name for s in wire.parse_stats(p9.rpc(Tread(fid=f.dir_clone, offset=0, count=4000)).data))
    assert names == [".", "..", "d", "f", "l"]


ALLOWED: dict[str, tuple[str, Callable[[Session, Targets], None]]] = {
    "Tread": (wire.DOTL, _read_file),
    "Treaddir": (wire.DOTL, _readdir),
    "Twalk_Tgetattr": (wire.DOTL, _walk_getattr),
    "Treadlink": (wire.DOTL, _readlink),
    "Tstatfs": (wire.DOTL, _statfs),
    "Txattrwalk": (wire.DOTL, _xattr_get),
    "Tfsync": (wire.DOTL, _fsync),
    "Tlock_Tgetlock": (wire.DOTL, _lock),
    "Tstat": (wire.DOTU, _stat_u),
    "Topen_OREAD": (wire.DOTU, _open_read_u),
    "Tread_dir": (wire.DOTU, _read_dir_u),
}


@READONLY
@case_path("readonly/allowed/{message}", backends=["local"], message=list(ALLOWED))
def test_reading_request_still_works(
    message: str, backend: str, p9: Session, local_export: Path, server: Server
) -> None:
    """Reads, listings, walks, attributes, link targets, statfs, xattr reads, fsync and locks work
    on a read-only export (9P2000.u's Tstat, Topen for reading, directory Tread too), and change
    nothing."""
    dialect, check = ALLOWED[message]
    assert p9.version(8192, dialect).version == dialect
    p9.attach(0)
    place = Place.open(p9, "local", local_export, f"readonly-allowed-{message}")
    populate(place.host_path())
    before = place.host_state()
    mirror = Mirror.at(p9, server, place.fid, place.host)
    check(p9, Targets(mirror, place.fid))
    assert place.host_state() == before
    for fid in set(p9.fids) - {0}:
        p9.clunk(fid)
    p9.clunk(0)
    place.close(passed=True)
