"""``bench io``: Twrite then Tread of one large file against msize, with the payloads resident in
guest memory (as a guest's page cache holds them) or copied per request; every byte checked."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError
from harness.p9 import wire
from harness.p9.channel import VIRTIO_MSIZE_LIMIT, ChainLayout
from harness.p9.messages import Tread, Twrite
from harness.tools.bench.report import Row, Table
from harness.tools.bench.variant import CPU_COLUMNS, CpuSplit, Variant, machine_config
from harness.tools.connect import Connection, connect
from harness.virtio.guestmem import PAGE, Regions
from harness.virtio.virtqueue import Buffer

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
    #: the harness's seconds reading resident replies' samples back from guest memory: transfer
    #: time the channel does not see (it never reads a resident payload)
    sampled: float = 0.0

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
                    table.add({"data path": path, "msize": msize, **_io_run(io, export, size, msize)})
    finally:
        shutil.rmtree(export, ignore_errors=True)
    return table


def _io_run(io: IoPath, export: Path, size: int, msize: int) -> Row:
    session, channel, driver = io.conn.session, io.conn.channel, io.conn.driver
    # What the transfers use: the msize asked for, capped, as Linux's client caps it, to what a
    # chain of pages can carry, then to what the server grants. Sized from the msize asked for,
    # payloads could exceed the server's grant, or (7.2 grants 8 MiB) make a chain of pages longer
    # than QEMU maps: either stops the device.
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
        transfer_before = channel.transfer_seconds + io.sampled  # the channel's, read, never written
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
        transfer = channel.transfer_seconds + io.sampled - transfer_before
    finally:
        for block in (source, sink):
            if block:
                driver.allocator.free(block)
    session.clunk(fid)
    session.clunk(0)
    (export / f"io-{msize}").unlink()
    mb, wall = size / 1e6, (wrote - start) + (done - read_start)
    return {
        "msize used": used,
        "MiB": round(size / 2**20, 1),
        "write MB/s": round(mb / (wrote - start), 1),
        "read MB/s": round(mb / (done - read_start), 1),
        "wall s": round(wall, 3),
        "server s": round(server, 3),
        "harness transfer s": round(transfer, 3),
        "transfer share": f"{transfer / wall:.0%}",
        **cpu.columns(),
    }


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
    io.sampled += time.perf_counter() - started
    if got != [io.expected(offset + at, n) for at, n in spans]:
        raise HarnessError(f"Tread of {length} bytes at {offset}: bytes differ from those written")
    return pending.wait().server_seconds


def _lay_out(path: Path, size: int) -> None:
    """Write the file once on the host, untimed, as fio lays out its files: the timed Twrites then
    overwrite pages the host's page cache already holds, and measure the server, not the host's
    page allocation (which varied a write's rate severalfold from run to run)."""
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
