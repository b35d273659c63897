"""Tlock/Tgetlock: "acquire or release a POSIX record lock"; "test for the existence of a POSIX
record lock" (diod protocol.md)."""

from __future__ import annotations

import os

import pytest

from fixtures.place import Place
from fixtures.qos import qos
from harness.p9.session import Session

LOCK_SUCCESS, LOCK_BLOCKED = 0, 1
RDLCK, WRLCK, UNLCK = 0, 1, 2


def open_twice(place: Place) -> tuple[int, int]:
    place.host_path("f").write_bytes(b"x" * 100)
    fids = []
    for _ in range(2):
        fid, _ = place.session.walk(place.fid, ["f"])
        place.session.lopen(fid, os.O_RDWR)
        fids.append(fid)
    return fids[0], fids[1]


def lock(p9: Session, fid: int, kind: int, proc_id: int) -> int:
    return int(p9.rpc("Tlock", fid=fid, type=kind, flags=0, start=0, length=0, proc_id=proc_id, client_id="c").status)


@qos("lock/basic", backends=["local"])
def test_lock_and_unlock(place: Place) -> None:
    """A write lock, its release, and Tgetlock on a free range answering UNLCK."""
    p9 = place.session
    first, second = open_twice(place)
    assert lock(p9, first, WRLCK, 1) == LOCK_SUCCESS
    assert lock(p9, first, UNLCK, 1) == LOCK_SUCCESS
    got = p9.rpc("Tgetlock", fid=second, type=WRLCK, start=0, length=0, proc_id=2, client_id="c")
    assert got.type == UNLCK
    for fid in (first, second):
        p9.clunk(fid)


@pytest.mark.qemu_bug(
    at_most="7.2.99",
    reason="v9fs_lock() takes no lock on the host and answers every Tlock with SUCCESS, and "
    "v9fs_getlock() always answers UNLCK: conflicting locks from two fids are both granted",
)
@qos("lock/conflict", backends=["local"])
def test_lock_conflict_between_fids(place: Place) -> None:
    """A write lock held through one fid: a conflicting Tlock through another is BLOCKED, and
    Tgetlock there describes the holder."""
    p9 = place.session
    first, second = open_twice(place)
    try:
        assert lock(p9, first, WRLCK, 1) == LOCK_SUCCESS
        assert lock(p9, second, WRLCK, 2) == LOCK_BLOCKED
        got = p9.rpc("Tgetlock", fid=second, type=WRLCK, start=0, length=0, proc_id=2, client_id="c")
        assert (got.type, got.proc_id) == (WRLCK, 1)
    finally:
        for fid in (first, second):
            p9.clunk(fid)
