"""The 9P2000.L wire format (and 9P2000.u's own messages), declared once, typed.

Each message is one frozen dataclass in :mod:`harness.p9.messages` whose annotated fields are its
wire layout (``fid: U32``, ``wnames: Names``), registered by :func:`message` under its type number;
the registry refuses a duplicate type or name, as gVisor's ``pkg/p9`` does.  From that one table
come the construct codec (compiled), the encoder and decoder, the names, the T→R pairing
(``Twalk`` is a ``TMessage[Rwalk]``, so ``session.rpc(Twalk(...))`` is an ``Rwalk`` to mypy),
trace printing, the malformed catalogue and the REPL's field lists.  Qid, Dirent and the rest are
typed records built the same way.

A frame is ``size[4] type[1] tag[2] body``; construct computes ``size`` and every count.  The tag
belongs to the frame, not to the message: :func:`encode` takes it, :func:`peek_header` reads it.

Malformed frames for negative cases are built from a correct one with :func:`encode` and then
bent with :func:`with_size`, :func:`truncated`, :func:`with_type` or plain byte surgery; the
session's ``send_raw`` sends any bytes.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import struct
import sys
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Generic, TypeVar

from construct import (
    Adapter,
    Construct,
    ConstructError,
    FocusedSeq,
    GreedyBytes,
    GreedyRange,
    Int8ul,
    Int16ul,
    Int32ul,
    Int64ul,
    Prefixed,
    PrefixedArray,
    Struct,
    Terminated,
)

from harness.errors import P9ProtocolError, errno_name

DOTL, DOTU = "9P2000.L", "9P2000.u"
NOTAG = 0xFFFF
NOFID = 0xFFFFFFFF
MAXWELEM = 16
HEADER_SIZE = 7
IOHDRSZ = 24
READDIRHDRSZ = 24
RREADDIR_HEADER = 11  # size[4] type[1] tag[2] count[4]
RREAD_HEADER = 11  # size[4] type[1] tag[2] count[4], then the data

QTDIR, QTAPPEND, QTEXCL, QTMOUNT, QTAUTH, QTTMP, QTSYMLINK, QTLINK, QTFILE = (
    0x80, 0x40, 0x20, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00,
)  # fmt: skip

#: Rlock's status and Tgetlock/Rgetlock's lock types (the Linux client's P9_LOCK_* values)
P9_LOCK_SUCCESS, P9_LOCK_BLOCKED, P9_LOCK_ERROR, P9_LOCK_GRACE = 0, 1, 2, 3
P9_LOCK_TYPE_RDLCK, P9_LOCK_TYPE_WRLCK, P9_LOCK_TYPE_UNLCK = 0, 1, 2

#: 9P2000.u's Topen/Tcreate mode byte, as QEMU reads it (OEXCL is QEMU's 0x04: Linux's 0x1000
#: does not fit in a byte)
OREAD, OWRITE, ORDWR, OEXEC, OEXCL, OTRUNC, OREXEC, ORCLOSE, OAPPEND = 0, 1, 2, 3, 0x04, 0x10, 0x20, 0x40, 0x80
#: 9P2000.u's stat mode bits above the permissions (Tcreate's perm, Rstat's mode)
DMDIR, DMAPPEND, DMEXCL, DMMOUNT, DMAUTH, DMTMP = 0x80000000, 0x40000000, 0x20000000, 0x10000000, 0x08000000, 0x04000000
DMSYMLINK, DMLINK, DMDEVICE, DMNAMEDPIPE, DMSOCKET = 0x02000000, 0x01000000, 0x00800000, 0x00200000, 0x00100000
DMSETUID, DMSETGID, DMSETVTX = 0x00080000, 0x00040000, 0x00010000

GETATTR_BASIC = 0x7FF
GETATTR_ALL = 0x3FFF
AT_REMOVEDIR = 0x200
#: Tsetattr's valid bits (a time bit without its _SET bit: the server's clock)
SETATTR_MODE, SETATTR_UID, SETATTR_GID, SETATTR_SIZE = 0x1, 0x2, 0x4, 0x8
SETATTR_ATIME, SETATTR_MTIME, SETATTR_CTIME, SETATTR_ATIME_SET, SETATTR_MTIME_SET = 0x10, 0x20, 0x40, 0x80, 0x100


class StringCodec(Adapter):  # type: ignore[misc]
    """``len[2]`` + bytes.  Decoded as UTF-8 with surrogateescape, so any byte string round-trips."""

    def _decode(self, obj: bytes, context: Any, path: Any) -> str:
        return obj.decode("utf-8", "surrogateescape")

    def _encode(self, obj: str | bytes, context: Any, path: Any) -> bytes:
        return obj if isinstance(obj, bytes) else obj.encode("utf-8", "surrogateescape")


STR = StringCodec(Prefixed(Int16ul, GreedyBytes))

# -- field types: a Python type annotated with its wire layout ------------------------------------

U8 = Annotated[int, Int8ul]
U16 = Annotated[int, Int16ul]
U32 = Annotated[int, Int32ul]
U64 = Annotated[int, Int64ul]
String = Annotated[str, STR]
#: ``count[4]`` then the bytes (Twrite, Rread)
Data = Annotated[bytes, Prefixed(Int32ul, GreedyBytes)]
#: ``nwname[2]`` then the names (Twalk)
Names = Annotated[list[str], PrefixedArray(Int16ul, STR)]


class Role(enum.Enum):
    """What a number field means to the protocol, beside its layout: the malformed catalogue (and
    anyone else) reads it from the declaration instead of guessing from field names."""

    #: a fid the request uses (walked or attached)
    FID = "fid"
    #: a fid the request acts on through an open handle (Tread, Tlock, ...)
    OPEN_FID = "open fid"
    #: a fid the request makes
    NEWFID = "newfid"
    #: a byte count the client asks for
    COUNT = "count"
    #: the largest message the client offers
    MSIZE = "msize"


Fid = Annotated[int, Int32ul, Role.FID]
OpenFid = Annotated[int, Int32ul, Role.OPEN_FID]
NewFid = Annotated[int, Int32ul, Role.NEWFID]
Count = Annotated[int, Int32ul, Role.COUNT]
Msize = Annotated[int, Int32ul, Role.MSIZE]


def python_type(message: type, field: str) -> Any:
    """The Python type of a field: ``int`` for ``U32``, ``list[str]`` for ``Names``, the record's
    class for ``Qid``."""
    hint = _hints(message)[field]
    return typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint


def role(message: type, field: str) -> Role | None:
    """The :class:`Role` ``field`` of ``message`` is declared with, or None."""
    hint = _hints(message)[field]
    extras = typing.get_args(hint)[2:] if typing.get_origin(hint) is Annotated else ()
    return next((extra for extra in extras if isinstance(extra, Role)), None)


class _Layout:
    """How a declared class maps to construct: its body, and the converters between construct's
    containers and the class (identity for plain fields, nested for records and lists of them).
    The converters are written out when first used: most processes use a handful of the
    messages, and none pays at start for the rest."""

    def __init__(
        self, cls: type, body: Construct, fields: tuple[str, ...], decoders: Converters, encoders: Converters
    ) -> None:
        self.cls, self.body, self.fields = cls, body, fields
        self.decoders, self.encoders = decoders, encoders

    @functools.cached_property
    def _both(self) -> tuple[Callable[[Any], Any], Callable[[Any], dict[str, Any]]]:
        return _converters(self.cls, self.fields, self.decoders, self.encoders)  # written out once

    @functools.cached_property
    def from_wire(self) -> Callable[[Any], Any]:
        return self._both[0]

    @functools.cached_property
    def to_wire(self) -> Callable[[Any], dict[str, Any]]:
        return self._both[1]


Converters = dict[str, Callable[[Any], Any]]


def _hints(cls: type) -> dict[str, Any]:
    """``cls``'s annotations resolved in its module (a name each, as the table writes them): what
    typing.get_type_hints(include_extras=True) gives, without its ~0.15 ms per class."""
    scope = vars(sys.modules[cls.__module__])
    return {
        name: (scope[hint] if hint in scope else eval(hint, scope)) if isinstance(hint, str) else hint
        for name, hint in inspect.get_annotations(cls).items()
    }


def _field_codec(hint: Any) -> tuple[Construct, Callable[[Any], Any] | None, Callable[[Any], Any] | None]:
    """The construct of one annotated field and its (from_wire, to_wire) converters, None for identity."""
    if typing.get_origin(hint) is Annotated:
        base, codec = typing.get_args(hint)[:2]
        if typing.get_origin(base) is list:
            (item,) = typing.get_args(base)
            if isinstance(item, type) and hasattr(item, "_layout"):
                inner = item._layout
                return codec, lambda xs: [inner.from_wire(x) for x in xs], lambda xs: [inner.to_wire(x) for x in xs]
            return codec, list, None
        return codec, None, None
    if isinstance(hint, type) and hasattr(hint, "_layout"):
        inner = hint._layout
        return inner.body, inner.from_wire, inner.to_wire
    raise TypeError(f"field annotation {hint!r} carries no wire layout")


def _layout_of(cls: type, terminated: bool) -> _Layout:
    hints = _hints(cls)
    names, subcons = [], []
    decoders: Converters = {}
    encoders: Converters = {}
    declared = getattr(cls, "__wire_fields__", None)  # a message's; a record is a dataclass
    for name in declared if declared is not None else [f.name for f in dataclasses.fields(cls)]:
        codec, dec, enc = _field_codec(hints[name])
        names.append(name)
        subcons.append(name / codec)
        if dec:
            decoders[name] = dec
        if enc:
            encoders[name] = enc
    body = Struct(*subcons, Terminated) if terminated else Struct(*subcons)
    return _Layout(cls, body, tuple(names), decoders, encoders)


def _converters(
    cls: type, names: tuple[str, ...], decoders: Converters, encoders: Converters
) -> tuple[Callable[[Any], Any], Callable[[Any], dict[str, Any]]]:
    """``from_wire(container) -> cls`` and ``to_wire(obj) -> dict`` as straight-line functions,
    written out per class.  A decoded reply is made without the frozen dataclass's ``__init__``
    (one ``object.__setattr__`` per field) by filling its ``__dict__`` in one call: Rgetattr's
    21 fields in ~3 µs instead of ~8 through the dataclass __init__."""

    def value(name: str, conv: dict[str, Callable[[Any], Any]], get: str) -> str:
        return f"{name}_({get})" if name in conv else get

    args = ", ".join(f"{n}={value(n, decoders, f'c[{n!r}]')}" for n in names)
    items = ", ".join(f"{n!r}: {value(n, encoders, f'o.{n}')}" for n in names)
    scope: dict[str, Any] = {}
    code = f"def from_wire(c):\n    o = new(cls)\n    o.__dict__.update({args})\n    return o\n"
    exec(code, {"cls": cls, "new": object.__new__, **{f"{n}_": f for n, f in decoders.items()}}, scope)
    code = f"def to_wire(o):\n    return {{{items}}}\n"
    exec(code, {f"{n}_": f for n, f in encoders.items()}, scope)
    return scope["from_wire"], scope["to_wire"]


_RecordT = TypeVar("_RecordT")


def _layout(cls: type) -> _Layout:
    layout: _Layout = getattr(cls, "_layout")  # noqa: B009  (set by record(), invisible to mypy)
    return layout


def record(cls: type[_RecordT]) -> type[_RecordT]:
    """A typed record that appears inside messages (Qid, Dirent): its codec from its fields."""
    setattr(cls, "_layout", _layout_of(cls, terminated=False))  # noqa: B010  (a class attribute mypy cannot see)
    return cls


@record
@dataclasses.dataclass(frozen=True)
class Qid:
    type: U8
    version: U32
    path: U64


@record
@dataclasses.dataclass(frozen=True)
class Dirent:
    qid: Qid
    offset: U64
    type: U8
    name: String


@record
@dataclasses.dataclass(frozen=True)
class Stat:
    """9P2000.u's stat record (Tstat, Twstat, a directory's Tread): ``size[2]`` and then these
    fields; construct computes the size, and a size that does not match the fields is malformed.
    ``n_uid``/``n_gid``/``n_muid`` and ``extension`` are 9P2000.u's additions to 9P2000's."""

    type: U16
    dev: U32
    qid: Qid
    mode: U32
    atime: U32
    mtime: U32
    length: U64
    name: String
    uid: String
    gid: String
    muid: String
    extension: String
    n_uid: U32
    n_gid: U32
    n_muid: U32


_layout(Stat).body = Prefixed(Int16ul, Struct(*_layout(Stat).body.subcons, Terminated))
#: Twstat's "don't touch" value of every field (stat(5)): ~0 numbers, empty strings.
DONT_TOUCH = Stat(
    type=0xFFFF, dev=0xFFFFFFFF, qid=Qid(0xFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF), mode=0xFFFFFFFF,
    atime=0xFFFFFFFF, mtime=0xFFFFFFFF, length=0xFFFFFFFFFFFFFFFF, name="", uid="", gid="", muid="",
    extension="", n_uid=0xFFFFFFFF, n_gid=0xFFFFFFFF, n_muid=0xFFFFFFFF,
)  # fmt: skip


def stat_bytes(stat: Stat) -> bytes:
    """``stat`` as it travels: ``size[2]`` and the fields."""
    built: bytes = _layout(Stat).body.build(_layout(Stat).to_wire(stat))
    return built


def parse_stats(data: bytes) -> list[Stat]:
    """The stat records of a 9P2000.u directory Tread's data, in order."""
    try:
        parsed = GreedyRange(_layout(Stat).body).parse(data)
        stats = [_layout(Stat).from_wire(item) for item in parsed]
    except (ConstructError, struct.error, ValueError) as err:
        raise P9ProtocolError(f"directory data of {len(data)} bytes is no sequence of stat records: {err}") from err
    if sum(len(stat_bytes(s)) for s in stats) != len(data):
        raise P9ProtocolError(f"directory data of {len(data)} bytes ends inside a stat record")
    return stats


Qids = Annotated[list[Qid], PrefixedArray(Int16ul, _layout(Qid).body)]
#: construct compiles no GreedyRange, but one can run a compiled element: ~3.5 µs per Rreaddir
#: entry instead of ~13 (a 100,000-file listing decodes in 0.35 s instead of 1.3 s).
Dirents = Annotated[
    list[Dirent],
    Prefixed(Int32ul, FocusedSeq("entries", "entries" / GreedyRange(_layout(Dirent).body.compile()), Terminated)),
]


# -- messages -----------------------------------------------------------------------------------


class Message:
    """A 9P message body: a frozen value whose fields are its wire layout. Subclasses are
    declared with :func:`message`, which makes them dataclass-like (to mypy too)."""

    TYPE: ClassVar[int]
    NAME: ClassVar[str]
    #: the dialects whose clients send it (see :func:`message`)
    DIALECTS: ClassVar[frozenset[str]]
    _layout: ClassVar[_Layout]
    __wire_fields__: ClassVar[tuple[str, ...]]

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r} of {self.NAME}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r} of {self.NAME}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return type(other) is type(self) and other.__dict__ == self.__dict__

    def __hash__(self) -> int:
        return hash((type(self), *self.__dict__.values()))

    def __repr__(self) -> str:
        return Message.__str__(self)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return cls._layout.fields

    def to_fields(self) -> dict[str, Any]:
        """The message as plain values, records as dicts: what construct builds from."""
        return self._layout.to_wire(self)

    @classmethod
    def codec(cls) -> Construct:
        """The body's construct (for byte surgery: field boundaries, string fields)."""
        return cls._layout.body

    def __str__(self) -> str:
        args = ", ".join(f"{name}={_show(getattr(self, name))}" for name in self._layout.fields)
        return f"{self.NAME}({args})"


class RMessage(Message):
    """A reply."""


R = TypeVar("R", bound=RMessage)


class TMessage(Message, Generic[R]):
    """A request whose reply is ``R`` (its type number is one more)."""

    @classmethod
    def reply_class(cls) -> type[RMessage]:
        reply = BY_TYPE[cls.TYPE + 1]
        assert issubclass(reply, RMessage)
        return reply


_MessageT = TypeVar("_MessageT", bound=Message)
BY_TYPE: dict[int, type[Message]] = {}
BY_NAME: dict[str, type[Message]] = {}


@typing.dataclass_transform(frozen_default=True)
def message(type_number: int, *, dialect: str | None = None) -> Callable[[type[_MessageT]], type[_MessageT]]:
    """Declare a message: its annotated fields, in order, are its body; registered under
    ``type_number``, and a second class with the same number or name is refused. ``dialect``
    marks a message only one dialect's clients send (9P2000.u's Topen, Tstat ...).

    The class becomes a frozen value with an ``__init__`` of its fields (defaults allowed),
    equality and a ``Twalk(fid=1, ...)`` repr, as ``@dataclass(frozen=True)`` would make it; mypy
    sees it so (PEP 681). Written here rather than by dataclasses: its per-class code generation
    made every pytest process's start several times slower for the whole message table."""

    def register(cls: type[_MessageT]) -> type[_MessageT]:
        name = cls.__name__
        if type_number in BY_TYPE or name in BY_NAME:
            raise TypeError(f"9P message {name} ({type_number}) declared twice")
        if name[0] not in "TR" or (name[0] == "T") != issubclass(cls, TMessage):
            raise TypeError(f"{name}: requests are TMessage subclasses named T..., replies R...")
        fields = tuple(inspect.get_annotations(cls))
        cls.__wire_fields__, cls.TYPE, cls.NAME = fields, type_number, name
        # 9P2000.L's own messages are numbered below 100; the 9P2000 ones (100 up) both dialects
        # send, except those declared for one
        cls.DIALECTS = frozenset({dialect} if dialect else {DOTL} if type_number < 100 else {DOTL, DOTU})
        setattr(cls, "__match_args__", fields)  # noqa: B010  (mypy: not a declared attribute)
        setattr(cls, "__init__", _make_init(cls, fields))  # noqa: B010  (mypy: cannot assign a method)
        cls._layout = _layout_of(cls, terminated=True)
        BY_TYPE[type_number] = BY_NAME[name] = cls
        return cls

    return register


def _make_init(cls: type, fields: tuple[str, ...]) -> Callable[..., None]:
    """``__init__(self, fid, newfid, wnames)``: the fields in declared order, class-level values
    as defaults, stored in the instance ``__dict__`` in one call."""
    defaults = {f"_{name}": cls.__dict__[name] for name in fields if name in cls.__dict__}
    params = ", ".join(f"{name}=_{name}" if f"_{name}" in defaults else name for name in fields)
    values = ", ".join(f"{name!r}: {name}" for name in fields)
    code = f"def __init__(self{', ' if params else ''}{params}):\n    set_dict(self, '__dict__', {{{values}}})\n"
    scope: dict[str, Any] = {}
    exec(code, {"set_dict": object.__setattr__, **defaults}, scope)
    init: Callable[..., None] = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def describe_rlerror(code: int) -> str:
    """``Rlerror EIO (5)``: how an Rlerror prints, in traces and reproducers alike."""
    return f"Rlerror {errno_name(code)} ({code})"


def _show(value: Any) -> str:
    if isinstance(value, bytes) and len(value) > 32:
        return f"<{len(value)} bytes {value[:16].hex()}…>"
    if hasattr(value, "_layout") and not isinstance(value, Message):
        return "{" + ", ".join(f"{k}={_show(getattr(value, k))}" for k in value._layout.fields) + "}"
    if isinstance(value, list) and len(value) > 8:
        return "[" + ", ".join(_show(v) for v in value[:8]) + f", … {len(value)} in all]"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value)


def table() -> tuple[type[Message], ...]:
    """Every declared message, by type number (:mod:`harness.p9.messages` declares them; the
    package imports it, so the table is whole whenever this module is used)."""
    return tuple(BY_TYPE[number] for number in sorted(BY_TYPE))


def requests(dialect: str = DOTL) -> tuple[type[TMessage[Any]], ...]:
    """Every T-message a ``dialect`` client sends (by default 9P2000.L's: what the malformed
    catalogue, the REPL and the string cases cover), by type number."""
    return tuple(m for m in table() if issubclass(m, TMessage) and dialect in m.DIALECTS)


def field_codecs(cls: type[Message]) -> dict[str, Construct]:
    """Each wire field of ``cls`` and its construct (``isinstance(c, StringCodec)`` for strings)."""
    return {sub.name: sub.subcon for sub in cls.codec().subcons if sub.name}


def request(name: str) -> type[TMessage[Any]]:
    """The T-message class called ``name``."""
    cls = lookup(name)
    if not issubclass(cls, TMessage):
        raise P9ProtocolError(f"{name} is not a request")
    return cls


def lookup(name: str) -> type[Message]:
    try:
        return BY_NAME[name]
    except KeyError:
        raise P9ProtocolError(f"unknown 9P message name {name!r}") from None


@functools.cache
def frame_codec(type_number: int) -> Construct:
    """The frame of message ``type_number`` as one struct, ``size type tag body``, compiled by
    construct on first use (~0.5 ms): construct compiles neither Prefixed nor Switch, so this
    builds Tgetattr in ~4 µs and parses Rgetattr in ~5 µs (~44 µs interpreted). :func:`encode`
    builds with size 0 and then sets it, as Prefixed would."""
    body = BY_TYPE[type_number]._layout.body
    return Struct("size" / Int32ul, "type" / Int8ul, "tag" / Int16ul, "body" / body).compile()


def encode(msg: Message, tag: int) -> bytes:
    """The frame of ``msg`` with ``tag``."""
    return encode_fields(type(msg), tag, msg.to_fields())


def encode_fields(cls: type[Message], tag: int, fields: Mapping[str, Any]) -> bytes:
    """The frame of message ``cls`` from plain field values (the malformed catalogue's and the
    REPL's way in: they build fields before they know they are valid)."""
    try:
        frame: bytes = frame_codec(cls.TYPE).build({"size": 0, "type": cls.TYPE, "tag": tag, "body": fields})
        return with_size(frame, len(frame))
    except (ConstructError, KeyError, TypeError, ValueError, struct.error) as err:
        raise P9ProtocolError(f"cannot encode {cls.NAME}{dict(fields)!r}: {err}") from err


def decode(frame: bytes) -> Message:
    """Parse a whole frame; its size field must match its length exactly."""
    if len(frame) < HEADER_SIZE:
        raise P9ProtocolError(f"9P frame of {len(frame)} bytes is shorter than the 7-byte header")
    cls = BY_TYPE.get(frame[4])
    if cls is None:
        raise P9ProtocolError(f"unknown 9P message type {frame[4]} in frame {frame[:16].hex()}")
    size = int.from_bytes(frame[:4], "little")
    if size != len(frame):
        raise P9ProtocolError(f"{cls.NAME} frame says size {size} but has {len(frame)} bytes: {frame[:24].hex()}")
    try:
        parsed = frame_codec(cls.TYPE).parse(frame)
    except (ConstructError, struct.error, ValueError, IndexError) as err:  # the compiled parser raises these
        raise P9ProtocolError(f"malformed {cls.NAME} frame ({len(frame)} bytes {frame[:24].hex()}…): {err}") from err
    decoded: Message = cls._layout.from_wire(parsed.body)
    return decoded


# -- payloads resident in guest memory (the frame goes out or comes back without its data) ---------


def encode_head(msg: Message, tag: int, payload: int) -> bytes:
    """The frame of ``msg`` (a Twrite with empty data) up to its trailing ``data``, with size and
    count counting ``payload`` bytes that travel in a descriptor of their own:
    ``encode_head(Twrite(..., data=b""), t, len(d)) + d == encode(Twrite(..., data=d), t)``."""
    if msg.NAME != "Twrite" or getattr(msg, "data", None) != b"":
        raise P9ProtocolError(f"{msg} is not a Twrite with its data left out")
    empty = encode(msg, tag)  # the count prefix is the frame's last 4 bytes
    return with_size(empty[:-4] + Int32ul.build(payload), len(empty) + payload)


def decode_head(frame: bytes, size: int) -> Message:
    """An Rread of ``size`` bytes of which only the head (``frame``, :data:`RREAD_HEADER` bytes)
    was read back: ``Rread(data=b"")``, the ``size - 11`` data bytes left where the device wrote
    them.  Anything else (an Rlerror fits the head buffer whole) decodes as usual."""
    rread = lookup("Rread")
    if len(frame) != RREAD_HEADER or frame[4] != rread.TYPE:
        return decode(frame)
    declared, count = int.from_bytes(frame[:4], "little"), int.from_bytes(frame[7:11], "little")
    if declared != size or count != size - RREAD_HEADER:
        raise P9ProtocolError(f"Rread head {frame.hex()} (size {declared}, count {count}) but {size} bytes were used")
    decoded: Message = rread(data=b"")  # type: ignore[call-arg]
    return decoded


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """``(size, type, tag)`` of a frame without decoding the body."""
    if len(frame) < HEADER_SIZE:
        raise P9ProtocolError(f"9P frame of {len(frame)} bytes is shorter than the 7-byte header")
    return int.from_bytes(frame[0:4], "little"), frame[4], int.from_bytes(frame[5:7], "little")


# -- malformed frames, for negative cases -------------------------------------------------------


def with_size(frame: bytes, size: int) -> bytes:
    """The same frame with a lying size field."""
    return size.to_bytes(4, "little") + frame[4:]


def truncated(frame: bytes, length: int) -> bytes:
    """The first ``length`` bytes of ``frame`` with the size field telling the truth about them."""
    return with_size(frame[:length], length)


def with_type(frame: bytes, type_number: int) -> bytes:
    """The same frame with another type byte."""
    return frame[:4] + bytes([type_number]) + frame[5:]
