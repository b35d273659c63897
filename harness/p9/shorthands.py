"""The shorthands cases write: one method per common request (``walk_fid``, ``getattr``,
``lcreate`` ...), each sending it through ``rpc`` and returning its reply, typed. A base of
:class:`harness.p9.session.Session`, which provides ``rpc``, ``new_fid`` and ``msize``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.errors import P9ProtocolError
from harness.p9 import wire
from harness.p9.messages import (
    Rclunk,
    Rcreate,
    Rgetattr,
    Rlcreate,
    Rlink,
    Rlopen,
    Rmkdir,
    Ropen,
    Rread,
    Rreaddir,
    Rreadlink,
    Rstatfs,
    Rsymlink,
    Runlinkat,
    Rversion,
    Rwalk,
    Rwrite,
    Rwstat,
    Tclunk,
    Tcreate,
    Tgetattr,
    Tlcreate,
    Tlink,
    Tlopen,
    Tmkdir,
    Topen,
    Tread,
    Treaddir,
    Treadlink,
    Tstat,
    Tstatfs,
    Tsymlink,
    Tunlinkat,
    Tversion,
    Twalk,
    Twrite,
    twstat,
)
from harness.p9.wire import R, Stat, TMessage

DEFAULT_MSIZE = 8192


class Shorthands:
    """The common messages: each returns its reply."""

    msize: int

    def rpc(self, request: TMessage[R], /, **options: Any) -> R:
        raise NotImplementedError

    def new_fid(self) -> int:
        raise NotImplementedError

    def version(self, msize: int = DEFAULT_MSIZE, version: str = "9P2000.L") -> Rversion:
        return self.rpc(Tversion(msize=msize, version=version))

    def walk(self, fid: int, names: Sequence[str], newfid: int) -> Rwalk:
        """Twalk; a partial walk returns fewer qids (and newfid is not made)."""
        return self.rpc(Twalk(fid=fid, newfid=newfid, wnames=list(names)))

    def walk_fid(self, fid: int, names: Sequence[str] | str = ()) -> int:
        """A new fid walked from ``fid`` along ``names`` (a list, or a path ``a/b/c``); every
        name must walk, else :class:`P9ProtocolError` (an Rlerror raises as usual)."""
        if isinstance(names, str):
            names = [part for part in names.split("/") if part]
        newfid = self.new_fid()
        reply = self.walk(fid, names, newfid)
        if len(reply.qids) != len(names):
            raise P9ProtocolError(f"walk of {list(names)} from fid {fid} stopped after {len(reply.qids)} names")
        return newfid

    def getattr(self, fid: int, request_mask: int = wire.GETATTR_ALL) -> Rgetattr:
        return self.rpc(Tgetattr(fid=fid, request_mask=request_mask))

    def lopen(self, fid: int, flags: int = 0) -> Rlopen:
        return self.rpc(Tlopen(fid=fid, flags=flags))

    def clunk(self, fid: int) -> Rclunk:
        return self.rpc(Tclunk(fid=fid))

    def readdir(self, fid: int, offset: int = 0, count: int | None = None) -> Rreaddir:
        count = self.msize - wire.RREADDIR_HEADER if count is None else count
        return self.rpc(Treaddir(fid=fid, offset=offset, count=count))

    def read(self, fid: int, offset: int, count: int) -> Rread:
        return self.rpc(Tread(fid=fid, offset=offset, count=count))

    def write(self, fid: int, offset: int, data: bytes) -> Rwrite:
        return self.rpc(Twrite(fid=fid, offset=offset, data=data))

    # -- 9P2000.u's own ------------------------------------------------------------------------

    def open(self, fid: int, mode: int = wire.OREAD) -> Ropen:
        """9P2000.u's Topen (``mode`` a byte: OREAD ... with OTRUNC, ORCLOSE)."""
        return self.rpc(Topen(fid=fid, mode=mode))

    def create(self, fid: int, name: str, perm: int, mode: int = wire.ORDWR, extension: str = "") -> Rcreate:
        """9P2000.u's Tcreate: ``fid`` (a directory) becomes the new node (open, for a file)."""
        return self.rpc(Tcreate(fid=fid, name=name, perm=perm, mode=mode, extension=extension))

    def stat(self, fid: int) -> Stat:
        """9P2000.u's Tstat: the stat record (the reply's ``nstat`` aside)."""
        return self.rpc(Tstat(fid=fid)).stat

    def wstat(self, fid: int, **changes: Any) -> Rwstat:
        """9P2000.u's Twstat of the "don't touch" stat with ``changes`` (``mode=0o600``,
        ``name="new"``); ``nstat`` is the stat's length, as stat(5) has it."""
        return self.rpc(twstat(fid, **changes))

    def statfs(self, fid: int) -> Rstatfs:
        return self.rpc(Tstatfs(fid=fid))

    def mkdir(self, dfid: int, name: str, mode: int = 0o755, gid: int = 0) -> Rmkdir:
        return self.rpc(Tmkdir(dfid=dfid, name=name, mode=mode, gid=gid))

    def lcreate(self, fid: int, name: str, flags: int = 1, mode: int = 0o644, gid: int = 0) -> Rlcreate:
        """Tlcreate: ``fid`` (a directory) becomes the new, open file."""
        return self.rpc(Tlcreate(fid=fid, name=name, flags=flags, mode=mode, gid=gid))

    def symlink(self, dfid: int, name: str, target: str, gid: int = 0) -> Rsymlink:
        return self.rpc(Tsymlink(fid=dfid, name=name, symtgt=target, gid=gid))

    def link(self, dfid: int, fid: int, name: str) -> Rlink:
        return self.rpc(Tlink(dfid=dfid, fid=fid, name=name))

    def readlink(self, fid: int) -> Rreadlink:
        return self.rpc(Treadlink(fid=fid))

    def unlinkat(self, dirfd: int, name: str, flags: int = 0) -> Runlinkat:
        return self.rpc(Tunlinkat(dirfd=dirfd, name=name, flags=flags))

    def readdir_all(self, fid: int, count: int | None = None) -> list[Rreaddir]:
        """Treaddir from offset 0, each next one at the last entry's offset, until a count-0 reply.

        Returns every reply, the final empty one included.
        """
        replies: list[Rreaddir] = []
        offset = 0
        while True:
            reply = self.readdir(fid, offset, count)
            replies.append(reply)
            if not reply.entries:
                return replies
            if reply.entries[-1].offset == offset:
                raise P9ProtocolError(f"Treaddir at offset {offset} returned entries that end at the same offset")
            offset = reply.entries[-1].offset
