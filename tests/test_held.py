"""The nothing-held check around every case (fixtures/held.py), on a fake QEMU's descriptor table
and fake sessions: a descriptor more than at the start fails, naming it and the refused requests;
a fid left held fails; equal or fewer passes; a descriptor closed just after the reply passes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

import pytest

from fixtures.held import Held
from harness.errors import LeakError
from harness.p9.messages import Rlerror, Tlopen
from harness.p9.session import Session, State
from harness.p9.trace import Direction, Record


class FakeMachine:
    def __init__(self, fds: Iterable[int]) -> None:
        self.fds = set(fds)

    def descriptors(self) -> frozenset[int]:
        return frozenset(self.fds)

    def descriptor_targets(self, fds: Iterable[int]) -> dict[int, str]:
        return {fd: f"/export/case/file{fd}" for fd in sorted(fds)}


def session(fids: set[int] = frozenset(), refused: bool = False) -> Any:  # type: ignore[assignment]
    """A Session-shaped object with ``fids`` held and, with ``refused``, a Tlopen refused."""
    fake: Any = Session.__new__(Session)
    fake.state, fake._fids = State.ATTACHED, set(fids)
    fake.history = []
    if refused:
        fake.history = [
            Record(0.0, Direction.SENT, 1, b"", Tlopen(fid=3, flags=0)),
            Record(0.1, Direction.RECEIVED, 1, b"", Rlerror(ecode=13)),
        ]
    return fake


def test_a_descriptor_more_fails_naming_it_and_the_refused_requests() -> None:
    machine = FakeMachine({0, 1, 2, 10})
    held = Held.now(machine)  # type: ignore[arg-type]
    machine.fds.add(11)
    with pytest.raises(LeakError, match=r"1 more host descriptor.*fd 11 -> /export/case/file11.*Tlopen"):
        held.check([session(refused=True)])


def test_a_fid_left_held_fails() -> None:
    held = Held.now(FakeMachine({0, 1}))  # type: ignore[arg-type]
    with pytest.raises(LeakError, match=r"left 2 fid\(s\) held.*\[3, 7\]"):
        held.check([session({3, 7})])


def test_as_many_or_fewer_passes() -> None:
    machine = FakeMachine({0, 1, 2, 10})
    held = Held.now(machine)  # type: ignore[arg-type]
    machine.fds.discard(10)
    held.check([session()])
    machine.fds |= {10, 12}  # one closed, another opened since: no more than at the start
    machine.fds.discard(2)
    held.check([session()])


def test_a_descriptor_closed_just_after_the_reply_passes() -> None:
    machine = FakeMachine({0, 1})
    held = Held.now(machine)  # type: ignore[arg-type]
    machine.fds.add(5)
    closer = threading.Timer(0.01, lambda: machine.fds.discard(5))
    closer.start()
    started = time.monotonic()
    held.check([session()])
    assert time.monotonic() - started < 0.5
