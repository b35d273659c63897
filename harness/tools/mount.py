"""``python -m harness mount MOUNTPOINT``: a QEMU, its device brought up by our driver, and its
export mounted through FUSE in the foreground until Ctrl-C, SIGTERM, an unmount from outside
(``fusermount3 -u``, ``umount``) or QEMU's death.

Whatever ends it, nothing stays: the mount is unmounted here, or by the watcher (a process of its
own, which sees the harness's end by a pipe closing: SIGKILL too); QEMU dies with the harness
(PR_SET_PDEATHSIG, as every QEMU the harness starts). QEMU's death ends the mount: a request
that finds QEMU gone answers EIO, and a check twice a second notices it when no request does.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, HarnessMisuse
from harness.fuse import require_fuse
from harness.fuse.watcher import mounted
from harness.p9.channel import Channel
from harness.p9.session import Session
from harness.p9.trace import format_records, lost_its_start, write_reproducer
from harness.qemu.config import LocalFs, MachineConfig, SecurityModel, SynthFs
from harness.qemu.machine import Machine
from harness.qemu.provision import usable_config

#: msize of the mount unless --msize: Linux's v9fs default since 5.15 (512000 there; a power
#: of two here, as QEMU prefers)
DEFAULT_MSIZE = 512 << 10
#: How often the mount looks for a QEMU that died while no request was out (seconds).
QEMU_CHECK = 0.5
#: the signals that stop the mount: Ctrl-C, a supervisor's SIGTERM, a closed terminal's SIGHUP
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Exit statuses (docs/posix.md): 0 stopped as asked, 1 QEMU died or the harness failed, 130
#: stopped before the mount was up.
STOPPED, FAILED, INTERRUPTED = 0, 1, 130


@dataclass(frozen=True)
class MountOptions:
    mountpoint: Path
    binary: Path
    backend: str = "local"
    export: Path | None = None
    security_model: SecurityModel = "passthrough"
    msize: int = DEFAULT_MSIZE
    trace_dir: Path | None = None
    #: keep only the last this many messages (None: all; a long stress run's whole conversation is
    #: gigabytes): the reproducer then says it is incomplete, the trace shows the end
    trace_limit: int | None = None


class StopSignals:
    """How the mount answers its stop signals (:data:`STOP_SIGNALS`), one named phase after another:

    * :meth:`setting_up`: each raises KeyboardInterrupt (SIGINT's Python default, SIGTERM and SIGHUP
      made alike), undoing what is done so far;
    * :meth:`starting`: trio is starting; a stop is only noted. Raised as KeyboardInterrupt inside
      trio's start-up it made trio fail with TrioInternalError (exit 1; a SIGTERM at once after the
      banner met it under load);
    * :meth:`serving` (a trio task): trio receives them; the banner, then the first stop, or one noted
      while starting, cancels the mount;
    * :meth:`cleaning_up`: ignored, so that a second Ctrl-C or a forwarded SIGTERM cannot cut the
      unmount short and leave the mount behind."""

    def __init__(self) -> None:
        self.noted: list[int] = []

    def setting_up(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _interrupt)

    def starting(self) -> None:
        for signum in STOP_SIGNALS:
            signal.signal(signum, lambda signum, frame: self.noted.append(signum))

    async def serving(self, cancel_scope: Any, banner: str) -> None:
        import trio

        with trio.open_signal_receiver(*STOP_SIGNALS) as received:
            print(banner, flush=True)  # what users and the fixture wait for: a stop from now on is clean
            async for signum in self._noted_then(received):  # the first stops the mount; a later one, the same
                print(f"{signal.Signals(signum).name}: unmounting", file=sys.stderr, flush=True)
                cancel_scope.cancel()

    async def _noted_then(self, received: AsyncIterator[int]) -> AsyncIterator[int]:
        for signum in self.noted:
            yield signum
        async for signum in received:
            yield signum

    def cleaning_up(self) -> None:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


@dataclass
class Outcome:
    """How the mount ended, set from the bridge and from the task watching QEMU: None while it serves."""

    failure: BaseException | None = None

    def fail(self, err: BaseException) -> None:
        if self.failure is None:
            self.failure = err


def run(options: MountOptions) -> int:
    require_fuse()
    logging.basicConfig(format="mount: %(levelname)s: %(message)s")
    stops = StopSignals()
    stops.setting_up()
    mountpoint = options.mountpoint.resolve()
    if not mountpoint.is_dir():
        raise HarnessMisuse(f"{mountpoint} is not a directory")
    if mounted(mountpoint):
        raise HarnessMisuse(f"{mountpoint} is mounted already (umount -l {mountpoint})")
    # QEMU's sockets and log, and a scratch export, live in one directory that the watcher removes
    # whatever ends this process
    rundir = Path(tempfile.mkdtemp(prefix="v9p-mount-"))
    try:
        return _run(options, mountpoint, rundir, stops)
    except KeyboardInterrupt as stop:
        print(f"{stop or 'SIGINT'} before the mount was up: stopped", file=sys.stderr)
        return INTERRUPTED


def _run(options: MountOptions, mountpoint: Path, rundir: Path, stops: StopSignals) -> int:
    with _watcher(mountpoint, rundir), _export(options, rundir) as fs:
        before = _export_header(fs)
        config, probe = usable_config(options.binary, fs)
        with Machine(config, workdir=rundir) as machine:
            session = Session(Channel.of(machine))
            if options.trace_dir:  # the whole conversation (or its end), for the reproducer
                session.history = collections.deque(session.history, maxlen=options.trace_limit)
                options.trace_dir.mkdir(parents=True, exist_ok=True)
            try:
                return _serve(machine, session, mountpoint, options, probe.version, stops)
            finally:
                if options.trace_dir:
                    _write_trace(options, config, session, {"qemu-version": probe.version, **before})


@contextlib.contextmanager
def _export(options: MountOptions, rundir: Path) -> Iterator[SynthFs | LocalFs]:
    if options.backend == "synth":
        yield SynthFs()
        return
    if options.export is not None and not options.export.is_dir():
        raise HarnessMisuse(f"--export {options.export}: not a directory")
    export = options.export
    if export is None:
        export = rundir / "export"
        export.mkdir()
        export.chmod(0o755)  # what a fresh filesystem's root is; the umask aside
    yield LocalFs(export.resolve(), security_model=options.security_model)


@contextlib.contextmanager
def _watcher(mountpoint: Path, rundir: Path) -> Iterator[None]:
    """The watcher process; its pipe closes when this process ends, however it ends."""
    watcher = subprocess.Popen(
        [sys.executable, "-m", "harness.fuse.watcher", str(mountpoint), str(rundir)],
        stdin=subprocess.PIPE,
        start_new_session=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        yield
    finally:
        assert watcher.stdin is not None
        watcher.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            watcher.wait(timeout=40)


def _serve(
    machine: Machine, session: Session, mountpoint: Path, options: MountOptions, version: str, stops: StopSignals
) -> int:
    import pyfuse3
    import trio

    from harness.fuse.bridge import Bridge

    outcome = Outcome()
    session.version(options.msize)
    bridge = Bridge(session, outcome.fail)
    bridge.attach_root()
    fuse_options = set(pyfuse3.default_options) | {"allow_other", "fsname=v9p-harness", "subtype=9p"}
    pyfuse3.init(bridge, str(mountpoint), fuse_options)
    banner = (f"mounted QEMU {version} ({options.backend}"
              f"{', ' + options.security_model if options.backend == 'local' else ''}, msize {session.msize}) "
              f"on {mountpoint}; pid {os.getpid()}, QEMU pid {machine.pid}")  # fmt: skip
    try:
        stops.starting()
        trio.run(_main, machine, mountpoint, outcome, banner, stops)
    except KeyboardInterrupt:  # a second Ctrl-C while the first was being acted on: the same request
        pass
    finally:
        stops.cleaning_up()
        pyfuse3.close(unmount=True)
    if outcome.failure is not None:
        print(f"error: the mount ended: {outcome.failure}", file=sys.stderr)
        return FAILED
    if bridge.defects:
        print(f"error: the bridge failed {bridge.defects} requests itself (above: 'bridge defect')", file=sys.stderr)
        return FAILED
    return STOPPED


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


async def _main(machine: Machine, mountpoint: Path, outcome: Outcome, banner: str, stops: StopSignals) -> None:
    import pyfuse3
    import trio

    async with trio.open_nursery() as nursery:

        async def serve() -> None:
            # returns when the kernel ends the FUSE session: an unmount from outside (fusermount3 -u,
            # umount), or the connection aborted (/sys/fs/fuse/connections), which leaves the mount
            # for the watcher; the other tasks stop with it
            await pyfuse3.main()
            if outcome.failure is None:  # else QEMU's death, which says so itself
                ended = "the FUSE connection was ended" if mounted(mountpoint) else "unmounted"
                print(f"{ended} from outside: stopping", file=sys.stderr, flush=True)
            nursery.cancel_scope.cancel()

        nursery.start_soon(serve)

        async def watch_qemu() -> None:
            while machine.is_running() and outcome.failure is None:
                await trio.sleep(QEMU_CHECK)
            outcome.fail(HarnessError(f"QEMU exited ({machine.exit_status})"))
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch_qemu)
        nursery.start_soon(stops.serving, nursery.cancel_scope, banner)


def _export_header(fs: SynthFs | LocalFs) -> dict[str, str]:
    """What a replay needs to know of the export as the mount found it: its root's mode, and
    whether it held files (which a replay cannot make again)."""
    if not isinstance(fs, LocalFs):
        return {}
    header = {"export-mode": oct(stat.S_IMODE(fs.path.stat().st_mode))}
    entries = len(os.listdir(fs.path))
    if entries:
        header["incomplete"] = f"the export held {entries} entries before the mount; a replay starts from an empty one"
    return header


def _write_trace(options: MountOptions, config: MachineConfig, session: Session, extra: dict[str, str]) -> None:
    assert options.trace_dir is not None
    if not options.trace_dir.is_dir():  # removed while the mount ran: nobody wants it (writing is slow)
        return
    fsdev = ",".join(f"{k}={v}" for k, v in config.fs.fsdev("fsdev0") if k not in ("id", "path"))
    source = f"python -m harness mount {options.mountpoint} (the programs run on the mount)"
    header = {"backend": config.fs.kind, "transport": config.transport, "qemu": str(config.binary), "fsdev": fsdev,
              "source": source, **extra}  # fmt: skip
    records = list(session.history)
    if lost_its_start(records):
        header["incomplete"] = f"the mount kept its last {len(records)} messages only (--trace-limit)"
    write_reproducer(options.trace_dir / "reproducer.9p", records, header)
    (options.trace_dir / "trace.txt").write_text(format_records(records))
