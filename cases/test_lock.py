"""Tlock/Tgetlock: "acquire or release a POSIX record lock"; "test for the existence of a POSIX
record lock" (diod protocol.md)."""

from __future__ import annotations

import errno
import os

import pytest

from fixtures.case_path import case_path
from fixtures.deviations import LOCK_CONFLICT
from fixtures.expect import FieldNotAsWanted, expect_field, expect_rlerror
from fixtures.place import Place
from fixtures.pool import Device
from harness.errors import QEMUExited
from harness.p9.messages import Tgetlock, Tlock
from harness.p9.session import Session
from harness.p9.wire import P9_LOCK_BLOCKED as LOCK_BLOCKED
from harness.p9.wire import P9_LOCK_SUCCESS as LOCK_SUCCESS
from harness.p9.wire import P9_LOCK_TYPE_RDLCK as RDLCK
from harness.p9.wire import P9_LOCK_TYPE_UNLCK as UNLCK
from harness.p9.wire import P9_LOCK_TYPE_WRLCK as WRLCK
from harness.qemu import versions


def open_twice(place: Place) -> tuple[int, int]:
    place.host_path("f").write_bytes(b"x" * 100)
    fids = []
    for _ in range(2):
        fid = place.session.walk_fid(place.fid, ["f"])
        place.session.lopen(fid, os.O_RDWR)
        fids.append(fid)
    return fids[0], fids[1]


def lock(p9: Session, fid: int, kind: int, proc_id: int) -> int:
    return int(p9.rpc(Tlock(fid=fid, type=kind, flags=0, start=0, length=0, proc_id=proc_id, client_id="c")).status)


@case_path("lock/basic", backends=["local"])
def test_lock_and_unlock(place: Place) -> None:
    """A write lock, its release, and Tgetlock on a free range answering UNLCK."""
    p9 = place.session
    first, second = open_twice(place)
    assert lock(p9, first, WRLCK, 1) == LOCK_SUCCESS
    assert lock(p9, first, UNLCK, 1) == LOCK_SUCCESS
    got = p9.rpc(Tgetlock(fid=second, type=WRLCK, start=0, length=0, proc_id=2, client_id="c"))
    assert got.type == UNLCK
    for fid in (first, second):
        p9.clunk(fid)


@pytest.mark.qemu_bug(**LOCK_CONFLICT, raises=FieldNotAsWanted)
@case_path("lock/conflict", backends=["local"])
def test_lock_conflict_between_fids(place: Place) -> None:
    """A write lock held through one fid: a conflicting Tlock through another is BLOCKED, and
    Tgetlock there describes the holder."""
    p9 = place.session
    first, second = open_twice(place)
    try:
        assert lock(p9, first, WRLCK, 1) == LOCK_SUCCESS
        conflicting = Tlock(fid=second, type=WRLCK, flags=0, start=0, length=0, proc_id=2, client_id="c")
        expect_field(p9.rpc(conflicting), "status", LOCK_BLOCKED)  # a check replay judges
        got = p9.rpc(Tgetlock(fid=second, type=WRLCK, start=0, length=0, proc_id=2, client_id="c"))
        assert (got.type, got.proc_id) == (WRLCK, 1)
    finally:
        for fid in (first, second):
            p9.clunk(fid)


@pytest.mark.qemu_bug(
    fixed_in=versions.LOCK_HANDLE_CHECK,
    when={"backend": "synth"},
    reason="v9fs_lock()/v9fs_getlock() call the backend's fstat without checking that the fid was "
    "opened; synth_fstat() dereferences the missing open state: QEMU dies of SIGSEGV",
    raises=QEMUExited,
)
@pytest.mark.qemu_bug(
    fixed_in=versions.LOCK_HANDLE_CHECK_LOCAL,
    when={"backend": "local"},
    reason="v9fs_lock()/v9fs_getlock() never check that the fid was opened: a lock on a walked, "
    "unopened fid is granted (local's fstat() of fd 0; fixed by either: c3aa2491cd's check, or on local "
    "75893c058b's descriptor -1)",
)
@case_path("lock/unopened_fid/{message}", message=["Tlock", "Tgetlock"])
def test_lock_on_an_unopened_fid(attached: Session, device: Device, message: str) -> None:
    """A record lock needs an open file, as fcntl(2) needs an open descriptor: a fid that was only
    walked gets EBADF, and QEMU lives on."""
    p9 = attached
    fid = p9.walk_fid(0, [])
    with expect_rlerror(errno.EBADF):
        if message == "Tlock":
            p9.rpc(Tlock(fid=fid, type=WRLCK, flags=0, start=0, length=0, proc_id=1, client_id="c"))
        else:
            p9.rpc(Tgetlock(fid=fid, type=WRLCK, start=0, length=0, proc_id=1, client_id="c"))
    assert device.alive()
    p9.clunk(fid)


BLOCK, RECLAIM = 0x1, 0x2
#: (type, flags) -> the Rlock status, or the errno QEMU refuses it with
LOCK_TABLE = {
    "RDLCK": (RDLCK, 0, LOCK_SUCCESS),
    "WRLCK": (WRLCK, 0, LOCK_SUCCESS),
    "UNLCK": (UNLCK, 0, LOCK_SUCCESS),
    "RDLCK_BLOCK": (RDLCK, BLOCK, LOCK_SUCCESS),
    "WRLCK_BLOCK": (WRLCK, BLOCK, LOCK_SUCCESS),
    "WRLCK_RECLAIM": (WRLCK, RECLAIM, errno.EINVAL),
    "WRLCK_BLOCK_RECLAIM": (WRLCK, BLOCK | RECLAIM, errno.EINVAL),
    "WRLCK_unknown_flag": (WRLCK, 0x80, errno.EINVAL),
}
RANGES = {"whole": (0, 0), "first_byte": (0, 1), "middle": (10, 20), "past_eof": (1 << 40, 100)}


@case_path("lock/table/{which}", backends=["local"], which=list(LOCK_TABLE))
def test_lock_types_and_flags(place: Place, which: str) -> None:
    """Each lock type with and without BLOCK is granted (SUCCESS); QEMU refuses every flag but
    BLOCK (RECLAIM too) with EINVAL; the file's bytes never change."""
    kind, flags, expected = LOCK_TABLE[which]
    p9 = place.session
    first, second = open_twice(place)
    lock_request = Tlock(fid=first, type=kind, flags=flags, start=0, length=0, proc_id=7, client_id="client-a")
    if expected == LOCK_SUCCESS:
        assert p9.rpc(lock_request).status == LOCK_SUCCESS
        assert (
            p9.rpc(Tlock(fid=first, type=UNLCK, flags=0, start=0, length=0, proc_id=7, client_id="client-a")).status
            == 0
        )
    else:
        with expect_rlerror(expected):
            p9.rpc(lock_request)
    assert place.host_path("f").read_bytes() == b"x" * 100
    for fid in (first, second):
        p9.clunk(fid)


@case_path("lock/getlock_echo/{kind}/{span}", backends=["local"], span=list(RANGES), kind=["RDLCK", "WRLCK"])
def test_getlock_answers_for_the_range_asked(place: Place, span: str, kind: str) -> None:
    """Tgetlock of a free range: Rgetlock says F_UNLCK and describes the very range, process and
    client it was asked about (start, length, proc_id, client_id), whatever the range."""
    start, length = RANGES[span]
    p9 = place.session
    first, second = open_twice(place)
    asked = RDLCK if kind == "RDLCK" else WRLCK
    got = p9.rpc(Tgetlock(fid=second, type=asked, start=start, length=length, proc_id=99, client_id="client-b"))
    assert (got.type, got.start, got.length, got.proc_id, got.client_id) == (UNLCK, start, length, 99, "client-b")
    for fid in (first, second):
        p9.clunk(fid)


@case_path("lock/ranges/{span}", backends=["local"], span=list(RANGES))
def test_lock_any_range(place: Place, span: str) -> None:
    """A write lock on any range (the whole file, one byte, the middle, far past the end) is
    granted and released."""
    start, length = RANGES[span]
    p9 = place.session
    first, second = open_twice(place)
    for kind in (WRLCK, UNLCK):
        got = p9.rpc(Tlock(fid=first, type=kind, flags=0, start=start, length=length, proc_id=3, client_id="c"))
        assert got.status == LOCK_SUCCESS
    for fid in (first, second):
        p9.clunk(fid)
