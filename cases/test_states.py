"""Every operation that takes a fid (fixtures/operations.py ``FID_OPS``) against every state its
fid can be in (``STATE_KINDS``): never made, clunked, on the file, open, an xattr fid, the file
removed through 9P or on the host (walked, and open), replaced on the host by a directory, on a
directory, on a symlink or a FIFO the host made itself, and the export root; under passthrough and
mapped-xattr, whose code differs for every node the host made. One oracle judges each answer
(``state_outcome``): the exact errno, or success; a refusal leaves the case's directory exactly as
it was and makes no fid.

Excluded: at the export root, the requests that would change the root every case shares
(``CHANGES_ROOT``: a node made in it, its mode, size or xattrs). The security models that keep
metadata differ from mapped-xattr only in where (mapped-file's .virtfs_metadata, which names/…
covers), and none from passthrough only in owners; neither is run here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from fixtures.case_path import case_path
from fixtures.expect import UnexpectedReply
from fixtures.operations import (
    CHANGES_ROOT,
    FID_OPS,
    STATE_CONTENT,
    STATE_KINDS,
    Seen,
    Subject,
    state_outcome,
)
from fixtures.place import Place
from fixtures.refusal import UNKNOWN, assert_refused
from harness.errors import P9Rlerror
from harness.p9.messages import Tclunk, Tunlinkat, Txattrwalk
from harness.qemu import versions

MODELS = ["passthrough", "mapped-xattr"]
#: the states whose fid is held, on anything but a symlink
MAPPED_NOT_LINKS = ("file", "open", "xattr", "replaced_by_dir_host", "dir", "fifo", "root")
#: the states whose fid is held but not open
NOT_OPEN = ("file", "xattr", "removed_9p", "removed_host", "replaced_by_dir_host", "dir", "symlink", "fifo", "root")


def _walked(place: Place, name: str = "f") -> int:
    return place.session.walk_fid(place.fid, [name])


def _opened(place: Place) -> int:
    fid = _walked(place)
    place.session.lopen(fid, os.O_RDWR)
    return fid


def _clunked(place: Place) -> int:
    fid = _walked(place)
    place.session.clunk(fid)
    return fid


def _xattr(place: Place) -> int:
    fid = place.session.new_fid()
    place.session.rpc(Txattrwalk(fid=_walked(place), newfid=fid, name=""))
    return fid


def _removed_9p(place: Place) -> int:
    fid = _walked(place)
    place.session.rpc(Tunlinkat(dirfd=place.fid, name="f", flags=0))
    return fid


def _removed_host(place: Place) -> int:
    fid = _walked(place)
    place.host_path("f").unlink()
    return fid


def _open_removed_host(place: Place) -> int:
    fid = _opened(place)
    place.host_path("f").unlink()
    return fid


def _replaced_by_dir_host(place: Place) -> int:
    fid = _walked(place)
    place.host_path("f").unlink()
    place.host_path("f").mkdir()
    return fid


#: state -> how the case's directory and the subject fid get there
MAKE: dict[str, Callable[[Place], int]] = {
    "unknown": lambda place: UNKNOWN,
    "clunked": _clunked,
    "file": _walked,
    "open": _opened,
    "xattr": _xattr,
    "removed_9p": _removed_9p,
    "removed_host": _removed_host,
    "open_removed_host": _open_removed_host,
    "replaced_by_dir_host": _replaced_by_dir_host,
    "dir": lambda place: _walked(place, "d"),
    "symlink": lambda place: _walked(place, "l"),
    "fifo": lambda place: _walked(place, "p"),
    "root": lambda place: place.session.walk_fid(0, []),
}
assert MAKE.keys() == STATE_KINDS.keys()


def populate(place: Place) -> None:
    """The file ``f``, the directory ``d``, the symlink ``l`` (to f) and the FIFO ``p``, all made
    on the host (under mapped-xattr: without the metadata QEMU would have given them)."""
    host = place.host_path()
    (host / "f").write_bytes(STATE_CONTENT)
    (host / "d").mkdir()
    (host / "l").symlink_to("f")
    os.mkfifo(host / "p", 0o600)


def changes_root(state: str, op: str, **_: Any) -> bool:
    """Left out: a request at the export root that would change the root every case shares."""
    return state == "root" and op in CHANGES_ROOT


#: state -> the node its fid is on, in the case's directory (the root's: the export, its parent)
NODE = {"file": "f", "open": "f", "xattr": "f", "open_removed_host": "f", "replaced_by_dir_host": "f", "dir": "d",
        "symlink": "l", "fifo": "p"}  # fmt: skip


def seen(place: Place, state: str, security_model: str) -> Seen:
    """The host around the request: the node the state's fid is on (None: gone from its path)."""
    kinds = STATE_KINDS[state]
    assert kinds is not None
    node = place.host_path().parent if state == "root" else place.host_path(NODE[state]) if state in NODE else None
    if node is not None and not (node.exists() or node.is_symlink()):
        node = None
    before = node.lstat() if node is not None else None
    return Seen(node, before, place.host_path(), security_model, kinds[0], kinds[2])


def check(place: Place, state: str, op: str, security_model: str, version: str) -> None:
    """The request on a fid in the state answers as the oracle says: a refusal with its errno,
    changing nothing; a success with every field the oracle knows (its row's ``returns`` in FID_OPS) and its effect on
    the host."""
    p9 = place.session
    populate(place)
    fid = MAKE[state](place)
    # a link's source when the subject is a directory: walked only for that request
    other = _walked(place) if op == "link_dir" and place.host_path("f").is_file() else place.fid
    request = FID_OPS[op].request(Subject(fid, place.fid, other))
    native = versions.has(version, versions.MAPPED_NATIVE_SYMLINK)
    want = state_outcome(op, state, security_model, native_symlinks=native)
    if want:
        assert_refused(place, request, want)
    else:
        host = seen(place, state, security_model)
        FID_OPS[op].returns(p9.rpc(request), host)
    for held in sorted(p9.fids - {0, place.fid}):
        p9.send(Tclunk(fid=held)).wait()  # an xattr fid's clunk may refuse (nothing written): beside the point


@pytest.mark.qemu_bug(
    fixed_in=(),
    reason="under a mapped security model local_readlink() opens the node and reads it, whatever its kind: "
    "Treadlink of a regular file answers its content as a link target, of a directory EISDIR, of a FIFO ENXIO, "
    "where readlink(2) says EINVAL (v9fs_readlink() checks no kind either)",
    raises=UnexpectedReply,
    when={"op": "readlink", "security_model": "mapped-xattr", "state": MAPPED_NOT_LINKS},
    upstream="readlink-mapped",
)
@pytest.mark.qemu_bug(
    fixed_in=versions.FID_HANDLE_CHECK,
    reason="v9fs_fsync(), v9fs_lock() and v9fs_getlock() use the fid's descriptor without checking the fid is "
    "open: on local they run on fd 0 or -1 (fixed by 75893c058b: EBADF)",
    raises=UnexpectedReply,
    when={"op": ("fsync", "lock", "getlock"), "state": NOT_OPEN},
)
@pytest.mark.qemu_bug(
    fixed_in=versions.MKNOD_SPECIAL,
    reason="fchmodat_nofollow() opens the node through openat_file(), which the CVE-2023-2861 fix makes refuse "
    "special files: a chmod of a FIFO under passthrough answers ENXIO",
    raises=P9Rlerror,
    when={"op": "setattr_mode", "state": "fifo", "security_model": "passthrough"},
)
@pytest.mark.qemu_bug(
    fixed_in=versions.FD_SETATTR,
    reason="v9fs_setattr() truncates by path: an open file whose name is gone answers ENOENT "
    "instead of ftruncate()ing the descriptor (unlinked_open_file/truncate)",
    raises=P9Rlerror,
    when={"op": "setattr_size", "state": "open_removed_host"},
)
@case_path("states/{state}/{op}/{security_model}", backends=["local"], state=list(MAKE), op=list(FID_OPS),
           security_model=MODELS, unless=changes_root)  # fmt: skip
def test_operation_in_state(place: Place, qemu_under_test: Any, state: str, op: str, security_model: str) -> None:
    """Each request that takes a fid, on a fid in each state, as the oracle says."""
    check(place, state, op, security_model, qemu_under_test.probe.version)
