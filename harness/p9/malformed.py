"""The catalogue of malformed requests, generated from the message table, and how to run one.

Every T-message gets: a size field one smaller and one larger than the frame, its body cut at
every field boundary, and (where it has strings) a string length that runs past the end. Then
come unknown type numbers, Twalk's nwname above its names, Tversion with a real tag, requests
before Tversion/Tattach, a tag reused while its request is in flight, and an unknown fid.

An outcome is a short string, as recorded in ``malformed_outcomes.json``: the reply
(``Rlerror EINVAL``, ``Rwalk``) or a :class:`Fate` (``needs-reset``, ``no-reply``, ``empty``,
``died: killed by SIGSEGV (-11)``).
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from construct import Construct

from harness.errors import DeviceNeedsReset, P9Timeout, QEMUExited, describe_status, errno_name
from harness.p9 import wire
from harness.p9.messages import Rlerror, Tflush, Twalk, Twrite
from harness.p9.session import Pending, Session
from harness.p9.wire import RMessage
from harness.qemu import versions

#: Where recorded outcomes live, one mapping per QEMU version.
RECORDED = Path(__file__).with_name("malformed_outcomes.json")
ROOT_FID = 0
#: A directory fid opened by prepare(), for the fields declared ``OpenFid`` (an unopened one
#: would only repeat the lock/unopened_fid crash).
OPEN_FID = 1
UNKNOWN_TYPES = (0, 1, 2, 5, 6, 99, 106, 150, 255)
#: The fixes and changes (from :mod:`harness.qemu.versions`) that change the outcome of a message's
#: entries: a version's expected outcome is the one recorded on a version that agrees with it on
#: each of these. Every difference between the recordings must be explained here (a self-test).
CHANGED_BY: dict[str, tuple[tuple[str, ...], ...]] = {
    # a size field off by one still decodes; the open directory fid then meets the handle check
    # (on synth, where the catalogue runs, each message's own: local's descriptor -1 is not there)
    "Tlock": (versions.LOCK_HANDLE_CHECK,),
    "Tgetlock": (versions.LOCK_HANDLE_CHECK,),
    "Tfsync": (versions.FSYNC_HANDLE_CHECK,),
    "Trenameat": (versions.SYNTH_RENAMEAT,),
}


class Fate(enum.StrEnum):
    """What became of a request that got no reply message."""

    #: QEMU called virtio_error(): the device set DEVICE_NEEDS_RESET
    NEEDS_RESET = "needs-reset"
    #: nothing within the time (the legacy interface has no NEEDS_RESET bit to say why)
    NO_REPLY = "no-reply"
    #: the buffer came back with nothing in it
    EMPTY = "empty"
    #: QEMU died; the outcome is ``died: <how>``
    DIED = "died"


def died(outcome: str) -> bool:
    return outcome.startswith(Fate.DIED)


def device_lost(outcome: str) -> bool:
    """The device takes no more requests after this outcome: reset it, or start a new QEMU."""
    return outcome in (Fate.NEEDS_RESET, Fate.NO_REPLY) or died(outcome)


@dataclass(frozen=True)
class Malformed:
    """One entry: its id, what is wrong, when to send it, and how to make its frame.

    The frame is made when first asked for: collecting the cases names every entry, but a run
    that selects a few should not build (and compile the codecs of) every message.
    """

    name: str
    what: str
    make: Callable[[], bytes] = field(repr=False, compare=False)
    #: "attached" (Tversion and Tattach first), "versioned" (Tversion only) or "new" (nothing)
    state: str = "attached"
    #: a request to have in flight (blocking) when the frame goes out
    blocker: bool = False

    @functools.cached_property
    def frame(self) -> bytes:
        return self.make()


def example_fields(message: type[wire.Message]) -> dict[str, Any]:
    """Plausible fields, by what each field is declared as (its :class:`~harness.p9.wire.Role`
    or type): fids on the attached root (an open one where the request needs an open handle), a
    fresh newfid, short names, a small count."""
    by_role = {wire.Role.FID: ROOT_FID, wire.Role.OPEN_FID: OPEN_FID, wire.Role.NEWFID: 100,
               wire.Role.COUNT: 64, wire.Role.MSIZE: 8192}  # fmt: skip
    by_type: dict[Any, Any] = {str: "name", bytes: b"data", list[str]: ["name"]}
    fields: dict[str, Any] = {}
    for name in message.field_names():
        role = wire.role(message, name)
        fields[name] = by_role.get(role, 0) if role is not None else by_type.get(wire.python_type(message, name), 0)
    return fields


def field_boundaries(body: Construct, fields: dict[str, Any]) -> list[tuple[str, int]]:
    """(field name, body offset where it starts) for every field of ``body``."""
    offsets, at = [], 0
    for sub in body.subcons:
        if not sub.name:
            continue
        offsets.append((sub.name, at))
        at += len(sub.build(fields[sub.name]))
    return offsets


@functools.cache
def _frame(name: str, tag: int = 1, **overrides: Any) -> bytes:
    defn = wire.lookup(name)
    return wire.encode_fields(defn, tag, {**example_fields(defn), **overrides})


def _per_message(defn: type[wire.Message]) -> Iterator[Malformed]:
    name = defn.NAME
    yield Malformed(f"{name}/size_smaller", "size field one less than the frame", partial(_resized, name, -1))
    yield Malformed(f"{name}/size_larger", "size field one more than the frame", partial(_resized, name, +1))
    boundaries = field_boundaries(defn.codec(), example_fields(defn))
    for field_name, offset in boundaries:
        yield Malformed(f"{name}/cut_before_{field_name}", f"body ends where {field_name} would start",
                        partial(_cut, name, wire.HEADER_SIZE + offset))  # fmt: skip
    strings = [(f, o) for f, o in boundaries if isinstance(_sub(defn, f), wire.StringCodec)]
    if strings:
        field_name, offset = strings[0]
        yield Malformed(f"{name}/string_past_end", f"{field_name}'s length runs past the end of the frame",
                        partial(_string_past_end, name, wire.HEADER_SIZE + offset))  # fmt: skip


def _resized(name: str, by: int) -> bytes:
    good = _frame(name)
    return wire.with_size(good, len(good) + by)


def _cut(name: str, at: int) -> bytes:
    return wire.truncated(_frame(name), at)


def _string_past_end(name: str, at: int) -> bytes:
    good = _frame(name)
    return good[:at] + (0xFFF0).to_bytes(2, "little") + good[at + 2 :]


def _sub(defn: type[wire.Message], name: str) -> Construct:
    return next(sub.subcon for sub in defn.codec().subcons if sub.name == name)


def _unknown_type(number: int) -> Malformed:
    return Malformed(f"type/{number}", f"message type {number}, which 9P2000.L does not define",
                     partial(_with_type, number))  # fmt: skip


def _with_type(number: int) -> bytes:
    return wire.with_type(_frame("Tgetattr"), number)


def catalogue() -> list[Malformed]:
    """Every entry, in a stable order."""
    entries: list[Malformed] = []
    for defn in wire.requests():
        entries += _per_message(defn)
    entries += [_unknown_type(number) for number in UNKNOWN_TYPES]
    entries += [
        Malformed("Twalk/nwname_17_with_16_names", "nwname says 17, 16 names follow", _walk_17_with_16_names),
        Malformed("Twalk/nwname_65535", "nwname 65535 and no names",
                  lambda: wire.encode(Twalk(fid=ROOT_FID, newfid=100, wnames=[]), 1)[:-2] + b"\xff\xff"),
        Malformed("Tversion/real_tag", "Tversion with tag 1 instead of NOTAG",
                  lambda: _frame("Tversion", tag=1, version="9P2000.L"), state="new"),
        Malformed("order/attach_before_version", "Tattach before any Tversion",
                  lambda: _frame("Tattach", afid=wire.NOFID, n_uname=0), state="new"),
        Malformed("order/walk_before_attach", "Twalk of fid 0 before any Tattach",
                  lambda: _frame("Twalk", wnames=()), state="versioned"),
        Malformed("tag/reused_in_flight", "a second request with the tag of one still in flight",
                  lambda: _frame("Tgetattr", tag=7, request_mask=wire.GETATTR_BASIC), blocker=True),
        Malformed("fid/unknown", "Tgetattr of a fid never made",
                  lambda: _frame("Tgetattr", fid=4242, request_mask=wire.GETATTR_BASIC)),
    ]  # fmt: skip
    return entries


def _walk_17_with_16_names() -> bytes:
    walk = _frame("Twalk", wnames=("a",) * 16)
    return walk[:15] + (17).to_bytes(2, "little") + walk[17:]


def prepare(session: Session, entry: Malformed) -> Pending[RMessage] | None:
    """Bring a fresh session to the entry's state; start its blocker. Returns the blocker."""
    if entry.state in ("versioned", "attached"):
        session.version()
    if entry.state == "attached":
        session.attach(ROOT_FID)
        session.walk(ROOT_FID, [], OPEN_FID)
        session.lopen(OPEN_FID, 0o200000)  # O_DIRECTORY
    if entry.blocker:  # synth FLUSH: blocks until flushed
        fid = session.walk_fid(ROOT_FID, ["FLUSH"])
        session.lopen(fid, 1)
        return session.send(Twrite(fid=fid, offset=0, data=b"\x01"), tag=7)
    return None


def run(session: Session, entry: Malformed, timeout: float = 1.0) -> str:
    """Send the entry's frame and name what happened."""
    try:
        reply = session.send_raw(entry.frame).wait(timeout)
    except DeviceNeedsReset:
        return Fate.NEEDS_RESET
    except P9Timeout:
        return Fate.NO_REPLY
    except QEMUExited as err:
        return f"{Fate.DIED}: {describe_status(err.status)}"
    if reply.message is None:
        return Fate.EMPTY
    if isinstance(reply.message, Rlerror):
        return f"Rlerror {errno_name(reply.message.ecode)}"
    return reply.message.NAME


def as_seen_on(transport: str, outcome: str) -> str:
    """A recorded outcome (taken on the modern interface) as ``transport`` shows it: the legacy
    interface has no DEVICE_NEEDS_RESET bit, so after virtio_error() its request goes unanswered."""
    return Fate.NO_REPLY if transport == "legacy" and outcome == Fate.NEEDS_RESET else outcome


def recordings() -> dict[str, dict[str, str]]:
    """Every version's recorded outcomes."""
    data: dict[str, dict[str, str]] = json.loads(RECORDED.read_text()) if RECORDED.exists() else {}
    return data


def recorded(version: str) -> dict[str, str] | None:
    """The outcomes recorded for QEMU ``version``, or None."""
    return recordings().get(version)


def changes_of(entry: str) -> tuple[tuple[str, ...], ...]:
    """The fixes and changes that decide ``entry``'s outcome (none: the same on every version)."""
    return CHANGED_BY.get(entry.split("/")[0], ())


def expected(entry: str, version: str, recorded: dict[str, dict[str, str]]) -> tuple[str, str] | None:
    """(outcome, recorded version) that QEMU ``version`` should give ``entry``: from a recording of a
    version with the same fixes for this entry, the nearest such one (newest at or below, else the
    oldest above). None when no recording has this version's combination of fixes."""
    changes = changes_of(entry)
    alike = [known for known, outcomes in recorded.items() if entry in outcomes
             and all(versions.has(known, c) == versions.has(version, c) for c in changes)]  # fmt: skip
    if not alike:
        return None
    base = versions.nearest_known(version, alike)
    return recorded[base][entry], base


def plausible(entry: Malformed, outcome: str) -> bool:
    """What any server may answer a malformed request with: an Rlerror, a device error, a buffer
    returned empty, or the reply of the request the frame still is (a server may read past a
    lying size field); never a crash, and never the reply of another request."""
    if outcome in (Fate.NEEDS_RESET, Fate.NO_REPLY, Fate.EMPTY) or outcome.startswith("Rlerror "):
        return True
    if died(outcome) or len(entry.frame) < wire.HEADER_SIZE:
        return False
    request = wire.BY_TYPE.get(entry.frame[4])
    return request is not None and issubclass(request, wire.TMessage) and outcome == request.reply_class().NAME


def record(version: str, outcomes: dict[str, str]) -> None:
    data: dict[str, dict[str, str]] = json.loads(RECORDED.read_text()) if RECORDED.exists() else {}
    data[version] = dict(sorted(outcomes.items()))
    RECORDED.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def cleanup(session: Session, blocker: Pending[RMessage] | None, outcome: str) -> None:
    """Free what the entry left in flight, when the device can still take a Tflush."""
    if blocker is not None and not device_lost(outcome):
        session.send(Tflush(oldtag=7)).wait()
        blocker.wait()
