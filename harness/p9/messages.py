"""Every 9P2000.L message, and 9P2000.u's own (Topen, Tcreate, Tstat, Twstat, Rerror), one typed
declaration each: the table the codec is built from.

A field's annotation is its wire layout (:mod:`harness.p9.wire`): ``U32`` is ``Int32ul``,
``String`` is ``len[2]`` + UTF-8, ``Qid`` a 13-byte record; ``Fid``, ``OpenFid``, ``NewFid``,
``Count`` and ``Msize`` are ``U32`` with a :class:`~harness.p9.wire.Role` that says what the field
is (the malformed catalogue reads it).  A request is a ``TMessage[R]``
whose reply ``R`` has the next type number.  This module is data: it is long on purpose.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.p9.wire import (
    DONT_TOUCH,
    DOTU,
    U8,
    U16,
    U32,
    U64,
    Cookie,
    Count,
    Data,
    Dirents,
    Fid,
    GetattrMask,
    Id,
    LockFlags,
    LockType,
    Mode,
    Msize,
    Names,
    Nanoseconds,
    NewFid,
    NodeMode,
    Offset,
    OpenFid,
    OpenFlags,
    OpenMode,
    Perm,
    Qid,
    Qids,
    RMessage,
    Seconds,
    SetattrValid,
    Stat,
    String,
    Tag,
    Target,
    TMessage,
    UnlinkFlags,
    XattrFlags,
    XattrSize,
    describe_rlerror,
    message,
    stat_bytes,
)


@message(7)
class Rlerror(RMessage):
    ecode: U32

    def __str__(self) -> str:
        return describe_rlerror(self.ecode)


@message(8)
class Tstatfs(TMessage["Rstatfs"]):
    fid: Fid


@message(9)
class Rstatfs(RMessage):
    type: U32
    bsize: U32
    blocks: U64
    bfree: U64
    bavail: U64
    files: U64
    ffree: U64
    fsid: U64
    namelen: U32


@message(12)
class Tlopen(TMessage["Rlopen"]):
    fid: Fid
    flags: OpenFlags


@message(13)
class Rlopen(RMessage):
    qid: Qid
    iounit: U32


@message(14)
class Tlcreate(TMessage["Rlcreate"]):
    fid: Fid
    name: String
    flags: OpenFlags
    mode: Mode
    gid: Id


@message(15)
class Rlcreate(RMessage):
    qid: Qid
    iounit: U32


@message(16)
class Tsymlink(TMessage["Rsymlink"]):
    fid: Fid
    name: String
    symtgt: Target
    gid: Id


@message(17)
class Rsymlink(RMessage):
    qid: Qid


@message(18)
class Tmknod(TMessage["Rmknod"]):
    dfid: Fid
    name: String
    mode: NodeMode
    major: U32
    minor: U32
    gid: Id


@message(19)
class Rmknod(RMessage):
    qid: Qid


@message(20)
class Trename(TMessage["Rrename"]):
    fid: Fid
    dfid: Fid
    name: String


@message(21)
class Rrename(RMessage):
    pass


@message(22)
class Treadlink(TMessage["Rreadlink"]):
    fid: Fid


@message(23)
class Rreadlink(RMessage):
    target: String


@message(24)
class Tgetattr(TMessage["Rgetattr"]):
    fid: Fid
    request_mask: GetattrMask


@message(25)
class Rgetattr(RMessage):
    valid: U64
    qid: Qid
    mode: U32
    uid: U32
    gid: U32
    nlink: U64
    rdev: U64
    size: U64
    blksize: U64
    blocks: U64
    atime_sec: U64
    atime_nsec: U64
    mtime_sec: U64
    mtime_nsec: U64
    ctime_sec: U64
    ctime_nsec: U64
    btime_sec: U64
    btime_nsec: U64
    gen: U64
    data_version: U64


@message(26)
class Tsetattr(TMessage["Rsetattr"]):
    fid: Fid
    valid: SetattrValid
    mode: Mode = 0
    uid: Id = 0
    gid: Id = 0
    size: Offset = 0
    atime_sec: Seconds = 0
    atime_nsec: Nanoseconds = 0
    mtime_sec: Seconds = 0
    mtime_nsec: Nanoseconds = 0


@message(27)
class Rsetattr(RMessage):
    pass


@message(30)
class Txattrwalk(TMessage["Rxattrwalk"]):
    fid: Fid
    newfid: NewFid
    name: String


@message(31)
class Rxattrwalk(RMessage):
    size: U64


@message(32)
class Txattrcreate(TMessage["Rxattrcreate"]):
    fid: Fid
    name: String
    attr_size: XattrSize
    flags: XattrFlags


@message(33)
class Rxattrcreate(RMessage):
    pass


@message(40)
class Treaddir(TMessage["Rreaddir"]):
    fid: OpenFid
    offset: Cookie
    count: Count


@message(41)
class Rreaddir(RMessage):
    entries: Dirents


@message(50)
class Tfsync(TMessage["Rfsync"]):
    fid: OpenFid
    datasync: U32 = 0


@message(51)
class Rfsync(RMessage):
    pass


@message(52)
class Tlock(TMessage["Rlock"]):
    fid: OpenFid
    type: LockType
    flags: LockFlags
    start: U64
    length: U64
    proc_id: U32
    client_id: String


@message(53)
class Rlock(RMessage):
    status: U8


@message(54)
class Tgetlock(TMessage["Rgetlock"]):
    fid: OpenFid
    type: LockType
    start: U64
    length: U64
    proc_id: U32
    client_id: String


@message(55)
class Rgetlock(RMessage):
    type: U8
    start: U64
    length: U64
    proc_id: U32
    client_id: String


@message(70)
class Tlink(TMessage["Rlink"]):
    dfid: Fid
    fid: Fid
    name: String


@message(71)
class Rlink(RMessage):
    pass


@message(72)
class Tmkdir(TMessage["Rmkdir"]):
    dfid: Fid
    name: String
    mode: Mode
    gid: Id


@message(73)
class Rmkdir(RMessage):
    qid: Qid


@message(74)
class Trenameat(TMessage["Rrenameat"]):
    olddirfid: Fid
    oldname: String
    newdirfid: Fid
    newname: String


@message(75)
class Rrenameat(RMessage):
    pass


@message(76)
class Tunlinkat(TMessage["Runlinkat"]):
    dirfd: Fid
    name: String
    flags: UnlinkFlags


@message(77)
class Runlinkat(RMessage):
    pass


@message(100)
class Tversion(TMessage["Rversion"]):
    msize: Msize
    version: String


@message(101)
class Rversion(RMessage):
    msize: U32
    version: String


@message(102)
class Tauth(TMessage["Rauth"]):
    afid: Fid
    uname: String
    aname: String
    n_uname: Id


@message(103)
class Rauth(RMessage):
    aqid: Qid


@message(104)
class Tattach(TMessage["Rattach"]):
    fid: Fid
    afid: Fid
    uname: String
    aname: String
    n_uname: Id


@message(105)
class Rattach(RMessage):
    qid: Qid


@message(107)
class Rerror(RMessage):
    """9P2000.u's error reply: a string and a Linux errno."""

    ename: String
    errno: U32


@message(108)
class Tflush(TMessage["Rflush"]):
    oldtag: Tag


@message(109)
class Rflush(RMessage):
    pass


@message(110)
class Twalk(TMessage["Rwalk"]):
    fid: Fid
    newfid: NewFid
    wnames: Names


@message(111)
class Rwalk(RMessage):
    qids: Qids


@message(112, dialect=DOTU)
class Topen(TMessage["Ropen"]):
    """9P2000.u's open: ``mode`` is one of OREAD, OWRITE, ORDWR, OEXEC with OTRUNC, ORCLOSE,
    OAPPEND or QEMU's OEXCL (:mod:`harness.p9.wire` names them)."""

    fid: Fid
    mode: OpenMode


@message(113)
class Ropen(RMessage):
    qid: Qid
    iounit: U32


@message(114, dialect=DOTU)
class Tcreate(TMessage["Rcreate"]):
    """9P2000.u's create: ``perm`` carries DMDIR, DMSYMLINK, DMDEVICE... and the permission
    bits, ``extension`` a symlink's target, a device's ``"c 1 3"``, a hard link's fid."""

    fid: Fid
    name: String
    perm: Perm
    mode: OpenMode
    extension: String


@message(115)
class Rcreate(RMessage):
    qid: Qid
    iounit: U32


@message(116)
class Tread(TMessage["Rread"]):
    fid: OpenFid
    offset: Offset
    count: Count


@message(117)
class Rread(RMessage):
    data: Data


@message(118)
class Twrite(TMessage["Rwrite"]):
    fid: OpenFid
    offset: Offset
    data: Data


@message(119)
class Rwrite(RMessage):
    count: U32


@message(120)
class Tclunk(TMessage["Rclunk"]):
    fid: Fid


@message(121)
class Rclunk(RMessage):
    pass


@message(122)
class Tremove(TMessage["Rremove"]):
    fid: Fid


@message(123)
class Rremove(RMessage):
    pass


@message(124, dialect=DOTU)
class Tstat(TMessage["Rstat"]):
    fid: Fid


@message(125)
class Rstat(RMessage):
    """``nstat[2]`` (the stat's length, size field included: stat(5)), then the stat."""

    nstat: U16
    stat: Stat


@message(126, dialect=DOTU)
class Twstat(TMessage["Rwstat"]):
    fid: Fid
    nstat: U16
    stat: Stat


@message(127)
class Rwstat(RMessage):
    pass


def twstat(fid: int, **changes: Any) -> Twstat:
    """Twstat of stat(5)'s "don't touch" record with ``changes`` (``mode=0o600``, ``name="new"``),
    ``nstat`` counting the record as it travels."""
    record = dataclasses.replace(DONT_TOUCH, **changes)
    return Twstat(fid=fid, nstat=len(stat_bytes(record)), stat=record)
