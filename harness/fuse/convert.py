"""What the bridge hands the kernel and keeps, apart from the requests it sends: an inode and a
file handle (:class:`Node`, :class:`Handle`), 9P's answers as FUSE's structures (Rgetattr as an
entry, Rstatfs as statvfs), and FUSE's setattr as the Tsetattr v9fs sends."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyfuse3

from harness.p9 import wire
from harness.p9.messages import Rgetattr, Rstatfs, Tsetattr

Context = pyfuse3.RequestContext
Entry = pyfuse3.EntryAttributes


@dataclass
class Node:
    """One FUSE inode: the server's file it names, the fid walked to it, and the kernel's count."""

    ino: int
    qid_path: int
    fid: int
    parent: int
    name: str
    lookups: int = 0
    #: directories: a fid of each uid's own attach, walked here, for creating as that uid
    as_uid: dict[int, int] = field(default_factory=dict)


@dataclass
class Handle:
    fid: int
    #: the inode it was opened on
    ino: int
    #: the largest Tread/Twrite payload: the server's iounit, or what msize leaves
    chunk: int
    #: who opened it: a write by anyone but root drops set-user-ID and set-group-ID, which the
    #: kernel leaves to a FUSE filesystem under direct I/O and v9fs does in the client
    uid: int = 0


def entry(ino: int, attrs: Rgetattr) -> Entry:
    """Rgetattr as the kernel's entry of inode ``ino``: nothing cached (timeouts 0)."""
    made = Entry()
    made.st_ino = ino
    made.generation = 0
    made.entry_timeout = made.attr_timeout = 0
    made.st_mode, made.st_nlink, made.st_uid, made.st_gid = attrs.mode, attrs.nlink, attrs.uid, attrs.gid
    made.st_rdev, made.st_size, made.st_blksize, made.st_blocks = attrs.rdev, attrs.size, attrs.blksize, attrs.blocks
    made.st_atime_ns = attrs.atime_sec * 10**9 + attrs.atime_nsec
    made.st_mtime_ns = attrs.mtime_sec * 10**9 + attrs.mtime_nsec
    made.st_ctime_ns = attrs.ctime_sec * 10**9 + attrs.ctime_nsec
    return made


def directory(ino: int) -> Entry:
    """The entry a listing gives ``.`` and ``..``: their inode and that they are directories."""
    made = Entry()
    made.st_ino = ino
    made.st_mode = stat.S_IFDIR
    return made


def statvfs(reply: Rstatfs) -> pyfuse3.StatvfsData:
    data = pyfuse3.StatvfsData()
    data.f_bsize = data.f_frsize = reply.bsize
    data.f_blocks, data.f_bfree, data.f_bavail = reply.blocks, reply.bfree, reply.bavail
    data.f_files, data.f_ffree, data.f_favail = reply.files, reply.ffree, reply.ffree
    data.f_namemax = reply.namelen
    return data


def setattr_request(fid: int, attr: Entry, fields: pyfuse3.SetattrFields) -> Tsetattr:
    """The Tsetattr v9fs would send for FUSE's ``fields``; a time is always the given one
    (pyfuse3 turns the kernel's "now" into its own clock before we see it)."""
    valid = 0
    values: dict[str, int] = {}
    for wanted, bit, name, value in _setattr_fields(attr, fields):
        if wanted:
            valid |= bit
            values.update({name: value} if name else {})
    if fields.update_atime:
        valid |= wire.SETATTR_ATIME | wire.SETATTR_ATIME_SET
        values["atime_sec"], values["atime_nsec"] = divmod(attr.st_atime_ns, 10**9)
    if fields.update_mtime:
        valid |= wire.SETATTR_MTIME | wire.SETATTR_MTIME_SET
        values["mtime_sec"], values["mtime_nsec"] = divmod(attr.st_mtime_ns, 10**9)
    return Tsetattr(fid=fid, valid=valid, **values)


def _setattr_fields(attr: Entry, fields: pyfuse3.SetattrFields) -> Iterator[tuple[bool, int, str, int]]:
    yield fields.update_mode, wire.SETATTR_MODE, "mode", attr.st_mode if fields.update_mode else 0
    yield fields.update_uid, wire.SETATTR_UID, "uid", attr.st_uid if fields.update_uid else 0
    yield fields.update_gid, wire.SETATTR_GID, "gid", attr.st_gid if fields.update_gid else 0
    yield fields.update_size, wire.SETATTR_SIZE, "size", attr.st_size if fields.update_size else 0
    yield fields.update_ctime, wire.SETATTR_CTIME, "", 0
