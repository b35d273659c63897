"""Hostile input: a qtest peer that speaks garbage, and fuzzed 9P replies. Only the harness's own
typed errors may come out: never an IndexError, a hang, or a construct exception."""

from __future__ import annotations

import base64
import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import P9Error, QTestError, QTestFail, QTestProtocolError
from harness.p9 import wire
from harness.p9.messages import Tversion
from harness.p9.session import Session
from harness.qemu.qtest import QTest
from tests.fakes import FakeQTestPeer, b64
from tests.test_session import FakeChannel, server
from tests.test_wire import sample


class ScriptedPeer:
    """A qtest peer that answers each command with the next scripted chunk of raw bytes."""

    def __init__(self, replies: list[bytes]) -> None:
        self.replies = list(replies)
        self.peer = FakeQTestPeer(self._respond)

    def _respond(self, line: str) -> list[str]:
        if not self.replies:
            self.peer.theirs.close()
            return []
        self.peer.theirs.sendall(self.replies.pop(0))
        return []


def client(peer: ScriptedPeer) -> QTest:
    return QTest(peer.peer.ours, timeout=0.3)


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        pytest.param(b"blah\n", QTestFail, id="garbage-line"),
        pytest.param(b"OK 0x12", QTestError, id="truncated-then-silence"),
        pytest.param(b"OK \xff\xfe\n", QTestProtocolError, id="not-ascii"),
        pytest.param(b"IRQ raise 3\nIRQ sideways 4\nOK 0x1\n", QTestProtocolError, id="bad-irq-line"),
        pytest.param(b"OK zzzz\n", QTestProtocolError, id="not-a-number"),
        pytest.param(b"OK 0x1\nOK 0x2\n", QTestProtocolError, id="more-replies-than-commands"),
    ],
)
def test_garbage_from_the_peer_is_a_typed_error(reply: bytes, error: type[Exception]) -> None:
    peer = ScriptedPeer([reply])
    qt = client(peer)
    with pytest.raises(error):
        qt.readl(0x1000)
    qt.close()
    peer.peer.close()


def test_huge_lines() -> None:
    big = bytes(range(256)) * 12288  # 3 MiB
    peer = ScriptedPeer([("OK " + b64(big) + "\n").encode(), ("OK " + "A" * 4_000_000 + "\n").encode()])
    qt = client(peer)
    assert base64.b64decode(qt.query(f"b64read 0x0 {len(big):#x}")) == big  # a correct 4 MB line
    with pytest.raises(QTestProtocolError):  # a huge reply of the wrong length
        qt.memread(0, 16)
    qt.close()
    peer.peer.close()


def test_irq_lines_anywhere_are_recorded() -> None:
    peer = ScriptedPeer([b"IRQ raise 1\nIRQ raise 2\nOK 0x00ff\nIRQ lower 1\n", b"IRQ lower 2\nOK 0x0001\n"])
    qt = client(peer)
    assert qt.inb(0x60) == 0xFF
    assert qt.inb(0x60) == 1
    assert qt.irq_log == [("raise", 1), ("raise", 2), ("lower", 1), ("lower", 2)]
    qt.close()
    peer.peer.close()


LINES = st.one_of(
    st.sampled_from([b"OK\n", b"OK 0x10\n", b"FAIL x\n", b"ERR y\n", b"IRQ raise 5\n", b"IRQ lower 5\n", b"\n"]),
    st.binary(max_size=40),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LINES, min_size=1, max_size=4))
def test_any_reply_bytes_give_a_value_or_a_typed_error(chunks: list[bytes]) -> None:
    peer = ScriptedPeer([b"".join(chunks)])
    qt = QTest(peer.peer.ours, timeout=0.05)
    try:
        value = qt.readw(0x1000)
        assert isinstance(value, int)
    except QTestError:
        pass
    finally:
        qt.close()
        peer.peer.close()


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_random_frames_decode_or_raise_protocol_error(frame: bytes) -> None:
    with contextlib.suppress(P9Error):
        wire.decode(frame)


REPLIES = [m for m in wire.table() if issubclass(m, wire.RMessage)]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(REPLIES), st.data())
def test_mutated_reply_frames_decode_or_raise_protocol_error(message: type[wire.Message], data: st.DataObject) -> None:
    frame = bytearray(wire.encode_fields(message, 1, sample(message.codec(), message.TYPE)))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "cut", "grow", "size"]))
        at = data.draw(st.integers(0, max(0, len(frame) - 1)))
        if kind == "flip" and frame:
            frame[at] ^= data.draw(st.integers(1, 255))
        elif kind == "cut":
            del frame[at:]
        elif kind == "grow":
            frame[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        else:
            frame[0:4] = data.draw(st.integers(0, 2**32 - 1)).to_bytes(4, "little")
    try:
        decoded = wire.decode(bytes(frame))
        assert type(decoded) is wire.BY_TYPE[frame[4]]
    except P9Error:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_a_session_given_garbage_replies_raises_only_p9_errors(garbage: bytes) -> None:
    def hostile(tag: int, request: wire.Message) -> bytes | None:
        return server(tag, request) if isinstance(request, Tversion) else garbage

    session = Session(FakeChannel(hostile), timeout=0.01)
    session.version()
    with contextlib.suppress(P9Error):
        session.getattr(0)
