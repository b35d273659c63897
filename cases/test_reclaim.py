"""File descriptor reclaim: QEMU keeps one host descriptor per open fid until the number it holds
passes a high-water mark derived from its RLIMIT_NOFILE (limit - min(400, limit/3)); then
v9fs_reclaim_fd() closes the descriptors of fids not used lately, and the next request on such a
fid reopens the file (v9fs_reopen_fid()) with the flags it was opened with. A client must not be
able to tell: every fid reads and writes as before, directory listings go on where they were, an
unlinked file's fid (which cannot be reopened) is never reclaimed.

QEMU runs with RLIMIT_NOFILE 200 here: the mark is 134 descriptors, each reclaim closes up to 100."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fixtures.case_path import case_path
from fixtures.expect import expect_field
from fixtures.place import Place
from fixtures.pool import Device
from harness.p9.messages import Tread

NOFILE = 200
#: more opens than the mark can take twice over: enough for two reclaim passes (the first only
#: clears each fid's "referenced" bit) wherever the target sits in QEMU's fid table
MAX_PADS = 400
RECLAIM = [pytest.mark.rlimit_nofile(NOFILE), pytest.mark.fsdev(security_model="passthrough")]


def qemu_fds_of(device: Device, host: Path) -> int:
    """How many descriptors QEMU holds of ``host``. Each link in /proc/PID/fd reads as the absolute
    path its descriptor was opened by, so one readlink per descriptor is enough: realpath() would
    lstat every component of it too, and the pad loops below ask after every open (~40% of these
    cases' time went there)."""
    pid = device.machine.pid
    assert pid is not None
    target = str(host.resolve())
    return sum(1 for fd in os.scandir(f"/proc/{pid}/fd") if _link(fd.path) == target)


def _link(path: str) -> str:
    """Where a /proc fd link points, or "" for a descriptor closed while the directory was read."""
    try:
        return os.readlink(path)
    except FileNotFoundError:
        return ""


def make_pad(place: Place) -> None:
    """The file the pad fids open; a case that makes it before its first request has it in its
    reproducer, which replay can then make too."""
    pad = place.host_path("pad")
    if not pad.exists():
        pad.write_bytes(b"pad")


@contextmanager
def reclaimed(place: Place, device: Device, *targets: Path) -> Iterator[int]:
    """Open pad fids until QEMU holds no descriptor of any of ``targets`` (their fids reclaimed);
    yields how many it took, and clunks the pads after the block."""
    p9 = place.session
    make_pad(place)
    pads: list[int] = []
    try:
        while any(qemu_fds_of(device, t) for t in targets):
            assert len(pads) < MAX_PADS, f"QEMU still holds {targets} after {MAX_PADS} more opens"
            fid = p9.walk_fid(place.fid, ["pad"])
            p9.lopen(fid, os.O_RDONLY)
            pads.append(fid)
        yield len(pads)
    finally:
        for fid in pads:
            p9.clunk(fid)


@RECLAIM[0]
@RECLAIM[1]
@case_path("reclaim/many_files", backends=["local"])
def test_every_fid_still_reads_its_file(place: Place, device: Device) -> None:
    """150 files open at once, more than the mark: QEMU holds fewer descriptors than fids (it
    reclaimed), and every fid still reads its own file's bytes."""
    p9 = place.session
    fids = {}
    for n in range(150):
        place.host_path(f"f{n}").write_bytes(f"file {n} ".encode() * (n + 1))
        fid = p9.walk_fid(place.fid, [f"f{n}"])
        p9.lopen(fid, os.O_RDONLY)
        fids[n] = fid
    held = sum(qemu_fds_of(device, place.host_path(f"f{n}")) for n in fids)
    assert held < len(fids), "QEMU reclaimed no descriptor"
    for n, fid in fids.items():
        expected = f"file {n} ".encode() * (n + 1)
        assert p9.read(fid, 0, len(expected) + 10).data == expected
    for fid in fids.values():
        p9.clunk(fid)


#: open flags -> what the file holds after "first" at 0, a reclaim, and "second" at 6
WRITE_FLAGS = {
    "O_WRONLY": (os.O_WRONLY, b"first-second"),
    "O_RDWR": (os.O_RDWR, b"first-second"),
    "O_WRONLY_O_TRUNC": (os.O_WRONLY | os.O_TRUNC, b"first-second"),
    "O_RDWR_O_TRUNC": (os.O_RDWR | os.O_TRUNC, b"first-second"),
    "O_WRONLY_O_APPEND": (os.O_WRONLY | os.O_APPEND, b"old.first-second"),
}


@pytest.mark.qemu_bug(
    fixed_in=(),
    when={"flags": "O_WRONLY_O_TRUNC"},
    reason="v9fs_reopen_fid() reopens a reclaimed fid with the flags it was opened with, O_TRUNC "
    "included: the file is truncated again, and what the client wrote before the reclaim is lost",
    upstream="reclaim-o-trunc",
)
@pytest.mark.qemu_bug(
    fixed_in=(),
    when={"flags": "O_RDWR_O_TRUNC"},
    reason="v9fs_reopen_fid() reopens a reclaimed fid with O_TRUNC again: data written before the reclaim is lost",
    upstream="reclaim-o-trunc",
)
@RECLAIM[0]
@RECLAIM[1]
@case_path("reclaim/write_{flags}", backends=["local"], flags=list(WRITE_FLAGS))
def test_writes_survive_a_reclaim(place: Place, device: Device, flags: str) -> None:
    """A fid opened for writing, written, reclaimed and written again: the host file has both
    writes, at the offsets asked for (at the end, with O_APPEND), and nothing of the first
    write is lost to the reopen."""
    open_flags, expected = WRITE_FLAGS[flags]
    p9 = place.session
    target = place.host_path("target")
    target.write_bytes(b"old.")
    make_pad(place)
    fid = p9.walk_fid(place.fid, ["target"])
    p9.lopen(fid, open_flags)
    assert p9.write(fid, 0, b"first-").count == 6
    with reclaimed(place, device, target):
        assert p9.write(fid, 6, b"second").count == 6  # reopens the file
        assert qemu_fds_of(device, target) == 1
    expect_bytes(place, "target", expected)
    assert target.read_bytes() == expected
    p9.clunk(fid)


@pytest.mark.qemu_bug(
    fixed_in=(),
    reason="Tlcreate keeps O_TRUNC in the fid's open flags; v9fs_reopen_fid() after a reclaim "
    "truncates the new file and loses what was written to it",
    upstream="reclaim-o-trunc",
)
@RECLAIM[0]
@RECLAIM[1]
@case_path("reclaim/lcreate_O_TRUNC", backends=["local"])
def test_created_file_survives_a_reclaim(place: Place, device: Device) -> None:
    """A file made by Tlcreate with O_TRUNC (what Linux sends for creat()), written, reclaimed,
    written again: both writes are in the file."""
    p9 = place.session
    make_pad(place)
    fid = p9.walk_fid(place.fid, [])
    p9.lcreate(fid, "made", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    p9.write(fid, 0, b"first-")
    with reclaimed(place, device, place.host_path("made")):
        p9.write(fid, 6, b"second")
    expect_bytes(place, "made", b"first-second")
    assert place.host_path("made").read_bytes() == b"first-second"
    p9.clunk(fid)


def expect_bytes(place: Place, name: str, expected: bytes) -> None:
    """The file's bytes, read through a fid of its own (more than ``expected``, to see any beyond),
    are ``expected``: what the host holds, as 9P shows it, a check replay judges."""
    p9 = place.session
    fid = p9.walk_fid(place.fid, [name])
    try:
        p9.lopen(fid, os.O_RDONLY)
        expect_field(p9.rpc(Tread(fid=fid, offset=0, count=len(expected) + 16)), "data", expected)
    finally:
        p9.clunk(fid)


@RECLAIM[0]
@RECLAIM[1]
@case_path("reclaim/readdir", backends=["local"])
def test_listing_goes_on_after_a_reclaim(place: Place, device: Device) -> None:
    """A directory listed halfway, its stream reclaimed, then listed on from the offset the last
    entry gave: every name exactly once."""
    p9 = place.session
    listed = place.host_path("listed")
    listed.mkdir()
    for n in range(40):
        (listed / f"entry{n:02}").write_bytes(b"")
    fid = p9.walk_fid(place.fid, ["listed"])
    p9.lopen(fid, os.O_RDONLY | os.O_DIRECTORY)
    first = p9.readdir(fid, 0, 300).entries
    assert 0 < len(first) < 42
    with reclaimed(place, device, listed):
        rest, offset = [], first[-1].offset
        while entries := p9.readdir(fid, offset, 300).entries:
            rest += entries
            offset = entries[-1].offset
    names = [e.name for e in first + rest]
    assert sorted(names) == sorted([".", "..", *os.listdir(listed)])
    p9.clunk(fid)


@RECLAIM[0]
@RECLAIM[1]
@case_path("reclaim/unlinked_kept", backends=["local"])
def test_unlinked_file_is_never_reclaimed(place: Place, device: Device) -> None:
    """An open file unlinked through 9P cannot be reopened by name: QEMU must keep its descriptor
    through a reclaim (v9fs_mark_fids_unreclaim()), and the fid still reads it."""
    session = place.session
    place.host_path("doomed").write_bytes(b"still here")
    fid = session.walk_fid(place.fid, ["doomed"])
    session.lopen(fid, os.O_RDONLY)
    session.unlinkat(place.fid, "doomed")
    place.host_path("pad").write_bytes(b"pad")
    pads = []
    for _ in range(2 * NOFILE // 3 + 20):  # past the mark: two reclaim passes
        pad = session.walk_fid(place.fid, ["pad"])
        session.lopen(pad, os.O_RDONLY)
        pads.append(pad)
    assert qemu_fds_of(device, place.host_path("pad")) < len(pads), "QEMU reclaimed nothing"
    assert session.read(fid, 0, 100).data == b"still here"
    for pad in pads:
        session.clunk(pad)
    session.clunk(fid)
