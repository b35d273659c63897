"""The 9P session against a fake transport that answers frames in Python."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable
from typing import Any

import pytest

from harness.errors import LeakError, P9ProtocolError, P9Rlerror, P9StateError, P9Timeout
from harness.p9 import wire
from harness.p9.channel import Completion, Request
from harness.p9.messages import (
    Rattach,
    Rclunk,
    Rflush,
    Rlerror,
    Rversion,
    Rwalk,
    Tattach,
    Tclunk,
    Tflush,
    Tgetattr,
    Tstatfs,
    Tversion,
    Twalk,
)
from harness.p9.session import Session, State
from harness.p9.wire import Qid
from harness.virtio.guestmem import Regions
from harness.virtio.virtqueue import Buffer

Answer = Callable[[int, wire.Message], bytes | None]


class FakeChannel:
    """Completes each request at once with ``answer(request)``; None means never."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.sent: list[bytes] = []
        self._next = 0

    def submit(
        self,
        frame: bytes,
        reply_capacity: int,
        layout: Any = None,
        *,
        out_tail: Regions | None = None,
        in_tail: Regions | None = None,
    ) -> Request:
        self.sent.append(frame)
        self._next += 1
        return Request(self._next, 0, 0, reply_capacity, (Buffer(0, len(frame)),))

    def batch(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def completed(self, request: Request) -> bool:
        return False  # this fake completes a request only when it is waited for

    def any_completed(self) -> bool:
        return False

    def wait(self, request: Request, timeout: float) -> Completion | None:
        frame = self.sent[request.head - 1]
        reply = self.answer(wire.peek_header(frame)[2], wire.decode(frame))
        return None if reply is None else Completion(request, len(reply), reply, request.head)


QID = Qid(type=0x80, version=0, path=7)


def server(tag: int, request: wire.Message) -> bytes | None:
    match request:
        case Tversion():
            return wire.encode(Rversion(msize=request.msize, version=request.version), tag)
        case Tattach():
            return wire.encode(Rattach(qid=QID), tag)
        case Twalk() if request.wnames == ["missing"]:
            return wire.encode(Rlerror(ecode=errno.ENOENT), tag)
        case Twalk():
            return wire.encode(Rwalk(qids=[QID] * (1 if request.wnames == ["a", "gone"] else len(request.wnames))), tag)
        case Tclunk():
            return wire.encode(Rclunk(), tag)
        case Tgetattr():
            return wire.encode(Rclunk(), tag)  # wrong reply type
        case Tflush():
            return wire.encode(Rflush(), tag + 1)  # wrong tag
    return None


@pytest.fixture
def session() -> Session:
    return Session(FakeChannel(server), timeout=0.01)


def state(session: Session) -> State:
    return session.state


def test_states_and_fids(session: Session) -> None:
    assert state(session) is State.NEW
    with pytest.raises(P9StateError):
        session.attach(0)
    session.version(16384)
    assert (state(session), session.msize) == (State.VERSIONED, 16384)
    root = session.new_fid()
    qid = session.attach(root).qid
    assert state(session) is State.ATTACHED and qid == QID
    child = session.walk_fid(root, ["a", "b"])
    assert session.fids == {root, child}
    session.clunk(child)
    assert session.fids == {root}
    session.version()
    assert session.fids == set()
    session.close()
    assert state(session) is State.CLOSED
    with pytest.raises(P9StateError):
        session.send(Tversion(msize=8192, version="9P2000.L"))


def test_partial_walk_creates_no_fid(session: Session) -> None:
    session.version()
    root = session.new_fid()
    session.attach(root)
    newfid = session.new_fid()
    qids = session.walk(root, ["a", "gone"], newfid).qids
    assert len(qids) == 1 and newfid not in session.fids


def test_rlerror_names_request_and_errno(session: Session) -> None:
    session.version()
    root = session.new_fid()
    session.attach(root)
    with pytest.raises(P9Rlerror) as info:
        session.walk(root, ["missing"], 5)
    assert info.value.errno == errno.ENOENT
    assert str(info.value).startswith("Twalk(fid=0, newfid=5, wnames=['missing']) -> Rlerror ENOENT (2)")


def test_wrong_reply_type_and_wrong_tag_are_protocol_errors(session: Session) -> None:
    session.version()
    with pytest.raises(P9ProtocolError, match="answered by Rclunk"):
        session.getattr(0)
    with pytest.raises(P9ProtocolError, match="answered with tag"):
        session.rpc(Tflush(oldtag=3))


def test_timeout_names_the_request(session: Session) -> None:
    session.version()
    with pytest.raises(P9Timeout, match=r"Tstatfs\(fid=9\)"):
        session.rpc(Tstatfs(fid=9))


def test_tags_are_reused_after_completion_and_distinct_while_pending() -> None:
    session = Session(FakeChannel(server))
    session.version()
    first = session.send(Tclunk(fid=1))
    second = session.send(Tclunk(fid=2))
    assert (first.tag, second.tag) == (0, 1)
    first.result()
    assert session.send(Tclunk(fid=3)).tag == 0


def test_close_reports_leaks(session: Session) -> None:
    session.version()
    session.attach(0)
    session.send(Tstatfs(fid=0))
    with pytest.raises(LeakError) as info:
        session.close()
    assert "Tstatfs(fid=0)" in str(info.value) and "fids never clunked: [0]" in str(info.value)


def test_history_shows_both_directions(session: Session) -> None:
    session.version()
    text = session.format_history()
    assert "--> tag=65535 Tversion(msize=8192, version='9P2000.L')" in text
    assert "<-- tag=65535 head=1 used=21 Rversion(msize=8192, version='9P2000.L')" in text


def test_raw_frames_go_out_unchanged(session: Session) -> None:
    frame = wire.with_size(wire.encode(Tversion(msize=8192, version="9P2000.L"), wire.NOTAG), 99)
    session.send_raw(frame)
    assert session.channel.sent[-1] == frame  # type: ignore[attr-defined]


def test_done_never_waits_and_turns_true_once_a_reply_is_known(session: Session) -> None:
    session.version()
    pending = session.send(Tclunk(fid=0))
    assert not pending.done()  # the fake transport answers only when waited for
    pending.result()
    assert pending.done()
