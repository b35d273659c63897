"""Every 9P2000.L message, one typed declaration each: the table the codec is built from.

A field's annotation is its wire layout (:mod:`harness.p9.wire`): ``U32`` is ``Int32ul``,
``String`` is ``len[2]`` + UTF-8, ``Qid`` a 13-byte record.  A request is a ``TMessage[R]``
whose reply ``R`` has the next type number.  This module is data: it is long on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.p9.wire import (
    U8,
    U16,
    U32,
    U64,
    Data,
    Dirent,
    Dirents,
    Names,
    Qid,
    Qids,
    RMessage,
    String,
    TMessage,
    describe_rlerror,
    message,
)

__all__ = [
    "Dirent", "Qid",
    "Rattach", "Rauth", "Rclunk", "Rerror", "Rflush", "Rfsync", "Rgetattr", "Rgetlock", "Rlcreate",
    "Rlerror", "Rlink", "Rlock", "Rlopen", "Rmkdir", "Rmknod", "Rread", "Rreaddir", "Rreadlink",
    "Rremove", "Rrename", "Rrenameat", "Rsetattr", "Rstatfs", "Rsymlink", "Runlinkat", "Rversion",
    "Rwalk", "Rwrite", "Rxattrcreate", "Rxattrwalk",
    "Tattach", "Tauth", "Tclunk", "Tflush", "Tfsync", "Tgetattr", "Tgetlock", "Tlcreate", "Tlink",
    "Tlock", "Tlopen", "Tmkdir", "Tmknod", "Tread", "Treaddir", "Treadlink", "Tremove", "Trename",
    "Trenameat", "Tsetattr", "Tstatfs", "Tsymlink", "Tunlinkat", "Tversion", "Twalk", "Twrite",
    "Txattrcreate", "Txattrwalk",
]  # fmt: skip


@message(7)
@dataclass(frozen=True)
class Rlerror(RMessage):
    ecode: U32

    def __str__(self) -> str:
        return describe_rlerror(self.ecode)


@message(8)
@dataclass(frozen=True)
class Tstatfs(TMessage["Rstatfs"]):
    fid: U32


@message(9)
@dataclass(frozen=True)
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
@dataclass(frozen=True)
class Tlopen(TMessage["Rlopen"]):
    fid: U32
    flags: U32


@message(13)
@dataclass(frozen=True)
class Rlopen(RMessage):
    qid: Qid
    iounit: U32


@message(14)
@dataclass(frozen=True)
class Tlcreate(TMessage["Rlcreate"]):
    fid: U32
    name: String
    flags: U32
    mode: U32
    gid: U32


@message(15)
@dataclass(frozen=True)
class Rlcreate(RMessage):
    qid: Qid
    iounit: U32


@message(16)
@dataclass(frozen=True)
class Tsymlink(TMessage["Rsymlink"]):
    fid: U32
    name: String
    symtgt: String
    gid: U32


@message(17)
@dataclass(frozen=True)
class Rsymlink(RMessage):
    qid: Qid


@message(18)
@dataclass(frozen=True)
class Tmknod(TMessage["Rmknod"]):
    dfid: U32
    name: String
    mode: U32
    major: U32
    minor: U32
    gid: U32


@message(19)
@dataclass(frozen=True)
class Rmknod(RMessage):
    qid: Qid


@message(20)
@dataclass(frozen=True)
class Trename(TMessage["Rrename"]):
    fid: U32
    dfid: U32
    name: String


@message(21)
@dataclass(frozen=True)
class Rrename(RMessage):
    pass


@message(22)
@dataclass(frozen=True)
class Treadlink(TMessage["Rreadlink"]):
    fid: U32


@message(23)
@dataclass(frozen=True)
class Rreadlink(RMessage):
    target: String


@message(24)
@dataclass(frozen=True)
class Tgetattr(TMessage["Rgetattr"]):
    fid: U32
    request_mask: U64


@message(25)
@dataclass(frozen=True)
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
@dataclass(frozen=True)
class Tsetattr(TMessage["Rsetattr"]):
    fid: U32
    valid: U32
    mode: U32 = 0
    uid: U32 = 0
    gid: U32 = 0
    size: U64 = 0
    atime_sec: U64 = 0
    atime_nsec: U64 = 0
    mtime_sec: U64 = 0
    mtime_nsec: U64 = 0


@message(27)
@dataclass(frozen=True)
class Rsetattr(RMessage):
    pass


@message(30)
@dataclass(frozen=True)
class Txattrwalk(TMessage["Rxattrwalk"]):
    fid: U32
    newfid: U32
    name: String


@message(31)
@dataclass(frozen=True)
class Rxattrwalk(RMessage):
    size: U64


@message(32)
@dataclass(frozen=True)
class Txattrcreate(TMessage["Rxattrcreate"]):
    fid: U32
    name: String
    attr_size: U64
    flags: U32


@message(33)
@dataclass(frozen=True)
class Rxattrcreate(RMessage):
    pass


@message(40)
@dataclass(frozen=True)
class Treaddir(TMessage["Rreaddir"]):
    fid: U32
    offset: U64
    count: U32


@message(41)
@dataclass(frozen=True)
class Rreaddir(RMessage):
    entries: Dirents


@message(50)
@dataclass(frozen=True)
class Tfsync(TMessage["Rfsync"]):
    fid: U32
    datasync: U32 = 0


@message(51)
@dataclass(frozen=True)
class Rfsync(RMessage):
    pass


@message(52)
@dataclass(frozen=True)
class Tlock(TMessage["Rlock"]):
    fid: U32
    type: U8
    flags: U32
    start: U64
    length: U64
    proc_id: U32
    client_id: String


@message(53)
@dataclass(frozen=True)
class Rlock(RMessage):
    status: U8


@message(54)
@dataclass(frozen=True)
class Tgetlock(TMessage["Rgetlock"]):
    fid: U32
    type: U8
    start: U64
    length: U64
    proc_id: U32
    client_id: String


@message(55)
@dataclass(frozen=True)
class Rgetlock(RMessage):
    type: U8
    start: U64
    length: U64
    proc_id: U32
    client_id: String


@message(70)
@dataclass(frozen=True)
class Tlink(TMessage["Rlink"]):
    dfid: U32
    fid: U32
    name: String


@message(71)
@dataclass(frozen=True)
class Rlink(RMessage):
    pass


@message(72)
@dataclass(frozen=True)
class Tmkdir(TMessage["Rmkdir"]):
    dfid: U32
    name: String
    mode: U32
    gid: U32


@message(73)
@dataclass(frozen=True)
class Rmkdir(RMessage):
    qid: Qid


@message(74)
@dataclass(frozen=True)
class Trenameat(TMessage["Rrenameat"]):
    olddirfid: U32
    oldname: String
    newdirfid: U32
    newname: String


@message(75)
@dataclass(frozen=True)
class Rrenameat(RMessage):
    pass


@message(76)
@dataclass(frozen=True)
class Tunlinkat(TMessage["Runlinkat"]):
    dirfd: U32
    name: String
    flags: U32


@message(77)
@dataclass(frozen=True)
class Runlinkat(RMessage):
    pass


@message(100)
@dataclass(frozen=True)
class Tversion(TMessage["Rversion"]):
    msize: U32
    version: String


@message(101)
@dataclass(frozen=True)
class Rversion(RMessage):
    msize: U32
    version: String


@message(102)
@dataclass(frozen=True)
class Tauth(TMessage["Rauth"]):
    afid: U32
    uname: String
    aname: String
    n_uname: U32


@message(103)
@dataclass(frozen=True)
class Rauth(RMessage):
    aqid: Qid


@message(104)
@dataclass(frozen=True)
class Tattach(TMessage["Rattach"]):
    fid: U32
    afid: U32
    uname: String
    aname: String
    n_uname: U32


@message(105)
@dataclass(frozen=True)
class Rattach(RMessage):
    qid: Qid


@message(107)
@dataclass(frozen=True)
class Rerror(RMessage):
    """9P2000.u's error reply: a string and a Linux errno."""

    ename: String
    errno: U32


@message(108)
@dataclass(frozen=True)
class Tflush(TMessage["Rflush"]):
    oldtag: U16


@message(109)
@dataclass(frozen=True)
class Rflush(RMessage):
    pass


@message(110)
@dataclass(frozen=True)
class Twalk(TMessage["Rwalk"]):
    fid: U32
    newfid: U32
    wnames: Names


@message(111)
@dataclass(frozen=True)
class Rwalk(RMessage):
    qids: Qids


@message(116)
@dataclass(frozen=True)
class Tread(TMessage["Rread"]):
    fid: U32
    offset: U64
    count: U32


@message(117)
@dataclass(frozen=True)
class Rread(RMessage):
    data: Data


@message(118)
@dataclass(frozen=True)
class Twrite(TMessage["Rwrite"]):
    fid: U32
    offset: U64
    data: Data


@message(119)
@dataclass(frozen=True)
class Rwrite(RMessage):
    count: U32


@message(120)
@dataclass(frozen=True)
class Tclunk(TMessage["Rclunk"]):
    fid: U32


@message(121)
@dataclass(frozen=True)
class Rclunk(RMessage):
    pass


@message(122)
@dataclass(frozen=True)
class Tremove(TMessage["Rremove"]):
    fid: U32


@message(123)
@dataclass(frozen=True)
class Rremove(RMessage):
    pass
