"""The 9P2000.L wire format (and 9P2000.u's own messages), declared once, typed.

Each message is one frozen dataclass in :mod:`harness.p9.messages` whose annotated fields are its
wire layout (``fid: U32``, ``wnames: Names``), registered by :func:`message` under its type number;
the registry refuses a duplicate type or name, as gVisor's ``pkg/p9`` does.  From that one table
come the construct codec (compiled; field kinds and layouts: :mod:`harness.p9.layout`), the
encoder and decoder, the names, the T→R pairing (``Twalk`` is a ``TMessage[Rwalk]``, so
``session.rpc(Twalk(...))`` is an ``Rwalk`` to mypy), trace printing, the malformed catalogue
and the REPL's field lists.  Qid, Dirent and the rest are typed records built the same way.

A frame is ``size[4] type[1] tag[2] body``; construct computes ``size`` and every count.  The tag
belongs to the frame, not to the message: :func:`encode` takes it, :func:`peek_header` reads it.

Malformed frames for negative cases are built from a correct one with :func:`encode` and then
bent with :func:`with_size`, :func:`truncated`, :func:`with_type` or plain byte surgery; the
session's ``send_raw`` sends any bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import struct
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Generic, Self, TypeVar

from construct import (
    Construct,
    ConstructError,
    FocusedSeq,
    GreedyRange,
    Int8ul,
    Int16ul,
    Int32ul,
    Prefixed,
    PrefixedArray,
    Struct,
    Terminated,
)

from harness.errors import P9ProtocolError, errno_name
from harness.p9.layout import STR as STR
from harness.p9.layout import U8 as U8
from harness.p9.layout import U16 as U16
from harness.p9.layout import U32 as U32
from harness.p9.layout import U64 as U64
from harness.p9.layout import Bits as Bits
from harness.p9.layout import Cookie as Cookie
from harness.p9.layout import Count as Count
from harness.p9.layout import Data as Data
from harness.p9.layout import Fid as Fid
from harness.p9.layout import GetattrMask as GetattrMask
from harness.p9.layout import Id as Id
from harness.p9.layout import Keep8 as Keep8
from harness.p9.layout import Keep16 as Keep16
from harness.p9.layout import Keep32 as Keep32
from harness.p9.layout import Keep64 as Keep64
from harness.p9.layout import Layout, layout, layout_of
from harness.p9.layout import LockFlags as LockFlags
from harness.p9.layout import LockType as LockType
from harness.p9.layout import Mode as Mode
from harness.p9.layout import Msize as Msize
from harness.p9.layout import Names as Names
from harness.p9.layout import Nanoseconds as Nanoseconds
from harness.p9.layout import NewFid as NewFid
from harness.p9.layout import NodeMode as NodeMode
from harness.p9.layout import Offset as Offset
from harness.p9.layout import OpenFid as OpenFid
from harness.p9.layout import OpenFlags as OpenFlags
from harness.p9.layout import OpenMode as OpenMode
from harness.p9.layout import Perm as Perm
from harness.p9.layout import Role as Role
from harness.p9.layout import Seconds as Seconds
from harness.p9.layout import SetattrValid as SetattrValid
from harness.p9.layout import StatLength as StatLength
from harness.p9.layout import StatTime as StatTime
from harness.p9.layout import String as String
from harness.p9.layout import StringCodec as StringCodec
from harness.p9.layout import Tag as Tag
from harness.p9.layout import Target as Target
from harness.p9.layout import UnlinkFlags as UnlinkFlags
from harness.p9.layout import Values as Values
from harness.p9.layout import XattrFlags as XattrFlags
from harness.p9.layout import XattrSize as XattrSize
from harness.p9.layout import bits as bits
from harness.p9.layout import largest as largest
from harness.p9.layout import python_type as python_type
from harness.p9.layout import record as record
from harness.p9.layout import role as role
from harness.p9.layout import values as values

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


@record
@dataclasses.dataclass(frozen=True)
class Qid:
    type: Keep8
    version: Keep32
    path: Keep64


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

    type: Keep16
    dev: Keep32
    qid: Qid
    mode: Keep32
    atime: StatTime
    mtime: StatTime
    length: StatLength
    name: String
    uid: String
    gid: String
    muid: String
    extension: String
    n_uid: Keep32
    n_gid: Keep32
    n_muid: Keep32


layout(Stat).body = Prefixed(Int16ul, Struct(*layout(Stat).body.subcons, Terminated))
#: Twstat's "don't touch" value of every field (stat(5)): ~0 numbers, empty strings.
DONT_TOUCH = Stat(
    type=0xFFFF, dev=0xFFFFFFFF, qid=Qid(0xFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF), mode=0xFFFFFFFF,
    atime=0xFFFFFFFF, mtime=0xFFFFFFFF, length=0xFFFFFFFFFFFFFFFF, name="", uid="", gid="", muid="",
    extension="", n_uid=0xFFFFFFFF, n_gid=0xFFFFFFFF, n_muid=0xFFFFFFFF,
)  # fmt: skip


def stat_bytes(stat: Stat) -> bytes:
    """``stat`` as it travels: ``size[2]`` and the fields."""
    built: bytes = layout(Stat).body.build(layout(Stat).to_wire(stat))
    return built


def parse_stats(data: bytes) -> list[Stat]:
    """The stat records of a 9P2000.u directory Tread's data, in order."""
    try:
        parsed = GreedyRange(layout(Stat).body).parse(data)
        stats = [layout(Stat).from_wire(item) for item in parsed]
    except (ConstructError, struct.error, ValueError) as err:
        raise P9ProtocolError(f"directory data of {len(data)} bytes is no sequence of stat records: {err}") from err
    if sum(len(stat_bytes(s)) for s in stats) != len(data):
        raise P9ProtocolError(f"directory data of {len(data)} bytes ends inside a stat record")
    return stats


Qids = Annotated[list[Qid], PrefixedArray(Int16ul, layout(Qid).body)]
#: construct compiles no GreedyRange, but one can run a compiled element: ~3.5 µs per Rreaddir
#: entry instead of ~13 (a 100,000-file listing decodes in 0.35 s instead of 1.3 s).
Dirents = Annotated[
    list[Dirent],
    Prefixed(Int32ul, FocusedSeq("entries", "entries" / GreedyRange(layout(Dirent).body.compile()), Terminated)),
]


# -- messages -----------------------------------------------------------------------------------


class Message:
    """A 9P message body: a frozen value whose fields are its wire layout. Subclasses are
    declared with :func:`message`, which makes them dataclass-like (to mypy too)."""

    TYPE: ClassVar[int]
    NAME: ClassVar[str]
    #: the dialects whose clients send it (see :func:`message`)
    DIALECTS: ClassVar[frozenset[str]]
    _layout: ClassVar[Layout]
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

    def replaced(self, **changes: Any) -> Self:
        """The same message with ``changes`` to its fields (``dataclasses.replace``)."""
        return type(self)(**{**self.__dict__, **changes})

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


#: covariant: a ``TMessage[Rwalk]`` is a request whose reply is an RMessage, so a table of
#: requests of every kind is typed ``list[Request]``
R = TypeVar("R", bound=RMessage, covariant=True)


class TMessage(Message, Generic[R]):
    """A request whose reply is ``R`` (its type number is one more)."""

    @classmethod
    def reply_class(cls) -> type[RMessage]:
        reply = BY_TYPE[cls.TYPE + 1]
        assert issubclass(reply, RMessage)
        return reply


#: a request of any kind
Request = TMessage[RMessage]

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
        cls._layout = layout_of(cls, terminated=True)
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


def requests(dialect: str = DOTL) -> tuple[type[Request], ...]:
    """Every T-message a ``dialect`` client sends (by default 9P2000.L's: what the malformed
    catalogue, the REPL and the string cases cover), by type number."""
    return tuple(m for m in table() if issubclass(m, TMessage) and dialect in m.DIALECTS)


def field_codecs(cls: type[Message]) -> dict[str, Construct]:
    """Each wire field of ``cls`` and its construct (``isinstance(c, StringCodec)`` for strings)."""
    return {sub.name: sub.subcon for sub in cls.codec().subcons if sub.name}


def request(name: str) -> type[Request]:
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
