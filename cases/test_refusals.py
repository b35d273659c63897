"""Requests the server must refuse, one row each: a fid it does not hold, a fid in the wrong state,
a newfid already in use, names and flags the protocol rules out, a node that already exists. Each
row asserts the exact errno and that the refusal changed nothing: no fid made (the newfid is still
free), no node made or removed on the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.case_path import case_path
from fixtures.expect import UnexpectedReply
from fixtures.mirror import Mirror
from fixtures.refusal import Refusal, refused
from fixtures.subjects import FREE, UNKNOWN
from harness.p9 import wire
from harness.p9.messages import (
    Tattach,
    Tcreate,
    Tgetlock,
    Tlock,
    Tlopen,
    Topen,
    Treaddir,
    Tunlinkat,
    Twalk,
    Txattrwalk,
    twstat,
)
from harness.qemu import versions

#: 9P2000.L: name -> the request (its errno: the model's)
REFUSED_DOTL: dict[str, Refusal] = {
    "walk/unknown_fid": Refusal(lambda t: Twalk(fid=UNKNOWN, newfid=FREE, wnames=["f"])),
    "walk/newfid_in_use": Refusal(lambda t: Twalk(fid=t.dir, newfid=0, wnames=["f"])),
    "walk/open_fid_onto_itself": Refusal(lambda t: Twalk(fid=t.open_file_rw, newfid=t.open_file_rw, wnames=[])),
    "attach/fid_in_use": Refusal(lambda t: Tattach(fid=t.dir, afid=wire.NOFID, uname="", aname="", n_uname=0)),
    "lopen/unknown_fid": Refusal(lambda t: Tlopen(fid=UNKNOWN, flags=0)),
    "lopen/twice": Refusal(lambda t: Tlopen(fid=t.open_file_rw, flags=0)),
    "readdir/unknown_fid": Refusal(lambda t: Treaddir(fid=UNKNOWN, offset=0, count=1000)),
    "readdir/not_opened": Refusal(lambda t: Treaddir(fid=t.dir, offset=0, count=1000)),
    "xattrwalk/unknown_fid": Refusal(lambda t: Txattrwalk(fid=UNKNOWN, newfid=FREE, name="")),
    "xattrwalk/newfid_in_use": Refusal(lambda t: Txattrwalk(fid=t.dir, newfid=0, name="")),
    "xattrwalk/no_such_name": Refusal(lambda t: Txattrwalk(fid=t.dir, newfid=FREE, name="user.none")),
    "unlinkat/unknown_dirfid": Refusal(lambda t: Tunlinkat(dirfd=UNKNOWN, name="f", flags=0)),
    "unlinkat/dot": Refusal(lambda t: Tunlinkat(dirfd=t.dir, name=".", flags=0)),
    "unlinkat/dotdot": Refusal(lambda t: Tunlinkat(dirfd=t.dir, name="..", flags=0)),
    "unlinkat/unknown_flags": Refusal(lambda t: Tunlinkat(dirfd=t.dir, name="f", flags=0x1)),
    "unlinkat/missing": Refusal(lambda t: Tunlinkat(dirfd=t.dir, name="missing", flags=0)),
    "lock/unknown_fid": Refusal(
        lambda t: Tlock(fid=UNKNOWN, type=1, flags=0, start=0, length=0, proc_id=1, client_id="c")
    ),
    "lock/unknown_flags": Refusal(
        lambda t: Tlock(fid=t.open_file_rw, type=1, flags=0x4, start=0, length=0, proc_id=1, client_id="c")
    ),
    "getlock/unknown_fid": Refusal(
        lambda t: Tgetlock(fid=UNKNOWN, type=1, start=0, length=0, proc_id=1, client_id="c")
    ),
}
#: 9P2000.u's own
REFUSED_DOTU: dict[str, Refusal] = {
    "create/unknown_fid": Refusal(lambda t: Tcreate(fid=UNKNOWN, name="n", perm=0o644, mode=0, extension="")),
    "create/open_fid": Refusal(lambda t: Tcreate(fid=t.open_file_u, name="n", perm=0o644, mode=0, extension="")),
    "create/dir_exists": Refusal(
        lambda t: Tcreate(fid=t.dir_clone, name="d", perm=wire.DMDIR | 0o755, mode=0, extension="")
    ),
    "create/symlink_exists": Refusal(
        lambda t: Tcreate(fid=t.dir_clone, name="f", perm=wire.DMSYMLINK | 0o777, mode=0, extension="t")
    ),
    "create/device_exists": Refusal(
        lambda t: Tcreate(fid=t.dir_clone, name="f", perm=wire.DMDEVICE | 0o600, mode=0, extension="c 1 3")
    ),
    "create/fifo_exists": Refusal(
        lambda t: Tcreate(fid=t.dir_clone, name="f", perm=wire.DMNAMEDPIPE | 0o600, mode=0, extension="")
    ),
    "create/file_exists_excl": Refusal(
        lambda t: Tcreate(fid=t.dir_clone, name="f", perm=0o644, mode=wire.ORDWR | wire.OEXCL, extension="")
    ),
    "create/link_to_unknown_fid": Refusal(
        lambda t: Tcreate(fid=t.dir_clone, name="n", perm=wire.DMLINK, mode=0, extension=str(UNKNOWN))
    ),
    "create/name_with_slash": Refusal(lambda t: Tcreate(fid=t.dir_clone, name="a/b", perm=0o644, mode=0, extension="")),
    "readdir/in_dotu": Refusal(lambda t: Treaddir(fid=t.open_dir_u, offset=0, count=1000)),
    "open/unknown_fid": Refusal(lambda t: Topen(fid=UNKNOWN, mode=0)),
    "wstat/unknown_fid": Refusal(lambda t: twstat(UNKNOWN, mode=0o600)),
    "wstat/rename_onto_a_directory": Refusal(lambda t: twstat(t.file_clone, name="d")),
}


def populate(host: Path) -> None:
    (host / "f").write_bytes(b"content")
    (host / "d").mkdir()


@pytest.mark.qemu_bug(
    fixed_in=versions.READDIR_DIR_FID,
    when={"message": "readdir/not_opened"},
    reason="v9fs_readdir() checks only that the fid has a directory stream, not that it was opened as a "
    "directory: EINVAL (on a fid opened as a file, the same missing check crashes QEMU: readdir/on_file_fid)",
    raises=UnexpectedReply,
)
@case_path("refused/{message}", backends=["local"], dialect=[wire.DOTL], message=list(REFUSED_DOTL))
def test_refused_request(mirror: Mirror, dialect: str, message: str) -> None:
    """9P2000.L: each refusal with its errno, and nothing changed."""
    refused(mirror, REFUSED_DOTL[message], populate)


@case_path("refused/dotu/{message}", backends=["local"], dialect=[wire.DOTU], message=list(REFUSED_DOTU))
def test_refused_dotu_request(mirror: Mirror, dialect: str, message: str) -> None:
    """9P2000.u's own: each refusal with its errno, and nothing changed."""
    refused(mirror, REFUSED_DOTU[message], populate)
