"""The models the concurrent cases judge replies with, through the one oracle (fixtures/oracle.py),
on the replies QEMU gave (no QEMU here): the pruned walk gives what every order gives, a known
race's answers are read as the race, anything else still fails."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cases.test_concurrent import NAME_REQUESTS, REQUESTS, WRITERS, Model, NameModel, ReadonlyModel, explained_by_race
from cases.test_concurrent_fids import FID_REQUESTS, WSTAT_REQUESTS, FidModel, WstatModel
from fixtures.oracle import every_order, serial_outcomes


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(WRITERS), min_size=0, max_size=3, unique=True),
    st.lists(st.sampled_from([op for op in REQUESTS if op not in WRITERS]), min_size=0, max_size=4, unique=True),
    st.randoms(use_true_random=False),
    st.sampled_from([Model, ReadonlyModel]),
)
def test_serial_outcomes_are_those_of_every_order(writers: list[str], readers: list[str], rng: Any, model: Any) -> None:
    ops = writers + readers
    rng.shuffle(ops)
    assert serial_outcomes(ops, model) == every_order(ops, model)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(
        [
            (FidModel, list(FID_REQUESTS)),
            (WstatModel, list(WSTAT_REQUESTS)),
            (NameModel, list(NAME_REQUESTS)),
        ]
    ).flatmap(lambda kind: st.tuples(st.just(kind[0]), st.lists(st.sampled_from(kind[1]), min_size=1, max_size=6))),
)
def test_the_other_models_too(kind_and_ops: tuple[Any, list[str]]) -> None:
    model, ops = kind_and_ops
    assert serial_outcomes(ops, model) == every_order(ops, model)


def test_a_raced_creation_reads_as_made_or_as_leaving_nothing() -> None:
    # 10.0.13, none: a Tsymlink took the name between Tmkdir's mkdirat and its fchmodat
    assert explained_by_race(["symlink_a", "rmdir_a", "mkdir_a"], ("ok", "ok", "ELOOP"), "dir") == 2
    # master, none: the first Tmkdir's clean-up removed the second's directory, by name
    ops = ["symlink_a", "mkdir_a", "rmdir_a2", "mkdir_a2"]
    assert explained_by_race(ops, ("ok", "ENOENT", "ok", "ENOENT"), None) == 1


def test_answers_no_reading_of_the_race_gives_are_not_excused() -> None:
    ops = ["symlink_a", "rmdir_a", "mkdir_a"]
    assert explained_by_race(ops, ("ok", "ok", "EEXIST"), "dir") is None  # no race errno
    assert explained_by_race(["mkdir_a", "rmdir_a"], ("ENOTDIR", "ok"), None) is None  # a remover's wrong errno
    assert explained_by_race(["mkdir_a", "unlink_a"], ("ENOENT", "EISDIR"), "dir") is None  # the name was taken
