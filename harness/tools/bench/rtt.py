"""``bench rtt``: round trips per second. qtest reads alone, 9P Tgetattr with 1 to 128 in flight,
the load generator keeping the server busy (QEMU's CPU per request is the server's cost), and rows
on a local export, where path-resolving requests take QEMU's rename lock."""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from harness.p9 import wire
from harness.p9.channel import ChainLayout
from harness.p9.fixed_chains import REPLY_CAPACITY as LOAD_REPLY
from harness.p9.fixed_chains import keep_in_flight
from harness.p9.messages import Tclunk, Tgetattr, Tmkdir, Treaddir, Tstatfs, Tunlinkat, Twalk
from harness.p9.session import Pending, Session
from harness.p9.wire import Request, RMessage
from harness.qemu.config import SynthFs
from harness.qemu.machine import Machine
from harness.tools.bench.report import Row, Table
from harness.tools.bench.variant import CPU_COLUMNS, QEMU_PER_OP, CpuSplit, Variant, machine_config, rate
from harness.tools.connect import connect
from harness.virtio.virtio_pci import Transport

#: requests kept in flight, the rows of the Tgetattr windows and of the load generator
DEPTHS = (1, 8, 32, 128)
#: 128 requests in flight only fit the 128-entry ring as one indirect descriptor each
INDIRECT = ChainLayout(indirect=True)


class Slots:
    """Request sequences kept in flight together, one request of each at a time (fio's iodepth
    when each sequence repeats one request): each step sends every idle sequence's next request
    (one batch, one socket write) and takes every reply that has come, at least the oldest one's.
    An error reply raises: a sequence is built so that each of its requests succeeds in turn."""

    def __init__(self, session: Session, sequences: Sequence[Iterator[Request]]) -> None:
        self.session, self.sequences = session, list(sequences)
        self.pending: dict[int, Pending[RMessage]] = {}  # sequence -> its request in flight, oldest first

    def step(self) -> int:
        with self.session.batch():
            for index, sequence in enumerate(self.sequences):
                if index not in self.pending:
                    self.pending[index] = self.session.send(next(sequence), layout=INDIRECT)
        next(iter(self.pending.values())).result()
        finished = [index for index, pending in self.pending.items() if pending.done()]
        for index in finished:
            self.pending.pop(index).result()
        return len(finished)

    def drain(self) -> None:
        for pending in self.pending.values():
            pending.result()
        self.pending = {}


def getattrs(k: int) -> list[Iterator[Request]]:
    """``k`` sequences of Tgetattr on the root."""
    return [itertools.repeat(Tgetattr(fid=0, request_mask=wire.GETATTR_BASIC)) for _ in range(k)]


#: fids the namespace rows walk to, one per sequence, far above the session's own
NAMESPACE_FIDS = 1 << 20


def walks(k: int, first: int = 0) -> list[Iterator[Request]]:
    """``k`` sequences of a Twalk of two names (``d``, ``x``) from the root to a fid of their own,
    and its Tclunk: what the rename lock around Twalk's lookups guards."""
    return [
        itertools.cycle([Twalk(fid=0, newfid=NAMESPACE_FIDS + i, wnames=["d", "x"]), Tclunk(fid=NAMESPACE_FIDS + i)])
        for i in range(first, first + k)
    ]


def creates(k: int, first: int = 0) -> list[Iterator[Request]]:
    """``k`` sequences of a Tmkdir of a name of their own in the root and the Tunlinkat of it:
    what the rename lock's write side around a create and its read-back serialises."""
    return [
        itertools.cycle(
            [Tmkdir(dfid=0, name=f"m{i}", mode=0o755, gid=0), Tunlinkat(dirfd=0, name=f"m{i}", flags=wire.AT_REMOVEDIR)]
        )
        for i in range(first, first + k)
    ]


def walks_and_creates(k: int, first: int = 0) -> list[Iterator[Request]]:
    """Half of ``k`` sequences walks, half creates: the two kinds contending for the lock."""
    return walks(k - k // 2, first) + creates(k // 2, first)


def namespace_rows(variant: Variant, transport: Transport, seconds: float, table: Table) -> None:
    """``bench rtt``'s rows on a local export, where path-resolving requests take QEMU's rename
    lock (synth has none): walks, creates and both together, 1 and 8 in flight."""
    with tempfile.TemporaryDirectory(prefix="v9p-bench-ns-") as export:
        (Path(export) / "d").mkdir()
        (Path(export) / "d" / "x").write_bytes(b"")
        with connect(machine_config(variant, variant.local(Path(export)), transport)) as conn:
            rows = [("Twalk of d, x and Tclunk", walks, 1), ("Twalk of d, x and Tclunk", walks, 8),
                    ("Tmkdir and Tunlinkat", creates, 1), ("Tmkdir and Tunlinkat", creates, 8),
                    ("half walks, half creates", walks_and_creates, 8)]  # fmt: skip
            for row, (kind, sequences, k) in enumerate(rows):
                # a row's own fids and names: the one before may end with a walk or a mkdir unanswered
                slots = Slots(conn.session, sequences(k, 1000 * row))
                _timed_row(table, conn.machine, f"local: {kind}, {k} in flight", seconds, slots.step)
                slots.drain()


def _timed_row(table: Table, machine: Machine, name: str, seconds: float, step: Callable[[], int]) -> None:
    """Run ``step`` for ``seconds`` (:func:`_rate`) and add its ``bench rtt`` row to ``table``."""
    before = machine.qtest.round_trips
    cpu = CpuSplit(machine)
    count, ops_per_s = rate(seconds, step, cpu)
    table.add(_rtt_row(name, count, ops_per_s, machine.qtest.round_trips - before, cpu))


def _rtt_row(name: str, count: int, per_second: float, round_trips: int, cpu: CpuSplit) -> Row:
    """One ``bench rtt`` row."""
    return {
        "measurement": name,
        "ops": count,
        "ops/s": round(per_second),
        "µs/op": round(1e6 / per_second, 1),
        "socket writes/op": round(round_trips / count, 2),
        QEMU_PER_OP: cpu.qemu_per_op(count),
        **cpu.columns(),
    }


def rtt_table(
    variant: Variant, transport: Transport, seconds: float, depths: Sequence[int] = DEPTHS, client_rows: bool = True
) -> Table:
    """``bench rtt``'s rows: with ``client_rows``, the qtest and session round trips (the harness's
    rate); the load generator's Tgetattr, Tstatfs and Treaddir at each of ``depths`` in flight (the
    server's); the local export's namespace rows."""
    values = ["ops", "ops/s", "µs/op", "socket writes/op", QEMU_PER_OP, *CPU_COLUMNS]
    table = Table("round trips", ["measurement"], values, compare="ops/s", also=[QEMU_PER_OP])
    with connect(machine_config(variant, SynthFs(), transport)) as conn:
        qt, session = conn.machine.qtest, conn.session
        status_addr = conn.driver.queue.used_idx_addr()

        def qtest_one() -> int:
            qt.readw(status_addr)
            return 1

        def qtest_batch() -> int:
            qt.exchange([f"readw {status_addr:#x}"] * 100)
            return 100

        def sequential() -> int:
            session.getattr(0, wire.GETATTR_BASIC)
            return 1

        steps = [("qtest readw, sequential", qtest_one), ("qtest readw, 100 pipelined", qtest_batch)]
        steps += [("9P Tgetattr on the root, sequential", sequential)]
        windows = {k: Slots(session, getattrs(k)) for k in DEPTHS}
        steps += [(f"9P Tgetattr, {k} in flight (indirect)", window.step) for k, window in windows.items()]
        steps = steps if client_rows else []
        for name, step in steps:
            _timed_row(table, conn.machine, name, seconds, step)
            # each row starts on an idle queue: a window's leftovers beside the next, larger window
            # would ask the 128-entry ring for more than it holds
            for window in windows.values():
                window.drain()
        listing = session.walk_fid(0, ["ReadDirDir"])
        session.lopen(listing, os.O_DIRECTORY)
        kinds: list[tuple[str, Request]] = [
            ("Tgetattr", Tgetattr(fid=0, request_mask=wire.GETATTR_BASIC)),
            ("Tstatfs", Tstatfs(fid=0)),
            ("Treaddir of 100 entries", Treaddir(fid=listing, offset=0, count=LOAD_REPLY - wire.RREADDIR_HEADER)),
        ]
        for (kind, request), k in itertools.product(kinds, depths):  # the server's rate: per request
            before = qt.round_trips  # the harness only puts an avail entry back on the ring
            cpu = CpuSplit(conn.machine)
            count, per_second = keep_in_flight(conn.channel, request, k, seconds, timed=cpu.measuring)
            name = f"load generator: {kind}, {k} in flight"
            table.add(_rtt_row(name, count, per_second, qt.round_trips - before, cpu))
        session.clunk(listing)
        session.clunk(0)
    namespace_rows(variant, transport, seconds, table)
    return table
