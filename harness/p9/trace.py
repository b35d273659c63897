"""What a session saw, message by message, and the reproducer file made from it.

A :class:`Record` is one frame sent (``-->``), received (``<--``) or not sent (``-x-``), with its
time, tag, decoded message, the descriptor head it travelled on and the length the device wrote.

A reproducer is a small text file, one message per line, fit to paste into a bug report::

    # virtio9p-harness reproducer
    # backend: synth
    # replay: python -m harness replay FILE [--qemu-binary B]
    --> 13000000180000000000000f3f000000000000  Tgetattr(fid=0, request_mask=16383)
    <-- 07000000070000...                      Rlerror ENOENT (2)
    <== Rlerror ENOENT (2)                      (what the case expected instead)
    # end: 7 lines, sha256 5f0c…

``python -m harness replay`` re-sends the ``-->`` lines to a fresh QEMU and reports the first reply
that differs from its ``<--`` line, or from its ``<==`` expectation where there is one. The last
line counts and checksums every line before it: a file cut short or altered is refused whole.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import stat
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from harness.errors import P9ProtocolError, ReproducerError
from harness.p9 import wire
from harness.p9.messages import Tversion

MAGIC = "# virtio9p-harness reproducer"
END = "# end: "
#: the errno of a request the case wanted to succeed (an Rlerror ended it): ``<== success``
SUCCESS = 0
#: the notes of a batch's two records (and its ``===`` lines in a reproducer)
BATCH_BEGIN, BATCH_END = "batch: one kick", "end of batch"


#: a Twalk's expectation in a race's reproducer: every name, or none (an error)
WHOLE_WALK = "<== every name walked, or an error"
#: a reply that must be an error, whichever (Rlerror or Rerror)
ANY_ERROR = "<== an error (any errno)"
#: after a field's value: an error reply will do too
OR_ERROR = ", or an error"


@dataclass(frozen=True)
class Expectation:
    """What the case wanted of one reply: an errno (:data:`SUCCESS`: a reply of the request's own
    type), a field of the reply no larger than a bound (``<== msize at most 4186112``) or equal to a
    value (``<== stat.mode equal to 2147746280``; a dotted field is a record's, bytes are hex), or,
    for a race, anything but one errno (``<== anything but ENOENT (2)``: which answer a serial order
    gives depends on the order, the raced one no order gives)."""

    errno: int | None = None
    field: str = ""
    at_most: int = 0
    #: the errno is the one answer not wanted
    anything_but: bool = False
    #: a Twalk's reply walks every name or is an error, never a part (a race's: the names moved
    #: while the walk went through them)
    whole_walk: bool = False
    #: the value ``field`` must have (an int, or bytes), instead of a bound
    equals: int | bytes | None = None
    #: any error reply will do (the case names no errno), success or no reply will not
    any_error: bool = False
    #: with a field's value: an error reply will do as well (a request whose host call failed may
    #: refuse, or answer the field right: ``<== mode equal to 33188, or an error``)
    or_error: bool = False

    def line(self) -> str:
        if self.whole_walk:
            return WHOLE_WALK
        if self.any_error:
            return ANY_ERROR
        if self.equals is not None:
            shown = f"hex:{self.equals.hex()}" if isinstance(self.equals, bytes) else str(self.equals)
            return f"<== {self.field} equal to {shown}" + (OR_ERROR if self.or_error else "")
        if self.errno is None:
            return f"<== {self.field} at most {self.at_most}"
        if self.anything_but:
            return f"<== anything but {wire.describe_rlerror(self.errno)}"
        return f"<== {'success (no error)' if self.errno == SUCCESS else wire.describe_rlerror(self.errno)}"

    @classmethod
    def parse(cls, line: str) -> Expectation:
        if line.startswith(WHOLE_WALK):
            return cls(whole_walk=True)
        if line.startswith(ANY_ERROR):
            return cls(any_error=True)
        if line.startswith("<== success"):
            return cls(SUCCESS)
        if line.startswith("<== anything but "):
            return cls(int(line.rsplit("(", 1)[1].rstrip(")")), anything_but=True)
        if " equal to " in line:
            field, value = line[4:].split(" equal to ", 1)
            or_error = value.endswith(OR_ERROR)
            value = value.removesuffix(OR_ERROR)
            equals = bytes.fromhex(value[4:]) if value.startswith("hex:") else int(value)
            return cls(field=field.strip(), equals=equals, or_error=or_error)
        if " at most " in line:
            field, bound = line[4:].split(" at most ")
            return cls(field=field.strip(), at_most=int(bound))
        return cls(int(line.rsplit("(", 1)[1].rstrip(")")))


#: header values replay can make; anything else is refused, never replayed as the default
BACKENDS = ("synth", "local")
TRANSPORTS = ("modern", "legacy")


class Direction(enum.StrEnum):
    """Which way a record's frame went, as trace lines and reproducers print it."""

    SENT = "-->"
    RECEIVED = "<--"
    NOT_SENT = "-x-"
    #: requests sent together, in one kick (``session.batch()``): a begin and an end record
    BATCH = "==="
    #: the next request ran with a host call failing (harness/fault): its note is the fault as
    #: ``Fault`` writes it, and replay arms it again around that request
    FAULT = "# fault:"


class Record(NamedTuple):
    time: float
    direction: Direction
    tag: int | None
    frame: bytes
    message: wire.Message | None
    head: int | None = None
    used_len: int | None = None
    note: str = ""

    def line(self, start: float) -> str:
        if self.direction in (Direction.BATCH, Direction.FAULT):
            return f"{(self.time - start) * 1000:9.3f} ms {self.direction} {self.note}"
        what = self.note or (str(self.message) if self.message else f"raw {self.frame[:32].hex()}")
        where = f" head={self.head}" if self.head is not None else ""
        used = f" used={self.used_len}" if self.used_len is not None else ""
        return f"{(self.time - start) * 1000:9.3f} ms {self.direction} tag={self.tag}{where}{used} {what}"


def format_records(records: Iterable[Record]) -> str:
    records = list(records)
    if not records:
        return ""
    return "\n".join(record.line(records[0].time) for record in records)


def lost_its_start(records: Sequence[Record]) -> bool:
    """Whether a session's records begin after its Tversion: its history was full (``HISTORY``,
    or a mount's ``--trace-limit``) and dropped the first, so a reproducer of it is incomplete."""
    return bool(records) and not (records[0].direction is Direction.SENT and isinstance(records[0].message, Tversion))


def case_id(nodeid: str) -> str:
    """What ``pytest -k`` selects a case by: its case path (``local/states/...``, the id in its
    node id's brackets), else its function's name."""
    return nodeid.split("[", 1)[1].removesuffix("]") if "[" in nodeid else nodeid.rsplit("::", 1)[-1]


def rerun_command(nodeid: str, binary: str) -> str:
    """The command that runs a case again on ``binary``, for a bug its reproducer cannot replay
    (this interpreter: the command works outside the venv too)."""
    return f"{sys.executable} -m pytest cases/ -k '{case_id(nodeid)}' --runxfail --qemu-binary {binary}"


def write_reproducer(
    path: Path, records: Iterable[Record], header: Mapping[str, str], expected: Mapping[int, Expectation] | None = None
) -> Path:
    """Write the exchange; ``expected`` maps a record's index to what the case wanted of it."""
    lines = [MAGIC, *(f"# {key}: {value}" for key, value in header.items())]
    if "incomplete" not in header:  # replay refuses an incomplete one: its header says what to run instead
        lines.append(f"# replay: {sys.executable} -m harness replay {path}")
    for index, record in enumerate(records):
        if record.direction is Direction.NOT_SENT:
            continue
        if record.direction in (Direction.BATCH, Direction.FAULT):  # a kick's bounds; a fault's request
            lines.append(f"{record.direction} {record.note}")
            continue
        shown = str(record.message) if record.message else ""
        body = record.frame.hex() if record.frame else f"(empty,tag={record.tag})"
        lines.append(f"{record.direction} {body}  {shown}".rstrip())
        if expected and index in expected:
            lines.append(expected[index].line())
    lines.append(_end_line(lines))
    path.write_text("\n".join(lines) + "\n")
    return path


def reseal(path: Path) -> None:
    """Write ``path``'s end line anew, after a deliberate edit (a header value changed by hand)."""
    lines = path.read_text().splitlines()
    body = lines[:-1] if lines and lines[-1].startswith(END) else lines
    path.write_text("\n".join([*body, _end_line(body)]) + "\n")


def _end_line(lines: list[str]) -> str:
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return f"{END}{len(lines)} lines, sha256 {digest}"


@dataclass(frozen=True)
class Step:
    """A request to send, the reply it got when recorded, and what was expected instead, if anything."""

    request: bytes
    reply: bytes | None
    expected: Expectation | None = None
    #: the reply came before the next request went out: replay waits for it in line
    in_line: bool = False
    #: which batch (one kick) the request went out in, counted from 1; 0 for none
    batch: int = 0
    #: the host call that failed while it ran (its ``# fault:`` line; harness/fault), "" for none
    fault: str = ""


def _awaited(steps: list[Step], tag: int) -> int | None:
    """The last step with request tag ``tag`` and no reply yet (replies can come out of order);
    None when no step awaits one."""
    for at in range(len(steps) - 1, -1, -1):
        if steps[at].reply is None and wire.peek_header(steps[at].request)[2] == tag:
            return at
    return None


# -- host files a local-backend case made before its first request ------------------------------

#: Files above this size, and all files once this much is recorded, are recorded by size only
#: (zeros on replay): a reproducer stays a file one can attach to a bug report.
HOST_FILE_LIMIT = 1 << 20
#: the xattrs a snapshot keeps: the client's own and POSIX ACLs (a case's host ACL is part of
#: what it set up; security.* and trusted.* are the host's business)
KEPT_XATTRS = ("user.", "system.posix_acl_")
HOST_TOTAL_LIMIT = 4 << 20


def snapshot_host(directory: Path) -> list[dict[str, object]]:
    """What ``directory`` holds, for a reproducer: each entry's path, kind, mode, owner, user
    xattrs, and a file's bytes (hex) or a symlink's target. Read without moving any atime
    (O_NOATIME): the case may be about to check it."""
    entries: list[dict[str, object]] = []
    seen: dict[int, str] = {}  # inode -> the first path of a file with several links
    recorded = 0
    for path in sorted(directory.rglob("*")):
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1 and st.st_ino in seen:
            entries.append({"path": str(path.relative_to(directory)), "kind": "link", "target": seen[st.st_ino]})
            continue
        seen.setdefault(st.st_ino, str(path.relative_to(directory)))
        entry: dict[str, object] = {
            "path": str(path.relative_to(directory)), "mode": stat.S_IMODE(st.st_mode), "owner": [st.st_uid, st.st_gid],
        }  # fmt: skip
        if not stat.S_ISLNK(st.st_mode):
            names = os.listxattr(path, follow_symlinks=False)
            entry["xattrs"] = {
                n: os.getxattr(path, n, follow_symlinks=False).hex() for n in names if n.startswith(KEPT_XATTRS)
            }
        if stat.S_ISLNK(st.st_mode):
            entry.update(kind="symlink", target=os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            entry.update(kind="dir")
        elif stat.S_ISREG(st.st_mode):
            small = st.st_size <= HOST_FILE_LIMIT and recorded + st.st_size <= HOST_TOTAL_LIMIT
            recorded += st.st_size if small else 0
            entry.update(kind="file", size=st.st_size, data=_read_quietly(path).hex() if small else None)
        elif stat.S_ISFIFO(st.st_mode):
            entry.update(kind="fifo")
        elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            entry.update(kind="chardev" if stat.S_ISCHR(st.st_mode) else "blockdev", rdev=st.st_rdev)
        else:
            continue  # sockets: not recreated
        entries.append(entry)
    return entries


def _read_quietly(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOATIME)
    except PermissionError:  # O_NOATIME needs the owner (or root)
        fd = os.open(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as file:
        return file.read()


def restore_host(directory: Path, entries: Iterable[Mapping[str, object]]) -> None:
    """Make what :func:`snapshot_host` recorded under ``directory`` again (directory modes last,
    so that a read-only one still gets its children)."""
    entries = list(entries)
    directories = []
    for entry in entries:
        path = directory / str(entry["path"])
        kind = entry["kind"]
        if kind == "link":
            os.link(directory / str(entry["target"]), path)
            continue
        mode = int(str(entry["mode"]))
        if kind == "dir":
            path.mkdir(parents=True, exist_ok=True)
            directories.append((path, mode))
            continue
        if kind == "symlink":
            path.symlink_to(str(entry["target"]))
            _own(path, entry)
            continue
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind in ("chardev", "blockdev"):
            os.mknod(path, (stat.S_IFCHR if kind == "chardev" else stat.S_IFBLK) | 0o600, int(str(entry["rdev"])))
        else:
            data = entry.get("data")
            path.write_bytes(bytes.fromhex(str(data)) if data is not None else bytes(int(str(entry["size"]))))
        _own(path, entry)
        os.chmod(path, mode)  # after the chown, which would clear setuid and setgid
    for path, mode in reversed(directories):
        _own(path, next(e for e in entries if directory / str(e["path"]) == path))
        os.chmod(path, mode)


def _own(path: Path, entry: Mapping[str, object]) -> None:
    owner = entry.get("owner")
    if isinstance(owner, list) and os.geteuid() == 0:
        os.lchown(path, int(owner[0]), int(owner[1]))
    xattrs = entry.get("xattrs")
    if isinstance(xattrs, dict):
        for name, value in xattrs.items():
            os.setxattr(path, name, bytes.fromhex(value), follow_symlinks=False)


def read_reproducer(path: Path) -> tuple[dict[str, str], list[Step]]:
    """The header and the steps of a whole reproducer; :class:`ReproducerError` (one line) for a
    file that is none, is cut or altered (its end line), or names what replay cannot make."""
    try:
        text = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ReproducerError(f"cannot read {path}: {err}") from err
    if not text or text[0] != MAGIC:
        raise ReproducerError(f"{path} is not a virtio9p-harness reproducer (first line {text[:1]})")
    if not text[-1].startswith(END):
        raise ReproducerError(f"{path} is cut short: its last line is not the '{END.strip()}' line")
    if text[-1] != _end_line(text[:-1]):
        raise ReproducerError(f"{path} is cut short or was changed after it was written: its end line does not match")
    try:
        header, steps = _parse(text[1:-1])
    except (P9ProtocolError, ValueError, IndexError) as err:
        raise ReproducerError(f"{path}: {err}") from err
    _check_header(header)
    return header, steps


def _parse(lines: list[str]) -> tuple[dict[str, str], list[Step]]:
    header: dict[str, str] = {}
    steps: list[Step] = []
    last_answered, depth, batches, fault = -1, 0, 0, ""
    # a trace marked incomplete whose first message is not a Tversion lost its start, and with it
    # the requests some of its first replies answer; ``lost``: the last reply answers one of those
    cut: bool | None = None
    lost = False
    for number, line in enumerate(lines, start=2):
        if line.startswith(f"{Direction.FAULT} "):  # on the request that follows
            fault = line[len(Direction.FAULT) + 1 :]
            _fault_readable(fault, number)
        elif line.startswith("# ") and ": " in line:
            key, value = line[2:].split(": ", 1)
            header[key] = value
        elif line.startswith(f"{Direction.BATCH} "):  # nested batches are one kick: the outermost counts
            depth += 1 if line.endswith(BATCH_BEGIN) else -1
            batches += line.endswith(BATCH_BEGIN) and depth == 1
        elif line.startswith("--> "):
            steps.append(Step(bytes.fromhex(line.split()[1]), None, batch=batches if depth else 0, fault=fault))
            if cut is None:
                cut = "incomplete" in header and wire.peek_header(steps[-1].request)[1] != Tversion.TYPE
            fault, lost = "", False
            last_answered = -1  # an expectation right after a request is on that request (no reply came)
        elif line.startswith("<-- "):
            field = line.split()[1]
            empty = field.startswith("(empty")
            reply = b"" if empty else bytes.fromhex(field)
            tag = int(field.split("=")[1].rstrip(")")) if empty else wire.peek_header(reply)[2]
            cut = "incomplete" in header if cut is None else cut
            at = _awaited(steps, tag)
            if at is None and not cut:
                raise P9ProtocolError(f"a reply with tag {tag} answers no recorded request")
            if at is None:  # read on, so that replay can refuse the file as incomplete, saying why
                lost = True
                continue
            last_answered, lost = at, False
            steps[at] = dataclasses.replace(steps[at], reply=reply, in_line=at == len(steps) - 1)
        elif line.startswith("<== ") and lost:
            continue  # on the lost request
        elif line.startswith("<== ") and steps:
            at = last_answered if last_answered >= 0 else len(steps) - 1
            steps[at] = dataclasses.replace(steps[at], expected=Expectation.parse(line))
        elif line.strip() and not line.startswith("#"):
            raise P9ProtocolError(f"line {number}: cannot read {line[:60]!r}")
    return header, steps


def _fault_readable(fault: str, number: int) -> None:
    """A ``# fault:`` line replay can arm again, or ReproducerError."""
    from harness.errors import HarnessMisuse
    from harness.fault.control import Fault

    try:
        Fault.parse(fault)
    except HarnessMisuse as err:
        raise ReproducerError(f"line {number}: {err}") from err


def _check_header(header: dict[str, str]) -> None:
    for key, known in (("backend", BACKENDS), ("transport", TRANSPORTS)):
        if header.get(key, known[0]) not in known:
            raise ReproducerError(f"its {key} is {header[key]!r}; replay knows {', '.join(known)}")
    try:
        files = json.loads(header.get("host-files", "[]"))
    except ValueError as err:
        raise ReproducerError(f"its host-files line is not JSON: {err}") from err
    if not isinstance(files, list) or not all(isinstance(f, dict) and "path" in f for f in files):
        raise ReproducerError("its host-files line is not a list of files")
