"""``python -m harness``: provisioning, diagnosis and benchmarks.

python -m harness qemu build [ORIGIN]            build (once) and print the binary's path
python -m harness qemu path [ORIGIN]             print the binary the harness would use
python -m harness qemu list                      the builds in the cache
python -m harness doctor [--qemu-binary B]       what the harness sees, as a table
python -m harness guest [-- COMMAND]             run a command on a Linux guest's v9fs mount of the export
python -m harness bench readdir [--qemu B ...]    Treaddir latency, synth and large local directories
python -m harness bench io [--qemu B ...]         Twrite then Tread of a large file against msize
python -m harness bench rtt [--qemu B ...]        qtest and 9P round trips per second
python -m harness bench lock [--qemu B ...]       a Trenameat alone and beside a Treaddir collecting
python -m harness bench guest [--qemu B ...]      a Linux guest's boot, msize and a workload on its mount
python -m harness bench releases [--qemu B ...]   the registry's measures across QEMU releases, interleaved
python -m harness bench bisect-step ...           one `git bisect run` step over a speed change
python -m harness bench suite [--whole]           our pytest run against QEMU's qos-test
python -m harness profile [--quick]              where a whole -n 2 run's time goes, harness and QEMU
(the benches are harness/tools/bench/registry.py's entries; `bench NAME --help` for each)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, ProvisionError
from harness.qemu.config import SECURITY_MODELS


def _add_qemu(sub: Any) -> None:
    qemu = sub.add_parser("qemu", help="provision the QEMU under test")
    qemu_sub = qemu.add_subparsers(dest="action", required=True)
    origins = "bookworm (QEMU 7.2), trixie (QEMU 10.0, the default)"
    build = qemu_sub.add_parser("build", help="build a qtest-capable QEMU (with QEMU's qos-test) into the cache")
    which = build.add_mutually_exclusive_group()
    which.add_argument("origin", nargs="?", default=None, help=f"a Debian suite: {origins}")
    which.add_argument("--source", metavar="DIR|TARBALL", help="a QEMU source tree or tarball of your own")
    which.add_argument(
        "--git", metavar="REF", help="any commit of a QEMU git repository (a tag: v5.2.0), 5.1 on; see --repo"
    )
    build.add_argument(
        "--repo", metavar="DIR", default=os.environ.get("V9P_QEMU_GIT"),
        help="the QEMU git repository --git reads (default: $V9P_QEMU_GIT)",
    )  # fmt: skip
    kind = build.add_mutually_exclusive_group()
    kind.add_argument("--gcov", action="store_true", help="with coverage counters (configure --enable-gcov)")
    kind.add_argument(
        "--sanitize",
        metavar="KINDS",
        help="with sanitizers: address, undefined or address,undefined (ASan, UBSan); or thread (TSan)",
    )
    path = qemu_sub.add_parser("path", help="print the binary the harness would use (or the build of ORIGIN)")
    path.add_argument("origin", nargs="?", default=None, help=f"{origins}, or a source tree/tarball built before")
    qemu_sub.add_parser("list", help="the builds in the cache: origin, version, seconds, path")


def _add_doctor(sub: Any) -> None:
    doctor = sub.add_parser("doctor", help="print what the harness finds")
    doctor.add_argument("--qemu-binary")


def _add_bench(sub: Any) -> None:
    bench = sub.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="bench", required=True)

    def idle(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--allow-idle", action="store_true",
            help="let idle CPUs halt; by default the bench holds the CPU latency QoS at 0 (needs root) so that "
            "a wake-up of QEMU or of the harness does not wait for a CPU to leave its idle state",
        )  # fmt: skip

    def common(parser: argparse.ArgumentParser) -> None:
        idle(parser)
        parser.add_argument("--qemu", action="append", help="a binary to measure (repeat to compare: B/A per row)")
        parser.add_argument("--qemu-binary", help="the same as one --qemu")
        parser.add_argument(
            "--guest-memory", choices=("shared", "qtest", "both"),
            help="guest RAM shared with QEMU (default), through qtest, or both (compared, interleaved)",
        )  # fmt: skip
        parser.add_argument("--rounds", type=int, default=3, help="rounds per variant, interleaved (default 3)")
        parser.add_argument("--json", help="write the results, every round, to this file")
        parser.add_argument("--plot", help="draw the results into this PNG (needs matplotlib)")

    from harness.tools.bench.registry import BENCHES, GUARD_ROUNDS, measures

    for entry in BENCHES:  # each bench's own command: harness/tools/bench/registry.py
        parser = bench_sub.add_parser(entry.name, help=entry.help)
        common(parser)
        entry.options(parser)
    releases = bench_sub.add_parser(
        "releases",
        help=f"{', '.join(m.name for m in measures())} over several QEMUs (every cached build, or --qemu ...), "
        "interleaved",
    )
    idle(releases)
    releases.add_argument("--qemu", action="append", help="a binary to measure (repeat); default: every cached build")
    releases.add_argument("--rounds", type=int, default=3, help="rounds per binary, interleaved (default 3)")
    releases.add_argument("--quick", action="store_true", help="smoke mode: tiny directories and files, 1 round")
    releases.add_argument("--json", help="write the results, every round, to this file")
    releases.add_argument("--plot-dir", help="draw one PNG per measure into this directory (needs matplotlib)")
    releases.add_argument(
        "--from-json", metavar="F", help="measure nothing: print (and --plot-dir) a saved --json again"
    )
    step = bench_sub.add_parser(
        "bisect-step", help="one `git bisect run` step over a speed change: exit 0 same speed, 1 changed, 125 skip"
    )
    idle(step)
    step.add_argument("--qemu-binary", required=True, help="the build of the commit under test")
    step.add_argument("--reference", required=True, help="a build of the bisection's good end")
    step.add_argument("--measure", choices=[m.name for m in measures()], default=measures()[0].name)
    step.add_argument(
        "--row", required=True, nargs="+", help="the row, as `bench releases` names it: local 2000 262144 262133"
    )
    step.add_argument("--threshold", type=float, default=2.0, help="the factor that counts as changed (default 2)")
    step.add_argument("--when", choices=("slower", "faster"), default="slower", help="exit 1 when slower (default)")
    step.add_argument("--rounds", type=int, default=3, help="rounds of each binary, interleaved (default 3)")
    step.add_argument("--quick", action="store_true", help="smoke mode: the measure's quick settings")
    suite = bench_sub.add_parser("suite", help="QEMU's 27 cases: our pytest run against QEMU's qos-test")
    idle(suite)
    suite.add_argument("--qemu-binary")
    suite.add_argument(
        "--rounds", type=int,
        help=f"rounds per runner, interleaved (default 5; with --whole 1; with --threshold {GUARD_ROUNDS})",
    )  # fmt: skip
    suite.add_argument("--json", help="write the measurements to this file")
    suite.add_argument(
        "--whole", action="store_true",
        help="instead: the whole suite with -n 2 on the shared and the qtest path (default 1 round)",
    )  # fmt: skip
    suite.add_argument(
        "--baseline", metavar="REV",
        help="with --whole: this tree's harness against git revision REV's (main, HEAD~3), not the two paths",
    )  # fmt: skip
    suite.add_argument(
        "--threshold", type=float,
        help="with --whole --baseline: exit 1 when this tree's harness / QEMU is this factor (1 or more) of REV's "
        "or more and the rounds lie apart (bench bisect-step's rule; e.g. 1.1); 2 when the host's steal makes it no "
        "verdict",
    )  # fmt: skip


def _add_malformed_report(sub: Any) -> None:
    malformed = sub.add_parser("malformed-report", help="the malformed-request catalogue, run and tabulated")
    malformed.add_argument("--qemu-binary")
    malformed.add_argument("--transport", choices=("modern", "legacy"), default="modern")
    malformed.add_argument("--record", action="store_true", help="store the outcomes as this QEMU's expectations")


def _add_coverage(sub: Any) -> None:
    cov = sub.add_parser("coverage", help="line and branch coverage of hw/9pfs reached by a pytest selection")
    cov.add_argument("origin", nargs="?", default=None, help="the QEMU to build with gcov (default: trixie)")
    cov.add_argument("--html", metavar="DIR", help="write gcovr's HTML report into DIR")
    cov.add_argument("--diff", metavar="BASE", help="also: the lines `git diff BASE` touched in the QEMU source")
    cov.add_argument("--compare-qos-test", action="store_true", help="also run QEMU's C suite on the same build")
    cov.add_argument("selection", nargs="*", help="pytest arguments, after --: -- -n 2 -k readdir")


def _add_known_bugs(sub: Any) -> None:
    bugs = sub.add_parser("known-bugs", help="the known QEMU bugs the cases pin, and which versions have each")
    bugs.add_argument("--write", action="store_true", help="make docs/known-bugs.md anew")


def _add_replay(sub: Any) -> None:
    replay = sub.add_parser("replay", help="re-send a reproducer to a fresh QEMU; report the first difference")
    replay.add_argument("file")
    replay.add_argument("--qemu-binary")
    replay.add_argument(
        "--find-fix", action="store_true",
        help="swap 0 and 1 (bug present: 0), for git bisect start --term-old=broken --term-new=fixed",
    )  # fmt: skip
    replay.add_argument(
        "--attempts", type=int, metavar="N",
        help="a race's reproducer: fresh replays until the race shows (default: its header's)",
    )  # fmt: skip


def _add_profile(sub: Any) -> None:
    prof = sub.add_parser(
        "profile", help="where a whole -n 2 run's time goes: the harness's buckets, QEMU's phases, the costliest cases"
    )
    prof.add_argument("--qemu-binary")
    prof.add_argument("--quick", action="store_true", help="QEMU's own cases only (--qemu-suite): seconds")
    prof.add_argument("--rate", type=int, default=100, help="py-spy samples per second per thread (default 100)")
    prof.add_argument("--json", metavar="FILE", help="keep the measurements in FILE (docs/speed.md quotes one)")
    prof.add_argument("--baseline", metavar="REV", help="profile git revision REV's harness instead (the before)")
    prof.add_argument("selection", nargs=argparse.REMAINDER, help="more pytest arguments, e.g. -- -m walk")


def _add_matrix(sub: Any) -> None:
    matrix = sub.add_parser("matrix", help="the same cases against several QEMU binaries, differences first")
    matrix.add_argument("--qemu", action="append", default=[], help="a QEMU binary (give two or more)")
    matrix.add_argument("--builds", action="store_true", help="every build in the cache (python -m harness qemu list)")
    matrix.add_argument("--sanitized", action="store_true", help="with --builds: the sanitizer builds too (ASan, TSan)")
    matrix.add_argument("--json", metavar="FILE", help="keep the runs' table and every case's outcome in FILE")
    matrix.add_argument("selection", nargs=argparse.REMAINDER, help="pytest arguments, e.g. -k readdir")
    described = matrix.add_argument_group(
        "the described matrix (.ci/matrix.yml, which the GitLab pipeline .ci/gitlab-ci.yml reads too; docs/pipeline.md)"
    )
    described.add_argument("--described", metavar="NAME", help="run matrix NAME's cells here, one after another")
    described.add_argument("--root", default="v9p-matrix", help="where --described keeps each cell's directory")
    described.add_argument("--build-qemu", metavar="QEMU", help="a build job: build QEMU (a key of .v9p-qemus)")
    described.add_argument("--into", metavar="DIR", help="with --build-qemu: copy the build into DIR (an artifact)")
    described.add_argument(
        "--cell", nargs="+", metavar=("QEMU", "FAMILY"),
        help="a test job: QEMU FAMILY [FIRST:COUNT] (a hunt's rounds), on --binary, into --out",
    )  # fmt: skip
    described.add_argument("--binary", help="with --cell: the QEMU binary (a build job's artifact)")
    described.add_argument("--out", help="with --cell: where the cells' directories go (JUnit, results, artefacts)")
    described.add_argument(
        "--merge", metavar="DIR",
        help="the last job: merge the cells' directories under DIR (--described NAME: a row for each of its cells)",
    )  # fmt: skip


def _add_repl(sub: Any) -> None:
    repl = sub.add_parser("repl", help="an interactive 9P session on a fresh QEMU")
    repl.add_argument("--qemu-binary")
    repl.add_argument("--backend", choices=("synth", "local"), default="synth")
    repl.add_argument("--export", help="directory to export with --backend local (default: a new empty one)")
    repl.add_argument("--transport", choices=("modern", "legacy"), default="modern")


def _add_mount(sub: Any) -> None:
    mount = sub.add_parser("mount", help="mount the export through FUSE: programs on the host become 9P clients")
    mount.add_argument("mountpoint")
    mount.add_argument("--qemu-binary")
    mount.add_argument("--backend", choices=("local", "synth"), default="local")
    mount.add_argument("--export", help="the directory --backend local exports (default: a new empty one)")
    mount.add_argument("--security-model", choices=SECURITY_MODELS, default="passthrough")
    mount.add_argument("--msize", type=int, default=512 << 10, help="the msize asked for (default 512 KiB)")
    mount.add_argument(
        "--trace-dir",
        help="write the 9P conversation into DIR at the end (trace.txt, reproducer.9p); made at the start, "
        "and if it is gone by the end nothing is written",
    )
    mount.add_argument("--trace-limit", type=int, help="with --trace-dir: keep only the last N messages")


def _add_guest(sub: Any) -> None:
    from harness.tools.guest import add_arguments

    add_arguments(
        sub.add_parser("guest", help="boot a Linux guest on the QEMU under test; run a command on a v9fs mount")
    )


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand, one small function each (the tools themselves are imported when run:
    importing them all costs every ``python -m harness`` about a second)."""
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--guest-memory", dest="every_guest_memory", choices=("shared", "qtest"),
        help="the guest-memory path of every QEMU this command starts, pytest runs included (default: shared, "
        "or $V9P_GUEST_MEMORY); bench has its own, which can also compare both",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        _add_qemu,
        _add_doctor,
        _add_bench,
        _add_malformed_report,
        _add_coverage,
        _add_known_bugs,
        _add_replay,
        _add_matrix,
        _add_profile,
        _add_repl,
        _add_mount,
        _add_guest,
    ):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    selection = argv[argv.index("--") + 1 :] if "--" in argv else []  # pytest's own arguments, untouched
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if hasattr(args, "selection"):
        args.selection = [*args.selection, *selection]
    for signum in (signal.SIGTERM, signal.SIGHUP):  # as Ctrl-C: every QEMU stopped, its directory removed
        signal.signal(signum, _interrupt)
    if args.every_guest_memory:  # read by every machine configuration, and inherited by pytest runs
        from harness.qemu.config import GUEST_MEMORY_ENV

        os.environ[GUEST_MEMORY_ENV] = args.every_guest_memory
    try:
        return _dispatch(args)
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        print(f"interrupted ({stop or 'SIGINT'}): stopped, nothing left behind", file=sys.stderr)
        return 130


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _dispatch(args: argparse.Namespace) -> int:
    from harness.qemu import provision

    if args.command == "qemu":
        return _qemu(args)
    if args.command == "doctor":
        from harness.tools.doctor import doctor

        return doctor(args.qemu_binary)
    if args.command == "bench":
        from harness.qemu.cpu_idle import cpus_kept_awake

        with cpus_kept_awake(not args.allow_idle) as unheld:
            if unheld is not None and not args.allow_idle:
                print(f"bench: idle CPUs may halt ({unheld}): the figures include their wake-ups", file=sys.stderr)
            return _bench_kind(args)
    if args.command == "repl":
        from harness.tools.repl import repl as run_repl

        if args.export and args.backend != "local":
            raise HarnessError("--export names the directory of --backend local; the synth backend exports none")
        binary, _ = provision.find_qemu(args.qemu_binary)
        return run_repl(binary, args.backend, args.export, args.transport)
    if args.command == "mount":
        from harness.tools.mount import MountOptions, run

        if args.export and args.backend != "local":
            raise HarnessError("--export names the directory of --backend local; the synth backend exports none")
        binary, _ = provision.find_qemu(args.qemu_binary)
        options = MountOptions(
            Path(args.mountpoint), binary, args.backend, Path(args.export) if args.export else None,
            args.security_model, args.msize, Path(args.trace_dir) if args.trace_dir else None, args.trace_limit,
        )  # fmt: skip
        return run(options)
    if args.command == "guest":
        from harness.tools.guest import guest

        return guest(args)
    if args.command == "matrix" and (args.described or args.build_qemu or args.cell or args.merge):
        return _described_matrix(args)
    if args.command == "matrix":
        from harness.qemu import build, versions
        from harness.tools.matrix import matrix as run_matrix

        kept = ("", *build.SANITIZED) if args.sanitized else ("",)
        chosen = [b for b in build.builds(provision.cache_root()) if b.variant in kept]
        cached = sorted(chosen, key=lambda b: (versions.parse(b.version), kept.index(b.variant)))
        builds = [str(b.binary) for b in cached] if args.builds else []
        return run_matrix([*args.qemu, *builds], [arg for arg in args.selection if arg != "--"], json_path=args.json)
    if args.command == "profile":
        from harness.tools.profile import profile

        selection = [arg for arg in args.selection if arg != "--"]
        return profile(args.qemu_binary, args.quick, args.rate, args.json, selection, args.baseline)
    if args.command == "replay":
        from harness.tools.replay import replay as run_replay

        return run_replay(Path(args.file), args.qemu_binary, find_fix=args.find_fix, attempts=args.attempts)
    if args.command == "coverage":
        from harness.qemu import build
        from harness.tools.coverage import coverage

        selection = [arg for arg in args.selection if arg != "--"]
        return coverage(args.origin or build.DEFAULT_ORIGIN, selection, args.html, args.diff, args.compare_qos_test)
    if args.command == "known-bugs":
        from harness.tools.known_bugs import main as known_bugs

        return known_bugs(args.write)
    if args.command == "malformed-report":
        from harness.tools.malformed_report import report

        binary, _ = provision.find_qemu(args.qemu_binary)
        return report(binary, args.transport, args.record)
    raise AssertionError(args)


def _qemu(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from harness.qemu import build, provision

    if args.action == "build":
        variant = "gcov" if args.gcov else build.sanitize_variant(args.sanitize) if args.sanitize else ""
        if args.git and not args.repo:
            raise ProvisionError("--git needs a QEMU git repository: --repo DIR or $V9P_QEMU_GIT")
        origin = build.git_origin(Path(args.repo), args.git) if args.git else args.source or args.origin
        print(provision.build(origin or build.DEFAULT_ORIGIN, variant=variant))
        return 0
    if args.action == "path" and args.origin:
        binary = provision.cached_build(origin=args.origin)
        if binary is None:
            raise ProvisionError(f"no build of {args.origin} in the cache: python -m harness qemu build {args.origin}")
        print(binary)
        return 0
    if args.action == "path":
        binary, source = provision.find_qemu()
        print(f"{binary}  (from {source})")
        return 0
    rows = [
        (b.origin, b.version, b.variant or "-", b.seconds, "yes" if b.qos_test else "no", b.binary)
        for b in build.builds(provision.cache_root())
    ]
    print(tabulate(rows, headers=("origin", "QEMU", "variant", "build s", "qos-test", "binary"), tablefmt="github"))
    return 0


def _bench_kind(args: argparse.Namespace) -> int:
    if args.bench == "bisect-step":
        from harness.tools.bench.bisect import bisect_step
        from harness.tools.bench.report import check_threshold

        try:
            check_threshold(args.threshold)  # before any round is measured
            row = " ".join(args.row)  # quoted or not: a bisect's sh -c line is quoted already
            return bisect_step(Path(args.qemu_binary), Path(args.reference), args.measure, row, args.threshold,
                               max(2, args.rounds), args.when, args.quick)  # fmt: skip
        except HarnessError as err:  # 2 would read as "bad" to git bisect: 255 stops it instead
            print(f"error: {err} (exit 255: git bisect run stops)", file=sys.stderr)
            return 255
    if args.bench == "releases":
        from harness.qemu import provision
        from harness.tools.bench.releases import bench_releases, cached_releases, from_json

        if args.from_json:
            return from_json(Path(args.from_json), args.plot_dir)
        binaries = [provision.find_qemu(name)[0] for name in args.qemu or []] or cached_releases()
        return bench_releases(binaries, 1 if args.quick else args.rounds, args.quick, args.json, args.plot_dir)
    if args.bench == "suite":
        from harness.tools.bench.registry import GUARD_ROUNDS
        from harness.tools.bench.report import check_threshold
        from harness.tools.bench.suite import bench_suite, bench_whole_suite

        if args.whole:
            rounds = (1 if args.threshold is None else GUARD_ROUNDS) if args.rounds is None else args.rounds
            if rounds < 1:
                raise HarnessError(f"--rounds {rounds}: one round or more")
            if args.threshold is None:
                return bench_whole_suite(args.qemu_binary, rounds, args.json, baseline=args.baseline)
            if not args.baseline or rounds < 2:
                raise HarnessError("--threshold judges this tree against a --baseline, over 2 rounds or more")
            check_threshold(args.threshold)
            try:
                return bench_whole_suite(args.qemu_binary, rounds, args.json, baseline=args.baseline,
                                         threshold=args.threshold)  # fmt: skip
            except HarnessError:
                raise
            except Exception as err:  # the guard's 1 means slower and nothing else: what broke cannot judge (2)
                raise HarnessError(f"the speed guard could not judge: {type(err).__name__}: {err}") from err
        if args.baseline or args.threshold is not None:
            raise HarnessError("--baseline and --threshold compare whole suites: give --whole too")
        return bench_suite(args.qemu_binary, args.rounds or 5, args.json)
    return _bench(args)


def _described_matrix(args: argparse.Namespace) -> int:
    """``matrix --described/--build-qemu/--cell/--merge``: the matrix .ci/matrix.yml describes,
    run here or as the pipeline's jobs (harness/tools/pipeline.py)."""
    from harness.tools import pipeline

    description = pipeline.load()
    if args.build_qemu:
        print(pipeline.build_qemu(description, args.build_qemu, Path(args.into) if args.into else None))
        return 0
    if args.cell:
        if not 2 <= len(args.cell) <= 3 or not args.binary or not args.out:
            raise HarnessError("--cell QEMU FAMILY [FIRST:COUNT] needs --binary and --out")
        binary = Path(args.binary).resolve()
        cell = pipeline.Cell(*args.cell)
        out = Path(args.out).resolve()
        return pipeline.run_cell(description, cell, binary, out, pipeline.node_total(), artifact=True)
    if args.merge:
        expected = description.matrix(args.described) if args.described else None
        text, status, records = pipeline.merge(Path(args.merge), expected, pipeline.ci_pipeline())
        print(text)
        if args.json:
            Path(args.json).write_text(json.dumps(records, indent=1) + "\n")
        return status
    return pipeline.run_described(args.described, Path(args.root).resolve())


def _bench(args: argparse.Namespace) -> int:
    from harness.qemu import config as qemu_config
    from harness.qemu import provision
    from harness.tools.bench.readdir import readdir_export
    from harness.tools.bench.run import Run
    from harness.tools.bench.variant import Variant

    names = (args.qemu or []) + ([args.qemu_binary] if args.qemu_binary else [])
    binaries = [provision.find_qemu(name)[0] for name in names] or [provision.find_qemu()[0]]
    wanted = args.guest_memory or qemu_config.wanted_guest_memory()  # the top-level --guest-memory set it
    modes = ["shared", "qtest"] if wanted == "both" else [wanted]
    options = getattr(args, "multidevs", None) or [None]
    models = getattr(args, "security_model", None) or [None]
    product = [(b, mode, o, m) for b in binaries for mode in modes for o in options for m in models]
    variants = [Variant(b, mode, slot, o, m) for slot, (b, mode, o, m) in enumerate(product)]  # type: ignore[arg-type]
    run = Run(variants, 1 if getattr(args, "quick", False) else args.rounds)
    # readdir's local directories: made once, listed by every variant and round
    from harness.tools.bench.registry import bench

    with readdir_export() if bench(args.bench).export else contextlib.nullcontext() as export:
        run.interleave(lambda variant: _bench_one(args, variant, export), args.bench)
    return run.report(args.json, args.plot)


def _bench_one(args: argparse.Namespace, variant: Any, export: Path | None = None) -> Any:
    from harness.tools.bench.registry import bench

    return bench(args.bench).table(args, variant, export)


if __name__ == "__main__":
    sys.exit(main())
