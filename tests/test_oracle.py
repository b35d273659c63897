"""The one oracle (fixtures/oracle.py), the one judge (fixtures/judge.py) and the one race
bookkeeping (fixtures/races.py RaceLog), on recorded answers, no QEMU: what some serial order of
the model of the export gives is accepted, what none gives is refused, for every relation the
concurrent families judge; a known race's reply is read as what it stands for, and nothing else
is; a race raises with every chance."""

from __future__ import annotations

import errno
import itertools
from dataclasses import dataclass

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fixtures.answers import OK, Answer, Data, Err, Listing, Walked
from fixtures.judge import Steps, judge_group
from fixtures.model import Export, Fid, Kind, Node, Server
from fixtures.oracle import ANY, every_order, linearizations, serial_outcomes
from fixtures.pairs import CLONES, CONTENT, EXCLUDED, PAIR_OPS, PAIRS, round_model
from fixtures.races import CreateRaceSeen, KnownRaceSeen, ListingRaceSeen, RaceLog, SameFidRaceSeen, WalkRaceSeen
from harness.p9 import wire
from harness.p9.messages import Tclunk, Tgetattr, Tmkdir, Treaddir, Trenameat, Tsymlink, Tunlinkat, Twalk
from harness.p9.wire import Request


@dataclass
class Register:
    """A register: ``set<n>`` writes n and answers the old value, ``get`` reads it."""

    value: int = 0

    @staticmethod
    def reads(op: str) -> bool:
        return op == "get"

    def apply(self, op: str) -> int:
        if op == "get":
            return self.value
        old, self.value = self.value, int(op[3:])
        return old


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(["set1", "set2", "set3", "get", "get"]), min_size=1, max_size=6))
def test_the_pruned_walk_gives_what_every_order_gives(ops: list[str]) -> None:
    assert serial_outcomes(ops, Register) == every_order(ops, Register)


def test_answers_no_order_gives_are_refused() -> None:
    ops = ["set1", "set2", "get"]
    assert linearizations(ops, (0, 1, 2), Register)  # set1, set2, get
    assert linearizations(ops, (2, 0, 1), Register)  # set2, set1, get
    assert not linearizations(ops, (0, 0, 2), Register)  # both writers saw the start: no order does
    assert not linearizations(ops, (0, 1, 3), Register)  # a value nobody wrote
    assert linearizations(ops, (0, 1, ANY), Register)  # a race's reply matches any answer
    with pytest.raises(ValueError, match="2 answers for 3 requests"):
        linearizations(ops, (0, 1), Register)


def _round(ops: list[str]) -> tuple[list[Request], Export]:
    model, fids = round_model()
    return [PAIR_OPS[op].request(fids) for op in ops], model


def _takes_a_clone(op: str) -> bool:
    _, fids = round_model()
    PAIR_OPS[op].request(fids)
    return len(fids.clones) < CLONES


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(sorted(PAIR_OPS)), min_size=1, max_size=4))
def test_on_the_model_the_pruned_walk_gives_what_every_order_gives(ops: list[str]) -> None:
    """The model of the export through the judge's steps: a reader run on a copy of each state,
    the writers' orders walked, gives every order's answers."""
    # a round holds CLONES fids of the directory for the requests that turn theirs into what they make
    assume(sum(map(_takes_a_clone, ops)) <= CLONES)
    requests, model = _round(ops)
    start = lambda: Steps(model.copy())  # noqa: E731
    assert serial_outcomes(requests, start) == every_order(requests, start)


# per relation, recorded answers no serial order of the pair gives
PAIR_SLIPS: dict[str, tuple[str, tuple[Answer, ...]]] = {
    # same fid: the fid followed the rename, yet Tgetattr on it failed after the rename succeeded
    "same_fid": ("getattr_F+rename_f_g", (Err(errno.ENOENT), OK)),
    # same name: the walk found f after an unlink of it succeeded, and the unlink ran first
    "same_name": ("walk_f+unlink_f", (Err(errno.ENOENT), Err(errno.ENOENT))),
    # a name inside the other's directory: the directory removed while it still held x
    "inside": ("getattr_X+rmdir_d", (OK, OK)),
    # the listing: both the old and the new name of one renamed file
    "listing": ("readdir+rename_f_g", (Listing(frozenset({".", "..", "f", "g", "d", "l"})), OK)),
}


@pytest.mark.parametrize("relation", list(PAIR_SLIPS))
def test_each_relation_refuses_answers_no_order_of_its_pair_gives(relation: str) -> None:
    pair, answers = PAIR_SLIPS[relation]
    assert PAIRS[pair] == relation
    requests, model = _round(pair.split("+"))
    ends, failure = judge_group(requests, answers, model.copy)
    assert not ends and failure is not None and "no serial order" in failure
    assert serial_outcomes(requests, lambda: Steps(model.copy()))  # and some answers it does give


def test_every_excluded_pair_answers_alike_in_both_orders() -> None:
    """The claim of EXCLUDED, on the model: either order gives the same answers and the same end."""
    for pair, why in EXCLUDED.items():
        first, second = pair.split("+")
        requests, model = _round([first, second])
        one, other = model.copy(), model.copy()
        forwards = (one.apply(requests[0]), one.apply(requests[1]))
        backwards = (other.apply(requests[1]), other.apply(requests[0]))
        assert forwards == backwards[::-1], (pair, why)


def _directory(server: Server | None = None) -> Export:
    model = Export(server)
    model.root.entries["a"] = Node(Kind.DIR, 0o755)
    model.fids[1] = Fid(())
    return model


def test_the_create_race_is_read_as_made_or_as_lost() -> None:
    """A Tmkdir that answered ENOENT beside a remove of its name reads as made (ok), or as made
    and lost at once; a remover's wrong errno is no race, and neither is ENOENT with no remover."""
    model = _directory()
    mkdir, rmdir = Tmkdir(dfid=1, name="b", mode=0o755, gid=0), Tunlinkat(dirfd=1, name="b", flags=wire.AT_REMOVEDIR)
    races = RaceLog()
    ends, failure = judge_group([mkdir, rmdir], (Err(errno.ENOENT), OK), model.copy, (b"m", b"r"), races, "here")
    assert failure is None and ends and races.seen[0][0] is CreateRaceSeen
    _, failure = judge_group([mkdir, rmdir], (Err(errno.ENOENT), Err(errno.ENOTDIR)), model.copy)
    assert failure is not None  # a remover's wrong errno
    _, failure = judge_group([mkdir], (Err(errno.ENOENT),), model.copy)
    assert failure is not None  # no request that could have removed it
    symlink = Tsymlink(fid=1, name="b", symtgt="t", gid=0)
    ends, failure = judge_group([symlink, rmdir, mkdir], (OK, OK, Err(errno.ELOOP)), model.copy)
    assert failure is None  # a symlink took the name meanwhile (passthrough's ELOOP)


def test_the_other_races_read_only_their_own_replies() -> None:
    model, fids = round_model()
    lcreate = PAIR_OPS["lcreate_C"].request(fids)
    races = RaceLog()
    _, failure = judge_group([lcreate, lcreate], (OK, Err(errno.ENOTDIR)), model.copy, (b"1", b"2"), races)
    assert failure is None and races.seen[0][0] is SameFidRaceSeen
    walk, rename = PAIR_OPS["walk_dx"].request(fids), PAIR_OPS["rename_d_e"].request(fids)
    _, failure = judge_group([walk, rename], (Walked(1), OK), model.copy, (b"w", b"r"), races := RaceLog())
    assert failure is None and races.seen[0][0] is WalkRaceSeen
    remapped, _ = round_model(Server(remap=True))
    readdir, unlink = PAIR_OPS["readdir"].request(fids), PAIR_OPS["unlink_f"].request(fids)
    races = RaceLog()
    _, failure = judge_group([readdir, unlink], (Err(errno.ENOENT), OK), remapped.copy, (b"l", b"u"), races)
    assert failure is None and races.seen[0][0] is ListingRaceSeen
    _, failure = judge_group([readdir, unlink], (Err(errno.ENOENT), OK), model.copy)
    assert failure is not None  # no remap, no listing race


def test_a_flushed_request_reads_as_done_or_not() -> None:
    model, fids = round_model()
    from fixtures.answers import FLUSHED

    unlink = PAIR_OPS["unlink_f"].request(fids)
    ends, failure = judge_group([unlink], (FLUSHED,), model.copy)
    tops = [end.at(("top",)) for end in ends]
    assert failure is None and {"f" in top.entries for top in tops if top is not None} == {False, True}


def test_a_race_log_raises_with_every_chance() -> None:
    log = RaceLog()
    log.raise_if_seen("nothing")  # nothing seen: no raise
    log.chance(b"one", b"two")
    log.saw(ListingRaceSeen, "seed 7", b"three")
    with pytest.raises(ListingRaceSeen) as raised:
        log.raise_if_seen("Treaddir failed with ENOENT")
    assert raised.value.reply == b"three" and list(raised.value.alike) == [b"one", b"two", b"three"]
    assert "seed 7" in str(raised.value)
    log.saw(CreateRaceSeen, "seed 9", None)
    with pytest.raises(KnownRaceSeen) as mixed:
        log.raise_if_seen("races")
    assert type(mixed.value) is KnownRaceSeen


def test_a_walk_race_reproducer_wants_every_name_or_an_error() -> None:
    from harness.p9.messages import Rlerror, Rwalk
    from harness.p9.trace import Expectation, Step
    from harness.tools.replay import _differs

    wanted = WalkRaceSeen.expected()
    assert Expectation.parse(wanted.line()) == wanted
    qid = wire.Qid(type=wire.QTDIR, version=0, path=1)
    walk = wire.encode(Twalk(fid=1, newfid=2, wnames=["d", "x"]), tag=3)
    step = Step(walk, None, wanted)
    race = {"local": True, "died": False, "only_expected": True}  # a race's reproducer: expectations only
    assert _differs(step, wire.encode(Rwalk(qids=[qid, qid]), tag=3), **race) is None
    assert _differs(step, wire.encode(Rlerror(ecode=errno.ENOENT), tag=3), **race) is None
    partial = _differs(step, wire.encode(Rwalk(qids=[qid]), tag=3), **race)
    assert partial is not None and "the race" in partial


def test_the_round_model_answers_as_a_serial_server() -> None:
    """Spot checks of the model on the pairs' round: the rules a serial server follows."""
    model, fids = round_model()
    assert model.peek(PAIR_OPS["read_Fo"].request(fids)) == Data(CONTENT)
    assert model.peek(PAIR_OPS["walk_dx"].request(fids)) == Walked(2)
    assert model.peek(PAIR_OPS["rmdir_d"].request(fids)) == Err(errno.ENOTEMPTY)
    assert model.peek(PAIR_OPS["mkdir_f"].request(fids)) == Err(errno.EEXIST)
    assert model.peek(PAIR_OPS["link_F_h"].request(fids)) == OK
    assert model.peek(Tclunk(fid=4242)) == Err(errno.ENOENT)  # a fid the server does not hold
    assert model.peek(Tgetattr(fid=4242, request_mask=wire.GETATTR_BASIC)) == Err(errno.ENOENT)
    renamed = model.copy()
    assert renamed.apply(Trenameat(olddirfid=fids.dir, oldname="d", newdirfid=fids.dir, newname="e")) == OK
    assert renamed.peek(Tgetattr(fid=fids.X, request_mask=wire.GETATTR_BASIC)) == OK  # X followed d to e
    assert renamed.peek(Treaddir(fid=fids.listing, offset=0, count=4000)) == Listing(
        frozenset({".", "..", "e", "f", "l"})
    )
    assert list(itertools.islice(PAIRS, 1))


def test_a_listing_race_on_a_name_the_group_brings_in() -> None:
    """A Treaddir's ENOENT beside a rename that brings a name into the listed directory and a
    remove of that name (the listing saw g, the remove took it before its lstat) is the listing
    race: the name is taken away only once the rename ran, and no start-state remove shows it
    (without remap, no listing race at all)."""
    remapped, fids = round_model(Server(remap=True))
    readdir, rename = PAIR_OPS["readdir"].request(fids), PAIR_OPS["rename_f_g"].request(fids)
    unlink_g = PAIR_OPS["unlink_f"].request(fids).replaced(name="g")
    races = RaceLog()
    group = [rename, unlink_g, readdir]
    _, failure = judge_group(group, (OK, OK, Err(errno.ENOENT)), remapped.copy, (b"r", b"u", b"l"), races)
    assert failure is None and races.seen[0][0] is ListingRaceSeen
    plain, _ = round_model()
    _, failure = judge_group(group, (OK, OK, Err(errno.ENOENT)), plain.copy)
    assert failure is not None  # no remap: the listing lstat()s nothing, no listing race
