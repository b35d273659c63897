"""The 9P codec: the table itself, a round trip of every message, golden frames from QEMU 7.2."""

from __future__ import annotations

from typing import Any

import pytest
from construct import FocusedSeq, FormatField, Prefixed, Struct

from harness.errors import P9ProtocolError
from harness.p9 import wire


def test_table_has_unique_types_and_names() -> None:
    assert len({m.type for m in wire.TABLE}) == len(wire.TABLE)
    assert len({m.name for m in wire.TABLE}) == len(wire.TABLE)


def test_every_request_has_its_reply() -> None:
    for message in wire.TABLE:
        if message.is_request:
            reply = wire.reply_type(message)
            assert reply.name == "R" + message.name[1:], message.name
            assert message.type % 2 == 0


def test_every_reply_except_errors_answers_a_request() -> None:
    for message in wire.TABLE:
        if not message.is_request and message.name not in ("Rlerror", "Rerror"):
            assert wire.BY_TYPE[message.type - 1].name == "T" + message.name[1:]


def sample(con: Any, seed: int) -> Any:
    """A value for any construct used in the table, different per seed."""
    kind = type(con).__name__
    if isinstance(con, wire._Str):
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


@pytest.mark.parametrize("message", wire.TABLE, ids=lambda m: m.name)
def test_round_trip(message: wire.MessageDef) -> None:
    fields = sample(message.body, message.type)
    frame = wire.encode(message.name, 0x1234, **fields)
    assert int.from_bytes(frame[:4], "little") == len(frame)
    assert frame[4] == message.type
    decoded = wire.decode(frame)
    assert (decoded.name, decoded.tag) == (message.name, 0x1234)
    assert decoded.fields == fields
    assert wire.encode(message.name, 0x1234, **decoded.fields) == frame


@pytest.mark.parametrize("message", wire.TABLE, ids=lambda m: m.name)
def test_compiled_codec_agrees_with_the_declared_frame(message: wire.MessageDef) -> None:
    fields = sample(message.body, message.type + 1)
    frame = wire.encode(message.name, 7, **fields)
    assert frame == wire.FRAME.build({"type": message.type, "tag": 7, "body": fields})
    declared = wire._WHOLE_FRAME.parse(frame)
    assert (declared.tag, declared.body) == (7, wire.decode(frame).fields)


GOLDEN = [
    ("1500000064ffff0020000008003950323030302e4c", "Tversion", wire.NOTAG, {"msize": 8192, "version": "9P2000.L"}),
    ("1500000065ffff0020000008003950323030302e4c", "Rversion", wire.NOTAG, {"msize": 8192, "version": "9P2000.L"}),
    ("1700000068000000000000ffffffff0000000000000000", "Tattach", 0,
     {"fid": 0, "afid": wire.NOFID, "uname": "", "aname": "", "n_uname": 0}),
    ("1400000069000080000000000000000000000000", "Rattach", 0, {"qid": {"type": 0x80, "version": 0, "path": 0}}),
    ("1300000018000000000000ff3f000000000000", "Tgetattr", 0, {"fid": 0, "request_mask": 0x3FFF}),
]  # fmt: skip


@pytest.mark.parametrize(("hexframe", "name", "tag", "fields"), GOLDEN, ids=[g[1] for g in GOLDEN])
def test_golden_frames_from_qemu(hexframe: str, name: str, tag: int, fields: dict[str, Any]) -> None:
    frame = bytes.fromhex(hexframe)
    assert wire.encode(name, tag, **fields) == frame
    decoded = wire.decode(frame)
    assert (decoded.name, decoded.tag, dict(decoded.fields)) == (name, tag, fields)


def test_rlerror_prints_errno_name() -> None:
    assert str(wire.decode(wire.encode("Rlerror", 1, ecode=2))) == "Rlerror ENOENT (2)"


def test_message_prints_like_a_call() -> None:
    msg = wire.decode(wire.encode("Twalk", 3, fid=1, newfid=2, wnames=["a"]))
    assert str(msg) == "Twalk(fid=1, newfid=2, wnames=['a'])"


GOOD = wire.encode("Tgetattr", 0, fid=0, request_mask=0x3FFF)


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(GOOD[:5], id="shorter-than-header"),
        pytest.param(wire.with_size(GOOD, len(GOOD) + 1), id="size-too-large"),
        pytest.param(wire.with_size(GOOD, len(GOOD) - 1), id="size-too-small"),
        pytest.param(wire.truncated(GOOD, 12), id="truncated-body"),
        pytest.param(GOOD + b"\0", id="trailing-byte"),
        pytest.param(wire.with_type(GOOD, 250), id="unknown-type"),
        pytest.param(wire.encode("Twalk", 0, fid=1, newfid=2, wnames=["abc"])[:-1] + b"", id="string-past-end"),
    ],
)
def test_malformed_frames_raise_protocol_error(frame: bytes) -> None:
    with pytest.raises(P9ProtocolError):
        wire.decode(frame)


def test_readdir_entries_must_fill_count_exactly() -> None:
    entry = {"qid": {"type": 0, "version": 0, "path": 1}, "offset": 1, "type": 0, "name": "a"}
    frame = wire.encode("Rreaddir", 0, entries=[entry])
    broken = bytearray(frame)
    broken[7:11] = (int.from_bytes(frame[7:11], "little") - 1).to_bytes(4, "little")  # count one short
    with pytest.raises(P9ProtocolError):
        wire.decode(wire.with_size(bytes(broken[:-1]), len(broken) - 1))


def test_non_utf8_names_round_trip() -> None:
    frame = wire.encode("Twalk", 0, fid=0, newfid=1, wnames=[b"\xff\xfe".decode("utf-8", "surrogateescape")])
    assert frame.endswith(b"\x02\x00\xff\xfe")
    assert wire.encode("Twalk", 0, **wire.decode(frame).fields) == frame


def test_unknown_message_name_is_refused() -> None:
    with pytest.raises(P9ProtocolError):
        wire.encode("Tnothing", 0)


@pytest.mark.parametrize("length", [0, 1, 8000, 4186088])
def test_encode_head_is_the_frame_without_its_data(length: int) -> None:
    data = bytes(range(256)) * (length // 256) + bytes(length % 256)
    head = wire.encode_head("Twrite", 3, length, fid=1, offset=2)
    assert head + data == wire.encode("Twrite", 3, fid=1, offset=2, data=data)
    with pytest.raises(P9ProtocolError, match="does not end in a data field"):
        wire.encode_head("Tread", 3, length, fid=1, offset=2, count=4)


def test_decode_head_checks_size_and_count() -> None:
    frame = wire.encode("Rread", 5, data=b"x" * 100)
    message = wire.decode_head(frame[: wire.RREAD_HEADER], len(frame))
    assert (message.name, message.tag, message.count) == ("Rread", 5, 100)
    with pytest.raises(P9ProtocolError, match="bytes were used"):
        wire.decode_head(frame[: wire.RREAD_HEADER], len(frame) - 1)
    error = wire.encode("Rlerror", 5, ecode=5)
    assert wire.decode_head(error, len(error)).ecode == 5
