"""Every pair of requests that can conflict, in flight together (fixtures/pairs.py: the rows, and
the relations derived from what each reads and writes): ``concurrent/pairs/{a}+{b}/{kick}``, in
one kick and staggered, each round from a seed of its own (``--concurrent-seed`` replays one),
the two in a seeded order. The answers must be those of some serial order of the two on the
model of the export (fixtures/judge.py), and QEMU alive after each round. The pairs that cannot
conflict (both read, or nothing shared: fixtures/pairs.py ``EXCLUDED`` names each with why) run
too, once each in one kick, all in one case (``concurrent/pairs/excluded``): a wrong reason fails
there instead of hiding.

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
from fixtures.judge import judge_group
from fixtures.mirror import Mirror
from fixtures.pairs import EXCLUDED, LISTING_PAIRS, MODEL_OPS, PAIR_OPS, PAIRS, pair_races, relation_of, set_up
from fixtures.pool import Device
from fixtures.races import PAIR_RACES, KnownRaceSeen, RaceLog
from harness.p9.messages import Rlopen, Rwalk, Tclunk, Tlopen, Twalk

#: share of --concurrent-rounds a pair runs (30 -> 3 rounds): 80 pairs, two kicks each
SHARE = 0.1
#: QEMU's RLIMIT_NOFILE in the reclaim variant (its reclaim mark is then 134 descriptors, as in
#: cases/test_reclaim.py), and how many files the case holds open past it: every fid the pair
#: opens or uses may have its descriptor reclaimed and be reopened by path
NOFILE, HELD_OPEN = 200, 160
UPSTREAM = ("create-race", "same-fid-lcreate", "walk-rename", "listing-race")


def under_reclaim(pair: str, kick: str, nofile: int, **_: Any) -> bool:
    """Left out: the reclaim variant of a pair whose requests share no fid (reclaim works on fids),
    and its staggered kick (the rounds cost 160 opens more)."""
    return nofile == NOFILE and (PAIRS[pair] != "same_fid" or kick != "one_kick")


def hold_open(mirror: Mirror) -> list[int]:
    """HELD_OPEN files (hard links of one, in ``hold/``) walked and opened: QEMU past its reclaim mark."""
    hold = mirror.path("hold")
    hold.mkdir()
    (hold / "0").write_bytes(b"held")
    for n in range(1, HELD_OPEN):
        os.link(hold / "0", hold / str(n))
    p9 = mirror.session
    fids = [p9.new_fid() for _ in range(HELD_OPEN)]
    replies = in_batches(p9, [Twalk(fid=mirror.fid, newfid=fid, wnames=["hold", str(n)]) for n, fid in enumerate(fids)])
    replies += in_batches(p9, [Tlopen(fid=fid, flags=os.O_RDONLY) for fid in fids])
    assert all(isinstance(r, Rwalk | Rlopen) for r in replies), [
        r for r in replies if not isinstance(r, Rwalk | Rlopen)
    ]
    mirror.learn(())
    return fids


def one_round(
    mirror: Mirror, ops: list[str], staggered: bool, held: Sequence[int], races: RaceLog, where: str
) -> str | None:
    """The group's requests in flight together (one kick, or one each), on the directory set up
    anew, judged; every fid but the held ones clunked after. What was wrong, or None."""
    fids = set_up(mirror, mirror.fid)
    start = mirror.model.copy
    requests = [PAIR_OPS[op].request(fids) for op in ops]
    frames = list[bytes]()
    answers = send_group(mirror.session, requests, staggered, frames)
    ends, failure = judge_group(requests, answers, start, frames, races, where)
    if ends:
        mirror.model = ends[0]
    mirror.clunk_all({0, mirror.fid, *held})
    return failure


def shuffled(pair: str) -> Callable[[int], list[str]]:
    """The pair's requests in the order a round's seed draws."""

    def draw(seed: int) -> list[str]:
        ops = pair.split("+")
        random.Random(seed).shuffle(ops)
        return ops

    return draw


def rounds(mirror: Mirror, device: Device, request: pytest.FixtureRequest, draw: Callable[[int], list[str]],
           kick: str, *, share: float = SHARE, held: Sequence[int] = ()) -> None:  # fmt: skip
    """Seeded rounds of the requests ``draw`` gives each seed, in flight together: some serial
    order's answers, or a known race's (noted, and raised at the end with every chance it had)."""
    races = RaceLog()
    for seed in round_seeds(request, share):
        ops = draw(seed)
        failure = one_round(mirror, ops, kick == "staggered", held, races, f"seed {seed}")
        assert device.alive(), f"QEMU died in the round of seed {seed}: {ops}"
        assert failure is None, (
            f"round of seed {seed} (-k '{request.node.callspec.id}' --concurrent-seed {seed}): {failure}"
        )
    races.raise_if_seen("a request answered as no serial order does")


@pair_races(remap=False)
@pytest.mark.fsdev(multidevs="warn")
@case_path("concurrent/pairs/{pair}/{kick}/nofile_{nofile}", backends=["local"], pair=list(PAIRS),
           kick=["one_kick", "staggered"], nofile=[0, NOFILE], unless=under_reclaim)  # fmt: skip
def test_pair(
    mirror: Mirror, device: Device, request: pytest.FixtureRequest, pair: str, kick: str, nofile: int
) -> None:
    """The two requests of the pair in flight together: their answers are some serial order's
    (``nofile_200``: QEMU at RLIMIT_NOFILE 200, past its descriptor reclaim mark; ``nofile_0``: its own limit)."""
    held = hold_open(mirror) if nofile else []
    rounds(mirror, device, request, shuffled(pair), kick, held=held)
    in_batches(mirror.session, [Tclunk(fid=fid) for fid in held])


def same_under_models(pair: str, **_: Any) -> bool:
    """Left out under passthrough: a pair none of whose requests works differently there (makes a
    node, or sets a mode or owner: fixtures/pairs.py ``MODEL_OPS``)."""
    return not MODEL_OPS & set(pair.split("+"))


@pair_races(remap=False)
@pytest.mark.fsdev(multidevs="warn", security_model="passthrough")
@case_path("concurrent/pairs/{pair}/passthrough/{kick}", backends=["local"], pair=list(PAIRS), kick=["one_kick"],
           unless=same_under_models)  # fmt: skip
def test_pair_under_passthrough(mirror: Mirror, device: Device, request: pytest.FixtureRequest, pair: str,
                                kick: str) -> None:  # fmt: skip
    """The pairs with a request whose code differs under passthrough, in one kick there."""
    rounds(mirror, device, request, shuffled(pair), kick)


@pair_races(remap=True)
@pytest.mark.fsdev(multidevs="remap")
@case_path("concurrent/pairs/{pair}/remap/{kick}", backends=["local"], pair=list(LISTING_PAIRS),
           kick=["one_kick", "staggered"])  # fmt: skip
def test_listing_pair_under_remap(mirror: Mirror, device: Device, request: pytest.FixtureRequest, pair: str,
                                  kick: str) -> None:  # fmt: skip
    """A pair with a listing under multidevs=remap (the default since 10.0), where QEMU lstat()s
    each entry it lists: the answers are some serial order's, or the known listing race's."""
    rounds(mirror, device, request, shuffled(pair), kick)


@pytest.mark.fsdev(multidevs="warn")
@case_path("concurrent/pairs/excluded", backends=["local"])
def test_excluded_pairs(mirror: Mirror, device: Device) -> None:
    """Every pair the table says cannot conflict (``EXCLUDED``: both read, or nothing shared), in
    one kick once each, both orders: the claim is that every order answers alike, so the two
    answers must be those of the one serial order the model gives, whichever ran first."""
    races, wrong = RaceLog(), []
    for pair, why in EXCLUDED.items():
        for ops in (pair.split("+"), pair.split("+")[::-1]):
            failure = one_round(mirror, ops, False, (), races, pair)
            if failure is not None:
                wrong.append(f"{pair} ({why}): {failure}")
        assert device.alive(), f"QEMU died in the excluded pair {pair}"
    assert not wrong, f"{len(wrong)} pairs listed as unable to conflict answered as no order does:\n" + "\n".join(wrong)


def draw_triple(seed: int) -> list[str]:
    """Three requests drawn by ``seed``, at least one pair of them able to conflict."""
    rng = random.Random(seed)
    while True:
        ops = rng.choices(list(PAIR_OPS), k=3)
        if any(relation_of(a, b) for a, b in itertools.combinations(ops, 2)):
            return ops


@pytest.mark.qemu_bug(fixed_in=(), race=True, raises=KnownRaceSeen, reason=PAIR_RACES, upstream=UPSTREAM)
@pytest.mark.fsdev(multidevs="warn")
@case_path("concurrent/triples/{kick}", backends=["local"], kick=["one_kick", "staggered"])
def test_triples(mirror: Mirror, device: Device, request: pytest.FixtureRequest, kick: str) -> None:
    """Three requests drawn by each round's seed (at least two of them able to conflict) in flight
    together: their answers are some serial order's. ``--concurrent-seed S`` replays a round."""
    rounds(mirror, device, request, draw_triple, kick, share=1.0)
