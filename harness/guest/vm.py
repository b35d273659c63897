"""One guest run: boot a kernel on the QEMU under test with the export as the cases configure
it, mount it with v9fs, run a script, and hand back what the script printed, its status, the
kernel's log and QEMU's v9fs trace (:class:`Run`).

QEMU runs with TCG (KVM where it works: :func:`kvm_works`), dies with its parent, and is
killed at the run's deadline; its directory of sockets, console and trace is removed at every
exit. A script that outlives its deadline is reported as a timeout with the kernel's log (the
guest powers off without unmounting: a hung v9fs mount cannot be)."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from harness.errors import HarnessError, ProvisionError
from harness.fault.control import Armed, Fault, HostCall, Injector
from harness.guest import initramfs
from harness.guest.kernel import Kernel
from harness.qemu import process
from harness.qemu.config import DEVICE_ID, FsConfig, LocalFs, driver_options
from harness.qemu.provision import FIRMWARE_DIRS

Accel = Literal["auto", "kvm", "tcg"]
#: the dialects a v9fs mount speaks (``version=``)
Dialect = Literal["9p2000.L", "9p2000.u"]
#: the export's tag in the guest
TAG = "v9p"
#: where the guest mounts the export, and where it keeps a local filesystem to compare with
EXPORT, LOCAL = "/mnt/export", "/tmp/local"
#: guest RAM: the initramfs (~80 MB unpacked) and the page cache of a cache=loose mount
RAM_MIB = 1024
log_ = logging.getLogger(__name__)
#: seconds from QEMU's start to the script's start that a run allows beyond its own deadline (and
#: within which the guest's /init must have said BOOTED)
BOOT_ALLOWANCE = 90.0
#: boots tried where the first printed nothing in BOOT_ALLOWANCE seconds
BOOT_ATTEMPTS = 2
#: the trace events a run records (QEMU's hw/9pfs/trace-events)
TRACE_EVENTS = "v9fs_*"


@dataclass(frozen=True)
class Mount:
    """A v9fs mount of the export at ``where`` with ``options`` (``mount -t 9p -o``)."""

    where: str = EXPORT
    version: Dialect = "9p2000.L"
    cache: str = "none"
    msize: int | None = None
    access: str | None = None
    posixacl: bool = False
    extra: tuple[str, ...] = ()
    #: the virtio-9p device it mounts: a mount of its own needs a device of its own (a v9fs
    #: mount holds its virtio channel alone), each serving the same export
    tag: str = TAG

    def options(self) -> str:
        opts = ["trans=virtio", f"version={self.version}", f"cache={self.cache}"]
        opts += [f"msize={self.msize}"] if self.msize else []
        opts += [f"access={self.access}"] if self.access else []
        opts += ["posixacl"] if self.posixacl else []
        return ",".join(opts + list(self.extra))


@dataclass
class Run:
    """What a guest run showed. ``status`` None: the script outlived its deadline, or the guest
    never ran it (``failures`` says why)."""

    status: int | None
    stdout: bytes
    stderr: bytes
    dmesg: str
    trace: str
    console: str
    #: seconds from QEMU's start to the export mounted, and to the run's end
    mounted_after: float | None
    seconds: float
    qemu_exit: int | None
    accel: str
    failures: list[str] = field(default_factory=list)
    timed_out: bool = False
    #: what the script said it was doing (``progress`` lines on the console), in order
    progress: list[str] = field(default_factory=list)
    #: each console mark with the host's time and QEMU's CPU then (:class:`Moment`)
    moments: list[Moment] = field(default_factory=list)
    #: what QEMU printed (its warnings: a descriptor chain it refused ...)
    qemu_log: str = ""
    #: the host calls an armed fault failed (harness/fault), in order
    injected: list[HostCall] = field(default_factory=list)

    def between(self, first: str, last: str) -> tuple[float, float, float]:
        """Seconds, vCPU CPU and other CPU from the progress mark ``first`` to ``last``."""
        one = next(m for m in self.moments if m.mark == f"PROGRESS {first}")
        two = next(m for m in self.moments if m.mark == f"PROGRESS {last}")
        return two.seconds - one.seconds, two.vcpu_cpu - one.vcpu_cpu, two.other_cpu - one.other_cpu

    @property
    def text(self) -> str:
        return self.stdout.decode(errors="replace")

    def explain(self) -> str:
        """The run, for a failing case's message."""
        lines = [f"status {self.status}, QEMU exit {self.qemu_exit}, {self.seconds:.1f} s ({self.accel})"]
        lines += [f"guest: {failure}" for failure in self.failures]
        if self.timed_out:
            lines.append("the script outlived its deadline" + (f" in: {self.progress[-1]}" if self.progress else ""))
        lines += ["--- stdout", self.text[-3000:], "--- stderr", self.stderr.decode(errors="replace")[-3000:]]
        lines += ["--- kernel log (tail)", "\n".join(self.dmesg.splitlines()[-25:])]
        if self.status is None and not self.dmesg:
            lines += ["--- console (tail)", "\n".join(self.console.splitlines()[-25:])]
        return "\n".join(lines)


def accelerators(binary: Path) -> set[str]:
    """The accelerators ``binary`` was built with (``-accel help``)."""
    found = subprocess.run([str(binary), "-accel", "help"], capture_output=True, text=True, check=False, timeout=30)
    return {line.strip() for line in found.stdout.splitlines()[1:] if line.strip()}


#: The KVM probe's limits: the kernel's ``Linux version`` line, then its panic. On some hosts
#: /dev/kvm opens and QEMU aborts setting an MSR (0x10a) at the first vCPU run; on others the vCPU
#: spins in the host kernel and the console stays silent until the probe gives up. A kernel that
#: runs prints that line within seconds even under TCG (a whole boot and mount of ``python -m
#: harness guest`` says how long it took): a boot silent for the first limit is not running, the
#: rest of it headroom for a loaded host.
KVM_FIRST_LINE_SECONDS = 10.0
KVM_PROBE_SECONDS = 60.0


def kvm_works(binary: Path, kernel: Kernel, cache: Path) -> bool:
    """Whether a kernel runs under KVM on this machine with ``binary``: /dev/kvm opens and a boot
    without a root filesystem prints its first line in time and gets as far as the kernel's panic
    (:data:`KVM_FIRST_LINE_SECONDS`); the answer is kept per binary and kernel."""
    if "kvm" not in accelerators(binary) or not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    record = cache / "guest-kvm.json"
    known: dict[str, bool] = {}
    with contextlib.suppress(OSError, ValueError):
        known = json.loads(record.read_text())
    info = binary.stat()
    key = f"{binary}:{info.st_size}:{info.st_mtime_ns}:{kernel.image}"
    if key not in known:
        argv = [str(binary), *_firmware(), "-machine", "pc", "-accel", "kvm", "-cpu", "host", "-m", "256M",
                "-nodefaults", "-display", "none", "-no-reboot", "-serial", "stdio", "-kernel", str(kernel.image),
                "-append", "console=ttyS0 panic=-1"]  # fmt: skip
        known[key] = boots_to_panic(argv, KVM_FIRST_LINE_SECONDS, KVM_PROBE_SECONDS)
        record.write_text(json.dumps(known, indent=1))
    return known[key]


def boots_to_panic(argv: Sequence[str], first_line: float, whole: float) -> bool:
    """Whether the QEMU that ``argv`` starts prints a kernel's ``Linux version`` line within
    ``first_line`` seconds and its ``Kernel panic`` within ``whole``; QEMU is killed after."""
    start = time.monotonic()
    tail, started = b"", False  # the output's last bytes (a line may straddle two reads)
    with subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_dies_with_us()
    ) as proc:
        assert proc.stdout is not None
        try:
            while b"Kernel panic" not in tail:
                started = started or b"Linux version" in tail
                left = start + (whole if started else first_line) - time.monotonic()
                ready, _, _ = select.select([proc.stdout], [], [], left) if left > 0 else ([], [], [])
                chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""
                if not chunk:  # out of time (a console that never stops talking too), or QEMU gone before the panic
                    return False
                tail = tail[-64:] + chunk
            return True
        finally:
            proc.kill()


def choose_accel(binary: Path, kernel: Kernel, cache: Path, wanted: Accel) -> str:
    """``wanted``, or for ``auto`` KVM where it works and TCG elsewhere; a binary built without the
    accelerator is refused, saying so."""
    have = accelerators(binary)
    if wanted == "auto":
        wanted = "kvm" if kvm_works(binary, kernel, cache) else "tcg"
    if wanted not in have:
        raise ProvisionError(
            f"{binary} has no {wanted.upper()} (its accelerators: {', '.join(sorted(have)) or 'none'}): a guest "
            f"kernel cannot run on it. The harness's own builds have TCG (`python -m harness qemu build`)"
        )
    return wanted


def _firmware() -> list[str]:
    return [arg for directory in FIRMWARE_DIRS for arg in ("-L", str(directory))]


def _dies_with_us(nofile: int | None = None) -> Callable[[], None]:
    parent = os.getpid()
    return lambda: process.die_with_parent(parent, nofile)


def argv(
    binary: Path,
    kernel: Kernel,
    initrd: Path,
    fs: FsConfig,
    accel: str,
    workdir: Path,
    trace: bool,
    tags: Sequence[str] = (TAG,),
) -> list[str]:
    """QEMU's command line for a run: the export as the cases configure it (a device for each of
    ``tags``, the first as the cases' ``v9p0``), the guest's console to a file."""
    cpu = ["-cpu", "host"] if accel == "kvm" else ["-cpu", "max"]
    args = [
        str(binary), *_firmware(),
        "-machine", "pc", "-accel", accel, *cpu, "-smp", "2", "-m", f"{RAM_MIB}M",
        "-nodefaults", "-display", "none", "-no-reboot", "-name", "v9p-guest,debug-threads=on",
        "-chardev", f"file,id=console,path={workdir / 'console'}", "-serial", "chardev:console",
        "-kernel", str(kernel.image), "-initrd", str(initrd),
        "-append", "console=ttyS0 loglevel=1 panic=-1 mitigations=off",
    ]  # fmt: skip
    for index, tag in enumerate(tags):
        device = DEVICE_ID if index == 0 else f"v9p{index}"
        args += ["-fsdev", driver_options(fs.kind, fs.fsdev(f"fsdev{index}"))]
        args += [
            "-device",
            driver_options("virtio-9p-pci", [("id", device), ("fsdev", f"fsdev{index}"), ("mount_tag", tag)]),
        ]
    if trace:
        args += ["-trace", f"enable={TRACE_EVENTS}", "-D", str(workdir / "trace")]
    return args


#: what every script can call: ``progress TEXT`` on the console as it runs (the rest of what it
#: prints comes at the end)
PRELUDE = 'progress() { echo "@@V9P-PROGRESS $*" > /dev/console; }\nexport -f progress\n'

MARK = re.compile(r"^@@V9P-([A-Z]+) ?(.*)$")


def parse_console(text: str) -> dict[str, list[str]]:
    """The console's @@V9P lines: a block (STDOUT ... END) as its lines, a single line as its
    argument; FAIL lines collected."""
    found: dict[str, list[str]] = {"FAIL": [], "PROGRESS": []}
    block: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        match = MARK.match(line)
        if block is not None:
            if match and match.group(1) == "END":
                block = None
            else:
                found[block].append(line)
            continue
        if not match:
            continue
        name, rest = match.groups()
        if name in ("STDOUT", "STDERR", "DMESG"):
            block = name
            found[name] = []
        elif name in ("FAIL", "PROGRESS"):
            found[name].append(rest)
        else:
            found[name] = [rest]
    return found


def _decoded(lines: list[str] | None) -> bytes:
    if not lines:
        return b""
    try:
        return base64.b64decode("".join(lines))
    except ValueError as err:
        raise HarnessError(f"the guest's console block did not decode ({err}): a kernel message inside it?") from err


def run(
    binary: Path,
    kernel: Kernel,
    fs: FsConfig,
    script: str,
    *,
    cache: Path,
    mounts: Sequence[Mount] = (Mount(),),
    accel: Accel = "auto",
    timeout: float = 120.0,
    trace: bool = True,
    nofile: int | None = None,
    files: Mapping[str, bytes] | None = None,
    fault: tuple[Path, Fault] | None = None,
) -> Run:
    """Boot, mount ``mounts`` of the export, run ``script`` (bash, cwd /tmp; the export at each
    mount's ``where``, a tmpfs at /tmp/local; ``progress TEXT`` says on the console what it is
    doing, for a run that hangs), and collect (see :class:`Run`). ``nofile``: QEMU's
    RLIMIT_NOFILE, from which 9pfs sizes its descriptor budget (fids beyond it are reclaimed).
    ``files``: more files for the guest's root (path -> bytes, executable), such as a test suite.
    ``fault``: the fault injector's library and a fault (harness/fault), armed from QEMU's start
    to its end; the run's ``injected`` holds the host calls it failed."""
    if fault is not None and not isinstance(fs, LocalFs):
        raise ValueError(f"a fault needs a local export's host calls, not {fs.kind}'s")
    chosen = choose_accel(binary, kernel, cache, accel)
    image = initramfs.build(kernel, cache)
    # removed in the finally below, or else at interpreter exit (TemporaryDirectory's finalizer)
    scratch = tempfile.TemporaryDirectory(prefix="v9p-guest-", ignore_cleanup_errors=True)
    workdir = Path(scratch.name)
    tags = tuple(dict.fromkeys(m.tag for m in mounts))
    qemu: subprocess.Popen[bytes] | None = None
    try:
        extra = initramfs.run_archive({
            "v9p/run.sh": (PRELUDE + script).encode(),
            "v9p/mounts": "".join(f"{m.tag} {m.where} {m.options()}\n" for m in mounts).encode(),
            "v9p/timeout": f"{int(timeout)}\n".encode(),
            **(files or {}),
        })  # fmt: skip
        initrd = workdir / "initrd"
        with open(initrd, "wb") as out, open(image.path, "rb") as base:
            shutil.copyfileobj(base, out)
            out.write(extra)
        # A guest that has printed nothing BOOT_ALLOWANCE seconds after its start never reached its
        # /init (seen once under TCG: an empty console and an idle QEMU): it is booted once more,
        # rather than left to its whole deadline; no 9P request was made by then.
        for attempt in range(BOOT_ATTEMPTS):
            (workdir / "console").unlink(missing_ok=True)
            start = time.monotonic()
            injector = Injector.create(workdir, fs.path) if fault is not None and isinstance(fs, LocalFs) else None
            armed = injector.armed(fault[1]) if injector is not None and fault is not None else contextlib.nullcontext()
            with open(workdir / "qemu.log", "wb") as log, armed as seen:
                qemu = subprocess.Popen(
                    argv(binary, kernel, initrd, fs, chosen, workdir, trace, tags),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_dies_with_us(nofile),
                    env=injector.env(fault[0], dict(os.environ)) if injector is not None and fault else None,
                )  # fmt: skip
                exit_status, moments = _wait(qemu, workdir / "console", start, timeout + BOOT_ALLOWANCE)
            injected = [call for call in seen.calls if call.done] if isinstance(seen, Armed) else []
            if injector is not None:
                injector.close()
            if moments or exit_status is not None or attempt == BOOT_ATTEMPTS - 1:
                break
            log_.warning("the guest printed nothing in %.0f s (its boot hung): booting it again", BOOT_ALLOWANCE)
        seconds = time.monotonic() - start
        console = (workdir / "console").read_text(errors="replace") if (workdir / "console").exists() else ""
        marks = parse_console(console)
        failures = marks["FAIL"]
        if exit_status is None:
            failures.append(f"QEMU still ran {timeout + BOOT_ALLOWANCE:.0f} s after its start: killed")
        elif exit_status != 0:
            failures.append(f"QEMU exited with status {exit_status}: {(workdir / 'qemu.log').read_text()[-1500:]}")
        if "DONE" not in marks and exit_status is not None:
            failures.append("the guest powered off before /init finished (a kernel panic? see the console)")
        status = int(marks["STATUS"][0]) if "STATUS" in marks else None
        trace_text = (workdir / "trace").read_text(errors="replace") if trace and (workdir / "trace").exists() else ""
        return Run(
            status=status, stdout=_decoded(marks.get("STDOUT")), stderr=_decoded(marks.get("STDERR")),
            dmesg=_decoded(marks.get("DMESG")).decode(errors="replace"), trace=trace_text, console=console,
            mounted_after=next((m.seconds for m in moments if m.mark.startswith("MOUNTED")), None),
            moments=moments, qemu_log=(workdir / "qemu.log").read_text(errors="replace"),
            seconds=seconds, qemu_exit=exit_status, accel=chosen, failures=failures, timed_out="TIMEOUT" in marks,
            progress=marks["PROGRESS"], injected=injected,
        )  # fmt: skip
    finally:
        if qemu is not None and qemu.poll() is None:
            qemu.kill()
            qemu.wait()
        scratch.cleanup()


@dataclass(frozen=True)
class Moment:
    """A console mark as the host saw it: seconds since QEMU started, and QEMU's CPU seconds so
    far, in its vCPU threads (the guest's own work under TCG) and in the rest (the main loop and
    the worker threads, where the 9P server runs)."""

    mark: str
    seconds: float
    vcpu_cpu: float
    other_cpu: float


def thread_cpu(pid: int) -> tuple[float, float]:
    """QEMU's CPU seconds in its vCPU threads and in the rest (``-name debug-threads=on`` names
    the vCPUs ``CPU n/TCG`` or ``CPU n/KVM``)."""
    vcpu = other = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            head, tail = (task / "stat").read_text().rsplit(")", 1)
            used = (int(tail.split()[11]) + int(tail.split()[12])) / tick
            if head.split("(", 1)[1].startswith("CPU "):
                vcpu += used
            else:
                other += used
    return vcpu, other


def _wait(qemu: subprocess.Popen[bytes], console: Path, start: float, limit: float) -> tuple[int | None, list[Moment]]:
    """QEMU's exit status (None: killed at ``limit`` seconds after ``start``), and each mark the
    guest printed (MOUNTED, PROGRESS ...) with when the host saw it (the console read as it grows)."""
    moments: list[Moment] = []
    seen = 0
    while True:
        status = qemu.poll()
        if console.exists() and status is None:
            text = console.read_bytes()
            complete = text.rfind(b"\n") + 1  # a line still being written waits for its end
            for line in text[seen:complete].decode(errors="replace").splitlines():
                if line.startswith("@@V9P-") and not line.startswith("@@V9P-END"):
                    moments.append(Moment(line[6:].rstrip("\r"), time.monotonic() - start, *thread_cpu(qemu.pid)))
            seen = max(seen, complete)
        if status is not None:
            return status, moments
        waited = time.monotonic() - start
        if waited > limit or (not moments and waited > BOOT_ALLOWANCE):  # (a boot that hung: see run())
            qemu.kill()
            qemu.wait()
            return None, moments
        time.sleep(0.05)
