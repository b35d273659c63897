"""9P frames over a virtqueue: submit a request, poll for its completion.

A request is a two-descriptor chain (the T-frame, then a writable reply buffer), laid out
otherwise by a :class:`ChainLayout`; reply buffer, frame and any indirect table share one guest
block.  Submission (frame, descriptors, avail ring, notify) goes to QEMU in one socket write, so a
request is on the ring when ``submit`` returns; inside :meth:`Channel.batch` the requests are made
available together, with one notification, when the batch ends.  Each poll of ``used.idx`` also
reads ahead the reply buffer of the request being waited for, so a fast reply costs no extra
round trip.

The channel takes a brought-up :class:`~harness.virtio.driver.Driver` (guest memory, the queue,
the device status) and a way to say what QEMU printed, never the QEMU process itself.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from harness.errors import DeviceError, DeviceNeedsReset, LeakError
from harness.qemu.machine import Machine
from harness.virtio.driver import DEFAULT_FEATURES, Driver
from harness.virtio.guestmem import PAGE, Regions, align_up, pieces
from harness.virtio.virtio_pci import STATUS_NEEDS_RESET
from harness.virtio.virtqueue import VIRTQUEUE_MAX_SIZE, Buffer, UsedElem

log = logging.getLogger(__name__)

#: The largest msize whose payload, in 4 KiB pages as Linux's client lays it out, fits one chain
#: beside the request's header and the reply's: the cap of Linux's client, and QEMU's where it caps
#: Tversion (``versions.MSIZE_CAP``; 4,186,112 bytes).
VIRTIO_MSIZE_LIMIT = (VIRTQUEUE_MAX_SIZE - 2) * PAGE
#: Bytes of the awaited reply buffer read together with each poll of the used ring.
READ_AHEAD = 512
#: A wait on shared RAM polls the used ring back to back this long, then sleeps between polls:
#: most replies come within a few hundred microseconds, and a sleeping poller costs a timer
#: wake-up (~60 µs or more) per reply.
SPIN_SECONDS = 500e-6
SLEEP_SECONDS = 100e-6
#: On the qtest path each poll is a round trip (its own pause): so many, then sleeps, as before
#: shared RAM (the baseline the benches compare with stays as it was).
QTEST_SPIN_POLLS = 100
QTEST_SLEEP_SECONDS = 200e-6
#: Requests QEMU's 9pfs serves at a time (MAX_REQ in hw/9pfs/9p.h), whatever the queue size. It
#: pops no more while they are busy, and looks at the ring again only when notified (a finished
#: request does not make it look), so chains beyond these wait for the next notification: a wait
#: with more than this many in flight notifies again at each health check (a driver may notify at
#: any time). The case ring/beyond_slots shows what happens without.
SERVER_SLOTS = 128
#: How often a silent wait checks the device status for DEVICE_NEEDS_RESET: first after
#: FIRST_HEALTH_CHECK, then twice as long each time, up to HEALTH_CHECK_INTERVAL. A frame the
#: device refuses (virtio_error: no reply, ever) is seen after FIRST_HEALTH_CHECK rather than a whole
#: interval: idle waits were most of the malformed-frame cases' time. A slower reply pays one status
#: read (a qtest round trip) and no more than one per doubling after it.
FIRST_HEALTH_CHECK = 0.004
HEALTH_CHECK_INTERVAL = 0.05


@dataclass(frozen=True)
class ChainLayout:
    """How one request is laid out in descriptors.

    ``out_segments``: sizes the T-frame is cut into (the rest goes in a last descriptor); empty
    means one descriptor. ``in_segment``: the reply buffer is described in descriptors of this
    size (None: one descriptor). ``indirect``: the chain goes into an indirect table and takes a
    single ring slot.
    """

    out_segments: tuple[int, ...] = ()
    in_segment: int | None = None
    indirect: bool = False
    #: Malformed on purpose: the last descriptor links back to the first writable one, a chain
    #: without end.
    loop: bool = False

    def max_descriptors(self, in_len: int) -> int:
        """At least ``len(buffers(...))`` for a reply buffer of ``in_len``: room for an indirect table."""
        return len(self.out_segments) + 1 + -(-in_len // (self.in_segment or max(in_len, 1)))

    def buffers(self, out_addr: int, out_len: int, in_addr: int, in_len: int) -> list[Buffer]:
        chain, offset = [], 0
        for size in self.out_segments:
            if offset + size < out_len:
                chain.append(Buffer(out_addr + offset, size))
                offset += size
        chain.append(Buffer(out_addr + offset, out_len - offset))
        step = self.in_segment or in_len
        if in_len:  # a reply buffer of no bytes is no descriptor at all
            chain += [Buffer(in_addr + at, min(step, in_len - at), writable=True) for at in range(0, in_len, step)]
        return chain


SIMPLE = ChainLayout()


def with_tails(chain: list[Buffer], out_tail: Regions | None, in_tail: Regions | None) -> tuple[Buffer, ...]:
    """``chain`` with resident device-readable buffers after the frame's, and resident
    device-writable ones after the reply buffer's, a descriptor each."""
    if out_tail is not None:
        first_in = next(pos for pos, buf in enumerate(chain) if buf.writable)
        chain[first_in:first_in] = [Buffer(r.addr, r.length) for r in pieces(out_tail)]
    if in_tail is not None:
        chain += [Buffer(r.addr, r.length, writable=True) for r in pieces(in_tail)]
    return tuple(chain)


@dataclass(eq=False)
class Request:
    """One submitted chain: where its frame and reply buffer live. The reply buffer starts the
    request's guest block (frame and any indirect table follow it), which is freed at completion.
    Compared and hashed by identity: a completion belongs to its request, not to its descriptor
    head, which a later request reuses once the device has returned it."""

    head: int
    out_addr: int
    in_addr: int
    in_size: int
    chain: tuple[Buffer, ...]
    #: perf_counter() when the kick had reached QEMU
    submitted_at: float = 0.0
    #: bytes of a caller's resident guest buffer after the reply buffer (never read back)
    in_tail: int = 0


class Completion(NamedTuple):
    request: Request
    used_len: int
    reply: bytes
    #: Position of this entry in the used ring since bring-up: the order the device completed in.
    order: int
    #: From the kick reaching QEMU to the return of the poll that found the used entry: the server's
    #: time, at most one poll round trip (tens of microseconds) too long.
    server_seconds: float = 0.0


@dataclass
class Spent:
    """How often this process did one thing, and the CPU time of the thread that did it: measured
    with two reads of the thread's CPU clock each time (a system call each), where a sampler
    guesses. The summary's harness line (fixtures/summary.py) adds up every process's."""

    count: int = 0
    seconds: float = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.seconds += seconds


class Channel:
    """9P requests over the request queue of one brought-up :class:`Driver`."""

    #: requests submitted by every channel of this process: the summary's count of what QEMU served
    submitted_in_process = 0
    #: every channel's waits for a reply in this process: polling the used ring (sleeping between
    #: polls), reading the replies back, and the health checks and notifies again a long wait makes;
    #: the part of the harness's CPU time that grows with how long QEMU takes to answer
    waits = Spent()
    #: every channel's publications in this process (avail.idx, the notify, the socket write): a
    #: just-woken QEMU often takes the CPU of the worker that woke it, which a sampler counts here
    notifies = Spent()

    def __init__(self, driver: Driver, diagnostics: Callable[[], str] = str) -> None:
        """``diagnostics()`` returns what QEMU last printed, for the error when the device asks
        for a reset."""
        self.driver = driver
        self.diagnostics = diagnostics
        self._sessions: list[object] = []
        self._in_flight: dict[int, Request] = {}
        self._done: dict[Request, Completion] = {}  # by request: a head is reused
        self._completed = 0
        self.abandoned = False
        self._batching = False
        #: seconds spent moving frames into guest memory and replies out of it (the harness's share)
        self.transfer_seconds = 0.0

    @classmethod
    def of(cls, machine: Machine, *, features: int = DEFAULT_FEATURES) -> Channel:
        """The 9P channel of a started ``machine``'s virtio-9p device, brought up by our driver
        (:meth:`Driver.of`): the one construction of the stack on a machine, for every caller."""
        return cls(Driver.of(machine, features=features), machine.output_tail)

    def session_opened(self, session: object) -> None:
        """A session was opened on this channel (the session says so itself): kept until the next
        reset, for the evidence of whatever case is using the device."""
        self._sessions.append(session)

    def sessions(self) -> list[object]:
        """The sessions opened since the last reset, oldest first."""
        return list(self._sessions)

    def reset(self, features: int | None = None) -> None:
        """Per-test queue reset: device reset, queue set up again, every request forgotten.

        ``features`` (if given) replaces the features the driver asks for from now on.
        """
        if self.abandoned:
            raise DeviceError("this channel was abandoned with requests in flight: start a new QEMU")
        self.driver.reset(features)
        self._sessions.clear()
        self._in_flight.clear()
        self._done.clear()
        self._completed = 0
        self.transfer_seconds = 0.0

    # -- requests ---------------------------------------------------------------------------------

    def submit(
        self,
        frame: bytes,
        reply_capacity: int,
        layout: ChainLayout | None = None,
        *,
        out_tail: Regions | None = None,
        in_tail: Regions | None = None,
    ) -> Request:
        """Place ``frame`` and an empty reply buffer in guest memory, make the chain available and
        notify the device (inside :meth:`batch`: when the batch ends).

        ``out_tail`` / ``in_tail`` are resident guest buffers the caller owns, chained after the
        frame / after the reply buffer: a payload that never crosses the qtest socket. Only the
        first ``reply_capacity`` bytes of the reply are read back.
        """
        if self.abandoned:
            raise DeviceError("this channel was abandoned with requests in flight")
        layout = layout or SIMPLE
        tails = sum(len(pieces(tail)) for tail in (out_tail, in_tail) if tail is not None)
        block, frame_at, table_at = self._place(len(frame), reply_capacity, layout, tails)
        chain = with_tails(layout.buffers(frame_at, len(frame), block, reply_capacity), out_tail, in_tail)
        started = time.perf_counter()
        # the buffer is filled before the chain is made available (virtio 1.x 2.7.13): QEMU may pop
        # an entry as soon as avail.idx says so, even in the middle of our socket write. Padded up
        # to the table, so that the table's write continues this one (qtest joins them).
        padding = bytes(table_at - frame_at - len(frame)) if table_at is not None else b""
        self.driver.mem.memwrite(frame_at, frame + padding)
        try:
            head = self.driver.queue.add(chain, indirect_table=table_at, loop=layout.loop, publish=False)
        except DeviceError:
            self.driver.allocator.free(block)
            raise
        if not self._batching:
            self._publish()
        now = time.perf_counter()
        self.transfer_seconds += now - started  # the frame into guest memory, with the kick
        tail = sum(r.length for r in pieces(in_tail)) if in_tail is not None else 0
        request = Request(head, frame_at, block, reply_capacity, chain, now, tail)
        self._in_flight[head] = request
        Channel.submitted_in_process += 1
        return request

    def _place(
        self, frame_len: int, reply_capacity: int, layout: ChainLayout, tails: int
    ) -> tuple[int, int, int | None]:
        """One guest block for a request: the reply buffer (page-aligned), the frame, and for an
        indirect layout the descriptor table after it. Returns block, frame and table addresses."""
        table_size = 16 * (layout.max_descriptors(reply_capacity) + tails) if layout.indirect else 0
        block = self.driver.allocator.alloc(reply_capacity + frame_len + 16 + table_size)
        frame_at = block + reply_capacity
        return block, frame_at, align_up(frame_at + frame_len, 16) if layout.indirect else None

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Submissions inside are made available together and go to QEMU in one socket write, with
        one notification, when the block ends."""
        outer, self._batching = self._batching, True
        try:
            yield
        finally:
            self._batching = outer
            if not outer:
                self._publish()

    def _publish(self) -> None:
        """Make the submitted chains available, notify the device (with VIRTIO_RING_F_EVENT_IDX
        only when avail_event asks for it) and send it all: on the ring when this returns."""
        cpu = time.thread_time()
        try:
            queue = self.driver.queue
            old = queue.publish()
            if old != queue.avail_idx:
                self.driver.kick(old)
            self.driver.send()
        finally:
            Channel.notifies.add(time.thread_time() - cpu)

    def wait(self, request: Request, timeout: float) -> Completion | None:
        """Poll until ``request`` completes (others are kept); None after ``timeout`` seconds."""
        cpu = time.thread_time()
        try:
            return self._wait(request, timeout)
        finally:
            Channel.waits.add(time.thread_time() - cpu)

    def _wait(self, request: Request, timeout: float) -> Completion | None:
        start = time.monotonic()
        interval = FIRST_HEALTH_CHECK
        next_check = start + interval
        polls, mapped = 0, self.driver.mem.mapped
        while request not in self._done:
            if self._in_flight.get(request.head) is not request:
                raise DeviceError(f"request with head {request.head} is not in flight")
            self._poll(request)
            if request in self._done:
                break
            now = time.monotonic()
            if now - start > timeout:
                return None
            if now > next_check:
                self._check_health()
                self._notify_beyond_slots()
                interval = min(2 * interval, HEALTH_CHECK_INTERVAL)
                next_check = now + interval
            polls += 1
            if (now - start > SPIN_SECONDS) if mapped else polls > QTEST_SPIN_POLLS:
                self.driver.tend()
                time.sleep(SLEEP_SECONDS if mapped else QTEST_SLEEP_SECONDS)
        return self._done.pop(request)

    def completed(self, request: Request) -> bool:
        """Whether an earlier poll found ``request`` complete (its completion not yet taken)."""
        return request in self._done

    def any_completed(self) -> bool:
        """Whether an earlier poll found any request complete whose completion is not yet taken."""
        return bool(self._done)

    def poll(self) -> list[Completion]:
        """Collect whatever has completed; returns and forgets every finished request."""
        self._poll(None)
        done, self._done = list(self._done.values()), {}
        return done

    def _poll(self, awaited: Request | None) -> None:
        mem = self.driver.mem
        # reading ahead saves a round trip per reply on the qtest path; in a mapping it is a copy
        ahead_wanted = awaited is not None and not mem.mapped
        spans = [(awaited.in_addr, min(READ_AHEAD, awaited.in_size))] if awaited and ahead_wanted else []
        elems, ahead = self.driver.queue.poll(spans)
        if not elems:
            return
        seen = time.perf_counter()
        requests = [self._in_flight.pop(elem.head) for elem in elems]
        for request, elem in zip(requests, elems, strict=True):
            if elem.length > request.in_size + request.in_tail:
                raise DeviceError(
                    f"device reports {elem.length} bytes written into a "
                    f"{request.in_size + request.in_tail}-byte reply buffer"
                )
        # what was written into each reply buffer (a resident tail stays where it is); every reply
        # not already read ahead comes back in one exchange
        lengths = [min(e.length, r.in_size) for r, e in zip(requests, elems, strict=True)]
        ahead_ok = [
            ahead_wanted and r is awaited and n <= len(ahead[0]) for r, n in zip(requests, lengths, strict=True)
        ]
        missing = [(r.in_addr, n) for r, n, ok in zip(requests, lengths, ahead_ok, strict=True) if not ok]
        started = time.perf_counter()
        fetched = iter(mem.memread_many(missing) if missing else [])
        if missing:
            self.transfer_seconds += time.perf_counter() - started
        for request, elem, length, ok in zip(requests, elems, lengths, ahead_ok, strict=True):
            reply = ahead[0][:length] if ok else next(fetched)
            self._finish(request, elem, reply, seen - request.submitted_at)

    def _finish(self, request: Request, elem: UsedElem, reply: bytes, server: float) -> None:
        self.driver.allocator.free(request.in_addr)
        self._done[request] = Completion(request, elem.length, reply, self._completed, server)
        self._completed += 1

    def _notify_beyond_slots(self) -> None:
        if self.driver.queue.in_flight > SERVER_SLOTS:
            self.driver.notify_again()

    def _check_health(self) -> None:
        status = self.driver.status()
        if status & STATUS_NEEDS_RESET:
            raise DeviceNeedsReset(status, self.diagnostics())

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def collect(self, grace: float = 0.0, quiet: float | None = None, *, keep: bool = False) -> int:
        """Collect completions nobody waited for, giving requests still in progress up to ``grace``
        seconds; returns how many are still in flight (blocked in the server). With ``quiet``, it
        returns as soon as that long has passed with no completion: a server gone silent with
        requests left is not waited for to the end of ``grace``, one still answering is. With
        ``keep`` the completions stay for their waiters (a session then reads each reply);
        without, they are dropped."""
        last = time.monotonic()
        deadline = last + grace
        next_check = last + HEALTH_CHECK_INTERVAL
        while True:
            before = len(self._in_flight)
            self._poll(None)
            if not keep:
                self._done.clear()
            now = time.monotonic()
            if len(self._in_flight) < before:
                last = now
            if not self._in_flight or now >= deadline or (quiet is not None and now - last >= quiet):
                return len(self._in_flight)
            if now > next_check:
                self._notify_beyond_slots()
                next_check = now + HEALTH_CHECK_INTERVAL
            time.sleep(0.001)

    def abandon(self) -> None:
        """Give up on requests the device still holds (blocked ones): this device is to be thrown
        away with its QEMU, never reset; submitting or resetting again is an error."""
        self.abandoned = True
        self._in_flight.clear()
        self._done.clear()

    def check_idle(self) -> None:
        """Raise :class:`LeakError` if a request, descriptor or guest buffer is still out."""
        if self.abandoned:
            return
        if self._in_flight or self._done:
            raise LeakError(
                f"{len(self._in_flight)} request(s) still in flight and {len(self._done)} completion(s) never collected"
            )
        self.driver.check_idle()
