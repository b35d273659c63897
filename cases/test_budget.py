"""What a client can make QEMU hold: memory (VmHWM, the high-water mark of its resident set, from
/proc/PID/status) and host file descriptors (/proc/PID/fd), measured around requests that pile up
server state or lie about what they will send. Each case runs on a QEMU of its own, so the
high-water mark is this case's; each bound is written beside the case with why.

SLACK is what a QEMU's resident set moves by without any client doing anything in particular
(glib's and the coroutine pools' growth, thread stacks being touched): a finding has to be above it.
Under ASan (its runtime is mapped in QEMU) per-object bounds are multiplied by
SANITIZER_OVERHEAD: it pads every allocation and keeps shadow memory. Under TSan the memory bounds
are not checked (within_budget()): its own history per thread and per coroutine grows with the
requests (8192 walked fids: 200-285 MiB on master's TSan build), so the figure measures TSan; every
other check of these cases (fds, refusals, replies, QEMU alive) holds there as anywhere.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from fixtures.batches import in_batches
from fixtures.case_path import case_path
from fixtures.place import Place
from fixtures.pool import Device
from harness.p9 import wire
from harness.p9.messages import Rlerror, Rreaddir, Tclunk, Tlopen, Treaddir, Twalk, Txattrcreate
from harness.p9.session import Session
from harness.qemu import versions
from harness.qemu.config import Resources

KIB = 1024
SLACK_KIB = 24 * KIB
#: ASan and TSan pad every allocation and keep shadow memory: a per-object bound times this
SANITIZER_OVERHEAD = 4
#: V9FS_MAX_XATTR_DEFAULT: the xattr fids a client may hold at once since the limit (versions.XATTR_FID_LIMIT)
XATTR_FIDS_ALLOWED = 1024
XATTR_SIZE = 64 * KIB  # XATTR_SIZE_MAX: the largest value a Txattrcreate may announce


def within_budget(before: Resources, grown: int, bound: int, what: str) -> None:
    """QEMU's high-water mark grew by at most ``bound`` KiB (``what`` grew it); not under TSan."""
    __tracebackhide__ = True
    if not before.tsan:
        assert grown <= bound, f"{what} grew QEMU's high-water mark by {grown} KiB (bound {bound})"


def clones(p9: Session, fid: int, first: int, count: int) -> list[int]:
    """``count`` fids walked from ``fid`` (a clone each: Twalk with no names)."""
    fids = list(range(first, first + count))
    replies = in_batches(p9, [Twalk(fid=fid, newfid=new, wnames=[]) for new in fids])
    assert not any(isinstance(reply, Rlerror) for reply in replies), replies[:3]
    return fids


@pytest.mark.slow
@pytest.mark.fresh_qemu
@pytest.mark.qemu_bug(
    fixed_in=versions.XATTR_FID_LIMIT,
    reason="v9fs_xattrcreate() allocates the value size each Txattrcreate announces (up to 64 KiB) and keeps "
    "it until the fid is clunked, with no limit on how many such fids a client holds: 4096 of them pin "
    "256 MiB of QEMU's memory for a few hundred KiB of requests (fixed by a limit of 1024, CVE-2026-8348: "
    "693b296b17; the max_xattr option came after it)",
)
@case_path("budget/xattr_fids", backends=["local"])
def test_xattr_fids_pin_bounded_memory(place: Place, device: Device) -> None:
    """4096 fids each announce a 64 KiB xattr value and never write it. Bound: what the limit lets
    a client hold (1024 values of 64 KiB: 64 MiB; max_xattr's default, where QEMU has the option)
    plus SLACK; the fids past it are refused (ENOSPC). Everything is given back at Tclunk."""
    p9 = place.session
    place.host_path("f").write_bytes(b"x")
    file = p9.walk_fid(place.fid, ["f"])
    fids = clones(p9, file, 10_000, 4096)
    before = device.machine.resources()
    replies = in_batches(p9, [Txattrcreate(fid=fid, name="user.budget", attr_size=XATTR_SIZE, flags=0)
                              for fid in fids])  # fmt: skip
    grown = device.machine.resources().hwm_kib - before.hwm_kib
    refused = sum(1 for r in replies if isinstance(r, Rlerror))
    in_batches(p9, [Tclunk(fid=fid) for fid in fids])  # a value never written: EINVAL, the fid gone
    p9.clunk(file)
    bound = XATTR_FIDS_ALLOWED * XATTR_SIZE // KIB * (2 if before.sanitized else 1) + SLACK_KIB  # large: shadow only
    within_budget(before, grown, bound, "4096 unwritten xattr values")
    assert refused >= 4096 - XATTR_FIDS_ALLOWED and all(
        r.ecode == errno.ENOSPC for r in replies if isinstance(r, Rlerror)
    ), f"{refused} refused"


@pytest.mark.slow
@pytest.mark.fresh_qemu
@case_path("budget/walked_fids", backends=["synth", "local"])
def test_walked_fids_cost_little_and_all_of_it_comes_back(attached: Session, device: Device) -> None:
    """8192 fids walked (cloned) from the root, then clunked. Bound: 1 KiB of QEMU's memory per
    fid (a V9fsFidState and its path are ~200 bytes) plus SLACK; no host fd is held for a
    walked fid; after the clunks the fds are as before."""
    p9 = attached
    before = device.machine.resources()
    fids = clones(p9, 0, 1000, 8192)
    during = device.machine.resources()
    in_batches(p9, [Tclunk(fid=fid) for fid in fids])
    after = device.machine.resources()
    bound = 8192 * (SANITIZER_OVERHEAD if before.sanitized else 1) + SLACK_KIB
    grown = during.hwm_kib - before.hwm_kib
    within_budget(before, grown, bound, "8192 walked fids")
    assert during.fds == before.fds and after.fds == before.fds, (before, during, after)


#: QEMU's RLIMIT_NOFILE in open_fids: a common default, set so that the case opens as many fids on
#: every machine (inherited, a limit of 20,000 took 8,192 opens that never reached 9pfs's reclaim
#: mark, 19,600 descriptors: 5 s of a case that checked nothing)
OPEN_FIDS_NOFILE = 1024


@pytest.mark.slow
@pytest.mark.fresh_qemu
@pytest.mark.rlimit_nofile(OPEN_FIDS_NOFILE)
@case_path("budget/open_fids", backends=["local"])
def test_open_fids_stay_within_the_fd_limit(place: Place, device: Device) -> None:
    """Twice as many fids opened as QEMU may hold descriptors: 9pfs reclaims descriptors of idle
    fids, so QEMU's open fds never reach its RLIMIT_NOFILE; every fid still reads; after the
    clunks QEMU holds no more descriptors than before."""
    p9 = place.session
    place.host_path("f").write_bytes(b"budget")
    before = device.machine.resources()
    assert before.nofile == OPEN_FIDS_NOFILE
    count = 2 * before.nofile
    source = p9.walk_fid(place.fid, ["f"])
    fids = clones(p9, source, 20_000, count)
    opened = in_batches(p9, [Tlopen(fid=fid, flags=os.O_RDONLY) for fid in fids])
    refused = [reply for reply in opened if isinstance(reply, Rlerror)]
    assert not refused, f"{len(refused)} of {count} Tlopen refused, the first: {refused[0]}"
    during = device.machine.resources()
    assert during.fds < before.nofile, f"QEMU holds {during.fds} fds, its limit is {before.nofile}"
    assert p9.read(fids[0], 0, 10).data == b"budget" and p9.read(fids[-1], 0, 10).data == b"budget"
    in_batches(p9, [Tclunk(fid=fid) for fid in [*fids, source]])
    after = device.machine.resources()
    assert after.fds <= before.fds, (before, after)


#: A directory whose listing is worth far more than a reply buffer: names of 200 bytes, each a
#: V9fsDirEnt with its dirent copy (~300 bytes of QEMU's heap) while a Treaddir collects them.
BIG_DIR_ENTRIES = 4000
LYING_MSIZE = 1024 * KIB
LYING_BUFFER = 4 * KIB
LYING_REQUESTS = 32


def fill_with_links(directory: Path, names: set[str]) -> None:
    """``names`` in ``directory``, hard links of one empty file: a listing is made of names, and a
    link costs a directory entry where a new file costs an inode, many times more. Files of
    their own where the host filesystem refuses so many links."""
    first, *rest = sorted(names)
    (directory / first).touch()
    for name in rest:
        try:
            os.link(directory / first, directory / name)
        except OSError as err:
            if err.errno not in (errno.EMLINK, errno.EPERM, errno.EOPNOTSUPP):
                raise
            (directory / name).touch()


@pytest.mark.fresh_qemu
@pytest.mark.qemu_bug(
    fixed_in=versions.READDIR_CAP,
    reason="v9fs_readdir() collects a listing as large as the Treaddir's count allows under the msize, before "
    "it finds that the reply buffer the driver gave is smaller: QEMU allocates for the msize, then cannot "
    "encode the reply and marks the transport broken (CVE-2026-9238, 64c6c7e0df)",
)
@case_path("budget/readdir_count_above_buffer", backends=["local"])
def test_readdir_count_above_the_reply_buffer(place: Place, device: Device) -> None:
    """A client negotiates a 1 MiB msize, then sends 32 Treaddirs of a 4,000-entry directory in one
    kick, each with count msize-11 and a 4 KiB reply buffer. Each is answered within its buffer
    (the first entries of the listing), QEMU stays up, and its high-water mark grows by no more
    than SLACK: the bound derived from what the client gave is 32 x 4 KiB, not 32 x 1 MiB."""
    p9 = place.session
    big = place.host_path("big")
    big.mkdir()
    names = {f"n{i:04d}" + "x" * 195 for i in range(BIG_DIR_ENTRIES)}
    fill_with_links(big, names)
    p9.clunk(place.fid)
    p9.clunk(0)
    msize = p9.version(LYING_MSIZE).msize
    p9.attach(0)
    directory = p9.walk_fid(0, [big.parent.name, "big"])
    fids = clones(p9, directory, 30_000, LYING_REQUESTS)
    in_batches(p9, [Tlopen(fid=fid, flags=os.O_RDONLY | os.O_DIRECTORY) for fid in fids])
    before = device.machine.resources()
    with p9.batch():
        count = msize - wire.RREADDIR_HEADER
        pendings = [p9.send(Treaddir(fid=fid, offset=0, count=count), reply_capacity=LYING_BUFFER) for fid in fids]
    replies = [pending.result(timeout=10) for pending in pendings]  # a broken transport answers none
    grown = device.machine.resources().hwm_kib - before.hwm_kib
    for reply in replies:
        assert isinstance(reply, Rreaddir) and reply.entries, reply
        assert {e.name for e in reply.entries} <= names | {".", ".."}, reply.entries[:3]
    assert all(p.wait().used_len <= LYING_BUFFER for p in pendings)
    assert device.alive()
    in_batches(p9, [Tclunk(fid=fid) for fid in [*fids, directory]])
    bound = SLACK_KIB * (SANITIZER_OVERHEAD if before.sanitized else 1)
    within_budget(before, grown, bound, f"{LYING_REQUESTS} Treaddirs with 4 KiB buffers")
