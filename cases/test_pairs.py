"""Every pair of requests that can conflict, in flight together (fixtures/pairs.py: the rows, the
model, the relations): ``concurrent/pairs/{a}+{b}/{kick}``, in one kick and staggered, each round
from a seed of its own (``--concurrent-seed`` replays one), the two in a seeded order. The answers
must be those of some serial order of the two (fixtures/oracle.py), and QEMU alive after each
round. Pairs that cannot conflict are not cases: fixtures/pairs.py ``EXCLUDED`` names each with
the reason.

The export lists with ``multidevs=warn``; the pairs with a listing run again under remap
(``concurrent/pairs/{pair}/remap/{kick}``), where QEMU lstat()s each entry it lists and a listing
beside a remove has the known listing race (and, before the rename lock, beside a rename).
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from fixtures.batches import in_batches, round_seeds, send_group
from fixtures.case_path import case_path
from fixtures.pairs import (
    CREATE_RACE_PAIRS,
    LISTING_PAIRS,
    LISTING_RACE_PAIRS,
    MODEL_OPS,
    PAIR_OPS,
    PAIRS,
    RENAME_LISTING_PAIRS,
    SAME_FID_PAIRS,
    TRIPLE_RACES,
    WALK_RACE_PAIRS,
    judge_group,
    relation,
    set_up,
)
from fixtures.place import Place
from fixtures.races import (
    CREATE_RACE,
    LISTING_RACE,
    RENAME_LISTING_RACE,
    SAME_FID_LCREATE_RACE,
    WALK_RENAME_RACE,
    CreateRaceSeen,
    KnownRaceSeen,
    ListingRaceSeen,
    RaceLog,
    SameFidRaceSeen,
    WalkRaceSeen,
)
from harness.p9.messages import (
    Rlopen,
    Rwalk,
    Tclunk,
    Tlopen,
    Twalk,
)
from harness.p9.session import Session
from harness.qemu import versions

#: share of --concurrent-rounds a pair runs (30 -> 3 rounds): 79 pairs, two kicks each
SHARE = 0.1
#: QEMU's RLIMIT_NOFILE in the reclaim variant (its reclaim mark is then 134 descriptors, as in
#: cases/test_reclaim.py), and how many files the case holds open past it: every fid the pair
#: opens or uses may have its descriptor reclaimed and be reopened by path
NOFILE, HELD_OPEN = 200, 160


def under_reclaim(pair: str, kick: str, nofile: int, **_: Any) -> bool:
    """Left out: the reclaim variant of a pair whose requests share no fid (reclaim works on fids),
    and its staggered kick (the rounds cost 160 opens more)."""
    return nofile == NOFILE and (PAIRS[pair] != "same_fid" or kick != "one_kick")


def hold_open(p9: Session, place: Place) -> list[int]:
    """HELD_OPEN files (hard links of one, in ``hold/``) walked and opened: QEMU past its reclaim mark."""
    hold = place.host_path("hold")
    hold.mkdir()
    (hold / "0").write_bytes(b"held")
    for n in range(1, HELD_OPEN):
        os.link(hold / "0", hold / str(n))
    fids = [p9.new_fid() for _ in range(HELD_OPEN)]
    replies = in_batches(p9, [Twalk(fid=place.fid, newfid=fid, wnames=["hold", str(n)]) for n, fid in enumerate(fids)])
    replies += in_batches(p9, [Tlopen(fid=fid, flags=os.O_RDONLY) for fid in fids])
    assert all(isinstance(r, Rwalk | Rlopen) for r in replies), [
        r for r in replies if not isinstance(r, Rwalk | Rlopen)
    ]
    return fids


def one_round(p9: Session, place: Place, ops: list[str], staggered: bool, held: list[int]) -> tuple[
        tuple[object, ...], list[bytes]]:  # fmt: skip
    """The group's requests in flight together (one kick, or one each), on a directory set up anew:
    their answers and reply frames; every fid but the held ones clunked after."""
    fids, frames = set_up(p9, place.fid, place.host_path()), list[bytes]()
    answers = send_group(p9, [PAIR_OPS[op].request(fids) for op in ops], staggered, frames)
    for fid in sorted(p9.fids - {0, place.fid, *held}):
        p9.clunk(fid)
    return answers, frames


def shuffled(pair: str) -> Callable[[int], list[str]]:
    """The pair's requests in the order a round's seed draws."""

    def draw(seed: int) -> list[str]:
        ops = pair.split("+")
        random.Random(seed).shuffle(ops)
        return ops

    return draw


def rounds(place: Place, device: Any, request: pytest.FixtureRequest, draw: Callable[[int], list[str]], kick: str,
           *, share: float = SHARE, held: Sequence[int] = (), remaps: bool = False) -> None:  # fmt: skip
    """Seeded rounds of the requests ``draw`` gives each seed, in flight together: some serial
    order's answers, or a known race's (noted, and raised at the end with every chance it had)."""
    p9, races = place.session, RaceLog()
    for seed in round_seeds(request, share):
        ops = draw(seed)
        answers, frames = one_round(p9, place, ops, kick == "staggered", list(held))
        assert device.alive(), f"QEMU died in the round of seed {seed}: {ops}"
        failure = judge_group(ops, answers, frames, races, f"seed {seed}", remaps=remaps)
        assert failure is None, (
            f"round of seed {seed} (-k '{request.node.callspec.id}' --concurrent-seed {seed}): {failure}"
        )
    races.raise_if_seen("a request answered as no serial order does")


@pytest.mark.qemu_bug(fixed_in=(), race=True, raises=CreateRaceSeen, reason=CREATE_RACE,
                      when={"pair": CREATE_RACE_PAIRS}, upstream="create-race")  # fmt: skip
@pytest.mark.qemu_bug(fixed_in=(), race=True, raises=SameFidRaceSeen, reason=SAME_FID_LCREATE_RACE,
                      when={"pair": SAME_FID_PAIRS}, upstream="same-fid-lcreate")  # fmt: skip
@pytest.mark.qemu_bug(fixed_in=(), race=True, raises=WalkRaceSeen, reason=WALK_RENAME_RACE,
                      when={"pair": WALK_RACE_PAIRS}, upstream="walk-rename")  # fmt: skip
@pytest.mark.fsdev(multidevs="warn")
@case_path("concurrent/pairs/{pair}/{kick}/nofile_{nofile}", backends=["local"], pair=list(PAIRS),
           kick=["one_kick", "staggered"], nofile=[0, NOFILE], unless=under_reclaim)  # fmt: skip
def test_pair(place: Place, device: Any, request: pytest.FixtureRequest, pair: str, kick: str, nofile: int) -> None:
    """The two requests of the pair in flight together: their answers are some serial order's
    (``nofile_200``: QEMU at RLIMIT_NOFILE 200, past its descriptor reclaim mark; ``nofile_0``: its own limit)."""
    held = hold_open(place.session, place) if nofile else []
    rounds(place, device, request, shuffled(pair), kick, held=held)
    in_batches(place.session, [Tclunk(fid=fid) for fid in held])


def same_under_models(pair: str, **_: Any) -> bool:
    """Left out under passthrough: a pair none of whose requests works differently there."""
    return not MODEL_OPS & set(pair.split("+"))


@pytest.mark.qemu_bug(fixed_in=(), race=True, raises=CreateRaceSeen, reason=CREATE_RACE,
                      when={"pair": CREATE_RACE_PAIRS}, upstream="create-race")  # fmt: skip
@pytest.mark.qemu_bug(fixed_in=(), race=True, raises=SameFidRaceSeen, reason=SAME_FID_LCREATE_RACE,
                      when={"pair": SAME_FID_PAIRS}, upstream="same-fid-lcreate")  # fmt: skip
@pytest.mark.fsdev(multidevs="warn", security_model="passthrough")
@case_path("concurrent/pairs/{pair}/passthrough/{kick}", backends=["local"], pair=list(PAIRS), kick=["one_kick"],
           unless=same_under_models)  # fmt: skip
def test_pair_under_passthrough(place: Place, device: Any, request: pytest.FixtureRequest, pair: str,
                                kick: str) -> None:  # fmt: skip
    """The pairs with a request whose code differs under passthrough, in one kick there."""
    rounds(place, device, request, shuffled(pair), kick)


@pytest.mark.qemu_bug(fixed_in=(), race=True, raises=ListingRaceSeen, reason=LISTING_RACE,
                      when={"pair": LISTING_RACE_PAIRS}, upstream="listing-race")  # fmt: skip
@pytest.mark.qemu_bug(fixed_in=versions.READDIR_RENAME_LOCK, race=True, raises=ListingRaceSeen,
                      reason=RENAME_LISTING_RACE, when={"pair": RENAME_LISTING_PAIRS})  # fmt: skip
@pytest.mark.fsdev(multidevs="remap")
@case_path("concurrent/pairs/{pair}/remap/{kick}", backends=["local"], pair=list(LISTING_PAIRS),
           kick=["one_kick", "staggered"])  # fmt: skip
def test_listing_pair_under_remap(place: Place, device: Any, request: pytest.FixtureRequest, pair: str,
                                  kick: str) -> None:  # fmt: skip
    """A pair with a listing under multidevs=remap (the default since 10.0), where QEMU lstat()s
    each entry it lists: the answers are some serial order's, or the known listing race's."""
    rounds(place, device, request, shuffled(pair), kick, remaps=True)


def draw_triple(seed: int) -> list[str]:
    """Three requests drawn by ``seed``, at least one pair of them able to conflict."""
    rng = random.Random(seed)
    while True:
        ops = rng.choices(list(PAIR_OPS), k=3)
        if any(relation(a, b) for a, b in itertools.combinations(ops, 2)):
            return ops


@pytest.mark.qemu_bug(fixed_in=(), race=True, raises=KnownRaceSeen, reason=TRIPLE_RACES,
                      upstream=("create-race", "same-fid-lcreate", "walk-rename"))  # fmt: skip
@pytest.mark.fsdev(multidevs="warn")
@case_path("concurrent/triples/{kick}", backends=["local"], kick=["one_kick", "staggered"])
def test_triples(place: Place, device: Any, request: pytest.FixtureRequest, kick: str) -> None:
    """Three requests drawn by each round's seed (at least two of them able to conflict) in flight
    together: their answers are some serial order's. ``--concurrent-seed S`` replays a round."""
    rounds(place, device, request, draw_triple, kick, share=1.0)
