"""A 9P2000.L client session: tags, fids, explicit states, asynchronous requests.

``send()`` returns a :class:`Pending`; ``Pending.result()`` waits for the reply; ``rpc()`` does
both.  An Rlerror becomes :class:`P9Rlerror`, which prints as
``Twalk(fid=1, newfid=2, wnames=['a']) -> Rlerror ENOENT (2)``.  ``send_raw()`` sends any bytes.
``session.rpc(Twalk(fid=0, newfid=1, wnames=["a"]))`` is an :class:`Rwalk` to mypy; the
wrappers (``walk``, ``getattr``, ...: :mod:`harness.p9.shorthands`) return their reply the same way.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from harness.errors import HarnessError, LeakError, P9ProtocolError, P9Rlerror, P9StateError, P9Timeout
from harness.p9 import wire
from harness.p9.messages import (
    Rattach,
    Rerror,
    Rlerror,
    Rread,
    Rversion,
    Rwalk,
    Rwrite,
    Tattach,
    Tclunk,
    Tread,
    Tremove,
    Tversion,
    Twalk,
    Twrite,
    Txattrwalk,
)
from harness.p9.shorthands import DEFAULT_MSIZE as DEFAULT_MSIZE
from harness.p9.shorthands import Shorthands
from harness.p9.trace import BATCH_BEGIN, BATCH_END, Direction, Record, format_records
from harness.p9.wire import Message, R, Request, RMessage, TMessage
from harness.virtio.guestmem import Regions, pieces

log = logging.getLogger(__name__)
hexlog = logging.getLogger(__name__ + ".hexdump")

DEFAULT_TIMEOUT = 10.0
#: Reply buffer used before a Tversion has fixed msize.
PREVERSION_REPLY_CAPACITY = 8192
#: Records (messages, batch bounds, faults) a session keeps for its trace and reproducer; a failure
#: shows the last 200. Most cases' whole sessions fit (xattr_limit's 1,024 fids take ~4,000); a few
#: outgrow it (budget/xattr_fids, budget/walked_fids: tens of thousands), and their reproducers,
#: which then lack their start, say so (``# incomplete:``) and name the case to run instead.
HISTORY = 16384
#: The tag of a raw frame too short to carry one.
NO_TAG = -1


class Done(Protocol):
    """A completed request as the channel reports it."""

    @property
    def used_len(self) -> int: ...
    @property
    def reply(self) -> bytes: ...
    @property
    def order(self) -> int: ...
    @property
    def server_seconds(self) -> float: ...


class FrameChannel(Protocol):
    """What the session sends frames through (:class:`harness.p9.channel.Channel`, or a test's
    fake). ``layout`` and the handle are the channel's own: the session passes them on."""

    def batch(self) -> contextlib.AbstractContextManager[None]: ...
    def submit(
        self,
        frame: bytes,
        reply_capacity: int,
        layout: Any = ...,
        *,
        out_tail: Regions | None = ...,
        in_tail: Regions | None = ...,
    ) -> Any: ...
    def wait(self, handle: Any, timeout: float) -> Done | None: ...
    def completed(self, handle: Any) -> bool: ...
    def any_completed(self) -> bool: ...


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
    message: Message | None  # None when the device returned the buffer empty (a flush)
    #: Completion order on the used ring (0 = first since the device was brought up).
    order: int
    #: The server's time for this request (see channel.Completion.server_seconds).
    server_seconds: float = 0.0

    @property
    def tag(self) -> int | None:
        """The reply frame's tag (None when the buffer came back empty)."""
        return wire.peek_header(self.frame)[2] if self.used_len >= wire.HEADER_SIZE else None


#: the replies of the two requests whose payload can stay in guest memory (send_resident)
_Resident = TypeVar("_Resident", Rwrite, Rread)


class Pending(Generic[R]):
    """A request on the ring.  ``result()`` waits for it and checks the reply."""

    def __init__(self, session: Session, request: TMessage[R] | None, frame: bytes, tag: int, handle: Any) -> None:
        self.session = session
        self.request = request
        self.frame = frame
        #: The frame's tag (:data:`NO_TAG` for a raw frame shorter than the header).
        self.tag = tag
        self.handle = handle
        self._reply: Reply | None = None
        #: when it went out (time.monotonic): how long an unanswered one has waited
        self.sent_at = time.monotonic()
        #: the protocol error its reply showed when the session settled it unawaited
        self._broken: P9ProtocolError | None = None

    @property
    def head(self) -> int:
        """Where the channel put this request (its descriptor head)."""
        head: int = self.handle.head
        return head

    def describe(self) -> str:
        return str(self.request) if self.request else f"raw frame {self.frame[:32].hex()}"

    def done(self) -> bool:
        """Whether the reply is known to be there (an earlier poll found it); never waits."""
        return self._reply is not None or self.session.channel.completed(self.handle)

    def wait(self, timeout: float | None = None) -> Reply:
        """Wait for the device to return the buffer; no checks on what it holds."""
        if self._broken is not None:
            raise self._broken  # found when the session settled it: said to whoever waits
        if self._reply is None:
            self._reply = self.session._complete(self, timeout)
        return self._reply

    def result(self, timeout: float | None = None) -> R:
        """The reply message; Rlerror/Rerror raise :class:`P9Rlerror`, anything odd P9ProtocolError."""
        reply = self.wait(timeout)
        message = reply.message
        if message is None:
            raise P9ProtocolError(f"{self.describe()}: device returned the reply buffer empty (used length 0)")
        if isinstance(message, Rlerror):
            raise P9Rlerror(self.describe(), message.ecode)
        if isinstance(message, Rerror):
            raise P9Rlerror(self.describe(), message.errno, f"Rerror {message.ename!r} ({message.errno})")
        if self.request is None:
            raise P9ProtocolError(f"{self.describe()}: a raw frame has no reply type to check; use wait()")
        if type(message) is not self.request.reply_class():
            raise P9ProtocolError(f"{self.describe()} answered by {message}")
        return message  # type: ignore[return-value]  # checked just above: the reply class of R


class Session(Shorthands):
    """One 9P conversation over a channel.  Close it (or use ``with``) to check for leaks."""

    def __init__(self, channel: FrameChannel, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.channel = channel
        self.timeout = timeout
        self.state = State.NEW
        self.msize = 0
        self.version_string = ""
        self._fids: set[int] = set()
        self._tags: dict[int, Pending[RMessage]] = {}
        self._next_fid = 0
        self.history: deque[Record] = deque(maxlen=HISTORY)
        #: called once, just before the next request goes out (call_before_next_send)
        self._before_next_send: list[Callable[[], None]] = []
        # the channel may keep the sessions opened on it: a case's evidence then has the trace of
        # a session the case made itself, not only of the one a fixture gave it
        opened = getattr(channel, "session_opened", None)
        if callable(opened):
            opened(self)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def fids(self) -> frozenset[int]:
        """The fids the server holds for this session, as its replies said (read-only: the
        session keeps it in step with attach, walk, xattrwalk, clunk, remove and version)."""
        return frozenset(self._fids)

    # -- sending ----------------------------------------------------------------------------------

    def send(
        self,
        request: TMessage[R],
        /,
        *,
        tag: int | None = None,
        reply_capacity: int | None = None,
        layout: Any = None,
    ) -> Pending[R]:
        """Encode and submit one T-message; Tversion gets NOTAG, others the lowest free tag.

        ``layout`` (a :class:`~harness.p9.channel.ChainLayout`) lays the request out in
        descriptors other than the plain two; the session only passes it on.
        """
        tag = self._tag_for(request, tag)
        return self._submit(request, wire.encode(request, tag), reply_capacity, layout)

    def send_raw(self, frame: bytes, *, reply_capacity: int | None = None, layout: Any = None) -> Pending[RMessage]:
        """Submit arbitrary bytes as one request (for malformed-input cases)."""
        request: Request | None = None
        with contextlib.suppress(P9ProtocolError):
            decoded = wire.decode(frame)
            request = decoded if isinstance(decoded, TMessage) else None
        return self._submit(request, frame, reply_capacity, layout)

    def send_resident(
        self, request: TMessage[_Resident], /, region: Regions, *, layout: Any = None
    ) -> Pending[_Resident]:
        """A Twrite whose data is already in guest memory at ``region`` (give it ``data=b""``), or
        a Tread of ``region``'s length the server writes straight there: the payload never
        crosses the qtest socket (``bench io``'s data path). Several regions are a payload in
        pieces, a descriptor each (with ``layout`` indirect for more than the ring holds). The
        Tread's reply decodes as ``Rread(data=b"")``; its used length says how much came."""
        tag = self._tag_for(request)
        parts = pieces(region)
        length = sum(part.length for part in parts)
        note = f"{request} with {length} bytes resident at {parts[0].addr:#x} in {len(parts)} piece(s)"
        if isinstance(request, Twrite):
            frame = wire.encode_head(request, tag, length)
            return self._submit(request, frame, None, layout, note, out_tail=region)
        assert isinstance(request, Tread), f"{request}: only a Twrite or a Tread has a resident payload"
        if request.count != length:
            raise P9StateError(f"{request}: count must be the region's length, {length}")
        return self._submit(request, wire.encode(request, tag), wire.RREAD_HEADER, layout, note, in_tail=region)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """``with session.batch(): ...``: the requests sent inside reach QEMU in one socket write,
        in one kick; the history marks where it begins and ends, so a reproducer replays it so."""
        self.history.append(Record(time.monotonic(), Direction.BATCH, None, b"", None, note=BATCH_BEGIN))
        try:
            with self.channel.batch():
                yield
        finally:
            self.history.append(Record(time.monotonic(), Direction.BATCH, None, b"", None, note=BATCH_END))

    def rpc(self, request: TMessage[R], /, **options: Any) -> R:
        """``send`` then ``result``: the typed reply."""
        return self.send(request, **options).result()

    def _submit(
        self,
        request: TMessage[R] | None,
        frame: bytes,
        capacity: int | None,
        layout: Any,
        note: str = "",
        **tails: Regions,
    ) -> Pending[R]:
        while self._before_next_send:
            self._before_next_send.pop(0)()
        if capacity is None:
            capacity = self.msize if self.msize >= wire.HEADER_SIZE else PREVERSION_REPLY_CAPACITY
        tag = wire.peek_header(frame)[2] if len(frame) >= wire.HEADER_SIZE else NO_TAG
        self.history.append(Record(time.monotonic(), Direction.SENT, tag, frame, request, note=note))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("--> tag=%s %s", tag, note or request or frame.hex())
        if hexlog.isEnabledFor(logging.DEBUG):
            hexlog.debug("--> %s", frame.hex())
        try:
            handle = self.channel.submit(frame, capacity, layout, **tails)
        except HarnessError as err:
            err.add_note(f"while sending {request or f'raw frame {frame[:32].hex()}'}")
            note = f"not sent: {type(err).__name__}"
            self.history.append(Record(time.monotonic(), Direction.NOT_SENT, tag, b"", None, note=note))
            raise
        pending = Pending(self, request, frame, tag, handle)
        if tag != NO_TAG:
            self._tags.setdefault(tag, pending)
        return pending

    def _complete(self, pending: Pending[RMessage], timeout: float | None) -> Reply:
        limit = self.timeout if timeout is None else timeout
        try:
            completion = self.channel.wait(pending.handle, limit)
        except HarnessError as err:
            err.add_note(f"while waiting for the reply to {pending.describe()} (tag {pending.tag})")
            raise
        if completion is None:
            raise P9Timeout(f"no reply within {limit} s to {pending.describe()} (tag {pending.tag})")
        if self._tags.get(pending.tag) is pending:
            del self._tags[pending.tag]
        frame = completion.reply
        if hexlog.isEnabledFor(logging.DEBUG):
            hexlog.debug("<-- %s", frame.hex())
        head = pending.head
        if completion.used_len == 0:
            note = "(reply buffer returned empty)"
            self.history.append(Record(time.monotonic(), Direction.RECEIVED, pending.tag, b"", None, head, 0, note))
            log.debug("<-- tag=%s (buffer returned empty)", pending.tag)
            return Reply(0, frame, None, completion.order, completion.server_seconds)
        received = Direction.RECEIVED
        try:
            resident = completion.used_len > len(frame)  # the data went to an in_tail
            message = wire.decode_head(frame, completion.used_len) if resident else wire.decode(frame)
        except P9ProtocolError:
            self.history.append(Record(time.monotonic(), received, pending.tag, frame, None, head, completion.used_len))
            raise
        tag = wire.peek_header(frame)[2]
        self.history.append(Record(time.monotonic(), received, tag, frame, message, head, completion.used_len))
        if pending.tag != NO_TAG and tag != pending.tag:
            raise P9ProtocolError(f"{pending.describe()} (tag {pending.tag}) answered with tag {tag}")
        log.debug("<-- tag=%d %s", tag, message)
        if pending.request is not None:
            self._track(pending.request, message)
        return Reply(completion.used_len, frame, message, completion.order, completion.server_seconds)

    def _track(self, request: Request, reply: Message) -> None:
        """Keep the fid set and the session state in step with what the server did."""
        ok = not isinstance(reply, Rlerror | Rerror)
        match request:
            case Tversion():
                self._fids.clear()
                if ok and isinstance(reply, Rversion):
                    self.state, self.msize, self.version_string = State.VERSIONED, reply.msize, reply.version
            case Tattach() if ok:
                self._fids.add(request.fid)
                self.state = State.ATTACHED
            case Twalk() if ok and isinstance(reply, Rwalk) and len(reply.qids) == len(request.wnames):
                self._fids.add(request.newfid)
            case Txattrwalk() if ok:
                self._fids.add(request.newfid)
            case Tclunk() | Tremove():
                self._fids.discard(request.fid)

    def _tag_for(self, request: Request, tag: int | None = None) -> int:
        """The tag a new request goes out with (Tversion NOTAG, others the lowest free one,
        unless given); a closed session sends nothing."""
        if self.state is State.CLOSED:
            raise P9StateError(f"{request.NAME} on a closed session")
        if tag is not None:
            return tag
        return wire.NOTAG if isinstance(request, Tversion) else self._free_tag()

    def _settle(self) -> None:
        """Complete the requests nobody has waited for whose replies the channel already holds:
        their tags are free again and their fids counted, whatever order (or none) the caller
        waits in. A reply that breaks the protocol is kept for whoever waits for it."""
        if not self.channel.any_completed():  # the common case: no scan of every tag per request
            return
        for pending in [p for p in self._tags.values() if p._reply is None and p.done()]:
            try:
                pending.wait(0)
            except P9ProtocolError as err:
                pending._broken = err

    def _free_tag(self) -> int:
        self._settle()
        for tag in range(wire.NOTAG):
            if tag not in self._tags:
                return tag
        raise P9StateError("all 65535 tags are in use")

    def note_fault(self, fault: str) -> None:
        """The next request runs with a host call failing (harness/fault; ``fault`` as its Fault
        writes it): the trace says so, and a reproducer arms it again."""
        self.history.append(Record(time.monotonic(), Direction.FAULT, None, b"", None, note=fault))

    def call_before_next_send(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` once, just before the next request is sent (a fixture snapshots the host
        files a case made before its first request)."""
        self._before_next_send.append(hook)

    def new_fid(self) -> int:
        """A fid number this session has not handed out and the server does not hold."""
        while self._next_fid in self._fids or self._next_fid == wire.NOFID:
            self._next_fid += 1
        fid, self._next_fid = self._next_fid, self._next_fid + 1
        return fid

    def outstanding(self) -> list[str]:
        """The requests sent and not answered, oldest first: ``tag 0: Twrite(...), 10.2 s``. Asks
        nothing of the device (it may be the one that stopped answering)."""
        now = time.monotonic()
        waiting = sorted((p for p in self._tags.values() if p._reply is None), key=lambda p: p.sent_at)
        return [f"tag {p.tag}: {p.describe()}, {now - p.sent_at:.1f} s without a reply" for p in waiting]

    def forget(self) -> None:
        """The device was reset: the server holds none of this session's fids or tags any more."""
        self._fids.clear()
        self._tags.clear()

    def attach(
        self, fid: int, *, uname: str = "", aname: str = "", n_uname: int = 0, afid: int = wire.NOFID
    ) -> Rattach:
        if self.state is State.NEW:
            raise P9StateError("Tattach before Tversion")
        return self.rpc(Tattach(fid=fid, afid=afid, uname=uname, aname=aname, n_uname=n_uname))

    def format_history(self, last: int | None = None) -> str:
        """The messages, one line each: time, direction, tag, head, used length, fields; with
        ``last``, only that many of the newest, after a line saying how many are left out."""
        records = list(self.history)
        if last is None or len(records) <= last:
            return format_records(records)
        shown = records[-last:]
        return f"    … {len(records) - last} earlier messages left out (all in trace.txt)\n" + format_records(shown)

    # -- end --------------------------------------------------------------------------------------

    def close(self, *, check: bool = True) -> None:
        """Close the session; with ``check``, raise :class:`LeakError` for open tags or fids."""
        if self.state is State.CLOSED:
            return
        if check:
            self._settle()
        self.state = State.CLOSED
        if not check:
            return
        problems = []
        if self._tags:
            problems.append("requests without reply: " + "; ".join(p.describe() for p in self._tags.values()))
        if self._fids:
            problems.append(f"fids never clunked: {sorted(self._fids)}")
        if problems:
            raise LeakError("session closed with " + " and ".join(problems))
