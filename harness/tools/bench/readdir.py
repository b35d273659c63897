"""``bench readdir``: Treaddir latency, a whole listing per sample, on synth's directory and on
local directories of any size, at count = msize - 11 and at split counts; in 9P2000.u, a Tread of
the open directory (its entries as stat records) in place of each Treaddir."""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.errors import HarnessError
from harness.p9 import wire
from harness.p9.messages import Rread, Rreaddir, Tread, Treaddir
from harness.qemu.config import FsConfig, SynthFs

#: QEMU's CPU time per whole listing: what a listing costs the server, however fast it was driven
from harness.tools.bench.registry import QEMU_PER_LISTING as QEMU_PER_LISTING
from harness.tools.bench.report import Row, Table, stats
from harness.tools.bench.variant import CPU_COLUMNS, CpuSplit, Variant, machine_config, progress
from harness.tools.connect import Connection, connect


def local_dir(root: Path, files: int) -> Path:
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
    dialect: str = wire.DOTL,
) -> Table:
    """One variant's Treaddir rows (in 9P2000.u: Tread of the open directory); the local
    directories in ``export`` (see :func:`readdir_export`: made there if missing), or in a
    directory of its own, removed after."""
    if export is None:
        with readdir_export() as own:
            return readdir_table(variant, sizes, msizes, runs, counts, own, dialect)
    request = _request_name(dialect)
    table = Table(
        request if dialect == wire.DOTL else f"{request} of a directory ({dialect})",
        ["backend", "files", "msize", "count"],
        [f"{request}/listing", "server min ms", "server median ms", "server mean ms", "server p95 ms", "server max ms",
         "client median ms", "harness median ms", QEMU_PER_LISTING, *CPU_COLUMNS],
        compare="server median ms",
    )  # fmt: skip
    binary = variant.binary
    # synth's directories list "." and "..", whose stat synth refuses: no 9P2000.u listing of one
    # ends (docs/known-bugs.md, synth-dot-names)
    places: list[tuple[str, FsConfig, list[str], int]] = [("synth", SynthFs(), ["ReadDirDir"], 100)]
    places = places if dialect == wire.DOTL else []
    places += [("local", variant.local(export), [local_dir(export, n).name], n) for n in sizes]
    # per msize: the whole listing (count = msize - 11), then the split counts below it
    splits = {m: [m - wire.RREADDIR_HEADER, *(c for c in counts if c < m - wire.RREADDIR_HEADER)] for m in msizes}
    total = len(places) * sum(map(len, splits.values()))
    with progress(total=total, what=f"{request} rows on {binary.name}") as bar:
        for backend, fs, path, files in places:
            with connect(machine_config(variant, fs), msize=None) as conn:
                for msize, count in ((m, c) for m in msizes for c in splits[m]):
                    cpu = CpuSplit(conn.machine)
                    with cpu.measuring():
                        measured = _readdir_runs(conn, path, msize, count, runs, dialect)
                    row = {"backend": backend, "files": files, "msize": msize, "count": count, **measured}
                    # the warm-up listings are in the measured stretch too: per listing of all of them
                    table.add({**row, QEMU_PER_LISTING: cpu.qemu_per_op(runs + 2), **cpu.columns()})
                    bar.update()
    return table


def _request_name(dialect: str) -> str:
    return "Treaddir" if dialect == wire.DOTL else "Tread"


def _readdir_runs(conn: Connection, path: list[str], msize: int, count: int, runs: int, dialect: str) -> Row:
    session = conn.session
    session.version(msize, dialect)
    session.attach(0)
    server: list[float] = []
    client: list[float] = []
    requests = 0
    for run in range(runs + 2):  # two warm-up listings
        fid = session.walk_fid(0, path)
        if dialect == wire.DOTL:
            session.lopen(fid, os.O_DIRECTORY)
        else:
            session.open(fid, wire.OREAD)
        offset, listing, listing_server, start = 0, 0, 0.0, time.perf_counter()
        while True:
            listed = Treaddir if dialect == wire.DOTL else Tread
            reply = session.send(listed(fid=fid, offset=offset, count=count)).wait()
            message = reply.message
            if isinstance(message, Rreaddir):
                step = message.entries[-1].offset if message.entries else offset
            elif isinstance(message, Rread):  # a 9P2000.u directory's offset: the stat records' bytes so far
                step = offset + len(message.data)
            else:
                raise HarnessError(f"a listing of {'/'.join(path)} was refused: {message}")
            listing_server += reply.server_seconds
            listing += 1
            if step == offset:  # the listing's end: no entry more
                break
            offset = step
        if run >= 2:  # one sample per whole listing, as the original benchmark timed a directory read
            server.append(listing_server)
            client.append(time.perf_counter() - start)
        requests = listing
        session.clunk(fid)
    session.clunk(0)
    s_min, s_med, s_mean, s_p95 = stats(server)
    c_med = statistics.median(client)
    named = {"server min ms": s_min, "server median ms": s_med, "server mean ms": s_mean, "server p95 ms": s_p95,
             "server max ms": max(server), "client median ms": c_med, "harness median ms": c_med - s_med}  # fmt: skip
    rounded = {column: round(v * 1000, 3) for column, v in named.items()}
    return {f"{_request_name(dialect)}/listing": requests, **rounded}
