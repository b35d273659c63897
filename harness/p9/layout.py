"""How a Python class whose annotated fields are a wire layout becomes a construct codec: the
field kinds (``U32``, ``String``, ``Fid`` ...: a Python type annotated with its construct and,
for numbers the protocol gives a meaning, a :class:`Role`), the layout of a record or message, and
the converters between construct's containers and the class, written out per class when first
used. :mod:`harness.p9.wire` declares the records and the message base on it."""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import sys
import typing
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from construct import (
    Adapter,
    Construct,
    GreedyBytes,
    Int8ul,
    Int16ul,
    Int32ul,
    Int64ul,
    Prefixed,
    PrefixedArray,
    Struct,
    Terminated,
)


class StringCodec(Adapter):  # type: ignore[misc]
    """``len[2]`` + bytes.  Decoded as UTF-8 with surrogateescape, so any byte string round-trips."""

    def _decode(self, obj: bytes, context: Any, path: Any) -> str:
        return obj.decode("utf-8", "surrogateescape")

    def _encode(self, obj: str | bytes, context: Any, path: Any) -> bytes:
        return obj if isinstance(obj, bytes) else obj.encode("utf-8", "surrogateescape")


STR = StringCodec(Prefixed(Int16ul, GreedyBytes))


@dataclasses.dataclass(frozen=True)
class Values:
    """The values of a field that mean something beside 0, 1 and its largest (a sized field's: its
    length): ``keep``, its "don't touch" value; ``special``, named values where the server's code
    turns (a time_t's sign, utimensat's UTIME_NOW, MAXWELEM names); ``relative``, named values a
    session and the request's target decide: (name, base, delta), base ``msize`` (the negotiated
    msize) or ``end`` (the size of the node the request's fid names). The boundaries table
    (fixtures/tables.py) derives each field's values from it."""

    keep: int | None = None
    special: tuple[tuple[str, int], ...] = ()
    relative: tuple[tuple[str, str, int], ...] = ()


# -- field types: a Python type annotated with its wire layout ------------------------------------

U8 = Annotated[int, Int8ul]
U16 = Annotated[int, Int16ul]
U32 = Annotated[int, Int32ul]
U64 = Annotated[int, Int64ul]
String = Annotated[str, STR]
#: ``count[4]`` then the bytes (Twrite, Rread)
Data = Annotated[
    bytes, Prefixed(Int32ul, GreedyBytes), Values(relative=(("msize-23", "msize", -23), ("msize-22", "msize", -22)))
]
#: ``nwname[2]`` then the names (Twalk)
Names = Annotated[list[str], PrefixedArray(Int16ul, STR), Values(special=(("MAXWELEM", 16), ("MAXWELEM+1", 17)))]
#: a symlink's target: PATH_MAX bytes with its NUL is what Linux takes
Target = Annotated[str, STR, Values(special=(("PATH_MAX-1", 4095), ("PATH_MAX", 4096)))]


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
    #: bits and values with a meaning each (:class:`Bits`: open flags, a setattr's valid bits ...)
    FLAGS = "flags"


@dataclasses.dataclass(frozen=True)
class Bits:
    """What a flags field's bits mean: each named bit, and the named values of the part ``mask``
    covers (an access mode, a lock type); the tables derive each field's values from it."""

    name: str
    bits: tuple[tuple[str, int], ...] = ()
    choices: tuple[tuple[str, int], ...] = ()
    mask: int = 0

    @property
    def known(self) -> int:
        """Every bit with a meaning (the choices' part included)."""
        found = self.mask
        for _, bit in self.bits:
            found |= bit
        return found


#: Tlopen's and Tlcreate's flags: 9P2000.L's P9_DOTL_* (Linux's values; CLOEXEC QEMU drops)
OPEN_BITS = Bits(
    "open flags",
    bits=(("O_CREAT", 0o100), ("O_EXCL", 0o200), ("O_NOCTTY", 0o400), ("O_TRUNC", 0o1000), ("O_APPEND", 0o2000),
          ("O_NONBLOCK", 0o4000), ("O_DSYNC", 0o10000), ("FASYNC", 0o20000), ("O_DIRECT", 0o40000),
          ("O_LARGEFILE", 0o100000), ("O_DIRECTORY", 0o200000), ("O_NOFOLLOW", 0o400000), ("O_NOATIME", 0o1000000),
          ("O_CLOEXEC", 0o2000000), ("O_SYNC", 0o4000000)),
    choices=(("O_RDONLY", 0), ("O_WRONLY", 1), ("O_RDWR", 2), ("O_NOACCESS", 3)),
    mask=3,
)  # fmt: skip
#: Tsetattr's valid bits
SETATTR_BITS = Bits("valid", bits=(
    ("MODE", 0x1), ("UID", 0x2), ("GID", 0x4), ("SIZE", 0x8), ("ATIME", 0x10), ("MTIME", 0x20), ("CTIME", 0x40),
    ("ATIME_SET", 0x80), ("MTIME_SET", 0x100)))  # fmt: skip
#: Tgetattr's request mask (P9_GETATTR_*)
GETATTR_BITS = Bits("request_mask", bits=tuple((name, 1 << at) for at, name in enumerate(
    ("MODE", "NLINK", "UID", "GID", "RDEV", "ATIME", "MTIME", "CTIME", "INO", "SIZE", "BLOCKS", "BTIME", "GEN",
     "DATA_VERSION"))))  # fmt: skip
#: Tunlinkat's flags
UNLINK_BITS = Bits("flags", bits=(("AT_REMOVEDIR", 0x200),))
#: Tlock's flags (P9_LOCK_FLAGS_*)
LOCK_BITS = Bits("flags", bits=(("BLOCK", 1), ("RECLAIM", 2)))
#: Tlock's and Tgetlock's lock type (P9_LOCK_TYPE_*)
LOCK_TYPES = Bits("type", choices=(("RDLCK", 0), ("WRLCK", 1), ("UNLCK", 2)), mask=0xFF)
#: Txattrcreate's flags (XATTR_CREATE, XATTR_REPLACE)
XATTR_BITS = Bits("flags", bits=(("CREATE", 1), ("REPLACE", 2)))
#: a mode a request gives a node: the permission bits and set-id and sticky bits (and, Tmknod's,
#: the type)
MODE_BITS = Bits("mode", bits=(
    ("S_ISUID", 0o4000), ("S_ISGID", 0o2000), ("S_ISVTX", 0o1000), ("S_IRUSR", 0o400), ("S_IWUSR", 0o200),
    ("S_IXUSR", 0o100), ("S_IRWXG", 0o70), ("S_IRWXO", 0o7)))  # fmt: skip
NODE_TYPES = Bits("mode", bits=MODE_BITS.bits, mask=0o170000, choices=(
    ("none", 0), ("S_IFREG", 0o100000), ("S_IFDIR", 0o40000), ("S_IFLNK", 0o120000), ("S_IFIFO", 0o10000),
    ("S_IFSOCK", 0o140000), ("S_IFCHR", 0o20000), ("S_IFBLK", 0o60000)))  # fmt: skip
#: 9P2000.u's Tcreate perm: the kind bits (DMDIR ...), the set-id and sticky bits and the permission bits
PERM_BITS = Bits("perm", bits=(
    ("DMDIR", 0x80000000), ("DMAPPEND", 0x40000000), ("DMEXCL", 0x20000000), ("DMSYMLINK", 0x02000000),
    ("DMLINK", 0x01000000), ("DMDEVICE", 0x00800000), ("DMNAMEDPIPE", 0x00200000), ("DMSOCKET", 0x00100000),
    ("DMSETUID", 0x00080000), ("DMSETGID", 0x00040000), ("DMSETVTX", 0x00010000), ("S_IRUSR", 0o400),
    ("S_IWUSR", 0o200), ("S_IXUSR", 0o100), ("S_IRWXG", 0o70), ("S_IRWXO", 0o7)))  # fmt: skip
#: 9P2000.u's Topen/Tcreate mode byte
OMODE_BITS = Bits("mode", bits=(("OEXCL", 0x04), ("OTRUNC", 0x10), ("OREXEC", 0x20), ("ORCLOSE", 0x40),
                                ("OAPPEND", 0x80)),
                  choices=(("OREAD", 0), ("OWRITE", 1), ("ORDWR", 2), ("OEXEC", 3)), mask=3)  # fmt: skip


#: the sign bit of an off_t or time_t a u64 field is read into
SIGN64 = (("2^63", 1 << 63),)
#: an owner: -1 leaves it (chown's "don't touch")
Id = Annotated[int, Int32ul, Values(keep=0xFFFFFFFF)]
#: a byte offset or a size, an off_t to the host: at the end of the node's data, and past it
Offset = Annotated[int, Int64ul, Values(special=SIGN64, relative=(("end", "end", 0), ("end+1", "end", 1)))]
#: a directory stream's offset: the host's cookie (telldir), an off_t
Cookie = Annotated[int, Int64ul, Values(special=SIGN64)]
#: 9P2000.L's seconds, a time_t to the host (2^31: past a 32-bit time_t)
Seconds = Annotated[int, Int64ul, Values(special=(("2^31", 1 << 31), *SIGN64))]
#: 9P2000.L's nanoseconds: the last valid, the first invalid, and utimensat's own two
Nanoseconds = Annotated[int, Int64ul, Values(special=(
    ("999999999", 999_999_999), ("10^9", 10**9),
    ("UTIME_NOW", (1 << 30) - 1), ("UTIME_OMIT", (1 << 30) - 2)))]  # fmt: skip
#: an xattr's size: Linux takes no more than XATTR_SIZE_MAX
XattrSize = Annotated[int, Int64ul, Values(special=(("XATTR_SIZE_MAX", 65536), ("XATTR_SIZE_MAX+1", 65537)))]
#: a tag: NOTAG is Tversion's own
Tag = Annotated[int, Int16ul, Values(keep=0xFFFF)]
#: 9P2000.u's stat fields, each ~0 "don't touch" (stat(5)); its times unsigned seconds, its
#: length an off_t to the host
Keep8 = Annotated[int, Int8ul, Values(keep=0xFF)]
Keep16 = Annotated[int, Int16ul, Values(keep=0xFFFF)]
Keep32 = Annotated[int, Int32ul, Values(keep=0xFFFFFFFF)]
Keep64 = Annotated[int, Int64ul, Values(keep=0xFFFFFFFFFFFFFFFF)]
StatLength = Annotated[int, Int64ul, Values(keep=0xFFFFFFFFFFFFFFFF, special=SIGN64)]
StatTime = Annotated[int, Int32ul, Values(keep=0xFFFFFFFF, special=(("2^31", 1 << 31),))]

Fid = Annotated[int, Int32ul, Role.FID]
OpenFid = Annotated[int, Int32ul, Role.OPEN_FID]
NewFid = Annotated[int, Int32ul, Role.NEWFID]
#: a reply's count: all of a reply of msize (its 11-byte header aside), and one more
Count = Annotated[int, Int32ul, Role.COUNT, Values(relative=(("msize-11", "msize", -11), ("msize-10", "msize", -10)))]
Msize = Annotated[int, Int32ul, Role.MSIZE]
OpenFlags = Annotated[int, Int32ul, Role.FLAGS, OPEN_BITS]
SetattrValid = Annotated[int, Int32ul, Role.FLAGS, SETATTR_BITS]
GetattrMask = Annotated[int, Int64ul, Role.FLAGS, GETATTR_BITS]
UnlinkFlags = Annotated[int, Int32ul, Role.FLAGS, UNLINK_BITS]
LockFlags = Annotated[int, Int32ul, Role.FLAGS, LOCK_BITS]
LockType = Annotated[int, Int8ul, Role.FLAGS, LOCK_TYPES]
XattrFlags = Annotated[int, Int32ul, Role.FLAGS, XATTR_BITS]
Mode = Annotated[int, Int32ul, Role.FLAGS, MODE_BITS]
NodeMode = Annotated[int, Int32ul, Role.FLAGS, NODE_TYPES]
OpenMode = Annotated[int, Int8ul, Role.FLAGS, OMODE_BITS]
Perm = Annotated[int, Int32ul, Role.FLAGS, PERM_BITS]


def python_type(message: type, field: str) -> object:
    """The Python type of a field: ``int`` for ``U32``, ``list[str]`` for ``Names``, the record's
    class for ``Qid``."""
    hint = _hints(message)[field]
    return typing.get_args(hint)[0] if typing.get_origin(hint) is Annotated else hint


def role(message: type, field: str) -> Role | None:
    """The :class:`Role` ``field`` of ``message`` is declared with, or None."""
    return next((extra for extra in _extras(message, field) if isinstance(extra, Role)), None)


def bits(message: type, field: str) -> Bits | None:
    """What a flags field's bits mean (:class:`Bits`), or None for any other field."""
    return next((extra for extra in _extras(message, field) if isinstance(extra, Bits)), None)


def largest(message: type, field: str) -> int:
    """The largest value a number field's layout holds (0xFFFFFFFF for ``U32``)."""
    codec = typing.get_args(_hints(message)[field])[1]
    return int((1 << 8 * codec.sizeof()) - 1)


def values(message: type, field: str) -> Values:
    """The values a number field's declaration names (:class:`Values`; none: an empty one)."""
    return next((extra for extra in _extras(message, field) if isinstance(extra, Values)), Values())


def _extras(message: type, field: str) -> tuple[Any, ...]:
    hint = _hints(message)[field]
    return typing.get_args(hint)[2:] if typing.get_origin(hint) is Annotated else ()


class Layout:
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


@functools.cache  # asked per request by the field checks (values, largest): once per class is enough
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


def layout_of(cls: type, terminated: bool) -> Layout:
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
    return Layout(cls, body, tuple(names), decoders, encoders)


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


def layout(cls: type) -> Layout:
    layout: Layout = getattr(cls, "_layout")  # noqa: B009  (set by record(), invisible to mypy)
    return layout


def record(cls: type[_RecordT]) -> type[_RecordT]:
    """A typed record that appears inside messages (Qid, Dirent): its codec from its fields."""
    setattr(cls, "_layout", layout_of(cls, terminated=False))  # noqa: B010  (a class attribute mypy cannot see)
    return cls
