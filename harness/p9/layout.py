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
