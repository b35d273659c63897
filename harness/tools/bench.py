"""Benchmarks: commands that print tables, never timed tests.

``bench rtt``, ``bench readdir`` and ``bench io`` measure variants: one or more QEMU binaries
(``--qemu A --qemu B``) on one or both guest-memory paths (``--guest-memory shared|qtest|both``).
Every variant is measured ``--rounds`` times, the variants interleaved round by round so that a
machine's drift hits them alike; the table gives each variant's median, min and max and the ratio
of medians to A. Each row also says where the time went: QEMU's CPU time over the row's wall time,
against the harness's (from /proc), in percent of one core; ``bench rtt`` adds QEMU's CPU time per
request, the server's cost whether or not the client keeps it busy. ``--json FILE`` keeps every round,
``--plot FILE.png`` draws the medians (matplotlib, the ``plot`` extra). Server time is from the
kick reaching QEMU to the poll that finds the used entry; the rest of a request's time is the
harness's.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness.errors import HarnessError, ProvisionError
from harness.p9 import wire
from harness.p9.channel import VIRTIO_MSIZE_LIMIT, ChainLayout
from harness.p9.load import REPLY_CAPACITY as LOAD_REPLY
from harness.p9.load import keep_in_flight
from harness.p9.messages import Rreaddir, Tclunk, Tgetattr, Tmkdir, Tread, Treaddir, Tstatfs, Tunlinkat, Twalk, Twrite
from harness.p9.session import Pending, Session
from harness.p9.wire import TMessage
from harness.qemu import cpu_idle, provision
from harness.qemu.machine import (
    FsConfig,
    GuestMemoryMode,
    LocalFs,
    Machine,
    MachineConfig,
    Multidevs,
    SynthFs,
    cpu_seconds,
)
from harness.qemu.qemu_suite import QEMU_72_CASES, QOS_PREFIX, firmware_wrapper
from harness.tools.connect import Connection, connect
from harness.virtio.guestmem import PAGE, Regions
from harness.virtio.virtio_pci import Transport
from harness.virtio.virtqueue import Buffer

PROJECT = Path(__file__).resolve().parents[2]
#: the load generator's rows of ``bench rtt``: requests kept in flight
LOAD_DEPTHS = (1, 8, 32, 128)
#: 128 requests in flight only fit the 128-entry ring as one indirect descriptor each
INDIRECT = ChainLayout(indirect=True)


@dataclass
class Table:
    """One bench's result on one binary: ``keys`` columns name a row, ``values`` columns measure it."""

    title: str  # per whole directory listing for Treaddir
    keys: list[str]
    values: list[str]
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    #: the value column compared between binaries (B / A)
    compare: str = ""
    #: value columns also shown per variant when variants are compared (their medians)
    also: list[str] = field(default_factory=list)


def stats(samples: Sequence[float]) -> tuple[float, float, float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return ordered[0], statistics.median(ordered), statistics.fmean(ordered), p95


@dataclass(frozen=True)
class Variant:
    """What one column of a bench measures: a QEMU binary, on one guest-memory path, with one
    ``multidevs`` for its local exports."""

    binary: Path
    guest_memory: GuestMemoryMode = "shared"
    #: its column: the same binary and path twice (an A/A run, to see the noise) are two variants
    slot: int = 0
    #: the local backend's multidevs option; None leaves it to the binary's default (remap since
    #: 10.0.0, warn before), an A/B of one binary against itself names both
    multidevs: Multidevs | None = None

    def label(self) -> str:
        option = f", multidevs={self.multidevs}" if self.multidevs else ""
        return f"{provision.probe_cached(self.binary).version} {self.guest_memory}{option} ({_home(self.binary)})"

    def local(self, export: Path) -> LocalFs:
        """The local backend this variant exports ``export`` with."""
        return LocalFs(export, multidevs=self.multidevs)


def machine_config(variant: Variant, fs: FsConfig, transport: Transport = "modern") -> MachineConfig:
    """The benches' machines: 512 MiB of RAM for msize up to 4 MiB in flight. A synth bench on a
    binary without the synth test tree is refused here, by name, not by an Rlerror later."""
    binary = variant.binary
    config, found = provision.usable_config(binary, fs, transport, ram_mib=512, guest_memory=variant.guest_memory)
    if config.guest_memory != variant.guest_memory:
        raise ProvisionError(f"cannot measure guest memory {variant.guest_memory} on this host")
    if fs.kind == "synth" and not found.synth_tree:
        raise ProvisionError(f"{binary} has no qtest accelerator, so no synth test tree, which this bench reads")
    return config


# -- rtt ------------------------------------------------------------------------------------------


class CpuSplit:
    """QEMU's and the harness's CPU time over the stretches of wall time measured with
    :meth:`measuring` (several add up), in percent of one core."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.qemu = self.harness = self.wall = 0.0

    @contextlib.contextmanager
    def measuring(self) -> Iterator[None]:
        qemu, harness, start = self.machine.cpu_seconds(), cpu_seconds(), time.perf_counter()
        try:
            yield
        finally:
            self.wall += time.perf_counter() - start
            self.qemu += self.machine.cpu_seconds() - qemu
            self.harness += cpu_seconds() - harness

    def cells(self) -> tuple[int, int]:
        if not self.wall:
            return 0, 0
        return round(100 * self.qemu / self.wall), round(100 * self.harness / self.wall)

    def qemu_per_op(self, ops: int) -> float:
        """QEMU's CPU microseconds per operation: the server's cost of a request, whatever the
        client's speed (a client too slow to keep QEMU busy lowers QEMU's CPU %, not this)."""
        return round(1e6 * self.qemu / ops, 1) if ops else 0.0


CPU_COLUMNS = ["QEMU CPU %", "harness CPU %"]
#: ``bench rtt``'s column of :meth:`CpuSplit.qemu_per_op`, shown per variant when compared
QEMU_PER_OP = "QEMU CPU µs/op"


def _rate(seconds: float, step: Callable[[], int], cpu: CpuSplit) -> tuple[int, float]:
    """Run ``step`` (which returns how many operations it did) for ``seconds``; ops and ops/s.
    ``cpu`` measures the timed steps, not the warm-up: its figures are per op of these."""
    step()  # warm-up
    done = 0
    with cpu.measuring():
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            done += step()
    return done, done / elapsed


class Slots:
    """Request sequences kept in flight together, one request of each at a time (fio's iodepth
    when each sequence repeats one request): each step sends every idle sequence's next request
    (one batch, one socket write) and takes every reply that has come, at least the oldest one's.
    An error reply raises: a sequence is built so that each of its requests succeeds in turn."""

    def __init__(self, session: Session, sequences: Sequence[Iterator[TMessage[Any]]]) -> None:
        self.session, self.sequences = session, list(sequences)
        self.pending: dict[int, Pending[Any]] = {}  # sequence -> its request in flight, oldest first

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


def getattrs(k: int) -> list[Iterator[TMessage[Any]]]:
    """``k`` sequences of Tgetattr on the root."""
    return [itertools.repeat(Tgetattr(fid=0, request_mask=wire.GETATTR_BASIC)) for _ in range(k)]


#: fids the namespace rows walk to, one per sequence, far above the session's own
NAMESPACE_FIDS = 1 << 20


def walks(k: int, first: int = 0) -> list[Iterator[TMessage[Any]]]:
    """``k`` sequences of a Twalk of two names (``d``, ``x``) from the root to a fid of their own,
    and its Tclunk: what the rename lock around Twalk's lookups guards."""
    return [
        itertools.cycle([Twalk(fid=0, newfid=NAMESPACE_FIDS + i, wnames=["d", "x"]), Tclunk(fid=NAMESPACE_FIDS + i)])
        for i in range(first, first + k)
    ]


def creates(k: int, first: int = 0) -> list[Iterator[TMessage[Any]]]:
    """``k`` sequences of a Tmkdir of a name of their own in the root and the Tunlinkat of it:
    what the rename lock's write side around a create and its read-back serialises."""
    return [
        itertools.cycle(
            [Tmkdir(dfid=0, name=f"m{i}", mode=0o755, gid=0), Tunlinkat(dirfd=0, name=f"m{i}", flags=wire.AT_REMOVEDIR)]
        )
        for i in range(first, first + k)
    ]


def walks_and_creates(k: int, first: int = 0) -> list[Iterator[TMessage[Any]]]:
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
    count, rate = _rate(seconds, step, cpu)
    table.rows.append(_rtt_row(name, count, rate, machine.qtest.round_trips - before, cpu))


def _rtt_row(name: str, count: int, rate: float, round_trips: int, cpu: CpuSplit) -> tuple[Any, ...]:
    """One ``bench rtt`` row, in the order of its columns: ops, ops/s, µs/op, socket writes/op,
    QEMU CPU µs/op, QEMU CPU %, harness CPU %."""
    per_op = round_trips / count
    return (name, count, round(rate), round(1e6 / rate, 1), round(per_op, 2), cpu.qemu_per_op(count), *cpu.cells())


def rtt_table(variant: Variant, transport: Transport, seconds: float) -> Table:
    values = ["ops", "ops/s", "µs/op", "socket writes/op", QEMU_PER_OP, *CPU_COLUMNS]
    table = Table("round trips", ["measurement"], values, compare="ops/s", also=[QEMU_PER_OP])
    with connect(machine_config(variant, SynthFs(), transport)) as conn:
        qt, session = conn.machine.qtest, conn.session
        status_addr = conn.driver.queue.layout.used + 2

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
        windows = {k: Slots(session, getattrs(k)) for k in (1, 8, 32, 128)}
        steps += [(f"9P Tgetattr, {k} in flight (indirect)", window.step) for k, window in windows.items()]
        for name, step in steps:
            _timed_row(table, conn.machine, name, seconds, step)
            # each row starts on an idle queue: a window's leftovers beside the next, larger window
            # would ask the 128-entry ring for more than it holds
            for window in windows.values():
                window.drain()
        listing = session.walk_fid(0, ["ReadDirDir"])
        session.lopen(listing, os.O_DIRECTORY)
        kinds: list[tuple[str, TMessage[Any]]] = [
            ("Tgetattr", Tgetattr(fid=0, request_mask=wire.GETATTR_BASIC)),
            ("Tstatfs", Tstatfs(fid=0)),
            ("Treaddir of 100 entries", Treaddir(fid=listing, offset=0, count=LOAD_REPLY - wire.RREADDIR_HEADER)),
        ]
        for (kind, request), k in itertools.product(kinds, LOAD_DEPTHS):  # the server's rate: per request
            before = qt.round_trips  # the harness only puts an avail entry back on the ring
            cpu = CpuSplit(conn.machine)
            count, rate = keep_in_flight(conn.channel, request, k, seconds, timed=cpu.measuring)
            name = f"load generator: {kind}, {k} in flight"
            table.rows.append(_rtt_row(name, count, rate, qt.round_trips - before, cpu))
        session.clunk(listing)
        session.clunk(0)
    namespace_rows(variant, transport, seconds, table)
    return table


def progress(iterable: Any = None, what: str = "", total: int | None = None) -> Any:
    """A tqdm progress bar on stderr (the bench's tables stay on stdout), or none when stderr is
    not a terminal; ``with progress(total=n) as bar: bar.update()`` or ``for x in progress(xs)``."""
    from tqdm import tqdm

    return tqdm(iterable, desc=what, total=total, file=sys.stderr, disable=not sys.stderr.isatty(), leave=False)


# -- readdir --------------------------------------------------------------------------------------


def _local_dir(root: Path, files: int) -> Path:
    """A directory of ``files`` empty files, made once per bench run."""
    where = root / f"dir{files}"
    if not where.exists():
        where.mkdir()
        fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i in progress(range(files), f"making {files} files"):
                os.close(os.open(f"ReadDirFile{i}", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
        finally:
            os.close(fd)
    return where


@contextlib.contextmanager
def readdir_export() -> Iterator[Path]:
    """The host directory ``bench readdir``'s local directories are made in, once for a whole run:
    every variant and round lists the same files (100,000 of them took minutes to make here, for
    each variant and round, before), and nothing of it is left afterwards."""
    export = Path(tempfile.mkdtemp(prefix="v9p-bench-readdir-"))
    try:
        yield export
    finally:
        shutil.rmtree(export, ignore_errors=True)


def readdir_table(
    variant: Variant,
    sizes: Sequence[int],
    msizes: Sequence[int],
    runs: int,
    counts: Sequence[int],
    export: Path | None = None,
) -> Table:
    """One variant's Treaddir rows; the local directories in ``export`` (see :func:`readdir_export`:
    made there if missing), or in a directory of its own, removed after."""
    if export is None:
        with readdir_export() as own:
            return readdir_table(variant, sizes, msizes, runs, counts, own)
    table = Table(
        "Treaddir",
        ["backend", "files", "msize", "count"],
        ["Treaddir/listing", "server min ms", "server median ms", "server mean ms", "server p95 ms", "server max ms",
         "client median ms", "harness median ms", *CPU_COLUMNS],
        compare="server median ms",
    )  # fmt: skip
    binary = variant.binary
    places: list[tuple[str, FsConfig, list[str], int]] = [("synth", SynthFs(), ["ReadDirDir"], 100)]
    places += [("local", variant.local(export), [_local_dir(export, n).name], n) for n in sizes]
    # per msize: the whole listing (count = msize - 11), then the split counts below it
    splits = {m: [m - wire.RREADDIR_HEADER, *(c for c in counts if c < m - wire.RREADDIR_HEADER)] for m in msizes}
    total = len(places) * sum(map(len, splits.values()))
    with progress(total=total, what=f"Treaddir rows on {binary.name}") as bar:
        for backend, fs, path, files in places:
            with connect(machine_config(variant, fs), msize=None) as conn:
                for msize, count in ((m, c) for m in msizes for c in splits[m]):
                    cpu = CpuSplit(conn.machine)
                    with cpu.measuring():
                        measured = _readdir_runs(conn, path, msize, count, runs)
                    table.rows.append((backend, files, msize, count, *measured, *cpu.cells()))
                    bar.update()
    return table


def _readdir_runs(conn: Connection, path: list[str], msize: int, count: int, runs: int) -> tuple[Any, ...]:
    session = conn.session
    session.version(msize)
    session.attach(0)
    server: list[float] = []
    client: list[float] = []
    requests = 0
    for run in range(runs + 2):  # two warm-up listings
        fid = session.walk_fid(0, path)
        session.lopen(fid, os.O_DIRECTORY)
        offset, listing, listing_server, start = 0, 0, 0.0, time.perf_counter()
        while True:
            reply = session.send(Treaddir(fid=fid, offset=offset, count=count)).wait()
            entries = reply.message.entries if isinstance(reply.message, Rreaddir) else []
            listing_server += reply.server_seconds
            listing += 1
            if not entries:
                break
            offset = entries[-1].offset
        if run >= 2:  # one sample per whole listing, as the original benchmark timed a directory read
            server.append(listing_server)
            client.append(time.perf_counter() - start)
        requests = listing
        session.clunk(fid)
    session.clunk(0)
    s_min, s_med, s_mean, s_p95 = stats(server)
    c_med = statistics.median(client)
    ms = [round(v * 1000, 3) for v in (s_min, s_med, s_mean, s_p95, max(server), c_med, c_med - s_med)]
    return (requests, *ms)


# -- io -------------------------------------------------------------------------------------------

#: The file's bytes repeat with this period, which no chunk size divides: data written at a wrong
#: offset, or read from one, does not match.
PERIOD = (8 << 20) + 4093
#: Bytes of every resident Tread reply compared with the file, twice: at a position that moves and
#: at the reply's end.
SAMPLE = 64


#: ``bench io``'s data paths: resident payloads in one descriptor, resident payloads in 4 KiB
#: pages (a descriptor each, in an indirect table: how Linux's client hands over its page cache),
#: and payloads copied into and out of guest memory with every request, as the cases move them.
IO_PATHS = ("resident", "resident, 4 KiB pages", "copied")
PAGED = ChainLayout(indirect=True)


@dataclass
class IoPath:
    """Where ``bench io``'s payloads live (:data:`IO_PATHS`): ``resident`` in guest memory,
    written once as a guest's page cache holds them, so only headers move per request (``paged``:
    in 4 KiB descriptors), or copied per request."""

    conn: Connection
    pattern: bytes  # two periods, so any chunk at any offset is one slice
    resident: bool
    paged: bool = False

    def expected(self, offset: int, length: int) -> bytes:
        return self.pattern[offset % PERIOD : offset % PERIOD + length]

    def region(self, addr: int, length: int) -> Regions:
        """The payload at ``addr``: one buffer, or its 4 KiB pages."""
        if not self.paged:
            return Buffer(addr, length)
        return [Buffer(addr + at, min(PAGE, length - at)) for at in range(0, length, PAGE)]

    @property
    def layout(self) -> ChainLayout | None:
        return PAGED if self.paged else None


def io_table(variant: Variant, size: int, msizes: Sequence[int], paths: Sequence[str] = IO_PATHS[:2]) -> Table:
    table = Table(
        "Twrite then Tread of one file",
        ["data path", "msize"],
        [
            "msize used",
            "MiB",
            "write MB/s",
            "read MB/s",
            "wall s",
            "server s",
            "harness transfer s",
            "transfer share",
            *CPU_COLUMNS,
        ],
        compare="read MB/s",
        also=["msize used", "write MB/s"],
    )
    period = random.Random(9).randbytes(PERIOD)
    export = Path(tempfile.mkdtemp(prefix="v9p-bench-io-"))
    try:
        with connect(machine_config(variant, variant.local(export)), msize=None) as conn:
            for path in paths:
                io = IoPath(conn, period * 2, path != "copied", paged="pages" in path)
                for msize in msizes:
                    table.rows.append((path, msize, *_io_run(io, export, size, msize)))
    finally:
        shutil.rmtree(export, ignore_errors=True)
    return table


def _io_run(io: IoPath, export: Path, size: int, msize: int) -> tuple[Any, ...]:
    session, channel, driver = io.conn.session, io.conn.channel, io.conn.driver
    # What the transfers use: the msize asked for, capped, as Linux's client caps it, to what a
    # chain of pages can carry, then to what the server grants. Sized from the msize asked for,
    # payloads went past 10.0.13's grant, and on 7.2.22, which grants 8 MiB, a chain of 8 MiB in
    # pages was longer than QEMU maps: either stopped the device.
    offered = min(msize, VIRTIO_MSIZE_LIMIT) if io.paged else msize
    used = min(offered, session.version(offered).msize)
    session.attach(0)
    chunk = used - wire.IOHDRSZ
    fid = session.walk_fid(0, [])
    session.lcreate(fid, f"io-{msize}", os.O_RDWR | os.O_TRUNC, 0o600)
    _lay_out(export / f"io-{msize}", size)
    source = driver.allocator.alloc(PERIOD + chunk) if io.resident else 0
    sink = driver.allocator.alloc(chunk) if io.resident else 0
    try:
        if io.resident:  # set-up, outside the timed part: the file's bytes into guest memory once
            driver.mem.memwrite(source, io.pattern[: PERIOD + chunk])
        offsets = [(offset, min(chunk, size - offset)) for offset in range(0, size, chunk)]
        transfer_before = channel.transfer_seconds
        cpu = CpuSplit(io.conn.machine)  # over the timed writes and reads only
        start = time.perf_counter()
        with cpu.measuring():
            server = sum(_io_write(io, fid, offset, length, source) for offset, length in offsets)
        wrote = time.perf_counter()
        _check_file(io, export / f"io-{msize}", size)  # not timed
        read_start = time.perf_counter()
        with cpu.measuring():
            server += sum(_io_read(io, fid, offset, length, sink) for offset, length in offsets)
        done = time.perf_counter()
        transfer = channel.transfer_seconds - transfer_before
    finally:
        for block in (source, sink):
            if block:
                driver.allocator.free(block)
    session.clunk(fid)
    session.clunk(0)
    (export / f"io-{msize}").unlink()
    mb, wall = size / 1e6, (wrote - start) + (done - read_start)
    return (used, round(size / 2**20, 1), round(mb / (wrote - start), 1), round(mb / (done - read_start), 1),
            round(wall, 3), round(server, 3), round(transfer, 3), f"{transfer / wall:.0%}", *cpu.cells())  # fmt: skip


def _io_write(io: IoPath, fid: int, offset: int, length: int, source: int) -> float:
    session = io.conn.session
    if io.resident:
        region = io.region(source + offset % PERIOD, length)
        pending = session.send_resident(Twrite(fid=fid, offset=offset, data=b""), region, layout=io.layout)
    else:
        pending = session.send(Twrite(fid=fid, offset=offset, data=io.expected(offset, length)))
    written = pending.result().count
    if written != length:
        raise HarnessError(f"Twrite of {length} bytes at {offset} wrote {written}")
    return pending.wait().server_seconds


def _io_read(io: IoPath, fid: int, offset: int, length: int, sink: int) -> float:
    session = io.conn.session
    if not io.resident:
        pending = session.send(Tread(fid=fid, offset=offset, count=length))
        if bytes(pending.result().data) != io.expected(offset, length):
            raise HarnessError(f"Tread of {length} bytes at {offset}: the bytes differ from those written")
        return pending.wait().server_seconds
    request = Tread(fid=fid, offset=offset, count=length)
    pending = session.send_resident(request, io.region(sink, length), layout=io.layout)
    pending.result()
    returned = pending.wait().used_len - wire.RREAD_HEADER
    if returned != length:
        raise HarnessError(f"Tread of {length} bytes at {offset} returned {returned}")
    # SAMPLE bytes at a position that moves from reply to reply, and the reply's last SAMPLE bytes
    spans = [
        (offset // 7 % max(1, length - SAMPLE), min(SAMPLE, length)),
        (max(0, length - SAMPLE), min(SAMPLE, length)),
    ]
    started = time.perf_counter()
    got = io.conn.driver.mem.memread_many([(sink + at, n) for at, n in spans])
    io.conn.channel.transfer_seconds += time.perf_counter() - started
    if got != [io.expected(offset + at, n) for at, n in spans]:
        raise HarnessError(f"Tread of {length} bytes at {offset}: bytes differ from those written")
    return pending.wait().server_seconds


def _lay_out(path: Path, size: int) -> None:
    """Write the file once on the host, untimed, as fio lays out its files: the timed Twrites then
    overwrite pages the host's page cache already holds, and measure the server, not the host's
    page allocation (which made a 4 MiB write 0.5-2.7 GB/s from run to run)."""
    zeros = bytes(8 << 20)
    with path.open("r+b") as file:
        for offset in range(0, size, len(zeros)):
            file.write(zeros[: min(len(zeros), size - offset)])


def _check_file(io: IoPath, path: Path, size: int) -> None:
    """The host file holds what was written, byte for byte (not timed)."""
    with path.open("rb") as file:
        for offset in range(0, size, PERIOD):
            if file.read(PERIOD) != io.expected(offset, min(PERIOD, size - offset)):
                raise HarnessError(f"{path}: the bytes written through 9P differ near offset {offset}")


# -- presenting ------------------------------------------------------------------------------------


def merged(rounds: list[Table]) -> Table:
    """One table from several rounds of the same bench: each numeric cell the median of its rounds."""
    first = rounds[0]
    table = Table(first.title, first.keys, first.values, compare=first.compare, also=first.also)
    for index, row in enumerate(first.rows):
        cells = list(row)
        for col in range(len(first.keys), len(row)):
            samples = [t.rows[index][col] for t in rounds]
            if all(isinstance(v, int | float) for v in samples):
                middle = statistics.median(samples)
                cells[col] = round(middle, 3) if isinstance(middle, float) else middle
        table.rows.append(tuple(cells))
    return table


def _spread(rounds: list[Table], index: int) -> tuple[Any, Any, Any]:
    """min, median and max over the rounds of row ``index``'s compared value."""
    at = len(rounds[0].keys) + rounds[0].values.index(rounds[0].compare)
    samples = [t.rows[index][at] for t in rounds]
    return min(samples), statistics.median(samples), max(samples)


def comparison(results: dict[Variant, list[Table]]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Headers and rows: per variant the compared value's median, min and max and the CPU split,
    then each variant's median over A's."""
    variants = list(results)
    first = results[variants[0]][0]
    letters = [chr(65 + i) for i in range(len(variants))]
    headers = list(first.keys)
    shown = [c for c in (*first.also, *CPU_COLUMNS) if c in first.values]
    for letter in letters:
        headers += [f"{letter} {first.compare}", f"{letter} min", f"{letter} max"]
        headers += [f"{letter} {column}" for column in shown]
    headers += [f"{letter}/A" for letter in letters[1:]]
    cpu_at = [len(first.keys) + first.values.index(c) for c in shown]
    rows = []
    for index, row in enumerate(first.rows):
        cells: list[Any] = list(row[: len(first.keys)])
        medians = []
        for variant in variants:
            low, middle, high = _spread(results[variant], index)
            medians.append(middle)
            whole = merged(results[variant]).rows[index]
            cells += [middle, low, high, *(whole[at] for at in cpu_at)]
        cells += [f"{m / medians[0]:.2f}" if medians[0] else "-" for m in medians[1:]]
        rows.append(tuple(cells))
    return headers, rows


def text(results: dict[Variant, list[Table]], labels: list[str], machine: str) -> str:
    """What a bench prints: a line naming the variants (``labels``), the rounds and the machine,
    then the table (one variant and round: its rows; one variant: medians with the compared
    value's spread; several: :func:`comparison`)."""
    variants = list(results)
    first = results[variants[0]][0]
    rounds = len(results[variants[0]])
    names = "; ".join(f"{chr(65 + i)} = {label}" for i, label in enumerate(labels))
    title = f"{first.title} — {names}; {rounds} round(s), interleaved; {machine}"
    if len(variants) == 1 and rounds == 1:
        return title + "\n" + tabulate(first.rows, headers=[*first.keys, *first.values], tablefmt="github")
    if len(variants) == 1:
        table = merged(results[variants[0]])
        spreads = [_spread(results[variants[0]], i) for i in range(len(table.rows))]
        headers = [*first.keys, *(f"{v} (median)" for v in first.values)]
        headers += [f"{first.compare} min", f"{first.compare} max"]
        rows = [(*row, low, high) for row, (low, _, high) in zip(table.rows, spreads, strict=True)]
        return title + "\n" + tabulate(rows, headers=headers, tablefmt="github")
    headers, rows = comparison(results)
    return title + "\n" + tabulate(rows, headers=headers, tablefmt="github")


def present(results: dict[Variant, list[Table]], json_path: str | None, plot_path: str | None) -> None:
    variants = list(results)
    first = results[variants[0]][0]
    labels = [v.label() for v in variants]
    machine = f"{os.cpu_count()} CPUs, {_load()}"
    print(text(results, labels, machine))
    if json_path:
        data = {
            "bench": first.title,
            "variants": [
                {"binary": str(v.binary), "guest_memory": v.guest_memory, "multidevs": v.multidevs} for v in variants
            ],
            "labels": labels,
            "qemu_versions": {str(v.binary): provision.probe_cached(v.binary).version for v in variants},
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "load": _load(),
            "machine": machine,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "table": {"keys": first.keys, "values": first.values, "compare": first.compare, "also": first.also},
            "columns": [*first.keys, *first.values],
            "rounds": [[[list(r) for r in t.rows] for t in results[v]] for v in variants],  # as "variants"
        }
        Path(json_path).write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {json_path}")
    if plot_path:
        plot([merged(results[v]) for v in variants], variants, Path(plot_path))
        print(f"wrote {plot_path}")
    _warn_of_steal()


def text_of_json(path: Path) -> str:
    """What the bench printed when it wrote ``path`` (``--json``): the docs quote this, and a
    self-test keeps them equal."""
    data = json.loads(path.read_text())
    shape = data["table"]
    results = {
        Variant(Path(v["binary"]), v["guest_memory"], slot, v.get("multidevs")): [
            Table(data["bench"], shape["keys"], shape["values"], [tuple(r) for r in rows], shape["compare"],
                  shape["also"])
            for rows in rounds
        ]
        for slot, (v, rounds) in enumerate(zip(data["variants"], data["rounds"], strict=True))
    }  # fmt: skip
    return text(results, data["labels"], data["machine"])


def _cpu_ticks() -> tuple[int, int] | None:
    """All CPUs' time so far and the part of it the hypervisor gave to other guests (steal), in
    ticks, from /proc/stat; None where there is no such file."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    ticks = [int(f) for f in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return sum(ticks), ticks[7]


#: /proc/stat when the bench began (this module is imported as a bench command starts)
_TICKS_AT_START = _cpu_ticks()


def _stolen() -> float | None:
    """The share of all CPU time the host took away since the bench began (steal); None where
    /proc/stat cannot say."""
    now = _cpu_ticks()
    if now is None or _TICKS_AT_START is None or now[0] <= _TICKS_AT_START[0]:
        return None
    return (now[1] - _TICKS_AT_START[1]) / (now[0] - _TICKS_AT_START[0])


def _load() -> str:
    """The machine's load when the bench ended: what else was running, roughly, and how much CPU
    time the host took away meanwhile. On a virtual machine that is the number to look at first: time
    stolen from QEMU or the harness lowers every rate by far more than a change of the server does."""
    one, five, _ = os.getloadavg()
    load = f"load average {one:.2f} (1 min), {five:.2f} (5 min)"
    stolen = _stolen()
    if stolen is not None:
        load += f", {100 * stolen:.0f}% of CPU time stolen by the host"
    idle = cpu_idle.state()
    return f"{load}, {idle}" if idle else load


#: Steal from this share of CPU time on makes a bench say that its figures are no verdict. A run
#: with 11% stolen measured the shared path's sequential load generator at 4,207/s, median of 3
#: rounds from 2,857 to 13,786, where a run with 2% stolen an hour before had 15,573 (13,550-16,802).
STEAL_WARNING = 0.05


def steal_warning() -> str | None:
    """What to tell the reader when the host took enough CPU time to make the figures its own."""
    stolen = _stolen()
    if stolen is None or stolen < STEAL_WARNING:
        return None
    return (
        f"warning: the host took {100 * stolen:.0f}% of this machine's CPU time during the bench (steal, "
        "/proc/stat). It falls on some rounds and variants more than on others, so these figures are no "
        "verdict: run again when the host is quieter."
    )


def _warn_of_steal() -> None:
    warning = steal_warning()
    if warning:
        print(warning, file=sys.stderr)


def plot(tables: list[Table], variants: list[Variant], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise HarnessError("--plot needs matplotlib: pip install -e '.[plot]' (make venv installs it)") from err
    first = tables[0]
    x_col = {"Treaddir": "files", "Twrite then Tread of one file": "msize"}.get(first.title, first.keys[0])
    columns = [*first.keys, *first.values]
    xi, yi = columns.index(x_col), columns.index(first.compare)
    figure, axes = plt.subplots(figsize=(7, 4))
    for variant, table in zip(variants, tables, strict=True):
        groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
        for row in table.rows:
            key = tuple(v for i, v in enumerate(row[: len(first.keys)]) if i != xi and columns[i] != "backend")
            groups.setdefault(key, []).append(row)
        for key, rows in groups.items():
            rows.sort(key=lambda r: r[xi])
            name = f"{provision.probe_cached(variant.binary).version} {variant.guest_memory}" + (
                f" {dict(zip([c for c in first.keys if c not in (x_col, 'backend')], key, strict=False))}"
                if key
                else ""
            )
            axes.plot([r[xi] for r in rows], [r[yi] for r in rows], marker="o", label=name)
    axes.set_xscale("log")
    axes.set_xlabel(x_col)
    axes.set_ylabel(first.compare)
    axes.set_title(first.title)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


# -- suite: ours against QEMU's qos-test ----------------------------------------------------------


def _timed(argv: list[str], env: dict[str, str] | None = None, cwd: Path = PROJECT) -> tuple[float, str, int]:
    start = time.perf_counter()
    run = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=600)
    return time.perf_counter() - start, run.stdout + run.stderr, run.returncode


def _passed(runner: str, output: str) -> int:
    if runner == "qos-test":
        return len(re.findall(r"^ok ", output, flags=re.MULTILINE))
    found = re.search(r"(\d+) passed", output)
    return int(found.group(1)) if found else 0


#: ``bench suite``'s row of ``python -c "import pytest"``, in the same environment as our runs.
PYTEST_FLOOR = "pytest's import alone"


def bench_suite(explicit: str | None, rounds: int, json_path: str | None = None) -> int:
    """QEMU 7.2's 27 cases (the ones every supported version has): our whole pytest process against
    QEMU's qos-test running just those, same binary, same run."""
    binary, _ = provision.find_qemu(explicit)
    qos_test = provision.qos_test_for(binary)
    if qos_test is None:
        raise ProvisionError(f"no qos-test beside {binary}: `python -m harness qemu build` builds it beside every QEMU")
    wrapper = firmware_wrapper(binary)
    only = [arg for name in QEMU_72_CASES for arg in ("-p", f"{QOS_PREFIX}/{name}")]
    names = " or ".join(f"{name}]" for name in QEMU_72_CASES)  # the ids end in the path
    pytest = [sys.executable, "-m", "pytest", "cases/", "-q", "--qemu-binary", str(binary), "--qemu-suite", "-k", names]
    # as `make conformance` runs it: bytecode cached outside the tree (see the Makefile)
    ours = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    ours["PYTHONPYCACHEPREFIX"] = str(provision.cache_root() / "pycache")
    qtest_path = ["--guest-memory", "qtest"]
    runners = {
        "qos-test (QEMU's C suite)": ([str(qos_test), "-m", "slow", *only],
                                      {**os.environ, "QTEST_QEMU_BINARY": str(wrapper)}),
        "ours, pytest": (pytest, ours),
        "ours, pytest -n 2": ([*pytest, "-n", "2"], ours),
        "ours, pytest, qtest path": ([*pytest, *qtest_path], ours),
        "ours, pytest -n 2, qtest path": ([*pytest, "-n", "2", *qtest_path], ours),
        # No pytest run is quicker than pytest's own import: the floor under every row above.
        PYTEST_FLOOR: ([sys.executable, "-c", "import pytest"], ours),
    }  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in runners}
    try:
        _timed([*pytest, "--co"], ours)  # fills the bytecode cache, as any earlier run would have
        for _ in range(rounds):
            for name, (argv, env) in runners.items():
                # qos-test makes its local export (qtest-9p-local-XXXXXX) in its working directory
                # and may leave it there: never in the checkout.
                seconds, output, status = _timed(argv, env, wrapper.parent if name.startswith("qos") else PROJECT)
                passed = _passed("qos-test" if name.startswith("qos") else "pytest", output)
                wanted = 0 if name == PYTEST_FLOOR else len(QEMU_72_CASES)
                if status != 0 or passed != wanted:
                    raise HarnessError(f"{name}: exit {status}, {passed} of {wanted} passed:\n{output[-3000:]}")
                times[name].append(seconds)
    finally:
        shutil.rmtree(wrapper.parent, ignore_errors=True)
    title = f"QEMU's 27 virtio-9p cases on {_home(binary)}, {rounds} rounds each, interleaved; whole-process wall time"
    data = {"title": f"{title}; {_load()}", "baseline": "qos-test (QEMU's C suite)", "times": times,
            "outcomes": {name: "no case" if name == PYTEST_FLOOR else f"{len(QEMU_72_CASES)} passed"
                         for name in times}}  # fmt: skip
    return _suite_report(data, json_path)


def _suite_report(data: dict[str, Any], json_path: str | None) -> int:
    print(suite_text(data))
    if json_path:
        Path(json_path).write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {json_path}")
    _warn_of_steal()
    return 0


def suite_text(data: dict[str, Any]) -> str:
    """``bench suite``'s table from its measurements (``--json`` keeps them: the docs quote this).
    The whole suite's also says where the CPU time went: the harness's pytest processes against
    QEMU (and any other program the cases ran), medians over the rounds."""
    times: dict[str, list[float]] = data["times"]
    # (harness, QEMU) CPU seconds per runner, medians over the rounds
    cpu = {
        name: tuple(statistics.median(column) for column in zip(*rounds, strict=True))
        for name, rounds in data.get("cpu", {}).items()
    }
    theirs = statistics.median(times[data["baseline"]])
    rows = [
        [name, data["outcomes"][name], f"{min(t):.3f}", f"{statistics.median(t):.3f}", f"{max(t):.3f}",
         f"{statistics.median(t) / theirs:.2f}", *(f"{seconds:.1f}" for seconds in cpu.get(name, ()))]
        for name, t in times.items()
    ]  # fmt: skip
    headers = ["runner", "outcome", "min s", "median s", "max s", f"median / {data['baseline']}"]
    headers += ["harness CPU s", "QEMU CPU s"] if cpu else []
    text = f"{data['title']}\n{tabulate(rows, headers=headers, tablefmt='github')}"
    return text + _cpu_bound(cpu) if set(cpu) == {"shared", "qtest"} else text


def _cpu_bound(cpu: dict[str, tuple[float, ...]]) -> str:
    """What the whole suite's CPU times say of the two paths' ratio. A run of two workers on two
    cores is CPU-bound, so the ratio of CPU times is near that of wall times; and if the harness's
    work the two paths share cost nothing, what would be left is QEMU's CPU time on each, plus on
    the qtest path the harness's cost of its qtest exchanges (the difference of the harness's
    times): while QEMU's work stays what it is, no change to the harness gets below that ratio."""
    harness, qemu = ({mode: spent[at] for mode, spent in cpu.items()} for at in (0, 1))
    total = {mode: harness[mode] + qemu[mode] for mode in cpu}
    floor = qemu["shared"] / (qemu["qtest"] + max(0.0, harness["qtest"] - harness["shared"]))
    return (
        f"\nCPU time, shared / qtest: {total['shared'] / total['qtest']:.2f}; with the harness's work common to both "
        f"paths taken out (QEMU's time on each, and what the qtest path costs the harness on top): {floor:.2f}"
    )


def _home(path: Path) -> str:
    """``path`` with the home directory as ``~``: the same on every machine's docs."""
    return str(path).replace(str(Path.home()), "~", 1)


#: The summary's line of where the CPU time went (fixtures/plugin.py, ``cpu_line``).
SUITE_CPU = r"CPU time over [\d.]+ s: (?P<harness>[\d.]+) s in the harness .*?, (?P<qemu>[\d.]+) s in QEMU"


def bench_whole_suite(explicit: str | None, rounds: int, json_path: str | None = None, workers: int = 2) -> int:
    """The whole conformance suite (``pytest cases/ -n 2``) on both guest-memory paths, same
    binary, interleaved: wall time and outcome counts, which must agree."""
    binary, _ = provision.find_qemu(explicit)
    pytest = [sys.executable, "-m", "pytest", "cases/", "-q", "-p", "no:cacheprovider", "-n", str(workers)]
    pytest += ["--qemu-binary", str(binary)]
    ours = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    ours["PYTHONPYCACHEPREFIX"] = str(provision.cache_root() / "pycache")
    times: dict[str, list[float]] = {"shared": [], "qtest": []}
    cpu: dict[str, list[list[float]]] = {mode: [] for mode in times}
    outcomes: dict[str, str] = {}
    for _ in range(rounds):
        for mode in times:
            seconds, output, status = _timed([*pytest, "--guest-memory", mode], ours)
            summary = re.findall(r"^=* ?(\d+ passed.*?)(?: in [\d.]+s.*)?=*$", output, flags=re.MULTILINE)
            spent = re.search(SUITE_CPU, output)  # the summary's CPU line (fixtures/plugin.py, cpu_line)
            if status != 0 or not summary or not spent:
                raise HarnessError(f"whole suite, guest memory {mode}: exit {status}:\n{output[-3000:]}")
            outcomes[mode] = summary[-1].strip()
            times[mode].append(seconds)
            cpu[mode].append([float(spent["harness"]), float(spent["qemu"])])
    passed = {mode: outcome.split(" passed")[0] for mode, outcome in outcomes.items()}
    if passed["shared"] != passed["qtest"]:  # xfailed/xpassed may differ: races show when they will
        raise HarnessError(f"the two paths disagree: shared {outcomes['shared']!r}, qtest {outcomes['qtest']!r}")
    title = f"the whole suite, -n {workers}, on {_home(binary)}, {rounds} round(s) each, interleaved; {_load()}"
    data = {"title": title, "baseline": "qtest", "times": times, "outcomes": outcomes, "cpu": cpu}
    return _suite_report(data, json_path)
