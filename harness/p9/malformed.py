"""The catalogue of malformed requests, generated from the message table, and how to run one.

Every T-message gets: a size field one smaller and one larger than the frame, its body cut at
every field boundary, and (where it has strings) a string length that runs past the end. Then
come unknown type numbers, Twalk's nwname above its names, Tversion with a real tag, requests
before Tversion/Tattach, a tag reused while its request is in flight, and an unknown fid.

An outcome is a short word: ``Rlerror EINVAL``, ``Rwalk``, ``needs-reset`` (virtio_error),
``no-reply`` (the legacy interface has no NEEDS_RESET bit), ``empty`` (buffer returned with
nothing), or ``died: killed by SIGSEGV (-11)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from construct import Construct

from harness.errors import DeviceNeedsReset, HarnessError, P9Timeout, QEMUExited, describe_status
from harness.p9 import wire
from harness.p9.session import Pending, Session

#: Where recorded outcomes live, one mapping per QEMU version.
RECORDED = Path(__file__).with_name("malformed_outcomes.json")
ROOT_FID = 0
#: A directory fid opened by prepare(), for the messages that need an open fid (an unopened one
#: would only repeat the lock/unopened_fid crash).
OPEN_FID = 1
NEEDS_OPEN = frozenset({"Tlock", "Tgetlock", "Tread", "Twrite", "Treaddir", "Tfsync"})
UNKNOWN_TYPES = (0, 1, 2, 5, 6, 99, 106, 150, 255)


@dataclass(frozen=True)
class Malformed:
    """One entry: its id, what is wrong, when to send it, and how to make its frame."""

    name: str
    what: str
    frame: bytes
    #: "attached" (Tversion and Tattach first), "versioned" (Tversion only) or "new" (nothing)
    state: str = "attached"
    #: a request to have in flight (blocking) when the frame goes out
    blocker: bool = False


def example_fields(message: wire.MessageDef) -> dict[str, Any]:
    """Plausible fields: fids on the attached root, a fresh newfid, short names."""
    fields: dict[str, Any] = {}
    for sub in message.body.subcons:
        if not sub.name:
            continue
        if isinstance(sub.subcon, wire._Str):
            fields[sub.name] = "name"
        elif sub.name == "fid" and message.name in NEEDS_OPEN:
            fields[sub.name] = OPEN_FID
        elif sub.name in ("fid", "dfid", "dirfd", "olddirfid", "newdirfid", "afid"):
            fields[sub.name] = ROOT_FID
        elif sub.name == "newfid":
            fields[sub.name] = 100
        elif type(sub.subcon).__name__ == "FocusedSeq":
            fields[sub.name] = ["name"]
        elif type(sub.subcon).__name__ == "Prefixed":
            fields[sub.name] = b"data"
        elif sub.name == "count":
            fields[sub.name] = 64
        elif sub.name == "msize":
            fields[sub.name] = 8192
        else:
            fields[sub.name] = 0
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


def _frame(name: str, tag: int = 1, **overrides: Any) -> bytes:
    defn = wire.BY_NAME[name]
    return wire.encode(name, tag, **{**example_fields(defn), **overrides})


def _per_message(defn: wire.MessageDef) -> Iterator[Malformed]:
    good = _frame(defn.name)
    yield Malformed(f"{defn.name}/size_smaller", "size field one less than the frame",
                    wire.with_size(good, len(good) - 1))  # fmt: skip
    yield Malformed(f"{defn.name}/size_larger", "size field one more than the frame",
                    wire.with_size(good, len(good) + 1))  # fmt: skip
    fields = example_fields(defn)
    for field, offset in field_boundaries(defn.body, fields):
        yield Malformed(f"{defn.name}/cut_before_{field}", f"body ends where {field} would start",
                        wire.truncated(good, wire.HEADER_SIZE + offset))  # fmt: skip
    strings = [(f, o) for f, o in field_boundaries(defn.body, fields) if isinstance(_sub(defn, f), wire._Str)]
    if strings:
        field, offset = strings[0]
        yield Malformed(f"{defn.name}/string_past_end", f"{field}'s length runs past the end of the frame",
                        _long_string(good, wire.HEADER_SIZE + offset))  # fmt: skip


def _sub(defn: wire.MessageDef, name: str) -> Construct:
    return next(sub.subcon for sub in defn.body.subcons if sub.name == name)


def _unknown_type(number: int) -> Malformed:
    frame = wire.with_type(_frame("Tgetattr"), number)
    return Malformed(f"type/{number}", f"message type {number}, which 9P2000.L does not define", frame)


def _long_string(frame: bytes, at: int) -> bytes:
    return frame[:at] + (0xFFF0).to_bytes(2, "little") + frame[at + 2 :]


def catalogue() -> list[Malformed]:
    """Every entry, in a stable order."""
    entries: list[Malformed] = []
    for defn in wire.TABLE:
        if defn.is_request:
            entries += _per_message(defn)
    walk = _frame("Twalk", wnames=["a"] * 16)
    entries += [_unknown_type(number) for number in UNKNOWN_TYPES]
    entries += [
        Malformed("Twalk/nwname_17_with_16_names", "nwname says 17, 16 names follow",
                  walk[:15] + (17).to_bytes(2, "little") + walk[17:]),
        Malformed("Twalk/nwname_65535", "nwname 65535 and no names",
                  wire.encode("Twalk", 1, fid=ROOT_FID, newfid=100, wnames=[])[:-2] + b"\xff\xff"),
        Malformed("Tversion/real_tag", "Tversion with tag 1 instead of NOTAG",
                  _frame("Tversion", tag=1, version="9P2000.L"), state="new"),
        Malformed("order/attach_before_version", "Tattach before any Tversion",
                  _frame("Tattach", afid=wire.NOFID, n_uname=0), state="new"),
        Malformed("order/walk_before_attach", "Twalk of fid 0 before any Tattach",
                  _frame("Twalk", wnames=[]), state="versioned"),
        Malformed("tag/reused_in_flight", "a second request with the tag of one still in flight",
                  _frame("Tgetattr", tag=7, request_mask=wire.GETATTR_BASIC), blocker=True),
        Malformed("fid/unknown", "Tgetattr of a fid never made",
                  _frame("Tgetattr", fid=4242, request_mask=wire.GETATTR_BASIC)),
    ]  # fmt: skip
    return entries


def prepare(session: Session, entry: Malformed) -> Pending | None:
    """Bring a fresh session to the entry's state; start its blocker. Returns the blocker."""
    if entry.state in ("versioned", "attached"):
        session.version()
    if entry.state == "attached":
        session.attach(ROOT_FID)
        session.walk(ROOT_FID, [], newfid=OPEN_FID)
        session.lopen(OPEN_FID, 0o200000)  # O_DIRECTORY
    if entry.blocker:  # synth FLUSH: blocks until flushed
        fid, _ = session.walk(ROOT_FID, ["FLUSH"])
        session.lopen(fid, 1)
        return session.send("Twrite", tag=7, fid=fid, offset=0, data=b"\x01")
    return None


def run(session: Session, entry: Malformed, timeout: float = 1.0) -> str:
    """Send the entry's frame and name what happened."""
    try:
        reply = session.send_raw(entry.frame).wait(timeout)
    except DeviceNeedsReset:
        return "needs-reset"
    except P9Timeout:
        return "no-reply"
    except QEMUExited as err:
        return f"died: {describe_status(err.status or 0)}"
    if reply.message is None:
        return "empty"
    if reply.message.name == "Rlerror":
        return f"Rlerror {_errno_name(reply.message.ecode)}"
    return str(reply.message.name)


def _errno_name(code: int) -> str:
    import errno

    return errno.errorcode.get(code, str(code))


def as_seen_on(transport: str, outcome: str) -> str:
    """A recorded outcome (taken on the modern interface) as ``transport`` shows it: the legacy
    interface has no DEVICE_NEEDS_RESET bit, so after virtio_error() its request goes unanswered."""
    return "no-reply" if transport == "legacy" and outcome == "needs-reset" else outcome


def recorded(version: str) -> dict[str, str] | None:
    """The outcomes recorded for QEMU ``version``, or None."""
    if not RECORDED.exists():
        return None
    data: dict[str, dict[str, str]] = json.loads(RECORDED.read_text())
    return data.get(version)


def record(version: str, outcomes: dict[str, str]) -> None:
    data: dict[str, dict[str, str]] = json.loads(RECORDED.read_text()) if RECORDED.exists() else {}
    data[version] = dict(sorted(outcomes.items()))
    RECORDED.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def cleanup(session: Session, blocker: Pending | None, outcome: str) -> None:
    """Free what the entry left in flight, when the device can still take a Tflush."""
    if blocker is not None and outcome not in ("needs-reset", "no-reply") and not outcome.startswith("died"):
        session.send("Tflush", oldtag=7).wait()
        blocker.wait()


def report(binary: Path, transport: str, write: bool) -> int:
    """``python -m harness malformed-report``: run the catalogue on one synth QEMU, print it."""
    from tabulate import tabulate

    from harness.machine import Machine
    from harness.p9.transport import VirtioTransport
    from harness.provision import usable_config

    if write and transport != "modern":
        raise HarnessError("outcomes are recorded on the modern interface (legacy has no NEEDS_RESET bit)")
    config, found = usable_config(binary, transport=transport)
    version = found.version
    before = recorded(version) or {}
    outcomes: dict[str, str] = {}
    rows = []
    machine = Machine(config)
    machine.launch()
    try:
        for entry in catalogue():
            if not machine.is_running() or machine.unresponsive:
                machine.shutdown()
                machine = Machine(config)
                machine.launch()
            device = VirtioTransport(machine)
            session = Session(device)
            blocker = prepare(session, entry)
            outcome = run(session, entry)
            if outcome in ("no-reply",) or outcome.startswith("died"):
                machine.shutdown()
            else:
                cleanup(session, blocker, outcome)
            outcomes[entry.name] = outcome
            known = as_seen_on(transport, before[entry.name]) if entry.name in before else ""
            rows.append(
                (entry.name, entry.what, outcome, known, "" if not known else "yes" if known == outcome else "NO")
            )
    finally:
        machine.shutdown()
    print(f"malformed requests on QEMU {version} ({binary}), {transport} transport, synth backend")
    print(tabulate(rows, headers=("entry", "what is wrong", "outcome", "recorded", "same"), tablefmt="github"))
    if write:
        record(version, outcomes)
        print(f"recorded {len(outcomes)} outcomes for QEMU {version} in {RECORDED}")
    return 1 if any(row[4] == "NO" for row in rows) else 0
