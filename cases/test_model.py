"""Property-based sessions: a hypothesis state machine (cases/model_session.py) drives a session
on the local backend against an in-memory model of the tree.

The default budget keeps the run short; ``--hypothesis-profile=long`` is for hunting. A failing
sequence is printed by hypothesis as a replayable script of rule calls, with the 9P trace of the
last steps in the report."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from fixtures.case_path import case_path
from fixtures.place import Place

if TYPE_CHECKING:
    from hypothesis import settings


def budget() -> settings:
    """Twelve sessions of 25 steps under hypothesis's default profile; a profile loaded with
    ``--hypothesis-profile`` (``long``: fixtures/hypothesis_profiles.py) keeps its own budget."""
    from hypothesis import settings

    if settings.get_current_profile_name() == "default":
        return settings(max_examples=12, stateful_step_count=25, deadline=None)
    return settings(deadline=None)


@case_path("model/session", backends=["local"])
def test_session_against_a_model(place: Place) -> None:
    """Every reply of a random session agrees with the in-memory model of the tree."""
    from hypothesis.stateful import run_state_machine_as_test

    from cases.model_session import SessionAgainstModel

    runs = itertools.count()
    # "state_machine_factory is anything which returns an instance of RuleBasedStateMachine when
    # called with no arguments" (its docstring); the annotation says type[...] only
    factory = lambda: SessionAgainstModel(place.session, place.fid, f"run{next(runs)}")  # noqa: E731
    run_state_machine_as_test(factory, settings=budget())  # type: ignore[arg-type]
