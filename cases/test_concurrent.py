"""Conflicting requests in flight together: readers of a directory, a file and fids (Twalk,
Tgetattr, Tlopen, Txattrwalk, Tread, Treaddir, Treadlink, Tstatfs) against renames and an unlink
of the file and of an ancestor (Trenameat, Tunlinkat), all in the ring at once, in one kick or
in staggered kicks, a random subset in a random order per round, each round's seed recorded; and
creations of one name against its removers.

Every round checks that QEMU is alive and that the replies, taken together, are ones some serial
order of the round's requests gives on the model of the export (fixtures/judge.py, the one judge
every concurrent family asks; the model: fixtures/model.py). After the case QEMU holds no more
host file descriptors than before (fixtures/held.py, around every case). Each round has a seed of
its own, the same every run; a case that fails names it, and ``--concurrent-seed S`` runs that
round alone; ``--concurrent-rounds N`` hunts longer.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable

import pytest

from fixtures.batches import round_seeds, send_group
from fixtures.case_path import case_path
from fixtures.judge import judge_group
from fixtures.mirror import Mirror
from fixtures.model import SECURITY_MODELS
from fixtures.pool import Device
from fixtures.races import CREATE_RACE, LISTING_RACE, CreateRaceSeen, ListingRaceSeen, RaceLog
from harness.p9 import wire
from harness.p9.messages import (
    Tgetattr,
    Tlcreate,
    Tlopen,
    Tmkdir,
    Tread,
    Treaddir,
    Treadlink,
    Trenameat,
    Tstatfs,
    Tsymlink,
    Tunlinkat,
    Twalk,
    Txattrwalk,
)
from harness.p9.wire import Request

CONTENT = b"concurrent content"
CLONES = 3  # fids on the same path as the file's


class Fids:
    """What the round's requests use, made through the mirror before the round: the directory,
    the file walked and opened, the directory opened for reading, the inner file walked, the
    link, and more fids on the file's path (a rename must move them all)."""

    def __init__(self, mirror: Mirror, host_link: bool) -> None:
        self.mirror, self.dir = mirror, mirror.fid
        self.open_file = mirror.opened(self.dir, ["f"], os.O_RDONLY)
        self.open_dir = mirror.opened(self.dir, [], os.O_RDONLY | os.O_DIRECTORY)
        # through 9P, so that it is a symlink under every security model (a host symlink is none
        # under the mapped ones); on a read-only export (passthrough) the host's own
        if not host_link:
            mirror.rpc(Tsymlink(fid=self.dir, name="l", symtgt="f", gid=0))
        self.file, self.inner, self.link, self.file_to_open = (
            mirror.walk(self.dir, names) for names in (["f"], ["s", "x"], ["l"], ["f"])
        )
        self.clones = [mirror.walk(self.dir, ["f"]) for _ in range(CLONES)]

    def new(self) -> int:
        return self.mirror.session.new_fid()


def _getattr_clone(n: int) -> Callable[[Fids], Request]:
    return lambda f: Tgetattr(fid=f.clones[n], request_mask=wire.GETATTR_BASIC)


#: op -> the request, from the round's fids
REQUESTS: dict[str, Callable[[Fids], Request]] = {
    "walk_f": lambda f: Twalk(fid=f.dir, newfid=f.new(), wnames=["f"]),
    "walk_g": lambda f: Twalk(fid=f.dir, newfid=f.new(), wnames=["g"]),
    "getattr_file": lambda f: Tgetattr(fid=f.file, request_mask=wire.GETATTR_BASIC),
    "getattr_inner": lambda f: Tgetattr(fid=f.inner, request_mask=wire.GETATTR_BASIC),
    **{f"getattr_clone{n}": _getattr_clone(n) for n in range(CLONES)},
    "lopen_file": lambda f: Tlopen(fid=f.file_to_open, flags=os.O_RDONLY),
    "xattrwalk_file": lambda f: Txattrwalk(fid=f.file, newfid=f.new(), name=""),
    "statfs": lambda f: Tstatfs(fid=f.dir),
    "readlink": lambda f: Treadlink(fid=f.link),
    "read_open": lambda f: Tread(fid=f.open_file, offset=0, count=100),
    "readdir": lambda f: Treaddir(fid=f.open_dir, offset=0, count=4000),
    "rename_f_g": lambda f: Trenameat(olddirfid=f.dir, oldname="f", newdirfid=f.dir, newname="g"),
    "rename_s_t": lambda f: Trenameat(olddirfid=f.dir, oldname="s", newdirfid=f.dir, newname="t"),
    "unlink_g": lambda f: Tunlinkat(dirfd=f.dir, name="g", flags=0),
}  # fmt: skip
WRITERS = ("rename_f_g", "rename_s_t", "unlink_g")


def populate(mirror: Mirror, host_link: bool = False) -> None:
    host = mirror.path()
    for entry in host.iterdir():
        if entry.name != ".virtfs_metadata":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    (host / "f").write_bytes(CONTENT)
    (host / "s").mkdir()
    (host / "s" / "x").write_bytes(b"inner")
    if host_link:
        (host / "l").symlink_to("f")
    mirror.learn(())


def one_round(mirror: Mirror, rng: random.Random, staggered: bool, where: str, races: RaceLog,
              host_link: bool = False) -> str | None:  # fmt: skip
    """Set the directory up, send a random group (a writer at least) in a random order, await all,
    judge them; what was wrong, or None."""
    populate(mirror, host_link)
    fids = Fids(mirror, host_link)
    start = mirror.model.copy
    readers = [op for op in REQUESTS if op not in WRITERS]
    ops = rng.sample(list(WRITERS), rng.randint(1, len(WRITERS))) + rng.sample(readers, rng.randint(1, 4))
    rng.shuffle(ops)
    requests = [REQUESTS[op](fids) for op in ops]
    frames = list[bytes]()
    answers = send_group(mirror.session, requests, staggered, frames)
    ends, failure = judge_group(requests, answers, start, frames, races, where)
    if ends:
        mirror.model = ends[0]
    mirror.clunk_all({0, mirror.fid})
    return failure


def _rounds(mirror: Mirror, device: Device, request: pytest.FixtureRequest, kick: str, what: str,
            host_link: bool = False) -> None:  # fmt: skip
    races = RaceLog()
    for seed in round_seeds(request):
        where = f"round of seed {seed} (replay it alone: -k '{request.node.callspec.id}' --concurrent-seed {seed})"
        failure = one_round(mirror, random.Random(seed), kick == "staggered", f"seed {seed}", races, host_link)
        assert device.alive(), f"QEMU died in the {where}"
        assert failure is None, f"{where}: {failure}"
    races.raise_if_seen(what)


@pytest.mark.qemu_bug(fixed_in=(), when={"multidevs": "remap"}, race=True, raises=ListingRaceSeen, reason=LISTING_RACE,
                      upstream="listing-race")  # fmt: skip
@case_path("concurrent/rename_under_readers/{security_model}/{multidevs}/{kick}", backends=["local"],
           security_model=list(SECURITY_MODELS), multidevs=["warn", "remap"],
           kick=["one_kick", "staggered"])  # fmt: skip
def test_rename_under_readers(mirror: Mirror, device: Device, request: pytest.FixtureRequest, security_model: str,
                              multidevs: str, kick: str) -> None:  # fmt: skip
    """Each round's replies are those of some serial order of its requests; QEMU answers
    throughout, and leaks no host file descriptor. Under remap a listing that failed with ENOENT
    beside a change of its entries is the known race: the round's other replies must still be an
    order's, and the case ends as that race's xfail, naming the seeds that saw it."""
    _rounds(mirror, device, request, kick, "Treaddir failed with ENOENT")


STAYING = tuple(f"s{n:02d}" for n in range(40))


@pytest.mark.qemu_bug(fixed_in=(), when={"multidevs": "remap"}, race=True, raises=ListingRaceSeen, reason=LISTING_RACE,
                      upstream="listing-race")  # fmt: skip
@pytest.mark.fsdev(security_model="passthrough")
@case_path("concurrent/listing_under_unlink/{multidevs}/{kick}", backends=["local"], multidevs=["warn", "remap"],
           kick=["one_kick", "staggered"])  # fmt: skip
def test_listing_under_unlink(mirror: Mirror, device: Device, request: pytest.FixtureRequest, multidevs: str,
                              kick: str) -> None:  # fmt: skip
    """The smallest group that shows the listing race: Tunlinkat of a file and a Treaddir of its
    directory (opened before) in flight together, the file made anew through 9P each round (so
    the reproducer replays every round). The listing has the file or not, beside the 40 that
    stay; it never fails. Under remap an ENOENT is the known race, seen in a few rounds in a
    hundred on 10.0.13 (the case's reproducer replays it: exit 1)."""
    races = RaceLog()
    for name in STAYING:  # entries QEMU lstat()s under remap: the wider the window the race needs
        mirror.rpc(Tmkdir(dfid=mirror.fid, name=name, mode=0o755, gid=0))
    for seed in round_seeds(request):
        made = mirror.walk(mirror.fid, [])
        mirror.rpc(Tlcreate(fid=made, name="c", flags=os.O_RDWR | os.O_CREAT | os.O_EXCL, mode=0o644, gid=0))
        mirror.clunk_all({0, mirror.fid})
        listing = mirror.opened(mirror.fid, [], os.O_RDONLY | os.O_DIRECTORY)
        requests: list[Request] = [Tunlinkat(dirfd=mirror.fid, name="c", flags=0),
                                         Treaddir(fid=listing, offset=0, count=4000)]  # fmt: skip
        if random.Random(seed).random() < 0.5:
            requests.reverse()
        start, frames = mirror.model.copy, list[bytes]()
        answers = send_group(mirror.session, requests, kick == "staggered", frames)
        ends, failure = judge_group(requests, answers, start, frames, races, f"seed {seed}")
        assert failure is None, f"round of seed {seed}: {failure}"
        mirror.model = ends[0]
        mirror.clunk_all({0, mirror.fid})
        assert device.alive()
    races.raise_if_seen("Treaddir failed with ENOENT")


@pytest.mark.fsdev(readonly="on", security_model="passthrough")
@case_path("concurrent/rename_under_readers/readonly/{kick}", backends=["local"], kick=["one_kick", "staggered"])
def test_refused_renames_under_readers(mirror: Mirror, device: Device, request: pytest.FixtureRequest,
                                       kick: str) -> None:  # fmt: skip
    """On a read-only export the same groups: the writers refused (EROFS) whatever is in flight
    beside them, the readers answered as if nothing happened."""
    _rounds(mirror, device, request, kick, "a refusal", host_link=True)


#: the requests of one name ``a`` made and removed
NAME_REQUESTS: dict[str, Callable[[int], Request]] = {
    "mkdir_a": lambda d: Tmkdir(dfid=d, name="a", mode=0o755, gid=0),
    "mkdir_a2": lambda d: Tmkdir(dfid=d, name="a", mode=0o700, gid=0),
    "symlink_a": lambda d: Tsymlink(fid=d, name="a", symtgt="t", gid=0),
    "rmdir_a": lambda d: Tunlinkat(dirfd=d, name="a", flags=wire.AT_REMOVEDIR),
    "rmdir_a2": lambda d: Tunlinkat(dirfd=d, name="a", flags=wire.AT_REMOVEDIR),
    "unlink_a": lambda d: Tunlinkat(dirfd=d, name="a", flags=0),
}


@pytest.mark.qemu_bug(fixed_in=(), race=True, raises=CreateRaceSeen, reason=CREATE_RACE, upstream="create-race")
@case_path("concurrent/create_under_removers/{security_model}/{kick}", backends=["local"],
           security_model=list(SECURITY_MODELS), kick=["one_kick", "staggered"])  # fmt: skip
def test_create_under_removers(mirror: Mirror, device: Device, request: pytest.FixtureRequest, security_model: str,
                               kick: str) -> None:  # fmt: skip
    """Tmkdir and Tsymlink of one name in flight with Tunlinkat of it (a directory or not): each
    round's replies are some serial order's, a creation that answered the known race's errno
    read as made or as leaving nothing (the name then free: fixtures/races.py); QEMU alive after
    every round, raced or not, and leaking no host fd."""
    races = RaceLog()
    for seed in round_seeds(request):
        rng = random.Random(seed)
        start_dir = rng.choice([False, True])
        # the round's start through 9P, not on the host: the reproducer then replays every round
        for flags in (wire.AT_REMOVEDIR, 0):
            mirror.send(Tunlinkat(dirfd=mirror.fid, name="a", flags=flags))
        if start_dir:
            mirror.rpc(Tmkdir(dfid=mirror.fid, name="a", mode=0o755, gid=0))
        ops = rng.sample(list(NAME_REQUESTS), rng.randint(2, 4))
        requests = [NAME_REQUESTS[op](mirror.fid) for op in ops]
        start, frames = mirror.model.copy, list[bytes]()
        answers = send_group(mirror.session, requests, kick == "staggered", frames)
        ends, failure = judge_group(requests, answers, start, frames, races, f"seed {seed}")
        assert device.alive(), f"QEMU died in the round of seed {seed}: {ops}"
        where = f"round of seed {seed} (-k '{request.node.callspec.id}' --concurrent-seed {seed})"
        assert failure is None, f"{where}: {failure}"
        mirror.model = ends[0]
        mirror.learn(())  # a raced creation's clean-up may have removed another's node: the host says which
    races.raise_if_seen("a creation answered ENOENT after making its node")
