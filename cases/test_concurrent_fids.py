"""Fids and descriptors under requests in flight: a fid clunked (or dropped by Tversion) while
requests on it are in the ring, a clunk of a fid whose request blocks, reads and renames while
QEMU reclaims descriptors, and 9P2000.u's Twstat rename under readers. Rounds, seeds and the one
oracle as in :mod:`cases.test_concurrent`, whose model and helpers these share."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cases.test_concurrent import CONTENT, Outcome, assert_serial
from fixtures.batches import in_batches, round_seeds, send_group
from fixtures.case_path import case_path
from fixtures.oracle import observed
from fixtures.place import Place
from fixtures.races import (
    RENAME_LISTING_RACE,
    ListingRaceSeen,
    RaceLog,
)
from harness.p9 import wire
from harness.p9.messages import (
    Rclunk,
    Rflush,
    Rlerror,
    Tclunk,
    Tflush,
    Tgetattr,
    Tlopen,
    Tread,
    Treaddir,
    Trenameat,
    Tstat,
    Tversion,
    Twalk,
    Twrite,
    twstat,
)  # fmt: skip
from harness.p9.session import Session
from harness.p9.wire import TMessage
from harness.qemu import versions


@dataclass
class FidModel:
    """One fid's life: alive until a Tclunk or a Tversion (which drops every fid). On a fid the
    server does not hold, Tread is EINVAL, Tgetattr, Twalk and Tclunk ENOENT (QEMU's answers, as
    refused/* pins them); Tversion always answers."""

    alive: bool = True

    @staticmethod
    def reads(op: str) -> bool:
        return op in ("read", "getattr", "walk")

    def apply(self, op: str) -> Outcome:
        if op == "read":
            return CONTENT if self.alive else "EINVAL"
        if op == "getattr":
            return "ok" if self.alive else "ENOENT"
        if op == "walk":  # no names: no qid
            return 0 if self.alive else "ENOENT"
        if op == "clunk":
            was, self.alive = self.alive, False
            return "ok" if was else "ENOENT"
        if op == "version":
            self.alive = False
            return "ok"
        raise AssertionError(op)


FID_REQUESTS: dict[str, Callable[[Session, int], TMessage[Any]]] = {
    "read": lambda p9, fid: Tread(fid=fid, offset=0, count=100),
    "getattr": lambda p9, fid: Tgetattr(fid=fid, request_mask=wire.GETATTR_BASIC),
    "walk": lambda p9, fid: Twalk(fid=fid, newfid=p9.new_fid(), wnames=[]),
    "clunk": lambda p9, fid: Tclunk(fid=fid),
    "version": lambda p9, fid: Tversion(msize=8192, version=wire.DOTL),
}


@case_path("concurrent/fid_lifetime/{kick}", kick=["one_kick", "staggered"])
def test_fid_clunked_or_dropped_with_requests_in_flight(
    p9: Session, device: Any, request: pytest.FixtureRequest, backend: str, kick: str
) -> None:
    """Tclunk (twice) and Tversion of an open fid while reads, attribute reads and walks of it are
    in flight: every answer one of some serial order (before the clunk it works, after it the
    fid is unknown), QEMU alive, no host fd left behind."""
    name = "LOPEN" if backend == "synth" else "concurrent-fid-lifetime"
    if backend == "local":
        (Path(device.machine.config.fs.path) / name).write_bytes(CONTENT)
    for seed in round_seeds(request):
        rng = random.Random(seed)
        p9.version(8192)
        p9.attach(0)
        fid = p9.walk_fid(0, [name])
        p9.lopen(fid, os.O_RDONLY)
        readers = ["getattr", "walk"] + (["read"] if backend == "local" else [])
        ops = rng.sample(["clunk", "clunk", "version"], rng.randint(1, 3)) + rng.sample(
            readers, rng.randint(1, len(readers))
        )
        rng.shuffle(ops)
        answers = send_group(p9, [FID_REQUESTS[op](p9, fid) for op in ops], kick == "staggered")
        assert_serial(request, seed, ops, answers, FidModel)
        assert device.alive()
        p9.version(8192)  # whatever the round left: every fid dropped
    if backend == "local":
        (Path(device.machine.config.fs.path) / name).unlink()


RECLAIM_NOFILE = 200  # QEMU's reclaim mark is then 134 descriptors (cases/test_reclaim.py)
RECLAIM_FILES = 160


@pytest.mark.slow
@pytest.mark.rlimit_nofile(RECLAIM_NOFILE)
@pytest.mark.fsdev(security_model="passthrough")
@pytest.mark.qemu_bug(fixed_in=versions.READDIR_RENAME_LOCK, introduced_in=versions.REMAP_DEFAULT, race=True,
                      raises=ListingRaceSeen, reason=RENAME_LISTING_RACE)  # fmt: skip
@case_path("concurrent/reclaim_under_renames/{kick}", backends=["local"], kick=["one_kick", "staggered"])
def test_reads_and_renames_while_descriptors_are_reclaimed(
    place: Place, device: Any, request: pytest.FixtureRequest, kick: str
) -> None:
    """More open fids than QEMU keeps descriptors for (it reclaims the idle ones, walking its fid
    table, and reopens them by path when used), then reads of many of them, renames of some and a
    listing, all in flight together: every read returns its own file's bytes (a reclaimed fid
    reopened at its renamed path), every rename works, the listing shows each file under exactly
    one of its names, QEMU stays within its descriptor limit. A listing that failed with ENOENT
    is the known race of a QEMU without the rename lock in Treaddir: every other reply must still
    hold, and the case ends as that bug's xfail, naming the seeds that saw it."""
    p9 = place.session
    host = place.host_path()
    races = RaceLog()
    for i in range(RECLAIM_FILES):
        (host / f"f{i}").write_bytes(f"file {i}".encode())
    for seed in round_seeds(request, share=1 / 3):  # 160 opens a round
        rng = random.Random(seed)
        # the round's renames taken back: each round starts from f0..f159 with their own bytes (a
        # rename costs a directory entry, a new file an inode, many times more)
        for renamed_file in host.glob("g*"):
            renamed_file.rename(host / f"f{renamed_file.name[1:]}")
        assert sorted(entry.name for entry in host.iterdir()) == sorted(f"f{i}" for i in range(RECLAIM_FILES))
        opened = [p9.new_fid() for _ in range(RECLAIM_FILES)]
        walks = [Twalk(fid=place.fid, newfid=opened[i], wnames=[f"f{i}"]) for i in range(RECLAIM_FILES)]
        opens = [Tlopen(fid=fid, flags=os.O_RDONLY) for fid in opened]
        for replies in (in_batches(p9, walks), in_batches(p9, opens)):  # set up in batches: a round costs less
            assert all(r is not None and not isinstance(r, Rlerror) for r in replies), replies
        listing = p9.walk_fid(place.fid, [])
        p9.lopen(listing, os.O_RDONLY | os.O_DIRECTORY)
        reads = rng.sample(range(RECLAIM_FILES), 39)
        renamed = set(rng.sample(range(RECLAIM_FILES), 20))
        requests: list[TMessage[Any]] = [Tread(fid=opened[i], offset=0, count=64) for i in reads]
        requests += [Trenameat(olddirfid=place.fid, oldname=f"f{i}", newdirfid=place.fid, newname=f"g{i}")
                     for i in renamed]  # fmt: skip
        requests.append(Treaddir(fid=listing, offset=0, count=8000))
        rng.shuffle(requests)
        frames: list[bytes] = []
        answers = dict(zip(map(id, requests), send_group(p9, requests, kick == "staggered", frames), strict=True))
        where = f"round of seed {seed} (-k '{request.node.callspec.id}' --concurrent-seed {seed})"
        for at, request_ in enumerate(requests):
            got = answers[id(request_)]
            if isinstance(request_, Treaddir):
                races.chance(frames[at])
            if isinstance(request_, Tread):
                i = opened.index(request_.fid)
                assert got == f"file {i}".encode(), f"{where}: {request_} read {got!r}"
            elif isinstance(request_, Trenameat):
                assert got == "ok", f"{where}: {request_} answered {got}"
            elif got == "ENOENT":  # the known race: where the fix is in, no marker expects it and the case fails
                races.saw(ListingRaceSeen, f"seed {seed}", frames[at])
            else:
                names = got - {".", ".."} if isinstance(got, frozenset) else got
                assert isinstance(names, frozenset), f"{where}: the listing answered {got}"
                wanted = {f"f{i}" for i in range(RECLAIM_FILES) if i not in renamed}
                either = {i for i in renamed if (f"f{i}" in names) != (f"g{i}" in names)}
                assert wanted <= names and either == renamed and len(names) == RECLAIM_FILES, (
                    f"{where}: the listing has {sorted(names)[:10]}… ({len(names)} names)"
                )
        assert device.alive() and device.machine.resources().fds < RECLAIM_NOFILE
        in_batches(p9, [Tclunk(fid=fid) for fid in [*opened, listing]])
    races.raise_if_seen("Treaddir failed with ENOENT")


@pytest.mark.needs_synth_tree
@case_path("concurrent/clunk_while_blocked", backends=["synth"])
def test_clunk_of_a_fid_with_a_blocked_request(attached: Session, device: Any) -> None:
    """A fid clunked while a request on it is blocked in the server (a write to synth's FLUSH,
    which only a Tflush ends): the clunk is answered at once, the fid is gone for the requests
    after it (ENOENT), and the blocked write is still there to be flushed: its buffer comes back
    empty before the Rflush. QEMU answers throughout and the name can be walked again."""
    p9 = attached
    fid = p9.walk_fid(0, ["FLUSH"])
    p9.lopen(fid, os.O_WRONLY)
    write = p9.send(Twrite(fid=fid, offset=0, data=b"\x01"))
    clunk = p9.send(Tclunk(fid=fid))
    after = p9.send(Tgetattr(fid=fid, request_mask=wire.GETATTR_BASIC))
    assert isinstance(clunk.wait().message, Rclunk)
    assert observed(after) == "ENOENT"
    flush = p9.send(Tflush(oldtag=write.tag))
    flushed, done = write.wait(), flush.wait()
    assert flushed.used_len == 0 and isinstance(done.message, Rflush) and flushed.order < done.order
    assert device.alive()
    again = p9.walk_fid(0, ["FLUSH"])
    p9.clunk(again)


@dataclass
class WstatModel:
    """9P2000.u: the file renamed by a Twstat of its own fid (the fid follows), walks by name, and
    Tstat of the fid, whose name is the file's name at that point of the order."""

    name: str = "f"

    @staticmethod
    def reads(op: str) -> bool:
        return op != "wstat_rename"

    def apply(self, op: str) -> Outcome:
        if op == "wstat_rename":
            if self.name != "f":
                return "ENOENT"
            self.name = "g"
            return "ok"
        if op in ("walk_f", "walk_g"):
            return 1 if op[-1] == self.name else "ENOENT"
        if op == "stat":
            return self.name
        raise AssertionError(op)


#: op -> the request, from the session, the directory's fid and the file's
WSTAT_REQUESTS: dict[str, Callable[[Session, int, int], TMessage[Any]]] = {
    "wstat_rename": lambda p9, dir_fid, fid: twstat(fid, name="g"),
    "walk_f": lambda p9, dir_fid, fid: Twalk(fid=dir_fid, newfid=p9.new_fid(), wnames=["f"]),
    "walk_g": lambda p9, dir_fid, fid: Twalk(fid=dir_fid, newfid=p9.new_fid(), wnames=["g"]),
    "stat": lambda p9, dir_fid, fid: Tstat(fid=fid),
}


@pytest.mark.fsdev(security_model="passthrough")
@case_path("concurrent/wstat_rename/{kick}", backends=["local"], dialect=[wire.DOTU], kick=["one_kick", "staggered"])
def test_wstat_rename_under_readers(
    place: Place, device: Any, request: pytest.FixtureRequest, dialect: str, kick: str
) -> None:
    """9P2000.u's rename (a Twstat of the file's own fid with a new name) in flight with walks of
    both names and Tstat of the fid: answers of some serial order, the Tstat's name included."""
    p9 = place.session
    for seed in round_seeds(request):
        rng = random.Random(seed)
        for entry in place.host_path().iterdir():
            entry.unlink()
        place.host_path("f").write_bytes(CONTENT)
        fid = p9.walk_fid(place.fid, ["f"])
        ops = ["wstat_rename", *rng.sample(["walk_f", "walk_g", "stat", "stat"], rng.randint(1, 4))]
        rng.shuffle(ops)
        pendings_answers = send_group(p9, [WSTAT_REQUESTS[op](p9, place.fid, fid) for op in ops], kick == "staggered")
        assert_serial(request, seed, ops, pendings_answers, WstatModel)
        assert device.alive()
        for held in sorted(p9.fids - {0, place.fid}):
            p9.clunk(held)
