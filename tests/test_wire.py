"""The 9P codec: the table itself, a round trip of every message, golden frames from QEMU 7.2."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from construct import FocusedSeq, FormatField, Prefixed, Struct

from harness.errors import P9ProtocolError, errno_name
from harness.p9 import wire
from harness.p9.messages import (
    Rattach,
    Rlerror,
    Rread,
    Rreaddir,
    Rversion,
    Tattach,
    Tclunk,
    Tgetattr,
    Tread,
    Tsetattr,
    Tversion,
    Twalk,
    Twrite,
)
from harness.p9.wire import Dirent, Qid

TABLE = wire.table()


def test_table_has_unique_types_and_names() -> None:
    assert len({m.TYPE for m in TABLE}) == len(TABLE) == len({m.NAME for m in TABLE})
    assert [m.TYPE for m in TABLE] == sorted(m.TYPE for m in TABLE)


def test_every_request_has_its_reply() -> None:
    for message in wire.requests():
        reply = message.reply_class()
        assert "R" + message.NAME[1:] == reply.NAME, message.NAME
        assert message.TYPE % 2 == 0


def test_every_reply_except_errors_answers_a_request() -> None:
    for message in TABLE:
        if issubclass(message, wire.RMessage) and message.NAME not in ("Rlerror", "Rerror"):
            assert "T" + message.NAME[1:] == wire.BY_TYPE[message.TYPE - 1].NAME


def test_the_registry_refuses_a_second_declaration() -> None:
    with pytest.raises(TypeError, match="declared twice"):

        @wire.message(110)
        @dataclasses.dataclass(frozen=True)
        class Twalk2(wire.TMessage[Rattach]):
            fid: wire.U32

    with pytest.raises(TypeError, match="requests are TMessage"):

        @wire.message(250)
        @dataclasses.dataclass(frozen=True)
        class Tbogus(wire.RMessage):
            fid: wire.U32

    assert 250 not in wire.BY_TYPE and "Twalk2" not in wire.BY_NAME


def test_a_field_without_a_wire_layout_is_refused() -> None:
    with pytest.raises(TypeError, match="carries no wire layout"):

        @wire.message(252)
        @dataclasses.dataclass(frozen=True)
        class Rplain(wire.RMessage):
            count: int


def sample(con: Any, seed: int) -> Any:
    """A value for any construct used in the table, different per seed."""
    kind = type(con).__name__
    if isinstance(con, wire.StringCodec):
        return f"name-{seed}-ü"
    if isinstance(con, Struct):
        return {sc.name: sample(sc, seed + i) for i, sc in enumerate(con.subcons) if sc.name}
    if isinstance(con, FocusedSeq):
        return sample(next(sc for sc in con.subcons if sc.name == con.parsebuildfrom), seed)
    if kind in ("Array", "GreedyRange"):
        return [sample(con.subcon, seed + i) for i in range(3)]
    if isinstance(con, Prefixed) and type(con.subcon).__name__ == "GreedyBytes":
        return bytes(range(seed % 7, seed % 7 + 40))
    if isinstance(con, FormatField):
        return (seed * 2654435761) % (1 << (8 * con.sizeof()))
    if hasattr(con, "subcon"):  # Renamed, Prefixed, Rebuild ...
        return sample(con.subcon, seed)
    if kind == "Compiled":  # what construct compiled: its declaration
        return sample(con.defersubcon, seed)
    raise TypeError(f"no sample for {con!r}")


@pytest.mark.parametrize("message", TABLE, ids=lambda m: m.NAME)
def test_round_trip(message: type[wire.Message]) -> None:
    fields = sample(message.codec(), message.TYPE)
    frame = wire.encode_fields(message, 0x1234, fields)
    assert wire.peek_header(frame) == (len(frame), message.TYPE, 0x1234)
    decoded = wire.decode(frame)
    assert type(decoded) is message
    assert wire.encode(decoded, 0x1234) == frame
    assert decoded == wire.decode(wire.encode(decoded, 0x1234))


@pytest.mark.parametrize("message", TABLE, ids=lambda m: m.NAME)
def test_compiled_codec_agrees_with_the_declared_body(message: type[wire.Message]) -> None:
    fields = sample(message.codec(), message.TYPE + 1)
    frame = wire.encode_fields(message, 7, fields)
    assert frame[wire.HEADER_SIZE :] == message.codec().build(fields)  # construct, interpreted
    assert message.codec().parse(frame[wire.HEADER_SIZE :]) == wire.decode(frame).to_fields() == fields


def test_messages_are_frozen_values() -> None:
    walk = Twalk(fid=1, newfid=2, wnames=["a"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        walk.fid = 3  # type: ignore[misc]
    assert walk == Twalk(1, 2, ["a"]) and walk != Twalk(fid=1, newfid=2, wnames=["b"]) and walk != Tclunk(fid=1)
    assert repr(walk) == str(walk) == "Twalk(fid=1, newfid=2, wnames=['a'])"
    assert repr(Rlerror(ecode=2)) == "Rlerror(ecode=2)" and str(Rlerror(ecode=2)) == "Rlerror ENOENT (2)"
    assert Tsetattr(fid=1, valid=1).mode == 0  # declared defaults
    with pytest.raises(TypeError):
        Twalk(fid=1)  # type: ignore[call-arg]
    match wire.decode(wire.encode(walk, 0)):
        case Twalk(fid, newfid, names):
            assert (fid, newfid, names) == (1, 2, ["a"])


def test_records_are_typed() -> None:
    reply = wire.decode(wire.encode(Rreaddir(entries=[Dirent(Qid(0x80, 1, 2), 9, 4, "d")]), 1))
    assert isinstance(reply, Rreaddir)
    (entry,) = reply.entries
    assert isinstance(entry, Dirent) and isinstance(entry.qid, Qid)
    assert (entry.qid.type, entry.qid.version, entry.qid.path, entry.offset, entry.name) == (0x80, 1, 2, 9, "d")
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.qid.path = 3  # type: ignore[misc]


GOLDEN: list[tuple[str, int, wire.Message]] = [
    ("1500000064ffff0020000008003950323030302e4c", wire.NOTAG, Tversion(msize=8192, version="9P2000.L")),
    ("1500000065ffff0020000008003950323030302e4c", wire.NOTAG, Rversion(msize=8192, version="9P2000.L")),
    ("1700000068000000000000ffffffff0000000000000000", 0,
     Tattach(fid=0, afid=wire.NOFID, uname="", aname="", n_uname=0)),
    ("1400000069000080000000000000000000000000", 0, Rattach(qid=Qid(type=0x80, version=0, path=0))),
    ("1300000018000000000000ff3f000000000000", 0, Tgetattr(fid=0, request_mask=0x3FFF)),
]  # fmt: skip


@pytest.mark.parametrize(("hexframe", "tag", "message"), GOLDEN, ids=[g[2].NAME for g in GOLDEN])
def test_golden_frames_from_qemu(hexframe: str, tag: int, message: wire.Message) -> None:
    frame = bytes.fromhex(hexframe)
    assert wire.encode(message, tag) == frame
    assert wire.decode(frame) == message
    assert wire.peek_header(frame)[2] == tag


def test_rlerror_prints_errno_name() -> None:
    assert str(wire.decode(wire.encode(Rlerror(ecode=2), 1))) == "Rlerror ENOENT (2)"
    assert errno_name(2) == "ENOENT" and errno_name(4095) == "4095"


def test_message_prints_like_a_call() -> None:
    msg = wire.decode(wire.encode(Twalk(fid=1, newfid=2, wnames=["a"]), 3))
    assert str(msg) == "Twalk(fid=1, newfid=2, wnames=['a'])"


GOOD = wire.encode(Tgetattr(fid=0, request_mask=0x3FFF), 0)


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(GOOD[:5], id="shorter-than-header"),
        pytest.param(wire.with_size(GOOD, len(GOOD) + 1), id="size-too-large"),
        pytest.param(wire.with_size(GOOD, len(GOOD) - 1), id="size-too-small"),
        pytest.param(wire.truncated(GOOD, 12), id="truncated-body"),
        pytest.param(GOOD + b"\0", id="trailing-byte"),
        pytest.param(wire.with_type(GOOD, 250), id="unknown-type"),
        pytest.param(wire.encode(Twalk(fid=1, newfid=2, wnames=["abc"]), 0)[:-1], id="string-past-end"),
    ],
)
def test_malformed_frames_raise_protocol_error(frame: bytes) -> None:
    with pytest.raises(P9ProtocolError):
        wire.decode(frame)


def test_readdir_entries_must_fill_count_exactly() -> None:
    frame = wire.encode(Rreaddir(entries=[Dirent(Qid(0, 0, 1), 1, 0, "a")]), 0)
    broken = bytearray(frame)
    broken[7:11] = (int.from_bytes(frame[7:11], "little") - 1).to_bytes(4, "little")  # count one short
    with pytest.raises(P9ProtocolError):
        wire.decode(wire.with_size(bytes(broken[:-1]), len(broken) - 1))


def test_non_utf8_names_round_trip() -> None:
    frame = wire.encode(Twalk(fid=0, newfid=1, wnames=[b"\xff\xfe".decode("utf-8", "surrogateescape")]), 0)
    assert frame.endswith(b"\x02\x00\xff\xfe")
    assert wire.encode(wire.decode(frame), 0) == frame


def test_unknown_message_name_is_refused() -> None:
    with pytest.raises(P9ProtocolError):
        wire.lookup("Tnothing")
    with pytest.raises(P9ProtocolError, match="not a request"):
        wire.request("Rwalk")


def test_a_field_out_of_range_is_a_protocol_error() -> None:
    with pytest.raises(P9ProtocolError, match="cannot encode Tgetattr"):
        wire.encode(Tgetattr(fid=1 << 32, request_mask=0), 0)


@pytest.mark.parametrize("length", [0, 1, 8000, 4186088])
def test_encode_head_is_the_frame_without_its_data(length: int) -> None:
    data = bytes(range(256)) * (length // 256) + bytes(length % 256)
    head = wire.encode_head(Twrite(fid=1, offset=2, data=b""), 3, length)
    assert head + data == wire.encode(Twrite(fid=1, offset=2, data=data), 3)
    with pytest.raises(P9ProtocolError, match="not a Twrite with its data left out"):
        wire.encode_head(Tread(fid=1, offset=2, count=4), 3, length)


def test_decode_head_checks_size_and_count() -> None:
    frame = wire.encode(Rread(data=b"x" * 100), 5)
    assert wire.decode_head(frame[: wire.RREAD_HEADER], len(frame)) == Rread(data=b"")
    with pytest.raises(P9ProtocolError, match="bytes were used"):
        wire.decode_head(frame[: wire.RREAD_HEADER], len(frame) - 1)
    error = wire.encode(Rlerror(ecode=5), 5)
    assert wire.decode_head(error, len(error)) == Rlerror(ecode=5)


def test_every_reply_the_server_sizes_has_its_largest_made_or_explained() -> None:
    """Each reply with a field the server fills from its own data (a string, data, a list, a stat
    record) is in cases/test_msize.py's LARGEST_REPLIES: made at its largest at the smallest msize
    by a case, or with the reason it always fits. A reply declared later without an entry fails."""
    from cases.test_msize import LARGEST_REPLIES

    fixed = (int, wire.Qid)
    replies = [cls for cls in wire.table() if issubclass(cls, wire.RMessage)]
    sized = {cls.__name__ for cls in replies if any(wire.python_type(cls, n) not in fixed for n in cls.field_names())}
    assert sized == set(LARGEST_REPLIES), (sized - set(LARGEST_REPLIES), set(LARGEST_REPLIES) - sized)
