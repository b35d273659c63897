"""``python -m harness guest``: boot a Linux kernel on the QEMU under test, mount its export with
v9fs, run a command there and print what it printed (docs/guest.md)."""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

from harness.errors import HarnessError
from harness.fault.control import Fault
from harness.fault.library import preload_library
from harness.guest import kernel as kernels
from harness.qemu import provision
from harness.qemu.config import SECURITY_MODELS, LocalFs, SynthFs
from harness.tools import guest_pjdfstest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # "selection": the name cli.main gives the words after "--" too, so `guest -- ls -l` works
    parser.add_argument("selection", nargs="*", metavar="COMMAND",
                        help="what the guest runs, by bash (default: a listing of the export)")  # fmt: skip
    parser.add_argument("--qemu-binary")
    parser.add_argument(
        "--kernel", help=f"6.1, 6.12, a linux-image package, or a kernel image (default {kernels.DEFAULT_KERNEL})"
    )
    parser.add_argument("--modules", help="with --kernel PATH: its modules directory (lib/modules/RELEASE)")
    parser.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto")
    parser.add_argument("--export", help="the directory exported (default: a new empty one, removed after)")
    parser.add_argument("--synth", action="store_true",
                        help="export QEMU's synth backend instead of a directory: its root alone, '.' and '..' (its "
                        "test tree is made under the qtest accelerator only)")  # fmt: skip
    parser.add_argument("--security-model", choices=SECURITY_MODELS, default="mapped-xattr")
    parser.add_argument("--multidevs", choices=("warn", "remap", "forbid"))
    parser.add_argument("--readonly", action="store_true")
    parser.add_argument("--version", choices=("9p2000.L", "9p2000.u"), default="9p2000.L", dest="dialect")
    parser.add_argument("--cache", default="none", help="v9fs cache mode: none, loose, mmap, fscache ...")
    parser.add_argument("--msize", type=int)
    parser.add_argument("--access", help="v9fs access= (user, client, any, UID)")
    parser.add_argument("--posixacl", action="store_true")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds the command may take")
    parser.add_argument(
        "--nofile",
        type=int,
        help="QEMU's RLIMIT_NOFILE: 9pfs keeps at most N - min(400, N/3) host descriptors, reclaiming past it",
    )
    parser.add_argument("--trace", help="write QEMU's v9fs trace events of the run to this file")
    parser.add_argument("--kernel-log", action="store_true", help="print the guest kernel's log too")
    parser.add_argument("--pjdfstest", action="store_true",
                        help="run pjdfstest's .t files on the mount (COMMAND: those named, e.g. chmod/00 or rename; "
                        "default all) and print those that failed")  # fmt: skip
    parser.add_argument("--json", help="with --pjdfstest: every .t's result to this file")
    parser.add_argument("--fault", metavar="SPEC",
                        help="QEMU runs with the fault injector, this fault armed from its start: 'call=fstatat nth=2 "
                        "errno=EIO path=d/new' (path relative to the export; docs/fault.md)")  # fmt: skip


def guest(args: argparse.Namespace) -> int:
    from harness.guest import vm  # construct and the initramfs builder: only when a guest runs

    if args.synth and (args.export or args.fault or args.pjdfstest or args.readonly):
        raise HarnessError("--synth exports no host directory: --export, --fault, --pjdfstest and --readonly need one")
    binary, _ = provision.find_qemu(args.qemu_binary)
    cache = provision.cache_root()
    kernel = kernels.find_kernel(args.kernel, cache, Path(args.modules) if args.modules else None)
    mount = vm.Mount(version=args.dialect, cache=args.cache, msize=args.msize, access=args.access,
                     posixacl=args.posixacl)  # fmt: skip
    script = " ".join(args.selection) if args.selection else f"ls -la {shlex.quote(vm.EXPORT)}"
    extra: dict[str, bytes] = {}
    if args.pjdfstest:
        source = guest_pjdfstest.tree()
        names = guest_pjdfstest.chosen(source, args.selection)
        script, extra = guest_pjdfstest.script(names, vm.EXPORT), guest_pjdfstest.files(source)
    with tempfile.TemporaryDirectory(prefix="v9p-guest-export-") as scratch:
        export = Path(args.export) if args.export else Path(scratch)
        fs = SynthFs() if args.synth else LocalFs(export.absolute(), args.security_model, args.multidevs, args.readonly)
        fault = (preload_library(cache), Fault.parse(args.fault)) if args.fault else None
        run = vm.run(binary, kernel, fs, script, cache=cache, mounts=(mount,), accel=args.accel,
                     timeout=args.timeout, trace=bool(args.trace), nofile=args.nofile, files=extra,
                     fault=fault)  # fmt: skip
    verdict = None
    if args.pjdfstest:
        taps = guest_pjdfstest.results(run.stdout.decode(errors="replace"))
        table, verdict = guest_pjdfstest.report(taps, names)
        print(table)
        if args.json:
            facts = {"kernel": kernel.release, "qemu": str(binary), "security_model": args.security_model,
                     "version": args.dialect, "cache": args.cache}  # fmt: skip
            guest_pjdfstest.write_json(Path(args.json), taps, names, facts)
    else:
        sys.stdout.buffer.write(run.stdout)
    sys.stdout.flush()
    sys.stderr.buffer.write(run.stderr)
    if args.kernel_log:
        print(run.dmesg, file=sys.stderr)
    if args.trace:
        Path(args.trace).write_text(run.trace)
    for failure in run.failures:
        print(f"guest: {failure}", file=sys.stderr)
    if fault is not None:
        made = ", ".join(str(call) for call in run.injected) or "none: the call was not made that often"
        print(f"guest: fault {fault[1]}: injected {made}", file=sys.stderr)
    mounted = f"{run.mounted_after:.1f} s" if run.mounted_after is not None else "never"
    print(f"guest: {kernel.release} on {binary} ({run.accel}): mounted after {mounted}, "
          f"{run.seconds:.1f} s in all, status {run.status}", file=sys.stderr)  # fmt: skip
    if run.timed_out:
        print(f"guest: the command outlived --timeout {args.timeout:.0f}", file=sys.stderr)
        return 124
    if verdict is not None:
        return 0 if verdict and run.status == 0 else 1
    return run.status if run.status is not None else 2
