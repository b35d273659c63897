"""A 9P2000.L client session: tags, fids, explicit states, asynchronous requests.

``send()`` returns a :class:`Pending`; ``Pending.result()`` waits for the reply; ``rpc()`` does
both.  An Rlerror becomes :class:`P9Rlerror`, which prints as
``Twalk(fid=1, newfid=2, wnames=['a']) -> Rlerror ENOENT (2)``.  ``send_raw()`` sends any bytes.

States: new → versioned (Tversion answered) → attached (a Tattach answered) → closed.  Fids are
tracked from the replies (attach, complete walk, xattrwalk add; clunk and remove drop, even on
error; Tversion drops all), so :meth:`Session.close` can say which ones leaked.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from harness.errors import HarnessError, LeakError, P9ProtocolError, P9Rlerror, P9StateError, P9Timeout
from harness.p9 import wire
from harness.p9.trace import Record, format_records
from harness.p9.transport import SIMPLE, ChainLayout, Completion, Request
from harness.virtqueue import Buffer

log = logging.getLogger(__name__)
hexlog = logging.getLogger(__name__ + ".hexdump")

DEFAULT_MSIZE = 8192
DEFAULT_TIMEOUT = 10.0
#: Reply buffer used before a Tversion has fixed msize.
PREVERSION_REPLY_CAPACITY = 8192
#: Messages kept for the trace attached to a failing case.
HISTORY = 256


class FrameTransport(Protocol):
    def batch(self) -> contextlib.AbstractContextManager[None]: ...

    def submit(
        self,
        frame: bytes,
        reply_capacity: int,
        layout: ChainLayout = ...,
        *,
        out_tail: Buffer | None = ...,
        in_tail: Buffer | None = ...,
    ) -> Request: ...
    def wait(self, request: Request, timeout: float) -> Completion | None: ...
    def completed(self, request: Request) -> bool: ...


class State(enum.Enum):
    NEW = "new"
    VERSIONED = "versioned"
    ATTACHED = "attached"
    CLOSED = "closed"


@dataclass
class Reply:
    """What came back for a request: the used length, the bytes, and the decoded message."""

    used_len: int
    frame: bytes
    message: wire.Message | None  # None when the device returned the buffer empty (a flush)
    #: Completion order on the used ring (0 = first since the device was brought up).
    order: int
    #: The server's time for this request (see transport.Completion.server_seconds).
    server_seconds: float = 0.0


class Pending:
    """A request on the ring.  ``result()`` waits for it and checks the reply."""

    def __init__(
        self, session: Session, request: wire.Message | None, frame: bytes, tag: int | None, handle: Request
    ) -> None:
        self.session = session
        self.request = request
        self.frame = frame
        #: The frame's tag (None for a raw frame shorter than the header).
        self.tag = tag
        self.handle = handle
        self._reply: Reply | None = None

    @property
    def head(self) -> int:
        """The descriptor head this request went out on."""
        return self.handle.head

    def describe(self) -> str:
        return str(self.request) if self.request else f"raw frame {self.frame[:32].hex()}"

    def done(self) -> bool:
        """Whether the reply is known to be there (an earlier poll found it); never waits."""
        return self._reply is not None or self.session.transport.completed(self.handle)

    def wait(self, timeout: float | None = None) -> Reply:
        """Wait for the device to return the buffer; no checks on what it holds."""
        if self._reply is None:
            self._reply = self.session._complete(self, timeout)
        return self._reply

    def result(self, timeout: float | None = None) -> wire.Message:
        """The reply message; Rlerror/Rerror raise :class:`P9Rlerror`, anything odd P9ProtocolError."""
        reply = self.wait(timeout)
        if reply.message is None:
            raise P9ProtocolError(f"{self.describe()}: device returned the reply buffer empty (used length 0)")
        message = reply.message
        if message.name == "Rlerror":
            raise P9Rlerror(self.describe(), message.ecode)
        if message.name == "Rerror":
            raise P9Rlerror(self.describe(), message.errno, f"Rerror {message.ename!r} ({message.errno})")
        if self.request is not None and message.name != wire.reply_type(wire.BY_NAME[self.request.name]).name:
            raise P9ProtocolError(f"{self.describe()} answered by {message}")
        return message


class Session:
    """One 9P conversation over a transport.  Close it (or use ``with``) to check for leaks."""

    def __init__(self, transport: FrameTransport, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.transport = transport
        self.timeout = timeout
        self.state = State.NEW
        self.msize = 0
        self.version_string = ""
        self.fids: set[int] = set()
        self._tags: dict[int, Pending] = {}
        self._next_fid = 0
        self.history: deque[Record] = deque(maxlen=HISTORY)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sending ----------------------------------------------------------------------------------

    def send(
        self,
        name: str,
        /,
        *,
        tag: int | None = None,
        reply_capacity: int | None = None,
        layout: ChainLayout = SIMPLE,
        **fields: Any,
    ) -> Pending:
        """Encode and submit one T-message; Tversion gets NOTAG, others the lowest free tag.

        ``layout`` lays the request out in descriptors other than the plain two.
        """
        tag = self._tag_for(name, tag)
        message = wire.Message(name, tag, fields)
        return self._submit(message, wire.encode(name, tag, **fields), reply_capacity, layout)

    def send_raw(self, frame: bytes, *, reply_capacity: int | None = None, layout: ChainLayout = SIMPLE) -> Pending:
        """Submit arbitrary bytes as one request (for malformed-input cases)."""
        request = None
        with contextlib.suppress(P9ProtocolError):
            request = wire.decode(frame)
        return self._submit(request, frame, reply_capacity, layout)

    def send_resident(self, name: str, /, region: Buffer, **fields: Any) -> Pending:
        """A Twrite whose data is already in guest memory at ``region``, or a Tread of
        ``region.length`` bytes the server writes straight there: the payload never crosses the
        qtest socket (``bench io``'s data path). The Tread's reply decodes as ``Rread(count=n)``."""
        tag = self._tag_for(name)
        shown = {**fields, "data_at": f"{region.addr:#x}", "count": region.length}
        if name == "Twrite":
            frame = wire.encode_head(name, tag, region.length, **fields)
            return self._submit(wire.Message(name, tag, shown), frame, None, SIMPLE, out_tail=region)
        if name == "Tread":
            frame = wire.encode(name, tag, count=region.length, **fields)
            return self._submit(wire.Message(name, tag, shown), frame, wire.RREAD_HEADER, SIMPLE, in_tail=region)
        raise P9ProtocolError(f"{name} carries no payload to keep in guest memory")

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """``with session.batch(): ...``: the requests sent inside reach QEMU in one socket write."""
        return self.transport.batch()

    def rpc(self, name: str, /, **fields: Any) -> wire.Message:
        """``send`` then ``result``."""
        return self.send(name, **fields).result()

    def _submit(
        self,
        request: wire.Message | None,
        frame: bytes,
        capacity: int | None,
        layout: ChainLayout,
        **tails: Buffer,
    ) -> Pending:
        if capacity is None:
            capacity = self.msize if self.msize >= wire.HEADER_SIZE else PREVERSION_REPLY_CAPACITY
        tag = wire.peek_header(frame)[2] if len(frame) >= wire.HEADER_SIZE else None
        self.history.append(Record(time.monotonic(), "-->", tag, frame, request))  # also when sending fails
        if log.isEnabledFor(logging.DEBUG):
            log.debug("--> tag=%s %s", tag, request or frame.hex())
        if hexlog.isEnabledFor(logging.DEBUG):
            hexlog.debug("--> %s", frame.hex())
        try:
            handle = self.transport.submit(frame, capacity, layout, **tails)
        except HarnessError as err:
            err.add_note(f"while sending {request or f'raw frame {frame[:32].hex()}'}")
            self.history.append(Record(time.monotonic(), "-x-", tag, b"", None, note=f"not sent: {type(err).__name__}"))
            raise
        pending = Pending(self, request, frame, tag, handle)
        if pending.tag is not None:
            self._tags.setdefault(pending.tag, pending)
        return pending

    def _complete(self, pending: Pending, timeout: float | None) -> Reply:
        limit = self.timeout if timeout is None else timeout
        try:
            completion = self.transport.wait(pending.handle, limit)
        except HarnessError as err:
            err.add_note(f"while waiting for the reply to {pending.describe()} (tag {pending.tag})")
            raise
        if completion is None:
            raise P9Timeout(f"no reply within {limit} s to {pending.describe()} (tag {pending.tag})")
        if pending.tag is not None and self._tags.get(pending.tag) is pending:
            del self._tags[pending.tag]
        frame = completion.reply
        if hexlog.isEnabledFor(logging.DEBUG):
            hexlog.debug("<-- %s", frame.hex())
        head = pending.head
        if completion.used_len == 0:
            note = "(reply buffer returned empty)"
            self.history.append(Record(time.monotonic(), "<--", pending.tag, b"", None, head, 0, note))
            log.debug("<-- tag=%s (buffer returned empty)", pending.tag)
            return Reply(0, frame, None, completion.order, completion.server_seconds)
        try:
            resident = completion.used_len > len(frame)  # the data went to an in_tail
            message = wire.decode_head(frame, completion.used_len) if resident else wire.decode(frame)
        except P9ProtocolError:
            self.history.append(Record(time.monotonic(), "<--", pending.tag, frame, None, head, completion.used_len))
            raise
        self.history.append(Record(time.monotonic(), "<--", message.tag, frame, message, head, completion.used_len))
        if pending.tag is not None and message.tag != pending.tag:
            raise P9ProtocolError(f"{pending.describe()} (tag {pending.tag}) answered with tag {message.tag}")
        log.debug("<-- tag=%d %s", message.tag, message)
        if pending.request is not None:
            self._track(pending.request, message)
        return Reply(completion.used_len, frame, message, completion.order, completion.server_seconds)

    def _track(self, request: wire.Message, reply: wire.Message) -> None:
        """Keep the fid set and the session state in step with what the server did."""
        ok = reply.name != "Rlerror" and reply.name != "Rerror"
        match request.name:
            case "Tversion":
                self.fids.clear()
                if ok:
                    self.state, self.msize, self.version_string = State.VERSIONED, reply.msize, reply.version
            case "Tattach" if ok:
                self.fids.add(request.fid)
                self.state = State.ATTACHED
            case "Twalk" if ok and len(reply.qids) == len(request.wnames):
                self.fids.add(request.newfid)
            case "Txattrwalk" if ok:
                self.fids.add(request.newfid)
            case "Tclunk" | "Tremove":
                self.fids.discard(request.fid)

    def _tag_for(self, name: str, tag: int | None = None) -> int:
        """The tag a new ``name`` request goes out with (Tversion NOTAG, others the lowest free
        one, unless given); a closed session sends nothing."""
        if self.state is State.CLOSED:
            raise P9StateError(f"{name} on a closed session")
        if tag is not None:
            return tag
        return wire.NOTAG if name == "Tversion" else self._free_tag()

    def _free_tag(self) -> int:
        for tag in range(wire.NOTAG):
            if tag not in self._tags:
                return tag
        raise P9StateError("all 65535 tags are in use")

    def new_fid(self) -> int:
        """A fid number this session has not handed out and the server does not hold."""
        while self._next_fid in self.fids or self._next_fid == wire.NOFID:
            self._next_fid += 1
        fid, self._next_fid = self._next_fid, self._next_fid + 1
        return fid

    # -- the common messages ----------------------------------------------------------------------

    def version(self, msize: int = DEFAULT_MSIZE, version: str = "9P2000.L") -> wire.Message:
        return self.rpc("Tversion", msize=msize, version=version)

    def attach(
        self, fid: int | None = None, *, uname: str = "", aname: str = "", n_uname: int = 0, afid: int = wire.NOFID
    ) -> tuple[int, dict[str, int]]:
        """Tattach; returns the fid and the root qid."""
        if self.state is State.NEW:
            raise P9StateError("Tattach before Tversion")
        fid = self.new_fid() if fid is None else fid
        reply = self.rpc("Tattach", fid=fid, afid=afid, uname=uname, aname=aname, n_uname=n_uname)
        return fid, reply.qid

    def walk(self, fid: int, names: Sequence[str], newfid: int | None = None) -> tuple[int, list[dict[str, int]]]:
        """Twalk; returns the new fid and the qids (a partial walk returns fewer qids)."""
        newfid = self.new_fid() if newfid is None else newfid
        reply = self.rpc("Twalk", fid=fid, newfid=newfid, wnames=list(names))
        return newfid, reply.qids

    def getattr(self, fid: int, request_mask: int = wire.GETATTR_ALL) -> wire.Message:
        return self.rpc("Tgetattr", fid=fid, request_mask=request_mask)

    def lopen(self, fid: int, flags: int = 0) -> wire.Message:
        return self.rpc("Tlopen", fid=fid, flags=flags)

    def clunk(self, fid: int) -> None:
        self.rpc("Tclunk", fid=fid)

    def readdir(self, fid: int, offset: int = 0, count: int | None = None) -> list[dict[str, Any]]:
        count = self.msize - wire.RREADDIR_HEADER if count is None else count
        return list(self.rpc("Treaddir", fid=fid, offset=offset, count=count).entries)

    def read(self, fid: int, offset: int, count: int) -> bytes:
        return bytes(self.rpc("Tread", fid=fid, offset=offset, count=count).data)

    def write(self, fid: int, offset: int, data: bytes) -> int:
        return int(self.rpc("Twrite", fid=fid, offset=offset, data=data).count)

    def format_history(self) -> str:
        """The recent messages, one line each: time, direction, tag, head, used length, fields."""
        return format_records(self.history)

    def walk_path(self, fid: int, path: str, newfid: int | None = None) -> tuple[int, list[dict[str, int]]]:
        """Twalk along ``a/b/c`` (empty components dropped)."""
        return self.walk(fid, [part for part in path.split("/") if part], newfid)

    def statfs(self, fid: int) -> wire.Message:
        return self.rpc("Tstatfs", fid=fid)

    def mkdir(self, dfid: int, name: str, mode: int = 0o755, gid: int = 0) -> dict[str, int]:
        return dict(self.rpc("Tmkdir", dfid=dfid, name=name, mode=mode, gid=gid).qid)

    def lcreate(self, fid: int, name: str, flags: int = 1, mode: int = 0o644, gid: int = 0) -> wire.Message:
        """Tlcreate: ``fid`` (a directory) becomes the new, open file."""
        return self.rpc("Tlcreate", fid=fid, name=name, flags=flags, mode=mode, gid=gid)

    def symlink(self, dfid: int, name: str, target: str, gid: int = 0) -> dict[str, int]:
        return dict(self.rpc("Tsymlink", fid=dfid, name=name, symtgt=target, gid=gid).qid)

    def link(self, dfid: int, fid: int, name: str) -> None:
        self.rpc("Tlink", dfid=dfid, fid=fid, name=name)

    def readlink(self, fid: int) -> str:
        return str(self.rpc("Treadlink", fid=fid).target)

    def unlinkat(self, dirfd: int, name: str, flags: int = 0) -> None:
        self.rpc("Tunlinkat", dirfd=dirfd, name=name, flags=flags)

    def readdir_all(self, fid: int, count: int | None = None) -> list[list[dict[str, Any]]]:
        """Treaddir from offset 0, each next one at the last entry's offset, until a count-0 reply.

        Returns the entries of every reply, the final empty one included.
        """
        replies: list[list[dict[str, Any]]] = []
        offset = 0
        while True:
            entries = self.readdir(fid, offset, count)
            replies.append(entries)
            if not entries:
                return replies
            if entries[-1]["offset"] == offset:
                raise P9ProtocolError(f"Treaddir at offset {offset} returned entries that end at the same offset")
            offset = entries[-1]["offset"]

    # -- end --------------------------------------------------------------------------------------

    def close(self, *, check: bool = True) -> None:
        """Close the session; with ``check``, raise :class:`LeakError` for open tags or fids."""
        if self.state is State.CLOSED:
            return
        self.state = State.CLOSED
        if not check:
            return
        problems = []
        if self._tags:
            problems.append("requests without reply: " + "; ".join(p.describe() for p in self._tags.values()))
        if self.fids:
            problems.append(f"fids never clunked: {sorted(self.fids)}")
        if problems:
            raise LeakError("session closed with " + " and ".join(problems))
