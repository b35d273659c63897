"""The host calls the injector wraps (harness/fault/preload.c, under these names), and the errnos
each can return on Linux, from its man page's ERRORS (EIO for every call: any filesystem can
return it), for the fault family to inject."""

from __future__ import annotations

import errno
from dataclasses import dataclass

E = errno


@dataclass(frozen=True)
class HostCallKind:
    """One wrapped call: its name, the errnos it can fail with, and whether it transfers data (a
    short transfer is then one of its faults)."""

    name: str
    errnos: tuple[int, ...]
    transfers: bool = False


_OPEN = (E.EIO, E.EACCES, E.EDQUOT, E.EINTR, E.ELOOP, E.EMFILE, E.ENFILE, E.ENOMEM, E.ENOSPC, E.EPERM, E.EROFS)
_STAT = (E.EIO, E.EACCES, E.ELOOP, E.ENOMEM, E.EOVERFLOW)
#: only the errnos that say a stored value could not be read: ENODATA and ENOTSUP say no value is
#: stored (on the node, or on the whole host), and EACCES, E2BIG and ERANGE say so too for a
#: mapped model's reader (an unprivileged QEMU cannot read a host node's user xattrs; a value of
#: another size is not one it stored), where the host's own values are the answer
_XATTR_GET = (E.EIO, E.ENOMEM)

#: name -> the call
CALLS: dict[str, HostCallKind] = {
    call.name: call
    for call in (
        HostCallKind("openat", _OPEN),
        HostCallKind("open", _OPEN),
        HostCallKind("close", (E.EIO, E.EINTR, E.ENOSPC, E.EDQUOT)),
        HostCallKind("dup", (E.EMFILE, E.EIO)),
        HostCallKind("fstatat", _STAT),
        HostCallKind("fstat", _STAT),
        HostCallKind("lstat", _STAT),
        HostCallKind("stat", _STAT),
        HostCallKind("mkdirat", (E.EIO, E.EACCES, E.EDQUOT, E.ELOOP, E.EMLINK, E.ENOMEM, E.ENOSPC, E.EPERM, E.EROFS)),
        HostCallKind("mknodat", (E.EIO, E.EACCES, E.EDQUOT, E.ENOMEM, E.ENOSPC, E.EPERM, E.EROFS)),
        HostCallKind("symlinkat", (E.EIO, E.EACCES, E.EDQUOT, E.ENOMEM, E.ENOSPC, E.EPERM, E.EROFS)),
        HostCallKind("linkat", (E.EIO, E.EACCES, E.EDQUOT, E.EMLINK, E.ENOMEM, E.ENOSPC, E.EPERM, E.EROFS, E.EXDEV)),
        HostCallKind(
            "renameat", (E.EIO, E.EACCES, E.EBUSY, E.EDQUOT, E.EMLINK, E.ENOMEM, E.ENOSPC, E.EPERM, E.EROFS, E.EXDEV)
        ),
        HostCallKind("unlinkat", (E.EIO, E.EACCES, E.EBUSY, E.ENOMEM, E.EPERM, E.EROFS)),
        HostCallKind("readlinkat", (E.EIO, E.EACCES, E.ELOOP, E.ENOMEM)),
        HostCallKind("fchmod", (E.EIO, E.EPERM, E.EROFS)),
        HostCallKind("fchmodat", (E.EIO, E.EACCES, E.ELOOP, E.ENOMEM, E.EPERM, E.EROFS)),
        HostCallKind("fchownat", (E.EIO, E.EACCES, E.ELOOP, E.ENOMEM, E.EPERM, E.EROFS)),
        HostCallKind("utimensat", (E.EIO, E.EACCES, E.EPERM, E.EROFS)),
        HostCallKind("futimens", (E.EIO, E.EACCES, E.EPERM, E.EROFS)),
        HostCallKind("ftruncate", (E.EIO, E.EFBIG, E.EINTR, E.EPERM, E.EROFS)),
        HostCallKind("preadv", (E.EIO, E.EAGAIN, E.EINTR), transfers=True),
        HostCallKind("pwritev", (E.EIO, E.EDQUOT, E.EFBIG, E.EINTR, E.ENOSPC, E.EPERM), transfers=True),
        HostCallKind("fsync", (E.EIO, E.EDQUOT, E.ENOSPC, E.EROFS)),
        HostCallKind("fdatasync", (E.EIO, E.EDQUOT, E.ENOSPC, E.EROFS)),
        HostCallKind("fdopendir", (E.EMFILE, E.ENFILE, E.ENOMEM)),
        HostCallKind("opendir", (E.EACCES, E.EMFILE, E.ENFILE, E.ENOMEM, E.EIO)),
        HostCallKind("readdir", (E.EIO, E.ENOENT)),
        HostCallKind("closedir", (E.EIO, E.EINTR)),
        HostCallKind("fstatfs", (E.EIO, E.EINTR, E.ENOMEM, E.ENOSYS)),
        HostCallKind("lgetxattr", _XATTR_GET),
        HostCallKind("fgetxattr", _XATTR_GET),
        HostCallKind("lsetxattr", (E.EIO, E.EDQUOT, E.ENOSPC, E.ENOTSUP, E.EPERM, E.ERANGE, E.E2BIG)),
        HostCallKind("llistxattr", (E.EIO, E.E2BIG, E.ENOTSUP, E.ERANGE)),
        HostCallKind("lremovexattr", (E.EIO, E.ENOTSUP, E.EPERM)),
    )
}
