"""Requests the server must refuse, one row each: a fid it does not hold, a fid in the wrong state,
a newfid already in use, names and flags the protocol rules out, a node that already exists. Each
row asserts the exact errno and that the refusal changed nothing: no fid made (the newfid is still
free), no node made or removed on the host."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from fixtures.place import Place
from harness.p9 import wire
from harness.p9.messages import (
    Rwalk,
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
from harness.p9.session import Session
from harness.p9.wire import TMessage

UNKNOWN = 4242  # a fid no case makes
FREE = 4343  # a newfid no case makes: still free after every refusal


def opened_file(p9: Session, place: Place) -> int:
    fid = p9.walk_fid(place.fid, ["f"])
    p9.lopen(fid, os.O_RDWR)
    return fid


def opened_file_u(p9: Session, place: Place) -> int:
    fid = p9.walk_fid(place.fid, ["f"])
    p9.open(fid, wire.ORDWR)
    return fid


def opened_dir_u(p9: Session, place: Place) -> int:
    fid = p9.walk_fid(place.fid, [])
    p9.open(fid, wire.OREAD)
    return fid



Row = tuple[str, Callable[[Session, Place], TMessage[Any]], int]
#: name -> (dialect, the request (after any set-up it needs), errno)
DOTL: dict[str, Row] = {
    "walk/unknown_fid": (wire.DOTL, lambda p9, pl: Twalk(fid=UNKNOWN, newfid=FREE, wnames=["f"]), errno.ENOENT),
    "walk/newfid_in_use": (wire.DOTL, lambda p9, pl: Twalk(fid=pl.fid, newfid=0, wnames=["f"]), errno.EINVAL),
    "walk/open_fid_onto_itself": (wire.DOTL, lambda p9, pl: Twalk(fid=(f := opened_file(p9, pl)), newfid=f, wnames=[]),
                                  errno.EINVAL),
    "attach/fid_in_use": (wire.DOTL, lambda p9, pl: Tattach(fid=pl.fid, afid=wire.NOFID, uname="", aname="",
                                                            n_uname=0), errno.EINVAL),
    "lopen/unknown_fid": (wire.DOTL, lambda p9, pl: Tlopen(fid=UNKNOWN, flags=0), errno.ENOENT),
    "lopen/twice": (wire.DOTL, lambda p9, pl: Tlopen(fid=opened_file(p9, pl), flags=0), errno.EINVAL),
    "readdir/unknown_fid": (wire.DOTL, lambda p9, pl: Treaddir(fid=UNKNOWN, offset=0, count=1000), errno.EINVAL),
    "readdir/not_opened": (wire.DOTL, lambda p9, pl: Treaddir(fid=pl.fid, offset=0, count=1000), errno.ENOTDIR),
    "xattrwalk/unknown_fid": (wire.DOTL, lambda p9, pl: Txattrwalk(fid=UNKNOWN, newfid=FREE, name=""), errno.ENOENT),
    "xattrwalk/newfid_in_use": (wire.DOTL, lambda p9, pl: Txattrwalk(fid=pl.fid, newfid=0, name=""), errno.EINVAL),
    "xattrwalk/no_such_name": (wire.DOTL, lambda p9, pl: Txattrwalk(fid=pl.fid, newfid=FREE, name="user.none"),
                               errno.ENODATA),
    "unlinkat/unknown_dirfid": (wire.DOTL, lambda p9, pl: Tunlinkat(dirfd=UNKNOWN, name="f", flags=0), errno.EINVAL),
    "unlinkat/dot": (wire.DOTL, lambda p9, pl: Tunlinkat(dirfd=pl.fid, name=".", flags=0), errno.EINVAL),
    "unlinkat/dotdot": (wire.DOTL, lambda p9, pl: Tunlinkat(dirfd=pl.fid, name="..", flags=0), errno.ENOTEMPTY),
    "unlinkat/unknown_flags": (wire.DOTL, lambda p9, pl: Tunlinkat(dirfd=pl.fid, name="f", flags=0x1), errno.EINVAL),
    "unlinkat/missing": (wire.DOTL, lambda p9, pl: Tunlinkat(dirfd=pl.fid, name="missing", flags=0), errno.ENOENT),
    "lock/unknown_fid": (wire.DOTL, lambda p9, pl: Tlock(fid=UNKNOWN, type=1, flags=0, start=0, length=0, proc_id=1,
                                                         client_id="c"), errno.ENOENT),
    "lock/unknown_flags": (wire.DOTL, lambda p9, pl: Tlock(fid=opened_file(p9, pl), type=1, flags=0x4, start=0,
                                                           length=0, proc_id=1, client_id="c"), errno.EINVAL),
    "getlock/unknown_fid": (wire.DOTL, lambda p9, pl: Tgetlock(fid=UNKNOWN, type=1, start=0, length=0, proc_id=1,
                                                               client_id="c"), errno.ENOENT),
}  # fmt: skip
DOTU: dict[str, Row] = {
    "create/unknown_fid": (wire.DOTU, lambda p9, pl: Tcreate(fid=UNKNOWN, name="n", perm=0o644, mode=0, extension=""),
                           errno.EINVAL),
    "create/open_fid": (wire.DOTU, lambda p9, pl: Tcreate(fid=opened_file_u(p9, pl), name="n", perm=0o644, mode=0,
                                                          extension=""), errno.EINVAL),
    "create/dir_exists": (wire.DOTU, lambda p9, pl: Tcreate(fid=p9.walk_fid(pl.fid, []), name="d",
                                                            perm=wire.DMDIR | 0o755, mode=0, extension=""),
                          errno.EEXIST),
    "create/symlink_exists": (wire.DOTU, lambda p9, pl: Tcreate(fid=p9.walk_fid(pl.fid, []), name="f",
                                                                perm=wire.DMSYMLINK | 0o777, mode=0, extension="t"),
                              errno.EEXIST),
    "create/device_exists": (wire.DOTU, lambda p9, pl: Tcreate(fid=p9.walk_fid(pl.fid, []), name="f",
                                                               perm=wire.DMDEVICE | 0o600, mode=0, extension="c 1 3"),
                             errno.EEXIST),
    "create/fifo_exists": (wire.DOTU, lambda p9, pl: Tcreate(fid=p9.walk_fid(pl.fid, []), name="f",
                                                             perm=wire.DMNAMEDPIPE | 0o600, mode=0, extension=""),
                           errno.EEXIST),
    "create/file_exists_excl": (wire.DOTU, lambda p9, pl: Tcreate(fid=p9.walk_fid(pl.fid, []), name="f", perm=0o644,
                                                                  mode=wire.ORDWR | wire.OEXCL, extension=""),
                                errno.EEXIST),
    "create/link_to_unknown_fid": (wire.DOTU, lambda p9, pl: Tcreate(fid=p9.walk_fid(pl.fid, []), name="n",
                                                                     perm=wire.DMLINK, mode=0, extension=str(UNKNOWN)),
                                   errno.EINVAL),
    "create/name_with_slash": (wire.DOTU, lambda p9, pl: Tcreate(fid=p9.walk_fid(pl.fid, []), name="a/b", perm=0o644,
                                                                 mode=0, extension=""), errno.ENOENT),
    "readdir/in_dotu": (wire.DOTU, lambda p9, pl: Treaddir(fid=opened_dir_u(p9, pl), offset=0, count=1000),
                        errno.EOPNOTSUPP),
    "open/unknown_fid": (wire.DOTU, lambda p9, pl: Topen(fid=UNKNOWN, mode=0), errno.ENOENT),
    "wstat/unknown_fid": (wire.DOTU, lambda p9, pl: twstat(UNKNOWN, mode=0o600), errno.EINVAL),
    "wstat/rename_onto_a_directory": (wire.DOTU, lambda p9, pl: twstat(p9.walk_fid(pl.fid, ["f"]), name="d"),
                                      errno.EISDIR),
}  # fmt: skip


def refused(place: Place, row: Row) -> None:
    _, make, expected = row
    p9 = place.session
    place.host_path("f").write_bytes(b"content")
    place.host_path("d").mkdir()
    before = place.host_state()
    request = make(p9, place)
    with expect_rlerror(expected):
        p9.rpc(request)
    assert place.host_state() == before
    reply = p9.send(Twalk(fid=place.fid, newfid=FREE, wnames=[])).wait().message  # FREE is still free
    assert isinstance(reply, Rwalk), f"newfid {FREE} is taken after the refusal: {reply}"
    for fid in set(p9.fids) - {0, place.fid}:
        p9.clunk(fid)


@case_path("refused/{message}", backends=["local"], dialect=[wire.DOTL], message=list(DOTL))
def test_refused_request(place: Place, dialect: str, message: str) -> None:
    """9P2000.L: each refusal with its errno, and nothing changed."""
    refused(place, DOTL[message])


@case_path("refused/dotu/{message}", backends=["local"], dialect=[wire.DOTU], message=list(DOTU))
def test_refused_dotu_request(place: Place, dialect: str, message: str) -> None:
    """9P2000.u's own: each refusal with its errno, and nothing changed."""
    refused(place, DOTU[message])
