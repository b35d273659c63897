"""Property-based sessions: a hypothesis state machine (cases/model_session.py) drives a session
on the local backend against an in-memory model of the tree.

The default budget keeps the run short and derandomized (the same sessions every run, drawn from
the case's name: a red run is a server that answered differently, never a new draw);
``--hypothesis-profile=long`` is for hunting, and ``--hypothesis-seed`` draws others. A failing
sequence is printed by hypothesis as a replayable script of rule calls, with the 9P trace of the
last steps in the report, and the case's reproducer replays its batches one kick each."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import pytest

from fixtures.case_path import case_path
from fixtures.mirror import Mirror
from fixtures.races import HUNTER_RACES, KnownRaceSeen, RaceLog

if TYPE_CHECKING:
    from hypothesis import settings


def budget(seeded: object = None) -> settings:
    """Twenty sessions of 30 steps under hypothesis's default profile, derandomized unless
    ``--hypothesis-seed`` is given; a profile loaded with ``--hypothesis-profile`` (``long``:
    fixtures/hypothesis_profiles.py) keeps its own budget."""
    from hypothesis import settings

    if settings.get_current_profile_name() == "default":
        return settings(max_examples=20, stateful_step_count=30, deadline=None, derandomize=seeded is None)
    return settings(deadline=None)


@pytest.mark.slow
@pytest.mark.qemu_bug(fixed_in=(), race=True, raises=KnownRaceSeen, reason=HUNTER_RACES,
                      upstream=("listing-race", "create-race", "same-fid-lcreate", "walk-rename"))  # fmt: skip
@case_path("model/session", backends=["local"])
def test_session_against_a_model(mirror: Mirror, request: pytest.FixtureRequest) -> None:
    """Every reply of a random session agrees with the in-memory model of the tree; the replies of
    each batch of requests in flight together are some serial order's. A reply of a known race
    (fixtures/races.py) is checked as the answer it stands for and noted, the session goes on,
    and the case ends as that race's xfail once everything else held."""
    from hypothesis.stateful import run_state_machine_as_test

    from cases.model_session import SessionAgainstModel

    runs, races = itertools.count(), RaceLog()
    # "state_machine_factory is anything which returns an instance of RuleBasedStateMachine when
    # called with no arguments" (its docstring); the annotation says type[...] only
    factory = lambda: SessionAgainstModel(mirror, f"run{next(runs)}", races)  # noqa: E731
    run_state_machine_as_test(factory, settings=budget(request.config.getoption("hypothesis_seed", None)))  # type: ignore[arg-type]
    races.raise_if_seen("a known race showed")
