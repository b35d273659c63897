"""Conflicting requests in flight together: readers of a directory, a file and fids (Twalk,
Tgetattr, Tlopen, Txattrwalk, Tread, Treaddir, Treadlink, Tstatfs) against renames and an unlink
of the file and of an ancestor (Trenameat, Tunlinkat), all in the ring at once, in one kick or
in staggered kicks, a random subset in a random order per round, each round's seed recorded.

Every round checks that QEMU is alive and that the replies, taken together, are ones some serial
order of the round's requests gives (a linearizability check against :class:`Model` by the one
oracle, fixtures/oracle.py; the model's limits are written on it). After the case QEMU holds no
more host file descriptors than before (/proc/PID/fd: fixtures/held.py, around every case). Each
round has a seed of its own, the same every run; a case that fails names it, and
``--concurrent-seed S`` runs that round alone; ``--concurrent-rounds N`` hunts longer.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fixtures.batches import round_seeds, send_group
from fixtures.case_path import case_path
from fixtures.oracle import serial_outcomes
from fixtures.place import Place
from fixtures.races import (
    CREATE_RACE,
    LISTING_RACE,
    CreateRaceSeen,
    ListingRaceSeen,
    RaceLog,
    Stand,
    excuse,
)
from harness.p9 import wire
from harness.p9.messages import (
    Tgetattr,
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
)  # fmt: skip
from harness.p9.session import Session
from harness.p9.wire import TMessage

CONTENT = b"concurrent content"
MODELS = ["passthrough", "mapped-xattr", "mapped-file", "none"]
#: the outcome of one request: "ok", an errno name, or what a reply shows (a listing, bytes)
Outcome = Any


CLONES = 3  # fids on the same path as the file's


@dataclass
class Model:
    """The directory as a serial server leaves it: which names exist, where the file's walked fid
    points. Limits: a listing is compared as a set of names (offsets and order are the host's);
    a fid's path follows every rename of it or of its directory, as QEMU's v9fs_fix_fid_paths()
    promises; Tgetattr is path-based (an unlinked file's fid: ENOENT, as QEMU answers today)."""

    names: set[str] = field(default_factory=lambda: {"f", "s", "l"})
    file_at: str = "f"  # the name the file's fid resolves to

    @staticmethod
    def reads(op: str) -> bool:
        """Whether ``op`` leaves the directory as it is (in every state)."""
        return op not in WRITERS

    def apply(self, op: str) -> Outcome:
        """Run one request of the group; what a serial server answers."""
        if op == "walk_f":  # a walk answers its qid count
            return 1 if "f" in self.names else "ENOENT"
        if op == "walk_g":
            return 1 if "g" in self.names else "ENOENT"
        if op in ("getattr_file", "lopen_file", "xattrwalk_file") or op.startswith("getattr_clone"):  # by path
            return "ok" if self.file_at in self.names else "ENOENT"
        if op == "statfs":
            return "ok"
        if op == "readlink":  # l -> f: the link is never touched, only its target
            return "f"
        if op == "getattr_inner":  # s/x: its fid follows s's rename
            return "ok"
        if op == "read_open":  # an open handle reads the bytes whatever happened to the name
            return CONTENT
        if op == "readdir":
            return frozenset(self.names | {".", ".."})
        if op == "rename_f_g":
            if "f" not in self.names:
                return "ENOENT"
            self.names = (self.names - {"f"}) | {"g"}
            self.file_at = "g" if self.file_at == "f" else self.file_at
            return "ok"
        if op == "rename_s_t":
            if "s" not in self.names:
                return "ENOENT"
            self.names = (self.names - {"s"}) | {"t"}
            return "ok"
        if op == "unlink_g":
            if "g" not in self.names:
                return "ENOENT"
            self.names -= {"g"}
            return "ok"
        raise AssertionError(op)


@dataclass
class Fids:
    """What the round's requests use, made before the round: the directory, the file walked and
    opened, the directory opened for reading, the inner file walked; fresh newfids."""

    p9: Session
    dir: int
    file: int
    open_file: int
    open_dir: int
    inner: int
    link: int
    file_to_open: int
    #: more fids on the file's path: a rename must move them all
    clones: tuple[int, ...] = ()

    @classmethod
    def make(cls, p9: Session, place: Place, host_link: bool = False) -> Fids:
        open_file = p9.walk_fid(place.fid, ["f"])
        p9.lopen(open_file, os.O_RDONLY)
        open_dir = p9.walk_fid(place.fid, [])
        p9.lopen(open_dir, os.O_RDONLY | os.O_DIRECTORY)
        # through 9P, so that it is a symlink under every security model (a host symlink is none
        # under the mapped ones); on a read-only export (passthrough) the host's own
        if not host_link:
            p9.rpc(Tsymlink(fid=place.fid, name="l", symtgt="f", gid=0))
        walked = [p9.walk_fid(place.fid, names) for names in (["f"], ["s", "x"], ["l"], ["f"])]
        clones = tuple(p9.walk_fid(place.fid, ["f"]) for _ in range(CLONES))
        file, inner, link, file_to_open = walked
        return cls(p9, place.fid, file, open_file, open_dir, inner, link, file_to_open, clones)


#: op -> the request, from the round's fids
REQUESTS: dict[str, Callable[[Fids], TMessage[Any]]] = {
    "walk_f": lambda f: Twalk(fid=f.dir, newfid=f.p9.new_fid(), wnames=["f"]),
    "walk_g": lambda f: Twalk(fid=f.dir, newfid=f.p9.new_fid(), wnames=["g"]),
    "getattr_file": lambda f: Tgetattr(fid=f.file, request_mask=wire.GETATTR_BASIC),
    "getattr_inner": lambda f: Tgetattr(fid=f.inner, request_mask=wire.GETATTR_BASIC),
    "getattr_clone0": lambda f: Tgetattr(fid=f.clones[0], request_mask=wire.GETATTR_BASIC),
    "getattr_clone1": lambda f: Tgetattr(fid=f.clones[1], request_mask=wire.GETATTR_BASIC),
    "getattr_clone2": lambda f: Tgetattr(fid=f.clones[2], request_mask=wire.GETATTR_BASIC),
    "lopen_file": lambda f: Tlopen(fid=f.file_to_open, flags=os.O_RDONLY),
    "xattrwalk_file": lambda f: Txattrwalk(fid=f.file, newfid=f.p9.new_fid(), name=""),
    "statfs": lambda f: Tstatfs(fid=f.dir),
    "readlink": lambda f: Treadlink(fid=f.link),
    "read_open": lambda f: Tread(fid=f.open_file, offset=0, count=100),
    "readdir": lambda f: Treaddir(fid=f.open_dir, offset=0, count=4000),
    "rename_f_g": lambda f: Trenameat(olddirfid=f.dir, oldname="f", newdirfid=f.dir, newname="g"),
    "rename_s_t": lambda f: Trenameat(olddirfid=f.dir, oldname="s", newdirfid=f.dir, newname="t"),
    "unlink_g": lambda f: Tunlinkat(dirfd=f.dir, name="g", flags=0),
}
WRITERS = ("rename_f_g", "rename_s_t", "unlink_g")


def populate(host: Path, host_link: bool = False) -> None:
    for entry in host.iterdir():
        if entry.name != ".virtfs_metadata":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    (host / "f").write_bytes(CONTENT)
    (host / "s").mkdir()
    (host / "s" / "x").write_bytes(b"inner")
    if host_link:
        (host / "l").symlink_to("f")


def one_round(
    p9: Session,
    place: Place,
    rng: random.Random,
    staggered: bool,
    host_link: bool = False,
    frames: list[bytes] | None = None,
) -> tuple[list[str], tuple[Outcome, ...]]:
    """Set the directory up, send a random group (a writer at least) in a random order, await all
    (their reply frames into ``frames``)."""
    populate(place.host_path(), host_link)
    fids = Fids.make(p9, place, host_link)
    readers = [op for op in REQUESTS if op not in WRITERS]
    ops = rng.sample(list(WRITERS), rng.randint(1, len(WRITERS))) + rng.sample(readers, rng.randint(1, 4))
    rng.shuffle(ops)
    answers = send_group(p9, [REQUESTS[op](fids) for op in ops], staggered, frames)
    for fid in sorted(p9.fids - {0, place.fid}):
        p9.clunk(fid)
    return ops, answers


def assert_serial(request: pytest.FixtureRequest, seed: int, ops: list[str], answers: tuple[Outcome, ...],
                  model_of: Callable[[], Any] = Model) -> None:  # fmt: skip
    __tracebackhide__ = True
    allowed = serial_outcomes(ops, model_of)
    assert answers in allowed, (
        f"round of seed {seed} (replay it alone: -k '{request.node.callspec.id}' --concurrent-seed {seed}): {ops} "
        f"were answered {answers}, which no serial order gives; serial orders give {sorted(map(str, allowed))[:6]}"
    )


@pytest.mark.qemu_bug(fixed_in=(), when={"multidevs": "remap"}, race=True, raises=ListingRaceSeen, reason=LISTING_RACE,
                      upstream="listing-race")  # fmt: skip
@case_path("concurrent/rename_under_readers/{security_model}/{multidevs}/{kick}", backends=["local"],
           security_model=MODELS, multidevs=["warn", "remap"], kick=["one_kick", "staggered"])  # fmt: skip
def test_rename_under_readers(place: Place, device: Any, request: pytest.FixtureRequest, security_model: str,
                              multidevs: str, kick: str) -> None:  # fmt: skip
    """Each round's replies are those of some serial order of its requests; QEMU answers
    throughout, and leaks no host file descriptor. Under remap a listing that failed with ENOENT
    is the known race: the round's other replies must still linearize, and the case ends as that
    race's xfail, naming the seeds that saw it."""
    p9, frames, races = place.session, list[bytes](), RaceLog()
    for seed in round_seeds(request):
        ops, answers = one_round(p9, place, random.Random(seed), kick == "staggered", frames=frames)
        if multidevs == "remap" and "readdir" in ops:
            races.chance(frames[ops.index("readdir")])
            if answers[ops.index("readdir")] == "ENOENT":
                races.saw(ListingRaceSeen, f"seed {seed}", frames[ops.index("readdir")])
                ops, answers = without(ops, answers, "readdir")
        assert_serial(request, seed, ops, answers)
        assert device.alive()
    races.raise_if_seen("Treaddir failed with ENOENT")


STAYING = tuple(f"s{n:02d}" for n in range(40))


@pytest.mark.qemu_bug(fixed_in=(), when={"multidevs": "remap"}, race=True, raises=ListingRaceSeen, reason=LISTING_RACE,
                      upstream="listing-race")  # fmt: skip
@pytest.mark.fsdev(security_model="passthrough")
@case_path("concurrent/listing_under_unlink/{multidevs}/{kick}", backends=["local"], multidevs=["warn", "remap"],
           kick=["one_kick", "staggered"])  # fmt: skip
def test_listing_under_unlink(place: Place, device: Any, request: pytest.FixtureRequest, multidevs: str,
                              kick: str) -> None:  # fmt: skip
    """The smallest group that shows the listing race: Tunlinkat of a file and a Treaddir of its
    directory (opened before) in flight together, the file made anew through 9P each round (so
    the reproducer replays every round). The listing has the file or not, beside the 40 that
    stay; it never fails. Under remap an ENOENT is the known race, seen in a few rounds in a
    hundred on 10.0.13 (the case's reproducer replays it: exit 1)."""
    p9, frames, races = place.session, list[bytes](), RaceLog()
    for name in STAYING:  # entries QEMU lstat()s under remap: the wider the window the race needs
        p9.mkdir(place.fid, name, 0o755)
    for seed in round_seeds(request):
        made = p9.walk_fid(place.fid, [])
        p9.lcreate(made, "c", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        p9.clunk(made)
        listing = p9.walk_fid(place.fid, [])
        p9.lopen(listing, os.O_RDONLY | os.O_DIRECTORY)
        requests: list[TMessage[Any]] = [
            Tunlinkat(dirfd=place.fid, name="c", flags=0),
            Treaddir(fid=listing, offset=0, count=4000),
        ]
        if random.Random(seed).random() < 0.5:
            requests.reverse()
        answers = dict(zip(map(type, requests), send_group(p9, requests, kick == "staggered", frames), strict=True))
        p9.clunk(listing)
        names, unlinked = answers[Treaddir], answers[Tunlinkat]
        listed = frames[[type(r) for r in requests].index(Treaddir)]
        races.chance(listed)
        if multidevs == "remap" and names == "ENOENT":
            races.saw(ListingRaceSeen, f"seed {seed}", listed)
            names = frozenset({".", "..", *STAYING})
        assert unlinked == "ok" and names in (
            frozenset({".", "..", *STAYING}),
            frozenset({".", "..", *STAYING, "c"}),
        ), f"round of seed {seed}: Tunlinkat answered {unlinked}, the listing {names}"
        assert device.alive()
    races.raise_if_seen("Treaddir failed with ENOENT")


class ReadonlyModel(Model):
    """The same directory on a read-only export: every rename and unlink EROFS, nothing moves."""

    def apply(self, op: str) -> Outcome:
        return "EROFS" if op in WRITERS else super().apply(op)


@pytest.mark.fsdev(readonly="on", security_model="passthrough")
@case_path("concurrent/rename_under_readers/readonly/{kick}", backends=["local"], kick=["one_kick", "staggered"])
def test_refused_renames_under_readers(place: Place, device: Any, request: pytest.FixtureRequest, kick: str) -> None:
    """On a read-only export the same groups: the writers refused (EROFS) whatever is in flight
    beside them, the readers answered as if nothing happened."""
    for seed in round_seeds(request):
        ops, answers = one_round(place.session, place, random.Random(seed), kick == "staggered", host_link=True)
        assert_serial(request, seed, ops, answers, ReadonlyModel)
        assert device.alive()


@dataclass
class NameModel:
    """One name ``a`` in a directory, made and removed by the round's requests: absent, a
    directory or a symlink. Creation answers EEXIST on a taken name; unlinkat(2)'s errnos."""

    node: str | None = None

    def apply(self, op: str) -> Outcome:
        if op == RACED:  # a raced creation that made its node on a free name, then lost it
            return RACED if self.node is None else "EEXIST"
        if op in CREATORS:
            if self.node is not None:
                return "EEXIST"
            self.node = "dir" if op.startswith("mkdir") else "link"
            return "ok"
        if self.node is None:
            return "ENOENT"
        wants_dir = op.startswith("rmdir")
        if (self.node == "dir") != wants_dir:
            return "ENOTDIR" if wants_dir else "EISDIR"
        self.node = None
        return "ok"


CREATORS = ("mkdir_a", "mkdir_a2", "symlink_a")
#: what the create race answers: the qid's lstat() after a remove (ENOENT); passthrough's and
#: none's fchmodat(O_NOFOLLOW) of a name a symlink took meanwhile (ELOOP: 10.0.13, none); the
#: mapped-xattr model's lsetxattr() of the same (EPERM, by the code)
CREATE_RACE_ERRNOS = ("ENOENT", "ELOOP", "EPERM")
RACED = "raced"


def explained_by_race(ops: list[str], answers: tuple[Outcome, ...], start: str | None) -> int | None:
    """Whether the replies are some serial order's once each creation that answered the create
    race's errno is taken as made (answered "ok") or as made on a free name and gone at once:
    QEMU removes the directory a failed Tmkdir made, by name (local_mkdir's err_end), and that
    can be another request's directory by then (master, security_model=none: two Tmkdirs both
    answered ENOENT and a Tsymlink of the name succeeded). The first raced reply's index, or None
    when no such reading explains the replies (fixtures/races.excuse reads them)."""
    stands = [
        Stand(at, ("ok", RACED), CreateRaceSeen)
        for at, (op, got) in enumerate(zip(ops, answers, strict=True))
        if op in CREATORS and got in CREATE_RACE_ERRNOS
    ]

    def fits(read: tuple[object, ...]) -> bool:  # a creation read as gone at once is the model's RACED request
        variant = [RACED if got == RACED else op for op, got in zip(ops, read, strict=True)]
        return read in serial_outcomes(variant, functools.partial(NameModel, start))

    found = excuse(answers, stands, fits)
    return None if found is None else found[0].at


NAME_REQUESTS: dict[str, Callable[[Session, int], TMessage[Any]]] = {
    "mkdir_a": lambda p9, d: Tmkdir(dfid=d, name="a", mode=0o755, gid=0),
    "mkdir_a2": lambda p9, d: Tmkdir(dfid=d, name="a", mode=0o700, gid=0),
    "symlink_a": lambda p9, d: Tsymlink(fid=d, name="a", symtgt="t", gid=0),
    "rmdir_a": lambda p9, d: Tunlinkat(dirfd=d, name="a", flags=wire.AT_REMOVEDIR),
    "rmdir_a2": lambda p9, d: Tunlinkat(dirfd=d, name="a", flags=wire.AT_REMOVEDIR),
    "unlink_a": lambda p9, d: Tunlinkat(dirfd=d, name="a", flags=0),
}


@pytest.mark.qemu_bug(fixed_in=(), race=True, raises=CreateRaceSeen, reason=CREATE_RACE, upstream="create-race")
@case_path("concurrent/create_under_removers/{security_model}/{kick}", backends=["local"], security_model=MODELS,
           kick=["one_kick", "staggered"])  # fmt: skip
def test_create_under_removers(place: Place, device: Any, request: pytest.FixtureRequest, security_model: str,
                               kick: str) -> None:  # fmt: skip
    """Tmkdir and Tsymlink of one name in flight with Tunlinkat of it (a directory or not): each
    round's replies are some serial order's, a creation that answered the known race's errno
    read as made or as leaving nothing (explained_by_race); QEMU leaks no host fd."""
    p9, frames, races = place.session, list[bytes](), RaceLog()
    for seed in round_seeds(request):
        rng = random.Random(seed)
        start = rng.choice([None, "dir"])
        # the round's start through 9P, not on the host: the reproducer then replays every round
        for flags in (wire.AT_REMOVEDIR, 0):
            p9.send(Tunlinkat(dirfd=place.fid, name="a", flags=flags)).wait()
        if start:
            p9.mkdir(place.fid, "a", 0o755)
        ops = rng.sample(list(NAME_REQUESTS), rng.randint(2, 4))
        answers = send_group(p9, [NAME_REQUESTS[op](p9, place.fid) for op in ops], kick == "staggered", frames)
        races.chance(*[frame for op, frame in zip(ops, frames, strict=True) if op in CREATORS])
        model_of = functools.partial(NameModel, start)
        if answers not in serial_outcomes(ops, model_of):
            at = explained_by_race(ops, answers, start)
            if at is not None:  # the known race: every reply checked, the raced ones as made or not
                races.saw(CreateRaceSeen, f"seed {seed}", frames[at])
                continue
        assert_serial(request, seed, ops, answers, model_of)
        assert device.alive()
    races.raise_if_seen("a creation answered ENOENT after making its node")


def without(ops: list[str], answers: tuple[Outcome, ...], op: str) -> tuple[list[str], tuple[Outcome, ...]]:
    at = ops.index(op)
    return ops[:at] + ops[at + 1 :], answers[:at] + answers[at + 1 :]
