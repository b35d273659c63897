"""Client for QEMU's qtest line protocol over a connected UNIX socket.

Every command of ``system/qtest.c`` has a typed method.  Commands whose reply is a bare ``OK``
(writes, ``out*``, ``memset``) are *posted*: they are queued and go out in the same socket write
as the next command that needs an answer, and their ``OK`` replies are checked then.  This is what
makes a virtqueue submission cost one round trip.  Order is kept: QEMU executes lines in order.

Asynchronous ``IRQ raise N`` / ``IRQ lower N`` lines may arrive between replies; they are recorded
in :attr:`QTest.irq_levels` and :attr:`QTest.irq_log` and skipped.
"""

from __future__ import annotations

import base64
import binascii
import collections
import contextlib
import logging
import select
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NoReturn

from harness.errors import QTestDisconnected, QTestError, QTestFail, QTestProtocolError, QTestTimeout

log = logging.getLogger(__name__)

#: Largest payload of a single ``b64write`` line; QEMU slows down sharply on multi-MiB lines.
B64WRITE_CHUNK = 64 * 1024
#: Largest span of a single ``b64read`` line (measured: 240 MB/s at 64 KiB, 123 MB/s at 2 MiB).
B64READ_CHUNK = 64 * 1024
#: Posted text is sent once it passes this: QEMU's qtest reader rescans and shifts its whole input
#: buffer for every line, so tens of megabytes sent at once take minutes.
POST_LIMIT = 1 << 20
#: How long a wait for a reply polls the socket before sleeping in poll() (as QEMU's own event loop
#: polls before ppoll, ``poll-max-ns``). A reply usually comes within ~10 µs; a sleeping reader
#: needs a cross-CPU wake-up that took ~40 µs more per round trip on a 2-vCPU machine.
SPIN_SECONDS = 50e-6
#: Unanswered :meth:`QTest.send_posted` lines allowed before a send waits for their answers. QEMU
#: writes each ``OK`` separately, and a UNIX socket charges every write about a kilobyte of buffer
#: whatever its size: some 200 unread answers fill it, and QEMU's main loop then sleeps in its
#: chardev write until they are read (measured: a burst of 300 notifies wedged it).
UNANSWERED_LIMIT = 32

#: :meth:`QTest.send_posted` reads the answers that have come only once this many are owed: one
#: receive per few notifies instead of one per notify (a system call the sequential load
#: generator paid per request).
DRAIN_AT = 8

LostHook = Callable[[QTestError], Exception | None]


class QTest:
    """One qtest connection.  Owns the socket; use as a context manager or call :meth:`close`."""

    #: as guest memory (harness.virtio.guestmem.GuestMemory), every access is a round trip
    mapped = False

    def __init__(
        self,
        sock: socket.socket,
        *,
        timeout: float = 30.0,
        on_lost: LostHook | None = None,
        spin: float = SPIN_SECONDS,
    ) -> None:
        self._sock = sock
        self.spin = spin
        # A blocking socket, each call made with MSG_DONTWAIT: in timeout mode CPython would poll()
        # before every send and recv, doubling the system calls of a round trip. A call that
        # would block waits in poll() for what is left of its deadline (:meth:`_wait_for`).
        sock.settimeout(None)
        self.timeout = timeout
        self._readable, self._writable = select.poll(), select.poll()
        self._readable.register(sock, select.POLLIN)
        self._writable.register(sock, select.POLLOUT)
        self._buf = bytearray()
        self._chunk = bytearray(1 << 20)
        self._chunk_view = memoryview(self._chunk)
        self._posted: list[str] = []
        self._posted_bytes = 0
        #: lines sent by :meth:`send_posted` whose ``OK`` has not been read yet, oldest first
        self._unanswered: collections.deque[str] = collections.deque()
        #: the last posted memwrite, not yet a line: a write that continues it joins it
        self._open_write: tuple[int, bytearray] | None = None
        self._on_lost = on_lost
        self.irq_levels: dict[int, bool] = {}
        self.irq_log: list[tuple[str, int]] = []
        self.round_trips = 0

    # -- plumbing -------------------------------------------------------------------------------

    def __enter__(self) -> QTest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_timeout(self, timeout: float) -> None:
        """How long to wait for the replies to a command (or for room to send it) before
        :class:`QTestTimeout`."""
        self.timeout = timeout

    def _wait_for(self, poller: select.poll, deadline: float) -> bool:
        """Whether the socket became ready (``poller`` says for what) before ``deadline``.

        A deadline, not a kernel timeout (SO_RCVTIMEO): a signal interrupts the waiting call, and
        CPython restarts it (PEP 475) with a kernel timeout from the start but with poll()'s
        recomputed from what is left. Signals that come often enough (a sampling profiler's
        stops, a timer) kept a silent QEMU waited for as long as they came."""
        left = deadline - time.monotonic()
        return left > 0 and bool(poller.poll(left * 1000))

    @contextlib.contextmanager
    def timeout_at_most(self, seconds: float) -> Iterator[None]:
        """Within the block, wait no longer than ``seconds`` for a reply (never longer than
        :attr:`timeout`): a caller with its own deadline is not held past it by a wedged QEMU."""
        kept = self.timeout
        self.set_timeout(max(0.001, min(kept, seconds)))
        try:
            yield
        finally:
            if self._sock.fileno() >= 0:  # a lost connection is already closed
                self.set_timeout(kept)

    def close(self) -> None:
        self._posted.clear()
        self._unanswered.clear()
        self._open_write = None
        self._sock.close()

    def post(self, line: str) -> None:
        """Queue a command whose reply must be a bare ``OK``; it is sent with the next query."""
        if self._open_write is not None:
            self._close_write()
        self._posted.append(line)
        self._posted_bytes += len(line)
        if self._posted_bytes > POST_LIMIT:
            self.flush()

    def flush(self) -> None:
        """Send every posted command now and check its ``OK`` (and those of :meth:`send_posted`)."""
        if self._posted or self._open_write is not None or self._unanswered:
            self.exchange([])

    def send_posted(self) -> None:
        """Send every posted command now without waiting for its ``OK``: the answers are read and
        checked by the next exchange, or by :meth:`drain`. For a caller that has nothing to ask
        QEMU and learns the outcome another way (the used ring in shared guest RAM): it saves the
        wait for a reply that QEMU sends only after running the command, a notify's whole
        virtqueue handler included. Past :data:`UNANSWERED_LIMIT` lines it waits, so that QEMU's
        replies never fill the socket."""
        if self._open_write is not None:
            self._close_write()
        if not self._posted:
            return
        lines, self._posted, self._posted_bytes = self._posted, [], 0
        if len(self._unanswered) >= DRAIN_AT:
            self.drain()
        self._send("\n".join(lines) + "\n")
        self._unanswered.extend(lines)
        if len(self._unanswered) > UNANSWERED_LIMIT:
            self.exchange([])

    def drain(self) -> None:
        """Check the answers to :meth:`send_posted` lines that have already come, without waiting."""
        if not self._unanswered:
            return
        try:
            size = self._sock.recv_into(self._chunk, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError as err:
            self._lost(QTestDisconnected(f"qtest socket receive failed: {err}"), err)
        if not size:
            self._lost(QTestDisconnected("qtest socket closed by QEMU"), None)
        self._buf += self._chunk_view[:size]
        self._check_unanswered(self._read_replies(len(self._unanswered), complete_only=True))

    def _check_unanswered(self, replies: list[str]) -> None:
        for reply in replies:
            line = self._unanswered.popleft()
            if reply.partition(" ")[0] != "OK":
                raise QTestFail(line, reply)

    def query(self, line: str) -> str:
        """Send posted commands plus ``line``; return the text after ``OK`` of the last reply."""
        return self.exchange([line])[0]

    def exchange(self, lines: Sequence[str]) -> list[str]:
        """Send posted commands and ``lines`` in one write; return the ``OK`` payloads of ``lines``."""
        if self._open_write is not None:
            self._close_write()
        everything = self._posted
        everything.extend(lines)
        if not everything:
            if self._unanswered:
                self._check_unanswered(self._read_replies(len(self._unanswered)))
            return []  # an empty line would make QEMU abort (qtest_process_command asserts on it)
        self._posted = []
        self._posted_bytes = 0
        self._send("\n".join(everything) + "\n")
        earlier = len(self._unanswered)  # send_posted lines: their answers come first
        replies = self._read_replies(earlier + len(everything))
        if earlier:
            self._check_unanswered(replies[:earlier])
            replies = replies[earlier:]
        payloads: list[str] = []
        for line, reply in zip(everything, replies, strict=True):
            status, _, rest = reply.partition(" ")
            if status != "OK":
                raise QTestFail(line, reply)
            payloads.append(rest)
        return payloads[len(everything) - len(lines) :]

    def _send(self, text: str) -> None:
        """Send ``text`` whole. A QEMU that stops reading (its main loop wedged) fails the send
        after :attr:`timeout` with the socket full, where a blocking send waited for ever."""
        self.round_trips += 1
        data, deadline = memoryview(text.encode("ascii")), time.monotonic() + self.timeout
        while data:
            try:
                data = data[self._sock.send(data, socket.MSG_DONTWAIT) :]
            except BlockingIOError as err:
                if not self._wait_for(self._writable, deadline):
                    self._lost(QTestTimeout(f"{len(data)} bytes of qtest commands not sent within {self.timeout} s: "
                                            "QEMU is not reading"), err)  # fmt: skip
            except OSError as err:
                self._lost(QTestDisconnected(f"qtest socket send failed: {err}"), err)

    def _read_replies(self, count: int, complete_only: bool = False) -> list[str]:
        """Read ``count`` reply lines, recording and skipping asynchronous IRQ lines (with
        ``complete_only``: at most ``count``, from what is already buffered)."""
        replies: list[str] = []
        deadline = time.monotonic() + self.timeout
        while len(replies) < count:
            if self._buf.count(b"\n") < count - len(replies):
                if not complete_only:
                    self._receive(deadline)
                    continue
                if b"\n" not in self._buf:
                    break
            *complete, rest = self._buf.split(b"\n")
            self._buf = bytearray(rest)
            for raw in complete:
                try:
                    line = raw.decode("ascii")
                except UnicodeDecodeError as err:
                    raise QTestProtocolError(f"non-ASCII qtest reply line: {bytes(raw[:80])!r}") from err
                if line.startswith("IRQ "):
                    self._record_irq(line)
                else:
                    replies.append(line)
        if len(replies) > count:
            raise QTestProtocolError(f"{len(replies)} qtest replies to {count} commands: {replies[count:]!r}")
        return replies

    def _receive(self, deadline: float) -> None:
        """Append what the socket has to the buffer: polled for :attr:`spin` seconds, then waited
        for until ``deadline``."""
        size = self._receive_polled() if self.spin > 0 else None
        if size is None:
            size = self._receive_blocking(deadline)
        if not size:
            self._lost(QTestDisconnected("qtest socket closed by QEMU"), None)
        self._buf += self._chunk_view[:size]

    def _receive_polled(self) -> int | None:
        deadline = time.perf_counter() + self.spin
        while True:
            try:
                return self._sock.recv_into(self._chunk, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if time.perf_counter() > deadline:
                    return None
            except OSError:
                return None  # the blocking receive reports it

    def _receive_blocking(self, deadline: float) -> int:
        while True:
            if not self._wait_for(self._readable, deadline):
                self._lost(QTestTimeout(f"no qtest reply within {self.timeout} s"), None)
            try:
                return self._sock.recv_into(self._chunk, 0, socket.MSG_DONTWAIT)  # a reused buffer: no 1 MiB per call
            except BlockingIOError:
                continue  # readable, then not: wait again
            except OSError as err:
                self._lost(QTestDisconnected(f"qtest socket receive failed: {err}"), err)

    def _lost(self, err: QTestError, cause: BaseException | None) -> NoReturn:
        better = self._on_lost(err) if self._on_lost else None
        if better is not None:
            raise better from err
        raise err from cause

    def _record_irq(self, line: str) -> None:
        words = line.split()
        if len(words) != 3 or words[1] not in ("raise", "lower"):
            raise QTestProtocolError(f"malformed IRQ line {line!r}")
        num = int(words[2], 0)
        self.irq_levels[num] = words[1] == "raise"
        self.irq_log.append((words[1], num))

    @staticmethod
    def _int(command: str, payload: str) -> int:
        try:
            return int(payload, 0)
        except ValueError as err:
            raise QTestProtocolError(f"qtest {command!r}: expected a number, got {payload!r}") from err

    # -- port I/O -------------------------------------------------------------------------------

    def inb(self, port: int) -> int:
        return self._int("inb", self.query(f"inb {port:#x}"))

    def inw(self, port: int) -> int:
        return self._int("inw", self.query(f"inw {port:#x}"))

    def inl(self, port: int) -> int:
        return self._int("inl", self.query(f"inl {port:#x}"))

    def outb(self, port: int, value: int) -> None:
        self.post(f"outb {port:#x} {value:#x}")

    def outw(self, port: int, value: int) -> None:
        self.post(f"outw {port:#x} {value:#x}")

    def outl(self, port: int, value: int) -> None:
        self.post(f"outl {port:#x} {value:#x}")

    # -- memory ---------------------------------------------------------------------------------

    def readb(self, addr: int) -> int:
        return self._int("readb", self.query(f"readb {addr:#x}"))

    def readw(self, addr: int) -> int:
        return self._int("readw", self.query(f"readw {addr:#x}"))

    def readl(self, addr: int) -> int:
        return self._int("readl", self.query(f"readl {addr:#x}"))

    def readq(self, addr: int) -> int:
        return self._int("readq", self.query(f"readq {addr:#x}"))

    def writeb(self, addr: int, value: int) -> None:
        self.post(f"writeb {addr:#x} {value:#x}")

    def writew(self, addr: int, value: int) -> None:
        self.post(f"writew {addr:#x} {value:#x}")

    def writel(self, addr: int, value: int) -> None:
        self.post(f"writel {addr:#x} {value:#x}")

    def writeq(self, addr: int, value: int) -> None:
        self.post(f"writeq {addr:#x} {value:#x}")

    def memread(self, addr: int, size: int) -> bytes:
        """Read guest memory with ``b64read`` (``read X 0`` would abort QEMU, so 0 is local); large
        spans as several lines of :data:`B64READ_CHUNK` in one exchange."""
        if size <= B64READ_CHUNK:
            return self._b64decode(self.query(f"b64read {addr:#x} {size:#x}"), size) if size else b""
        return self.memread_many([(addr, size)])[0]

    def memread_many(self, spans: Iterable[tuple[int, int]]) -> list[bytes]:
        """Several reads in one socket write (spans above :data:`B64READ_CHUNK` in several lines)."""
        lines: list[str] = []
        sizes: list[int] = []
        pieces: list[int] = []  # lines per span
        for addr, size in spans:
            starts = range(addr, addr + size, B64READ_CHUNK)
            pieces.append(len(starts))
            for at in starts:
                sizes.append(min(B64READ_CHUNK, addr + size - at))
                lines.append(f"b64read {at:#x} {sizes[-1]:#x}")
        data = [self._b64decode(text, n) for text, n in zip(self.exchange(lines), sizes, strict=True)]
        joined, at = [], 0
        for count in pieces:
            joined.append(data[at] if count == 1 else b"".join(data[at : at + count]))
            at += count
        return joined

    def memwrite(self, addr: int, data: bytes) -> None:
        """Post ``b64write`` lines of at most :data:`B64WRITE_CHUNK` bytes each. A write that starts
        where the previous posted one ended joins its line (a frame and the descriptor table after
        it: one command for QEMU to parse instead of two)."""
        if not data:
            return
        last = self._open_write
        if last is not None and last[0] + len(last[1]) == addr and len(last[1]) + len(data) <= B64WRITE_CHUNK:
            last[1].extend(data)
            return
        if len(data) <= B64WRITE_CHUNK:
            if last is not None:
                self._close_write()
            self._open_write = (addr, bytearray(data))
            return
        view = memoryview(data)
        for offset in range(0, len(view), B64WRITE_CHUNK):
            self._post_b64write(addr + offset, view[offset : offset + B64WRITE_CHUNK])

    def _close_write(self) -> None:
        assert self._open_write is not None
        addr, data = self._open_write
        self._open_write = None
        self._post_b64write(addr, data)

    def _post_b64write(self, addr: int, data: bytes | bytearray | memoryview) -> None:
        self.post(f"b64write {addr:#x} {len(data):#x} {base64.b64encode(data).decode('ascii')}")

    def load16(self, addr: int) -> int:
        """A little-endian u16 of guest memory (one ``b64read``: QEMU copies it whole)."""
        return int.from_bytes(self.memread(addr, 2), "little")

    def store16(self, addr: int, value: int) -> None:
        """Post a little-endian u16 write (as a ``b64write`` that may join the write before it)."""
        self.memwrite(addr, value.to_bytes(2, "little"))

    def hexread(self, addr: int, size: int) -> bytes:
        """The slow hex ``read`` command, kept for comparison and for the protocol's sake."""
        if size == 0:
            return b""
        payload = self.query(f"read {addr:#x} {size:#x}")
        try:
            return bytes.fromhex(payload.removeprefix("0x"))
        except ValueError as err:
            raise QTestProtocolError(f"qtest read: bad hex {payload[:40]!r}") from err

    def hexwrite(self, addr: int, data: bytes) -> None:
        if data:
            self.post(f"write {addr:#x} {len(data):#x} 0x{data.hex()}")

    def memset(self, addr: int, size: int, byte: int) -> None:
        self.post(f"memset {addr:#x} {size:#x} {byte:#x}")

    @staticmethod
    def _b64decode(payload: str, size: int) -> bytes:
        try:
            data = base64.b64decode(payload, validate=True)
        except binascii.Error as err:
            raise QTestProtocolError(f"qtest b64read: bad base64 {payload[:40]!r}") from err
        if len(data) != size:
            raise QTestProtocolError(f"qtest b64read: asked {size} bytes, got {len(data)}")
        return data

    # -- clock, interrupts, misc ----------------------------------------------------------------

    def clock_step(self, ns: int | None = None) -> int:
        """Advance the virtual clock (only under the qtest accelerator)."""
        line = "clock_step" if ns is None else f"clock_step {ns}"
        return self._int("clock_step", self.query(line))

    def clock_set(self, ns: int) -> int:
        return self._int("clock_set", self.query(f"clock_set {ns}"))

    def endianness(self) -> str:
        return self.query("endianness")

    def irq_intercept_in(self, qom_path: str) -> None:
        self.query(f"irq_intercept_in {qom_path}")

    def irq_intercept_out(self, qom_path: str, name: str | None = None) -> None:
        self.query(f"irq_intercept_out {qom_path}" + (f" {name}" if name else ""))

    def set_irq_in(self, qom_path: str, name: str, num: int, level: int) -> None:
        self.query(f"set_irq_in {qom_path} {name} {num} {level}")

    def module_load(self, prefix: str, lib: str) -> None:
        self.query(f"module_load {prefix} {lib}")
