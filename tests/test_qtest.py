"""The qtest client against a fake QEMU end: reply parsing, IRQ lines, errors, posting."""

from __future__ import annotations

import contextlib
import signal
import socket
import time
from collections.abc import Iterator

import pytest

from harness.errors import QEMUExited, QTestDisconnected, QTestError, QTestFail, QTestProtocolError, QTestTimeout
from harness.qemu.qtest import B64WRITE_CHUNK, QTest
from tests.fakes import FakeQTestPeer, b64


def standard(line: str) -> list[str]:
    words = line.split()
    match words[0]:
        case "inb":
            return ["OK 0x00ff"]
        case "readl":
            return ["IRQ raise 4", "OK 0x0000000012345678", "IRQ lower 4"]
        case "b64read":
            return ["OK " + b64(bytes(range(int(words[2], 0))))]
        case "outb" | "writel" | "b64write" | "memset":
            return ["FAIL bad write"] if words[1] == "0xdead" else ["OK"]
        case "read":
            return ["OK 0x" + "ab" * int(words[2], 0)]
        case "clock_step":
            return ["FAIL Unknown command 'clock_step'"]
        case "inw":
            return ["OK not-a-number"]
        case "silence":
            return []
    return ["OK"]


@pytest.fixture
def peer() -> Iterator[FakeQTestPeer]:
    fake = FakeQTestPeer(standard)
    yield fake
    fake.close()


@pytest.fixture
def qt(peer: FakeQTestPeer) -> Iterator[QTest]:
    client = QTest(peer.ours, timeout=0.5)
    yield client
    client.close()


def test_numbers_are_parsed(qt: QTest) -> None:
    assert qt.inb(0x60) == 0xFF


def test_irq_lines_are_recorded_and_skipped(qt: QTest) -> None:
    assert qt.readl(0x1000) == 0x12345678
    assert qt.inb(0x60) == 0xFF  # the trailing "IRQ lower" did not shift the next reply
    assert qt.irq_log == [("raise", 4), ("lower", 4)]
    assert qt.irq_levels == {4: False}


def test_posted_writes_travel_with_the_next_query(qt: QTest, peer: FakeQTestPeer) -> None:
    qt.outb(0x70, 1)
    qt.writel(0x2000, 5)
    assert peer.received == []
    assert qt.inb(0x60) == 0xFF
    assert peer.received == ["outb 0x70 0x1", "writel 0x2000 0x5", "inb 0x60"]
    assert qt.round_trips == 1


def test_failed_posted_write_is_raised_at_the_next_query(qt: QTest) -> None:
    qt.outb(0xDEAD, 1)
    with pytest.raises(QTestFail, match="outb 0xdead"):
        qt.inb(0x60)
    assert qt.inb(0x60) == 0xFF  # the stream stayed in step


def test_fail_reply_names_command(qt: QTest) -> None:
    with pytest.raises(QTestFail) as info:
        qt.clock_step()
    assert info.value.command == "clock_step" and "Unknown command" in info.value.reply


def test_b64read_and_hexread(qt: QTest) -> None:
    assert qt.memread(0x100, 5) == bytes(range(5))
    assert qt.memread(0x100, 0) == b""
    assert qt.memread_many([(0, 3), (0, 0), (0, 2)]) == [b"\0\1\2", b"", b"\0\1"]
    assert qt.hexread(0, 3) == b"\xab\xab\xab"


def test_large_writes_are_chunked(qt: QTest, peer: FakeQTestPeer) -> None:
    qt.memwrite(0x1000, bytes(B64WRITE_CHUNK * 2 + 1))
    qt.flush()
    sizes = [int(line.split()[2], 0) for line in peer.received]
    assert sizes == [B64WRITE_CHUNK, B64WRITE_CHUNK, 1]
    assert [int(line.split()[1], 0) for line in peer.received] == [
        0x1000,
        0x1000 + B64WRITE_CHUNK,
        0x1000 + 2 * B64WRITE_CHUNK,
    ]


def test_unparsable_number(qt: QTest) -> None:
    with pytest.raises(QTestProtocolError):
        qt.inw(0x60)


def test_no_reply_times_out(qt: QTest) -> None:
    with pytest.raises(QTestTimeout):
        qt.query("silence")


def test_a_bounded_wait_ends_by_its_own_deadline(peer: FakeQTestPeer) -> None:
    """timeout_at_most() shortens the wait of a long-timeout connection, and only within it."""
    qt = QTest(peer.ours, timeout=30.0)
    with qt.timeout_at_most(0.2):
        started = time.monotonic()
        with pytest.raises(QTestTimeout, match=r"within 0\.2 s"):
            qt.query("silence")
        assert time.monotonic() - started < 5.0
    assert qt.timeout == 30.0
    with qt.timeout_at_most(60.0):  # never longer than the connection's own
        assert qt.timeout == 30.0


@contextlib.contextmanager
def interrupted_every(interval: float, give_up: float) -> Iterator[None]:
    """Signals with a handler ``interval`` apart, as a sampling profiler's stops or a timer's
    ticks: each interrupts a waiting system call, which CPython then restarts (PEP 475). After
    ``give_up`` seconds the handler raises, so that a wait that never ends fails the test."""
    started = time.monotonic()

    def tick(signum: int, frame: object) -> None:
        if time.monotonic() - started > give_up:
            raise AssertionError(f"still waiting {give_up} s later")

    previous = signal.signal(signal.SIGALRM, tick)
    signal.setitimer(signal.ITIMER_REAL, interval, interval)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_wait_interrupted_again_and_again_still_ends_by_its_timeout(qt: QTest) -> None:
    """Each interruption restarted the kernel's receive timeout (SO_RCVTIMEO) from the start: a
    silent QEMU was waited for as long as the signals came. Under py-spy's sampling, the hotplug
    case whose QEMU wedges (10 s allowed) waited 40 minutes."""
    started = time.monotonic()
    with interrupted_every(0.02, give_up=5.0), pytest.raises(QTestTimeout, match=r"within 0\.5 s"):
        qt.query("silence")
    assert time.monotonic() - started < 2.5


def test_a_qemu_that_reads_nothing_fails_the_send_by_the_timeout() -> None:
    """A wedged QEMU reads nothing more of what is sent: once the socket is full the send waits for room
    no longer than the timeout (it used to wait for ever), however often signals interrupt it."""
    ours, theirs = socket.socketpair()
    qt = QTest(ours, timeout=0.5)
    started = time.monotonic()
    try:
        with interrupted_every(0.02, give_up=5.0), pytest.raises(QTestTimeout, match=r"sent within 0\.5 s"):
            qt.memwrite(0, bytes(8 << 20))  # posted lines past POST_LIMIT go out at once
            qt.flush()
    finally:
        qt.close()
        theirs.close()
    assert time.monotonic() - started < 2.5


def test_closed_peer_is_reported(qt: QTest, peer: FakeQTestPeer) -> None:
    peer.close()
    with pytest.raises(QTestDisconnected):
        qt.inb(0x60)


def test_lost_hook_turns_disconnect_into_its_error(peer: FakeQTestPeer) -> None:
    seen: list[QTestError] = []

    def explain(err: QTestError) -> Exception:
        seen.append(err)
        return QEMUExited("QEMU died", argv=["qemu"], status=-9, output_tail="boom")

    qt = QTest(peer.ours, timeout=0.5, on_lost=explain)
    peer.close()
    with pytest.raises(QEMUExited, match="killed by SIGKILL") as info:
        qt.inb(0x60)
    assert isinstance(info.value.__cause__, QTestDisconnected) and len(seen) == 1


def test_malformed_irq_line() -> None:
    fake = FakeQTestPeer(lambda line: ["IRQ sideways 3", "OK"])
    qt = QTest(fake.ours, timeout=0.5)
    with pytest.raises(QTestProtocolError):
        qt.query("x")
    qt.close()
    fake.close()


def test_nothing_to_say_sends_nothing(qt: QTest, peer: FakeQTestPeer) -> None:
    """An empty line makes QEMU abort (qtest_process_command asserts on it): never send one."""
    assert qt.memread_many([(0x1000, 0)]) == [b""]
    assert qt.exchange([]) == []
    qt.flush()
    assert qt.inb(0x60) == 0xFF
    assert peer.received == ["inb 0x60"] and qt.round_trips == 1


def test_every_command_sends_its_line_and_parses_its_reply() -> None:
    """Each command of system/qtest.c: the line it sends and what it makes of QEMU's answer."""
    answers = {
        "readq": "OK 0x0123456789abcdef",
        "clock_step": "OK 1000",
        "clock_set": "OK 5000",
        "endianness": "OK little",
    }
    fake = FakeQTestPeer(lambda line: [answers.get(line.split()[0], "OK")])
    qt = QTest(fake.ours, timeout=0.5)
    qt.outw(0x510, 3)
    qt.writeb(0x1000, 1)
    qt.writew(0x1002, 2)
    qt.writeq(0x1008, 0x1122334455667788)
    qt.hexwrite(0x2000, b"\x01\x02")
    qt.memset(0x3000, 16, 0xAA)
    assert qt.readq(0x1008) == 0x0123456789ABCDEF
    assert qt.clock_step() == 1000 and qt.clock_step(100) == 1000 and qt.clock_set(5000) == 5000
    assert qt.endianness() == "little"
    qt.irq_intercept_in("ioapic")
    qt.irq_intercept_out("/machine/unattached/device[0]", "irq")
    qt.set_irq_in("/machine/ioapic", "unnamed-gpio-in", 11, 1)
    qt.module_load("accel", "qtest")
    assert fake.received == [
        "outw 0x510 0x3", "writeb 0x1000 0x1", "writew 0x1002 0x2", "writeq 0x1008 0x1122334455667788",
        "write 0x2000 0x2 0x0102", "memset 0x3000 0x10 0xaa", "readq 0x1008", "clock_step", "clock_step 100",
        "clock_set 5000", "endianness", "irq_intercept_in ioapic",
        "irq_intercept_out /machine/unattached/device[0] irq", "set_irq_in /machine/ioapic unnamed-gpio-in 11 1",
        "module_load accel qtest",
    ]  # fmt: skip
    qt.close()
    fake.close()


def test_adjacent_posted_writes_join_one_line_in_order(qt: QTest, peer: FakeQTestPeer) -> None:
    qt.memwrite(0x1000, b"ab")
    qt.memwrite(0x1002, b"cd")  # continues the first: joins it
    qt.memwrite(0x2000, b"ef")  # elsewhere: a line of its own
    qt.outb(0x70, 1)  # any other command ends the open write, so order is kept
    qt.memwrite(0x2002, b"gh")
    qt.memwrite(0x3000, b"x" * B64WRITE_CHUNK)
    qt.memwrite(0x3000 + B64WRITE_CHUNK, b"y")  # would exceed a line: not joined
    qt.flush()
    assert peer.received == [
        f"b64write 0x1000 0x4 {b64(b'abcd')}",
        f"b64write 0x2000 0x2 {b64(b'ef')}",
        "outb 0x70 0x1",
        f"b64write 0x2002 0x2 {b64(b'gh')}",
        f"b64write 0x3000 {B64WRITE_CHUNK:#x} {b64(b'x' * B64WRITE_CHUNK)}",
        f"b64write {0x3000 + B64WRITE_CHUNK:#x} 0x1 {b64(b'y')}",
    ]
