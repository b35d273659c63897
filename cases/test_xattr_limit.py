"""The max_xattr fsdev option (QEMU 10.0.12, 11.0.3, 11.1.0): a cap on the xattr fids a client may
hold at once, 1024 by default, ENOSPC beyond it, ``max_xattr=0`` for none; so that a guest cannot
pin unbounded server memory with Txattrcreate. QEMU's own ``{synth,local}/xattr_limit/*`` cases,
under their names: fids walked to WRITE, each with a 1 KiB ``user.test`` created and written;
on synth the server's own count of xattr fids (``stat/xattr_count``) is checked at every step.
QEMU 7.2 has no such option: there these cases skip, saying so. The default limit came first, in a
commit of its own (CVE-2026-8348): a build that has it without the option runs the default case."""

from __future__ import annotations

import errno
import os

import pytest

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from fixtures.place import Place
from harness.p9.messages import Txattrcreate
from harness.p9.session import Session

DEFAULT = 1024  # V9FS_MAX_XATTR_DEFAULT
SIZE = 1024  # TEST_XATTR_SIZE
DATA = b"X" * SIZE


class XattrCount:
    """The server's count of open xattr fids, from the synth file ``stat/xattr_count`` (a size_t),
    opened once and read again at every check: one Tread, where walk, open, read and clunk took
    four requests (QEMU's case opens it each time; the count the server reports is the same)."""

    def __init__(self, p9: Session) -> None:
        self.p9 = p9
        self.fid = p9.walk_fid(0, ["stat", "xattr_count"])
        p9.lopen(self.fid, os.O_RDONLY)

    def __call__(self) -> int:
        data = self.p9.read(self.fid, 0, 8).data
        assert len(data) == 8, data
        return int.from_bytes(data, "little")

    def close(self) -> None:
        self.p9.clunk(self.fid)


def create(p9: Session, fid: int, name: str = "user.test") -> None:
    p9.rpc(Txattrcreate(fid=fid, name=name, attr_size=SIZE, flags=0))


def do_xattr_limit(place: Place, limit: int | None, counted: bool) -> None:
    p9 = place.session
    count = XattrCount(p9) if counted else None
    fids = []
    for n in range(1, (limit or DEFAULT + 100) + 1):
        fid = p9.walk_fid(place.fid, ["WRITE"])
        create(p9, fid)
        assert p9.write(fid, 0, DATA).count == SIZE
        fids.append(fid)
        if count:
            assert count() == n
    if limit is not None:  # one more is refused, and counted nowhere
        refused = p9.walk_fid(place.fid, ["WRITE"])
        with expect_rlerror(errno.ENOSPC):
            create(p9, refused, "user.test_exceed")
        if count:
            assert count() == limit
        fids.append(refused)
    for fid in fids:
        p9.clunk(fid)
    if count:
        assert count() == 0
        count.close()


def run_case(place: Place, backend: str, limit: int | None) -> None:
    if backend == "local":
        place.host_path("WRITE").write_bytes(b"")
    do_xattr_limit(place, limit, counted=backend == "synth")
    if backend == "local":  # every create committed at its Tclunk; the refused one nowhere
        assert os.getxattr(place.host_path("WRITE"), "user.test") == DATA
        assert "user.test_exceed" not in os.listxattr(place.host_path("WRITE"))


@pytest.mark.slow
@pytest.mark.qemu_feature("xattr_fid_limit")
@pytest.mark.qemu_feature("synth_xattr", when={"backend": "synth"})
@case_path("xattr_limit/default")
def test_xattr_limit_default(place: Place, backend: str) -> None:
    """No option: 1024 xattr fids created and written; the 1025th ENOSPC; all clunked, count 0."""
    run_case(place, backend, DEFAULT)


@pytest.mark.fsdev(max_xattr=100)
@pytest.mark.qemu_feature("synth_xattr", when={"backend": "synth"})
@case_path("xattr_limit/custom")
def test_xattr_limit_custom(place: Place, backend: str) -> None:
    """max_xattr=100: 100 xattr fids, the 101st ENOSPC."""
    run_case(place, backend, 100)


@pytest.mark.slow
@pytest.mark.fsdev(max_xattr=0)
@pytest.mark.qemu_feature("synth_xattr", when={"backend": "synth"})
@case_path("xattr_limit/unlimited")
def test_xattr_limit_unlimited(place: Place, backend: str) -> None:
    """max_xattr=0: no limit; 100 past the default all open."""
    run_case(place, backend, None)
