"""FUSE's low-level requests answered with 9P2000.L, as Linux's v9fs speaks it with
``cache=none,access=user``.

* Identity: one Tattach per uid that uses the mount (``n_uname``); a directory gets a fid of the
  caller's attach, walked along its path, when the caller creates in it, because QEMU makes a new
  node owned by the uid of the fid it was created through.
* An inode is one walked fid (``Node.fid``, walked by the lookup that made it); a file handle is
  a clone of it, Tlopen'ed (or Tlcreate'd); a listing is Treaddir on such a clone.
* Nothing cached: entry and attribute timeouts are 0 and file I/O is direct, so every stat, lookup,
  read and write reaches the server.
* Permissions are checked by the kernel from the attributes (``default_permissions``), as v9fs
  checks them in the client: QEMU, running as root, does not check them for us.

Each FUSE operation is a plain method marked :func:`operation`; a 9P error reaches the program as
its errno, and a failure of the harness or of QEMU (no reply, QEMU dead) answers EIO and calls
``on_failure``, which ends the mount (:meth:`Bridge.failed`, the one place that decides).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import pyfuse3

from harness.errors import HarnessError, P9Rlerror
from harness.fuse import convert
from harness.fuse.convert import Context, Entry, Handle, Node, setattr_request
from harness.p9 import wire
from harness.p9.messages import (
    Rgetattr,
    Tattach,
    Tfsync,
    Tgetattr,
    Tlcreate,
    Tlink,
    Tlopen,
    Tmkdir,
    Tmknod,
    Treaddir,
    Treadlink,
    Trenameat,
    Tsetattr,
    Tstatfs,
    Tsymlink,
    Tunlinkat,
    Twalk,
    Txattrcreate,
    Txattrwalk,
)
from harness.p9.session import Session
from harness.p9.wire import Dirent, Request

log = logging.getLogger(__name__)
Params = ParamSpec("Params")
R = TypeVar("R")

#: Open flags the server is not to see: the kernel has done what they ask (O_CREAT, O_EXCL by
#: lookup, O_NOCTTY has no meaning there); v9fs drops the same.
KERNEL_ONLY_FLAGS = os.O_CREAT | os.O_EXCL | os.O_NOCTTY
#: removexattr is Txattrcreate of size 0 with this flag, as v9fs sends it
XATTR_REPLACE = 2


def operation(
    body: Callable[Concatenate[Bridge, Params], R],
) -> Callable[Concatenate[Bridge, Params], Coroutine[Any, Any, R]]:
    """A FUSE request handler made of a plain method whose body runs 9P requests: pyfuse3 awaits
    it, and :meth:`Bridge.failed` is the one place a failure becomes the program's errno or the
    mount's end."""

    @functools.wraps(body)
    async def handler(self: Bridge, /, *args: Params.args, **kwargs: Params.kwargs) -> R:
        try:
            return body(self, *args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except Exception as err:
            raise self.failed(err) from err

    return handler


class Bridge(pyfuse3.Operations):
    """The operations; ``session`` is versioned, not attached (the bridge attaches per uid)."""

    supports_dot_lookup = False
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, session: Session, on_failure: Callable[[BaseException], None]) -> None:
        super().__init__()
        self.session = session
        self.on_failure = on_failure
        self.roots: dict[int, int] = {}  # uid -> fid of its Tattach
        self.nodes: dict[int, Node] = {}
        self.inos: dict[int, int] = {}  # qid path -> ino, never reused: st_ino stays what it was
        self.handles: dict[int, Handle] = {}
        self._next_ino = pyfuse3.ROOT_INODE + 1
        self._next_fh = 1
        #: requests the bridge itself failed (logged as "bridge defect"); the mount exits 1 if any
        self.defects = 0

    # -- plumbing ---------------------------------------------------------------------------------

    def failed(self, err: Exception) -> pyfuse3.FUSEError:
        """What a failure of an operation's 9P work tells the program (called while it is handled):
        an Rlerror is its errno; a failure of the harness or of QEMU (no reply, QEMU dead) is EIO and
        ends the mount; anything else is a defect of the bridge, said loudly: EIO, the mount stays."""
        if isinstance(err, P9Rlerror):
            return pyfuse3.FUSEError(err.errno)
        if isinstance(err, HarnessError):
            log.error("the mount fails: %s", err)
            self.on_failure(err)
            return pyfuse3.FUSEError(errno.EIO)
        self.defects += 1
        log.exception("bridge defect (EIO to the program): %s", err)
        return pyfuse3.FUSEError(errno.EIO)

    def root_fid(self, uid: int) -> int:
        if uid not in self.roots:
            fid = self.session.new_fid()
            self.session.rpc(Tattach(fid=fid, afid=wire.NOFID, uname="", aname="", n_uname=uid))
            self.roots[uid] = fid
        return self.roots[uid]

    def attach_root(self) -> None:
        fid = self.root_fid(0)
        qid_path = self.session.rpc(Tgetattr(fid=fid, request_mask=wire.GETATTR_BASIC)).qid.path
        self.nodes[pyfuse3.ROOT_INODE] = Node(pyfuse3.ROOT_INODE, qid_path, fid, pyfuse3.ROOT_INODE, "", 1)
        self.inos[qid_path] = pyfuse3.ROOT_INODE

    def walk(self, fid: int, names: Sequence[str]) -> int:
        """A new fid, ``fid`` walked along ``names`` (none: a clone); ENOENT if a name is missing."""
        newfid = self.session.new_fid()
        if len(self.session.rpc(Twalk(fid=fid, newfid=newfid, wnames=list(names))).qids) != len(names):
            raise pyfuse3.FUSEError(errno.ENOENT)
        return newfid

    def clunk(self, fid: int) -> None:
        self.session.clunk(fid)

    def node(self, ino: int) -> Node:
        try:
            return self.nodes[ino]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ESTALE) from None

    def path(self, node: Node) -> list[str]:
        names: list[str] = []
        while node.ino != pyfuse3.ROOT_INODE:
            names.insert(0, node.name)
            node = self.node(node.parent)
        return names

    def creating_fid(self, parent: Node, uid: int) -> int:
        """A fid of the caller's own attach at ``parent``: QEMU makes the node owned by its uid."""
        if uid == 0:
            return parent.fid
        if uid not in parent.as_uid:
            names = self.path(parent)
            root = self.root_fid(uid)
            parent.as_uid[uid] = self.walk(root, names)
        return parent.as_uid[uid]

    def create_gid(self, parent: Node, ctx: Context) -> tuple[int, int]:
        """The new node's gid, and S_ISGID for a directory: a set-group-ID directory hands both on,
        as v9fs_get_fsgid_for_create and v9fs_vfs_mkdir_dotl do."""
        attrs = self.session.rpc(Tgetattr(fid=parent.fid, request_mask=wire.GETATTR_BASIC))
        return (attrs.gid, stat.S_ISGID) if attrs.mode & stat.S_ISGID else (ctx.gid, 0)

    def entry(self, node: Node, attrs: Rgetattr) -> Entry:
        return convert.entry(node.ino, attrs)

    def intern(self, parent: Node, name: str, fid: int) -> tuple[Node, Rgetattr]:
        """The node ``fid`` (just walked from ``parent`` by ``name``) is: a known inode takes the
        new fid (the old one may name a file since removed whose inode number came back)."""
        try:
            attrs = self.session.rpc(Tgetattr(fid=fid, request_mask=wire.GETATTR_ALL))
        except BaseException:
            self.clunk(fid)
            raise
        ino = self.inos.get(attrs.qid.path)
        node = self.nodes.get(ino) if ino is not None else None
        if node is None:
            ino = ino if ino is not None else self._new_ino(attrs.qid.path)
            node = self.nodes[ino] = Node(ino, attrs.qid.path, fid, parent.ino, name)
        else:
            self.clunk(node.fid)
            node.fid, node.parent, node.name = fid, parent.ino, name
        return node, attrs

    def _new_ino(self, qid_path: int) -> int:
        ino, self._next_ino = self._next_ino, self._next_ino + 1
        self.inos[qid_path] = ino
        return ino

    def looked_up(self, parent: Node, name: str) -> Entry:
        node, attrs = self.intern(parent, name, self.walk(parent.fid, [name]))
        node.lookups += 1
        return self.entry(node, attrs)

    def drop(self, node: Node) -> None:
        for fid in [node.fid, *node.as_uid.values()]:
            self.clunk(fid)
        del self.nodes[node.ino]

    def new_handle(self, fid: int, ino: int, iounit: int, uid: int = 0) -> int:
        fh, self._next_fh = self._next_fh, self._next_fh + 1
        room = self.session.msize - wire.IOHDRSZ
        self.handles[fh] = Handle(fid, ino, min(iounit, room) if iounit else room, uid)
        return fh

    def handle(self, fh: int) -> Handle:
        try:
            return self.handles[fh]
        except KeyError:
            raise pyfuse3.FUSEError(errno.EBADF) from None

    # -- names --------------------------------------------------------------------------------------

    @operation
    def lookup(self, parent_inode: int, name: bytes, ctx: Context | None = None) -> Entry:
        return self.looked_up(self.node(parent_inode), os.fsdecode(name))

    @operation
    def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for ino, count in inode_list:
            node = self.nodes.get(ino)
            if node is None or ino == pyfuse3.ROOT_INODE:
                continue
            node.lookups -= count
            if node.lookups <= 0:
                self.drop(node)

    @operation
    def getattr(self, inode: int, ctx: Context | None = None) -> Entry:
        node = self.node(inode)
        try:
            attrs = self.session.rpc(Tgetattr(fid=node.fid, request_mask=wire.GETATTR_ALL))
        except P9Rlerror as err:
            # removed since: an open file's fid still answers (QEMU fstat()s it since 9.2.0,
            # 8.2.9, 7.2.16), and fstat(2) of an open, unlinked file must work. pyfuse3 does not
            # pass the file handle FUSE names, so any open one of the inode's will do.
            opened = [h.fid for h in self.handles.values() if h.ino == inode]
            if err.errno != errno.ENOENT or not opened:
                raise
            attrs = self.session.rpc(Tgetattr(fid=opened[0], request_mask=wire.GETATTR_ALL))
        return self.entry(node, attrs)

    @operation
    def setattr(self, inode: int, attr: Entry, fields: pyfuse3.SetattrFields, fh: int | None, ctx: Context) -> Entry:
        node = self.node(inode)
        request = setattr_request(self.handle(fh).fid if fh else node.fid, attr, fields)
        if request.valid:
            self.session.rpc(request)
        return self.entry(node, self.session.rpc(Tgetattr(fid=node.fid, request_mask=wire.GETATTR_ALL)))

    @operation
    def readlink(self, inode: int, ctx: Context) -> bytes:
        return os.fsencode(self.session.rpc(Treadlink(fid=self.node(inode).fid)).target)

    def create_node(
        self, parent_inode: int, name: bytes, ctx: Context, request: Callable[[int, str, int, int], Request]
    ) -> Entry:
        """mknod, mkdir, symlink: ``request(fid, name, gid, setgid)`` through a fid of the caller's own
        attach (with the gid, and S_ISGID for a directory, create_gid gives), then the new node looked up."""
        parent, text = self.node(parent_inode), os.fsdecode(name)
        gid, setgid = self.create_gid(parent, ctx)
        self.session.rpc(request(self.creating_fid(parent, ctx.uid), text, gid, setgid))
        return self.looked_up(parent, text)

    @operation
    def mknod(self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: Context) -> Entry:
        major, minor, mode = os.major(rdev), os.minor(rdev), mode & ~ctx.umask
        return self.create_node(
            parent_inode, name, ctx,
            lambda fid, text, gid, _: Tmknod(dfid=fid, name=text, mode=mode, major=major, minor=minor, gid=gid),
        )  # fmt: skip

    @operation
    def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: Context) -> Entry:
        mode &= ~ctx.umask
        return self.create_node(
            parent_inode, name, ctx,
            lambda fid, text, gid, setgid: Tmkdir(dfid=fid, name=text, mode=mode | setgid, gid=gid),
        )  # fmt: skip

    @operation
    def symlink(self, parent_inode: int, name: bytes, target: bytes, ctx: Context) -> Entry:
        to = os.fsdecode(target)
        return self.create_node(
            parent_inode, name, ctx, lambda fid, text, gid, _: Tsymlink(fid=fid, name=text, symtgt=to, gid=gid)
        )

    @operation
    def link(self, inode: int, new_parent_inode: int, new_name: bytes, ctx: Context) -> Entry:
        node, parent = self.node(inode), self.node(new_parent_inode)
        self.session.rpc(Tlink(dfid=parent.fid, fid=node.fid, name=os.fsdecode(new_name)))
        node.lookups += 1
        return self.entry(node, self.session.rpc(Tgetattr(fid=node.fid, request_mask=wire.GETATTR_ALL)))

    @operation
    def unlink(self, parent_inode: int, name: bytes, ctx: Context) -> None:
        self.session.rpc(Tunlinkat(dirfd=self.node(parent_inode).fid, name=os.fsdecode(name), flags=0))

    @operation
    def rmdir(self, parent_inode: int, name: bytes, ctx: Context) -> None:
        self.session.rpc(Tunlinkat(dirfd=self.node(parent_inode).fid, name=os.fsdecode(name), flags=wire.AT_REMOVEDIR))

    @operation
    def rename(
        self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes, flags: int, ctx: Context
    ) -> None:
        if flags:  # RENAME_NOREPLACE, RENAME_EXCHANGE: 9P has no way to ask; v9fs answers the same
            raise pyfuse3.FUSEError(errno.EINVAL)
        old, new = self.node(parent_inode_old), self.node(parent_inode_new)
        old_name, new_name = os.fsdecode(name_old), os.fsdecode(name_new)
        self.session.rpc(Trenameat(olddirfid=old.fid, oldname=old_name, newdirfid=new.fid, newname=new_name))
        for node in self.nodes.values():  # paths of the fids walked later; the server moves ours
            if node.parent == old.ino and node.name == old_name:
                node.parent, node.name = new.ino, new_name

    # -- files ------------------------------------------------------------------------------------

    def opened(self, inode: int, flags: int, uid: int) -> int:
        """A handle of a clone of the inode's fid, Tlopen'ed with ``flags`` (the clone clunked if refused)."""
        fid = self.walk(self.node(inode).fid, [])
        try:
            reply = self.session.rpc(Tlopen(fid=fid, flags=flags))
        except BaseException:
            self.clunk(fid)
            raise
        return self.new_handle(fid, inode, reply.iounit, uid)

    @operation
    def open(self, inode: int, flags: int, ctx: Context) -> pyfuse3.FileInfo:
        return pyfuse3.FileInfo(fh=self.opened(inode, flags & ~KERNEL_ONLY_FLAGS, ctx.uid), direct_io=True)

    @operation
    def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: Context
    ) -> tuple[pyfuse3.FileInfo, Entry]:
        parent, text = self.node(parent_inode), os.fsdecode(name)
        gid, _ = self.create_gid(parent, ctx)
        fid = self.walk(self.creating_fid(parent, ctx.uid), [])
        try:
            request = Tlcreate(fid=fid, name=text, flags=flags & ~KERNEL_ONLY_FLAGS, mode=mode & ~ctx.umask, gid=gid)
            reply = self.session.rpc(request)
        except BaseException:
            self.clunk(fid)
            raise
        entry = self.looked_up(parent, text)
        return pyfuse3.FileInfo(fh=self.new_handle(fid, entry.st_ino, reply.iounit, ctx.uid), direct_io=True), entry

    @operation
    def read(self, fh: int, off: int, size: int) -> bytes:
        handle, data = self.handle(fh), bytearray()
        while len(data) < size:
            count = min(size - len(data), handle.chunk)
            got = self.session.read(handle.fid, off + len(data), count).data
            data += got
            if len(got) < count:
                break
        return bytes(data)

    @operation
    def write(self, fh: int, off: int, buf: bytes) -> int:
        handle, done = self.handle(fh), 0
        if handle.uid != 0:
            self.drop_privileges(handle)
        while done < len(buf):
            wrote = self.session.write(handle.fid, off + done, buf[done : done + handle.chunk]).count
            if wrote == 0:
                break
            done += wrote
        return done

    def drop_privileges(self, handle: Handle) -> None:
        """What the kernel's file_remove_privs does before a write by someone without CAP_FSETID:
        S_ISUID goes, and S_ISGID where group execution is allowed."""
        mode = self.session.rpc(Tgetattr(fid=handle.fid, request_mask=wire.GETATTR_BASIC)).mode
        kill = stat.S_ISUID | (stat.S_ISGID if mode & stat.S_IXGRP else 0)
        if mode & kill:  # the whole mode, type bits too, as v9fs sends it: mapped-xattr stores what it is given
            self.session.rpc(Tsetattr(fid=handle.fid, valid=wire.SETATTR_MODE, mode=mode & ~kill))

    async def flush(self, fh: int) -> None:
        return None  # v9fs sends nothing on close(2) but the last one's Tclunk

    @operation
    def release(self, fh: int) -> None:
        if fh in self.handles:
            self.clunk(self.handles.pop(fh).fid)

    @operation
    def fsync(self, fh: int, datasync: bool) -> None:
        self.session.rpc(Tfsync(fid=self.handle(fh).fid, datasync=int(datasync)))

    # -- directories ------------------------------------------------------------------------------

    @operation
    def opendir(self, inode: int, ctx: Context) -> int:
        return self.opened(inode, os.O_RDONLY, ctx.uid)

    @operation
    def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        handle, offset = self.handle(fh), start_id
        count = self.session.msize - wire.READDIRHDRSZ
        while True:
            entries = self.session.rpc(Treaddir(fid=handle.fid, offset=offset, count=count)).entries
            if not entries:
                return
            for dirent in entries:
                if not self.reply_entry(handle, dirent, token):
                    return
                offset = dirent.offset

    def reply_entry(self, handle: Handle, dirent: Dirent, token: pyfuse3.ReaddirToken) -> bool:
        """One entry to the kernel (readdirplus: with its attributes, walked as a lookup would)."""
        if dirent.name in (".", ".."):
            entry = convert.directory(self.inos.get(dirent.qid.path, pyfuse3.ROOT_INODE))
            return bool(pyfuse3.readdir_reply(token, os.fsencode(dirent.name), entry, dirent.offset))
        directory = self.node(handle.ino)
        try:
            fid = self.walk(directory.fid, [dirent.name])
        except (pyfuse3.FUSEError, P9Rlerror):  # removed since the listing was read
            return True
        node, attrs = self.intern(directory, dirent.name, fid)
        if not pyfuse3.readdir_reply(token, os.fsencode(dirent.name), self.entry(node, attrs), dirent.offset):
            if node.lookups == 0:
                self.drop(node)
            return False
        node.lookups += 1
        return True

    releasedir = release  # a listing's handle is a Tlopen'ed clone like a file's

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        return None

    @operation
    def statfs(self, ctx: Context) -> pyfuse3.StatvfsData:
        return convert.statvfs(self.session.rpc(Tstatfs(fid=self.node(pyfuse3.ROOT_INODE).fid)))

    # -- extended attributes ------------------------------------------------------------------------

    def xattr_read(self, inode: int, name: str) -> bytes:
        fid = self.session.new_fid()
        size = self.session.rpc(Txattrwalk(fid=self.node(inode).fid, newfid=fid, name=name)).size
        try:
            data = bytearray()
            while len(data) < size:
                got = self.session.read(fid, len(data), min(size - len(data), self.session.msize - wire.IOHDRSZ)).data
                if not got:
                    break
                data += got
            return bytes(data)
        finally:
            self.clunk(fid)

    def xattr_write(self, inode: int, name: str, value: bytes, flags: int) -> None:
        fid = self.walk(self.node(inode).fid, [])
        try:
            self.session.rpc(Txattrcreate(fid=fid, name=name, attr_size=len(value), flags=flags))
            for start in range(0, len(value), self.session.msize - wire.IOHDRSZ):
                self.session.write(fid, start, value[start : start + self.session.msize - wire.IOHDRSZ])
        finally:
            self.clunk(fid)  # the clunk sets (or removes) the attribute: its error is the call's

    @operation
    def getxattr(self, inode: int, name: bytes, ctx: Context) -> bytes:
        return self.xattr_read(inode, os.fsdecode(name))

    @operation
    def listxattr(self, inode: int, ctx: Context) -> list[bytes]:
        return [n for n in self.xattr_read(inode, "").split(b"\0") if n]

    @operation
    def setxattr(self, inode: int, name: bytes, value: bytes, ctx: Context) -> None:
        self.xattr_write(inode, os.fsdecode(name), value, 0)

    @operation
    def removexattr(self, inode: int, name: bytes, ctx: Context) -> None:
        self.xattr_write(inode, os.fsdecode(name), b"", XATTR_REPLACE)
