"""The benchmarks, one entry each: what ``python -m harness bench NAME`` takes and runs, and, for
those ``bench releases`` and ``bench bisect-step`` measure, how those two run it. cli.py builds
its ``bench`` commands from :data:`BENCHES`, releases.py and bisect.py take :func:`measures`; a
new benchmark is its module and one entry here.

The modules that measure are imported when a bench runs, not when the command line is parsed:
``python -m harness --help`` stays quick.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.p9 import wire
from harness.qemu.config import SECURITY_MODELS

if TYPE_CHECKING:
    from harness.tools.bench.report import Table
    from harness.tools.bench.variant import Variant


#: the rounds ``bench suite --whole --threshold`` (its speed guard, harness/tools/bench/suite.py) runs by
#: default: :func:`harness.tools.bench.report.decide` says how often that many rounds of one tree lie
#: apart by chance. Here, for the command line's help to name it without importing the bench.
GUARD_ROUNDS = 3


#: the columns of QEMU's CPU per request of readdir's and rtt's tables
QEMU_PER_LISTING = "QEMU CPU µs/listing"
QEMU_PER_OP = "QEMU CPU µs/op"


@dataclass(frozen=True)
class Settings:
    """How much each measure does in ``bench releases`` and ``bench bisect-step``: the full run,
    or ``--quick`` (a smoke test of the command)."""

    files: int = 2000
    msize: int = 256 << 10
    runs: int = 20
    io_mib: int = 64
    io_msize: int = 1 << 20
    seconds: float = 1.0
    depths: tuple[int, ...] = (1, 32)

    @classmethod
    def quick(cls) -> Settings:
        return cls(files=20, msize=8192, runs=2, io_mib=2, io_msize=8192, seconds=0.1, depths=(1,))


@dataclass(frozen=True)
class Measure:
    """A bench as ``bench releases`` and ``bench bisect-step`` run it: one table per binary from
    :class:`Settings`, and the column of QEMU's CPU per request."""

    name: str
    table: Callable[[Variant, Settings, Path], Table]
    #: the name of QEMU's CPU per request, and how a row gives it
    cpu: str
    cpu_of: Callable[[dict[str, Any]], float]
    #: a larger value of the compared column is better (a rate), not worse (a time)
    higher_is_better: bool


@dataclass(frozen=True)
class Bench:
    """``bench NAME``: its help line, its own options (beside the ones every bench takes: the
    binaries, rounds, --json, --plot), the table of one variant from those options, whether it
    lists the local directories readdir makes (``export``), and its :class:`Measure`, if releases
    and bisect-step take it."""

    name: str
    help: str
    options: Callable[[argparse.ArgumentParser], None]
    table: Callable[[argparse.Namespace, Variant, Path | None], Table]
    export: bool = False
    measure: Measure | None = None


def _many(parser: argparse.ArgumentParser, flag: str, what: str) -> None:
    """``--files 100 200``, or ``--files 100 --files 200``: several values either way."""
    parser.add_argument(flag, type=int, nargs="+", action="extend", help=what)


def _multidevs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--multidevs", choices=("warn", "remap", "forbid"), action="append",
        help="the local export's multidevs option (default: the binary's own); repeat to compare, interleaved",
    )  # fmt: skip


def _security_model(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--security-model", choices=SECURITY_MODELS, action="append",
        help="the local export's security model (default mapped-xattr); repeat to compare, interleaved",
    )  # fmt: skip


def _quick(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--quick", action="store_true", help=f"smoke mode: {what}")


# -- rtt -----------------------------------------------------------------------------------------


def _rtt_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transport", choices=("modern", "legacy"), default="modern")
    parser.add_argument("--seconds", type=float, default=2.0, help="time spent on each measurement")


def _rtt(args: argparse.Namespace, variant: Variant, export: Path | None) -> Table:
    from harness.tools.bench.rtt import rtt_table

    return rtt_table(variant, args.transport, args.seconds)


def _rtt_measure(variant: Variant, settings: Settings, export: Path) -> Table:
    from harness.tools.bench.rtt import rtt_table

    return rtt_table(variant, "modern", settings.seconds, settings.depths, client_rows=False)


# -- readdir -------------------------------------------------------------------------------------


def _readdir_options(parser: argparse.ArgumentParser) -> None:
    _multidevs(parser)
    _security_model(parser)
    _many(parser, "--files", "local directory sizes (default 100 1000 10000 100000)")
    _many(parser, "--msize", "msize values (default 8192 1048576)")
    _many(parser, "--count", "split counts besides msize - 11 (default 2048: a listing in parts)")
    parser.add_argument("--runs", type=int, default=20, help="listings measured per row (after 2 warm-ups)")
    parser.add_argument("--version", choices=(wire.DOTL, wire.DOTU), default=wire.DOTL,
                        help="the dialect: 9P2000.L lists with Treaddir (default), 9P2000.u with Tread of the "
                        "open directory, whose server stats each entry (local directories only)")  # fmt: skip
    _quick(parser, "tiny directories, 2 runs")


def _readdir(args: argparse.Namespace, variant: Variant, export: Path | None) -> Table:
    from harness.tools.bench.readdir import readdir_table

    sizes = args.files or ([20, 200] if args.quick else [100, 1000, 10000, 100000])  # given sizes win
    msizes = args.msize or ([8192] if args.quick else [8192, 1 << 20])
    return readdir_table(variant, sizes, msizes, 2 if args.quick else args.runs, args.count or [2048], export,
                         args.version)  # fmt: skip


def _readdir_measure(variant: Variant, settings: Settings, export: Path) -> Table:
    from harness.tools.bench.readdir import readdir_table

    # synth's 100 entries and a local directory, each listed whole: count = msize - 11
    return readdir_table(variant, [settings.files], [settings.msize], settings.runs, [], export)


# -- io ------------------------------------------------------------------------------------------


def _io_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", type=int, default=256, help="file size in MiB (default 256)")
    _multidevs(parser)
    _many(parser, "--msize", "msize values (default 8 KiB … 4,186,112)")
    _quick(parser, "2 MiB, two msizes")
    parser.add_argument(
        "--copied", "--through-qtest", action="store_true",
        help="also copy every payload into and out of guest memory per request, as the cases do, besides the "
        "default resident payloads (written into guest memory once, in one descriptor and in 4 KiB pages)",
    )  # fmt: skip


def _io(args: argparse.Namespace, variant: Variant, export: Path | None) -> Table:
    from harness.p9.channel import VIRTIO_MSIZE_LIMIT as largest
    from harness.tools.bench.io import IO_PATHS, io_table

    msizes = args.msize or ([8192, 1 << 20] if args.quick else [8192, 128 << 10, 512 << 10, 1 << 20, 2 << 20, largest])
    paths = list(IO_PATHS if args.copied or args.quick else IO_PATHS[:2])
    return io_table(variant, (2 if args.quick else args.size) << 20, msizes, paths)


def _io_measure(variant: Variant, settings: Settings, export: Path) -> Table:
    from harness.tools.bench.io import io_table

    return io_table(variant, settings.io_mib << 20, [settings.io_msize], ["resident"])


def _io_cpu(row: dict[str, Any]) -> float:
    """QEMU's CPU µs per MiB moved (written, then read), from its share of the row's wall time."""
    return round(float(row["QEMU CPU %"]) / 100 * float(row["wall s"]) * 1e6 / (2 * float(row["MiB"])), 1)


# -- lock ----------------------------------------------------------------------------------------


def _lock_options(parser: argparse.ArgumentParser) -> None:
    _multidevs(parser)
    _many(parser, "--files", "local directory sizes (default 2000 100000)")
    parser.add_argument("--msize", type=int, default=262144, help="msize; the listing asks for msize - 11 (256 KiB)")
    parser.add_argument("--runs", type=int, default=10, help="renames measured per row (after 2 warm-ups)")
    _quick(parser, "20 files, 2 runs")


def _lock(args: argparse.Namespace, variant: Variant, export: Path | None) -> Table:
    from harness.tools.bench.lock import lock_table

    assert export is not None
    sizes = args.files or ([20] if args.quick else [2000, 100000])
    return lock_table(variant, sizes, args.msize, 2 if args.quick else args.runs, export)


# -- guest ---------------------------------------------------------------------------------------


def _guest_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kernel", action="append", help="6.1, 6.12, a package or an image; repeat (default 6.1 6.12)")
    parser.add_argument("--cache", action="append", help="v9fs cache modes; repeat (default none loose mmap)")
    _many(parser, "--msize", "msize values (default 131072 524288 1048576 4194304)")
    parser.add_argument("--files", type=int, help="the workload's files (default 1000; listing: 2000)")
    parser.add_argument(
        "--workload", choices=("build", "listing"), default="build",
        help="build: small files made, archived, read, copied, removed (per msize); listing: ls, ls -l and find "
        "of one large directory made on the host",
    )  # fmt: skip
    _multidevs(parser)
    _security_model(parser)
    _quick(parser, "kernel 6.1, cache=none, one msize, 100 files")


def _guest(args: argparse.Namespace, variant: Variant, export: Path | None) -> Table:
    from harness.tools.bench.guest import guest_table, listing_table

    kernels_wanted = ["6.1"] if args.quick else args.kernel or ["6.1", "6.12"]
    caches = ["none"] if args.quick else args.cache or ["none", "loose", "mmap"]
    if args.workload == "listing":
        return listing_table(variant, kernels_wanted, caches, 100 if args.quick else args.files or 2000)
    if args.quick:
        return guest_table(variant, kernels_wanted, caches, [131072], 100)
    msizes = args.msize or [131072, 512 << 10, 1 << 20, 4 << 20]
    return guest_table(variant, kernels_wanted, caches, msizes, args.files or 1000)


#: the benches, in the order ``bench releases`` prints those it measures
BENCHES = (
    Bench("readdir", "Treaddir latency on synth and on large local directories", _readdir_options, _readdir,
          export=True, measure=Measure("readdir", _readdir_measure, QEMU_PER_LISTING,
                                       lambda row: row[QEMU_PER_LISTING], higher_is_better=False)),
    Bench("io", "Twrite then Tread of a large file against msize", _io_options, _io,
          measure=Measure("io", _io_measure, "QEMU CPU µs/MiB", _io_cpu, higher_is_better=True)),
    Bench("rtt", "qtest and 9P round trips per second, 1/8/32/128 in flight", _rtt_options, _rtt,
          measure=Measure("rtt", _rtt_measure, QEMU_PER_OP, lambda row: row[QEMU_PER_OP], higher_is_better=True)),
    Bench("lock", "a Trenameat's latency alone and beside a Treaddir collecting entries", _lock_options, _lock,
          export=True),
    Bench("guest", "a Linux guest's boot, msize and a build-like workload on a v9fs mount", _guest_options, _guest),
)  # fmt: skip


def bench(name: str) -> Bench:
    return next(found for found in BENCHES if found.name == name)


def measures() -> tuple[Measure, ...]:
    """What ``bench releases`` and ``bench bisect-step`` measure, in the order releases prints them."""
    return tuple(found.measure for found in BENCHES if found.measure is not None)
