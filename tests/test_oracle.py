"""The one oracle (fixtures/oracle.py) and the one race bookkeeping (fixtures/races.py RaceLog),
on recorded answers, no QEMU: what some serial order gives is accepted, what none gives is
refused, for every model the cases and the hunter judge with; a race raises with every chance."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cases.model_tree import BatchModel, BatchOp, Model, Sent
from cases.test_concurrent import Model as DirModel
from cases.test_concurrent import NameModel
from cases.test_concurrent_fids import FidModel, WstatModel
from fixtures.operations import FID_OPS, STATE_CONTENT, STATE_KINDS, Seen, state_outcome
from fixtures.oracle import ANY, every_order, linearizations, serial_outcomes
from fixtures.pairs import EXCLUDED, PAIRS, fresh
from fixtures.races import CreateRaceSeen, KnownRaceSeen, ListingRaceSeen, RaceLog, WalkRaceSeen


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


def test_the_end_state_is_the_matching_orders() -> None:
    ends = linearizations(["set1", "set2"], (0, 1), Register)
    assert [m.value for m in ends] == [2]


# one recorded answer per model that no serial order gives: each relation the cases judge
NOT_SERIAL = [
    # same name: the new name unlinked though the rename that made it failed
    (DirModel, ["rename_f_g", "unlink_g", "walk_f"], ("ENOENT", "ok", "ENOENT")),
    # a listing that has both names of one renamed file
    (DirModel, ["rename_f_g", "readdir"], ("ok", frozenset({"f", "g", "s", "l", ".", ".."}))),
    # same fid: read after the only clunk that succeeded, while getattr says gone
    (FidModel, ["clunk", "clunk"], ("ok", "ok")),
    # the only clunk refused, yet the fid answered after it
    (FidModel, ["clunk", "getattr"], ("ENOENT", "ok")),
    # same name made twice
    (NameModel, ["mkdir_a", "mkdir_a2"], ("ok", "ok")),
    # a name removed that no order made
    (NameModel, ["symlink_a", "rmdir_a"], ("ok", "ok")),
    # the Tstat's name is neither the name before nor after the rename
    (WstatModel, ["wstat_rename", "stat"], ("ok", "h")),
]


@pytest.mark.parametrize(("model", "ops", "answers"), NOT_SERIAL, ids=[f"{m.__name__}-{o}" for m, o, _ in NOT_SERIAL])
def test_each_model_refuses_what_no_order_gives(model: type, ops: list[str], answers: tuple[object, ...]) -> None:
    assert answers not in serial_outcomes(ops, model)
    assert not linearizations(ops, answers, model)


def test_the_hunters_batches_through_the_same_oracle() -> None:
    tree = Model()
    tree.nodes[("a",)] = None
    mkdir, rmdir = BatchOp("mkdir", ("a", "b")), BatchOp("rmdir", ("a",))
    sent = [Sent(mkdir, (0,)), Sent(rmdir, (1,))]

    def start() -> BatchModel:
        return BatchModel(tree, [("a",), ()])

    assert linearizations(sent, (0, errno.ENOTEMPTY), start)  # mkdir first
    assert linearizations(sent, (errno.ENOENT, 0), start)  # rmdir first
    assert not linearizations(sent, (0, 0), start)  # both succeeded: a directory removed with a child


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


# -- the pairs (fixtures/pairs.py): per relation, recorded answers no serial order of the pair gives --

PAIR_SLIPS = {
    # same fid: the fid followed the rename, yet Tgetattr on it failed after the rename succeeded
    # and before no other request could have removed it
    "same_fid": ("getattr_F+rename_f_g", ("ENOENT", "ok")),
    # same name: the walk found f after an unlink of it succeeded, and the unlink ran first
    "same_name": ("walk_f+unlink_f", ("ENOENT", "ENOENT")),
    # a name inside the other's directory: the directory removed while it still held x
    "inside": ("getattr_X+rmdir_d", ("ok", "ok")),
    # the listing: both the old and the new name of one renamed file
    "listing": ("readdir+rename_f_g", (frozenset({".", "..", "f", "g", "d", "l"}), "ok")),
}


@pytest.mark.parametrize("relation", list(PAIR_SLIPS))
def test_each_relation_refuses_answers_no_order_of_its_pair_gives(relation: str) -> None:
    pair, answers, *_ = PAIR_SLIPS[relation]
    assert PAIRS[pair] == relation
    ops = pair.split("+")
    assert not linearizations(ops, answers, fresh), (pair, answers)
    assert serial_outcomes(ops, fresh), pair  # and some answers it does give


def test_every_pair_that_is_a_case_conflicts_and_every_excluded_one_cannot() -> None:
    for pair in PAIRS:
        first, second = pair.split("+")
        assert len(serial_outcomes([first, second], fresh)) >= 1
    for pair, why in EXCLUDED.items():
        first, second = pair.split("+")
        # apart or both reading: the two orders answer alike and leave the same directory
        one, other = fresh(), fresh()
        answers = (one.apply(first), one.apply(second))
        swapped = (other.apply(second), other.apply(first))
        assert answers == swapped[::-1] and one == other, (pair, why)


# -- the states (fixtures/operations.py state_outcome): per state, an answer a slip in QEMU gives --

STATE_SLIPS = {
    "unknown": ("getattr", 0),  # a fid the server never made answered
    "clunked": ("read", 0),  # a clunked fid read
    "file": ("read", 0),  # a fid never opened read
    "open": ("lopen", 0),  # opened twice
    "xattr": ("lcreate", 0),  # an xattr fid turned into a new file
    "removed_9p": ("getattr", 0),  # a removed file's attributes by path
    "removed_host": ("lopen", 0),  # a file removed on the host opened
    "open_removed_host": ("read", errno.ENOENT),  # the descriptor forgotten: read by path
    "replaced_by_dir_host": ("setattr_size", 0),  # a directory truncated
    "dir": ("readlink", 0),  # a directory read as a link
    "symlink": ("lopen", 0),  # a symlink followed
    "fifo": ("lopen", 0),  # a FIFO opened (CVE-2023-2861)
    "root": ("remove", 0),  # the export root removed
}


@pytest.mark.parametrize("state", list(STATE_KINDS))
def test_each_state_refuses_an_answer_a_slip_would_give(state: str) -> None:
    op, slipped = STATE_SLIPS[state]
    for model in ("passthrough", "mapped-xattr"):
        assert state_outcome(op, state, model) != slipped, (state, op, model)


def test_a_walk_race_reproducer_wants_every_name_or_an_error() -> None:
    from harness.p9 import wire
    from harness.p9.messages import Rlerror, Rwalk, Twalk
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


def _returns_seen(tmp_path: Path, kind: str = "file", held: str = "walked", model: str = "passthrough") -> Seen:
    """A case directory as test_states makes it (f, d), the fid on f or d."""
    (tmp_path / "f").write_bytes(STATE_CONTENT)
    (tmp_path / "d").mkdir()
    node = tmp_path / ("d" if kind == "dir" else "f")
    return Seen(node, node.lstat(), tmp_path, model, kind, held)


def test_each_success_row_refuses_a_reply_a_slip_would_give(tmp_path: Path) -> None:
    """FID_OPS' returns on recorded replies: a right one passes, one a server slip would give fails
    (a field off by one, the wrong kind, a node not made or not moved)."""
    from harness.p9 import wire
    from harness.p9.messages import Rgetattr, Rlcreate, Rread, Rreadlink, Rstatfs, Rwalk, Rwrite

    seen = _returns_seen(tmp_path)
    host, fs = (tmp_path / "f").lstat(), os.statvfs(tmp_path)
    qid = wire.Qid(type=wire.QTFILE, version=0, path=1)

    right_attr = Rgetattr(valid=wire.GETATTR_BASIC, qid=qid, mode=host.st_mode, uid=host.st_uid, gid=host.st_gid,
                          nlink=host.st_nlink, rdev=0, size=host.st_size, blksize=4096, blocks=1, atime_sec=0,
                          atime_nsec=0, mtime_sec=0, mtime_nsec=0, ctime_sec=0, ctime_nsec=0, btime_sec=0,
                          btime_nsec=0, gen=0, data_version=0)  # fmt: skip

    def attr(**change: Any) -> Rgetattr:
        return Rgetattr(**{**vars(right_attr), **change})

    statfs = dict(type=0x01021994, bsize=fs.f_bsize, blocks=fs.f_blocks, bfree=fs.f_bfree, bavail=fs.f_bavail,
                  files=fs.f_files, ffree=fs.f_ffree, fsid=0, namelen=fs.f_namemax)  # fmt: skip
    right_and_slipped = [
        ("getattr", attr(), attr(size=host.st_size + 1)),
        ("getattr", attr(), attr(mode=host.st_mode ^ 0o100)),
        ("getattr", attr(), attr(qid=wire.Qid(type=wire.QTDIR, version=0, path=1))),
        ("walk_clone", Rwalk(qids=[]), Rwalk(qids=[qid])),
        ("statfs", Rstatfs(**statfs), Rstatfs(**{**statfs, "namelen": fs.f_namemax - 1})),
        ("readlink", Rreadlink(target="f"), Rreadlink(target="state content")),
    ]
    for op, right, slipped in right_and_slipped:
        FID_OPS[op].returns(right, seen)
        with pytest.raises(AssertionError):
            FID_OPS[op].returns(slipped, seen)
    (tmp_path / "o").mkdir()
    opened = _returns_seen(tmp_path / "o", held="open")
    FID_OPS["read"].returns(Rread(data=STATE_CONTENT), opened)
    with pytest.raises(AssertionError):
        FID_OPS["read"].returns(Rread(data=STATE_CONTENT[:-1]), opened)
    with pytest.raises(AssertionError):  # the reply says written, the file does not hold it
        FID_OPS["write"].returns(Rwrite(count=2), opened)
    (tmp_path / "o" / "f").write_bytes(b"xy" + STATE_CONTENT[2:])
    FID_OPS["write"].returns(Rwrite(count=2), opened)
    (tmp_path / "m").mkdir()
    made = _returns_seen(tmp_path / "m", kind="dir")
    with pytest.raises(AssertionError):  # answered, but nothing made
        FID_OPS["lcreate"].returns(Rlcreate(qid=qid, iounit=0), made)
    (tmp_path / "m" / "d" / "new").write_bytes(b"")
    (tmp_path / "m" / "d" / "new").chmod(0o644)
    with pytest.raises(AssertionError):  # made with another mode than asked
        FID_OPS["lcreate"].returns(Rlcreate(qid=qid, iounit=0), made)
    (tmp_path / "m" / "d" / "new").chmod(0o640)
    FID_OPS["lcreate"].returns(Rlcreate(qid=qid, iounit=0), made)
