"""One QEMU process: argv built from typed configuration, qtest and QMP connections, stderr kept.

The harness listens on both UNIX sockets and QEMU connects (as libqtest does); QMP is greeted,
through qemu.qmp, when a command first needs it.  QEMU gets
``PR_SET_PDEATHSIG(SIGKILL)`` and its own session, so it dies with the harness process even on
``kill -9`` and never sees a terminal's Ctrl-C before the harness has cleaned up.  Every path out
of :meth:`Machine.launch` and :meth:`Machine.shutdown` leaves no process, socket or directory.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from harness.errors import HarnessMisuse, QEMUError, QEMUExited, QEMUStartError, QTestError, QTestTimeout
from harness.fault.control import Injector
from harness.qemu.config import DEVICE_ID, LocalFs, MachineConfig, Resources
from harness.qemu.process import cpu_seconds, die_with_parent, listen, writes_coverage
from harness.qemu.qtest import QTest
from harness.qemu.sanitizers import sanitizer_env

if TYPE_CHECKING:
    from qemu.qmp.legacy import QEMUMonitorProtocol

log = logging.getLogger(__name__)

OUTPUT_TAIL_LINES = 20
#: the pc machine's ACPI PCI hotplug registers: slots to remove (ACPI_PCIHP_ADDR 0xae00 +
#: PCI_DOWN_BASE 4) and eject (+ PCI_EJ_BASE 8)
ACPI_PCIHP_DOWN, ACPI_PCIHP_EJECT = 0xAE04, 0xAE08
QTEST_SOCKET, QMP_SOCKET = "qtest.sock", "qmp.sock"
#: Lines QEMU prints on an orderly stop that say nothing about the case.
BENIGN_OUTPUT = ("GLib: g_timer_elapsed: assertion 'timer != NULL' failed",)

#: How long QEMU gets to quit before SIGTERM, and then SIGKILL.
STOP_TIMEOUT = 5.0
#: How many times longer than a plain build an ASan or TSan build of QEMU is given for an operation
#: before it is called wedged: a sanitizer build is several times slower (TSan the most), the plain
#: bounds are already ten times or more what a working QEMU needs, and times four they are the
#: bounds the TSan runs were checked with.
SANITIZER_SLOWDOWN = 4
#: After QEMU closed the qtest socket: how long its exit status is waited for (it is exiting).
EXIT_AFTER_DISCONNECT = 1.0
#: A gcov build writes ~1,500 counter files as it exits, under a lock each that every other exiting
#: QEMU wants too: on 2 busy cores that took longer than 5 s, and the SIGKILL then lost the counters
#: of whatever cases that QEMU served (7.2's whole 9P2000.u directory read, for one).
GCOV_STOP_TIMEOUT = 120.0


class Machine:
    """A running QEMU.  ``with Machine(config) as m:`` launches it and always shuts it down."""

    def __init__(
        self,
        config: MachineConfig,
        *,
        qtest_timeout: float = 10.0,
        start_timeout: float = 15.0,
        workdir: Path | None = None,
    ) -> None:
        self.config = config
        self.qtest_timeout = qtest_timeout
        self.start_timeout = start_timeout
        # sockets and QEMU's output; under ``workdir`` when given, so that whoever owns that can
        # remove what a killed process could not
        self._dir = Path(tempfile.mkdtemp(prefix="v9p-qemu-", dir=workdir))
        # removed by _remove_dir(), or else at interpreter exit whatever the way out (a
        # KeyboardInterrupt whose report hit a closed pipe never reaches a shutdown): weakref.finalize
        # runs what is still pending then. QEMU itself dies with this process (PR_SET_PDEATHSIG).
        self._dir_removal = weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)
        self.argv = config.argv(Path(QTEST_SOCKET), Path(QMP_SOCKET))  # relative to QEMU's cwd, self._dir
        self.log_path = self._dir / "qemu.log"
        self._proc: subprocess.Popen[bytes] | None = None
        #: guest RAM mapped here too (guest_memory "shared"), from spawn() until the connections close
        self.guest_ram: mmap.mmap | None = None
        self._qtest: QTest | None = None
        self._qtest_listener: socket.socket | None = None
        self._qmp_listener: socket.socket | None = None
        #: QEMU's monitor connection, accepted at start-up; greeted by qemu.qmp when first needed.
        self._qmp_socket: socket.socket | None = None
        self._qmp: QEMUMonitorProtocol | None = None
        self._deadline = 0.0
        #: True once the harness asked QEMU to stop: an exit after that is not a crash.
        self.stopped_by_harness = False
        #: True once QEMU was alive but did not answer qtest in time (wedged or stopped).
        self.unresponsive = False
        #: the fault injector's control block, when the config preloads it (harness/fault)
        self.injector: Injector | None = None

    # -- life cycle -----------------------------------------------------------------------------

    def __enter__(self) -> Machine:
        self.launch()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def launch(self) -> None:
        """Start QEMU and take its qtest and QMP connections; on any failure clean up and raise."""
        self.spawn()
        self.connect()

    def spawn(self) -> None:
        """The first half of :meth:`launch`: start the QEMU process, listening for its qtest and
        QMP connections. Spawning several machines before connecting any lets their start-ups (QEMU's
        own initialisation) run side by side."""
        with self._abandoned_on_failure():
            self._spawn()

    def connect(self) -> None:
        """The second half of :meth:`launch`: take QEMU's connections and greet it over qtest."""
        with self._abandoned_on_failure():
            self._connect()

    @contextlib.contextmanager
    def _abandoned_on_failure(self) -> Iterator[None]:
        try:
            yield
        except QEMUStartError:
            self._abandon()
            raise
        except Exception as err:
            status = self._stop_process()
            detail = err.message if isinstance(err, QEMUError) else err  # its argv and output follow once
            error = QEMUStartError(
                f"QEMU did not start: {detail}", argv=self.argv, status=status, output_tail=self.output_tail()
            )
            self._abandon()
            raise error from err
        except BaseException:
            self._abandon()
            raise

    def _abandon(self) -> None:
        self._stop_process(timeout=1.0)
        self._close_connections()
        self._remove_dir()

    def _spawn(self) -> None:
        if isinstance(self.config.fs, LocalFs) and (problem := self.config.fs.host_problem()):
            raise HarnessMisuse(problem)
        # AF_UNIX paths are limited to 108 bytes and the machine directory can be deep: we bind
        # through /proc/self/fd/<dir> and QEMU, started in that directory, connects by bare name.
        dir_fd = os.open(self._dir, os.O_RDONLY | os.O_DIRECTORY)
        short = Path(f"/proc/self/fd/{dir_fd}")
        try:
            self._qtest_listener = listen(short / QTEST_SOCKET)
            self._qmp_listener = listen(short / QMP_SOCKET)
        finally:
            os.close(dir_fd)
        ram_fd = self._shared_ram() if self.config.guest_memory == "shared" else None
        if ram_fd is not None:
            self.argv = self.config.argv(Path(QTEST_SOCKET), Path(QMP_SOCKET), ram_fd)
        log.debug("launch in %s: %s", self._dir, " ".join(self.argv))
        if self.config.injector is not None:
            if not isinstance(self.config.fs, LocalFs):
                raise HarnessMisuse("the fault injector aims at the local backend's host calls: no synth")
            self.injector = Injector.create(self._dir, self.config.fs.path)
        parent = os.getpid()
        with open(self.log_path, "wb") as out:
            try:
                self._popen(out, parent, ram_fd)
            finally:
                if ram_fd is not None:  # QEMU holds its own; the mapping keeps ours
                    os.close(ram_fd)
        self._deadline = time.monotonic() + self.start_timeout

    def _shared_ram(self) -> int:
        """A memfd of the guest's RAM size, mapped here; its fd, for QEMU to inherit."""
        size = self.config.ram_mib << 20
        try:
            fd = os.memfd_create("v9p-guest-ram")
        except OSError as err:
            raise QEMUStartError(f"no shared guest RAM: memfd_create: {err}; use --guest-memory qtest") from err
        try:
            os.ftruncate(fd, size)
            self.guest_ram = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as err:
            os.close(fd)
            raise QEMUStartError(f"no shared guest RAM of {size >> 20} MiB: {err}; use --guest-memory qtest") from err
        return fd

    def _popen(self, out: IO[bytes], parent: int, ram_fd: int | None) -> None:
        self._proc = subprocess.Popen(
            self.argv,
            cwd=self._dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: die_with_parent(parent, self.config.nofile),
            env=self._env(),
            pass_fds=(ram_fd,) if ram_fd is not None else (),
        )

    def _env(self) -> dict[str, str]:
        env = {**sanitizer_env(self.config.binary), **os.environ}
        if self.injector is not None and self.config.injector is not None:
            env = self.injector.env(self.config.injector, env)
        return env

    def _connect(self) -> None:
        if self._qtest_listener is None or self._qmp_listener is None:
            raise HarnessMisuse("connect() before spawn()")
        self._qmp_socket = self._accept(self._qmp_listener, "QMP")
        conn = self._accept(self._qtest_listener, "qtest")
        self._close_listeners()
        self._qtest = QTest(conn, timeout=self.qtest_timeout, on_lost=self._explain_lost)
        self._qtest.endianness()

    def _close_listeners(self) -> None:
        for listener in (self._qtest_listener, self._qmp_listener):
            if listener is not None:
                listener.close()
        self._qtest_listener = self._qmp_listener = None

    def _monitor(self) -> QEMUMonitorProtocol:
        """QMP through qemu.qmp, greeted on first use: most runs send no QMP command, and
        importing qemu.qmp (asyncio) and greeting each QEMU cost ~15 ms of CPU per process."""
        if self._qmp is None:
            if self._qmp_socket is None:
                raise HarnessMisuse(f"QMP of a QEMU that was never started: {' '.join(self.argv)}")
            from qemu.qmp.legacy import QEMUMonitorProtocol

            monitor = QEMUMonitorProtocol(self._qmp_socket)
            monitor.connect()
            self._qmp = monitor
        return self._qmp

    def _accept(self, listener: socket.socket, which: str) -> socket.socket:
        listener.settimeout(0.02)
        assert self._proc is not None
        while True:
            try:
                conn, _ = listener.accept()
                return conn
            except TimeoutError:
                status = self._proc.poll()
                if status is not None:
                    raise QEMUStartError(
                        f"QEMU exited before connecting to the {which} socket",
                        argv=self.argv, status=status, output_tail=self.output_tail(),
                    ) from None  # fmt: skip
                if time.monotonic() > self._deadline:
                    raise QEMUStartError(
                        f"QEMU did not connect to the {which} socket within {self.start_timeout} s",
                        argv=self.argv, output_tail=self.output_tail(),
                    ) from None  # fmt: skip

    def shutdown(self, timeout: float | None = None) -> int | None:
        """Stop QEMU (QMP ``quit`` if QMP is in use, else SIGTERM, which QEMU handles as cleanly;
        then SIGTERM, then SIGKILL) and remove its files. ``timeout`` for each step: 5 s, or
        :data:`GCOV_STOP_TIMEOUT` for a gcov build.

        Returns the exit status, or None if QEMU was never started.
        """
        if timeout is None:
            timeout = GCOV_STOP_TIMEOUT if writes_coverage(self.config.binary) else STOP_TIMEOUT
        self.stopped_by_harness = True
        try:
            if self._proc is not None and self.is_running() and self.unresponsive:
                self._proc.kill()  # it already failed to answer qtest: asking it to quit would only wait
            if self._proc is not None and self.is_running():
                self._proc.send_signal(signal.SIGCONT)  # a stopped QEMU could not obey quit
            asked = False
            if self._qmp is not None and self.is_running():  # QMP in use: quit through it
                from qemu.qmp import QMPError

                with contextlib.suppress(QMPError, OSError, TimeoutError, EOFError):
                    self._qmp.settimeout(timeout)
                    self._qmp.cmd("quit")
                    asked = True
            return self._stop_process(timeout, asked_to_quit=asked)  # else SIGTERM: QEMU ends as cleanly
        finally:
            self._close_connections()
            self._remove_dir()

    def _stop_process(self, timeout: float = 5.0, *, asked_to_quit: bool = False) -> int | None:
        """Wait for QEMU to end: ``timeout`` for one asked to quit, then SIGTERM and ``timeout``
        again, then SIGKILL. One that already ended keeps its own exit status."""
        proc = self._proc
        if proc is None:
            return None
        for sig in (None, signal.SIGTERM, signal.SIGKILL) if asked_to_quit else (signal.SIGTERM, signal.SIGKILL):
            if sig is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)
            try:
                return proc.wait(timeout=timeout if sig is not signal.SIGKILL else None)
            except subprocess.TimeoutExpired:
                continue
        return proc.returncode

    def _close_connections(self) -> None:
        self._close_listeners()
        if self.guest_ram is not None:
            self.guest_ram.close()
            self.guest_ram = None
        if self._qtest is not None:
            self._qtest.close()
        if self._qmp is not None:
            from qemu.qmp import QMPError

            with contextlib.suppress(QMPError, OSError, RuntimeError, EOFError):
                self._qmp.close()
            self._qmp = None
        if self._qmp_socket is not None:
            self._qmp_socket.close()
            self._qmp_socket = None

    def _remove_dir(self) -> None:
        if self.injector is not None:
            self.injector.close()
        if self._dir.exists():
            self._saved_log = self.output_text()
        self._dir_removal()

    # -- state ------------------------------------------------------------------------------------

    @property
    def qtest(self) -> QTest:
        if self._qtest is None:
            raise HarnessMisuse(f"qtest of a QEMU that was never started: {' '.join(self.argv)}")
        return self._qtest

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def cpu_seconds(self) -> float:
        """CPU time QEMU has used so far, all its threads, user and system (/proc/PID/stat)."""
        if self.pid is None:
            raise HarnessMisuse("CPU time of a QEMU that was never started")
        return cpu_seconds(self.pid)

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def resources(self) -> Resources:
        """What the running QEMU holds now, from /proc: resident memory, its high-water mark,
        open file descriptors, and its soft RLIMIT_NOFILE."""
        if self.pid is None:
            raise HarnessMisuse("resources of a QEMU that was never started")
        status = dict(line.split(":", 1) for line in Path(f"/proc/{self.pid}/status").read_text().splitlines())
        limits = Path(f"/proc/{self.pid}/limits").read_text()
        nofile = re.search(r"^Max open files\s+(\d+)", limits, re.MULTILINE)
        maps = Path(f"/proc/{self.pid}/maps").read_text()
        return Resources(
            rss_kib=int(status["VmRSS"].split()[0]), hwm_kib=int(status["VmHWM"].split()[0]),
            fds=len(os.listdir(f"/proc/{self.pid}/fd")), nofile=int(nofile.group(1)) if nofile else 0,
            sanitized="libasan" in maps or "libtsan" in maps, tsan="libtsan" in maps,
        )  # fmt: skip

    def descriptors(self) -> frozenset[int]:
        """The host file descriptors the running QEMU holds now, by number (/proc/PID/fd: one
        directory read, ~20 us for QEMU's ~40 descriptors)."""
        if self.pid is None:
            raise HarnessMisuse("descriptors of a QEMU that was never started")
        return frozenset(int(name) for name in os.listdir(f"/proc/{self.pid}/fd"))

    def descriptor_targets(self, fds: Iterable[int]) -> dict[int, str]:
        """What each of ``fds`` is open on (a path, ``socket:[…]``, ``anon_inode:…``), or why not:
        one readlink each, for naming a descriptor a check found, not for counting."""
        targets = {}
        for fd in sorted(fds):
            try:
                targets[fd] = os.readlink(f"/proc/{self.pid}/fd/{fd}")
            except OSError as err:
                targets[fd] = f"({err.strerror}: closed since)"
        return targets

    def wedge_bound(self, seconds: float) -> float:
        """How long a case waits for this QEMU to finish an operation (a reset, an unplug) before it
        calls its main loop wedged: ``seconds``, the bound for a plain build, stretched by
        :data:`SANITIZER_SLOWDOWN` for a sanitizer build, which is that much slower."""
        return seconds * (SANITIZER_SLOWDOWN if self.resources().sanitized else 1)

    @property
    def exit_status(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def output_text(self) -> str:
        """Everything QEMU printed so far (stdout and stderr), benign stop noise removed."""
        try:
            text = self.log_path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            text = getattr(self, "_saved_log", "")
        return "".join(line for line in text.splitlines(keepends=True) if line.strip() not in BENIGN_OUTPUT)

    def output_tail(self, lines: int = OUTPUT_TAIL_LINES) -> str:
        return "".join(self.output_text().splitlines(keepends=True)[-lines:])

    def output_mark(self) -> int:
        """A position to pass to :meth:`output_since`."""
        return len(self.output_text())

    def output_since(self, mark: int) -> str:
        return self.output_text()[mark:]

    def _explain_lost(self, err: QTestError) -> Exception | None:
        """qtest lost its peer: say whether QEMU died, and how. A closed socket means QEMU is going:
        its status is waited for (up to :data:`EXIT_AFTER_DISCONNECT`). A reply that did not come
        in time is a QEMU that is still there unless it has already gone: waiting a second more for
        an exit that is not coming cost each wedged-QEMU case (a known bug's) that second."""
        proc = self._proc
        if proc is None:
            return None
        status: int | None
        if isinstance(err, QTestTimeout):
            status = proc.poll()
        else:
            try:
                status = proc.wait(timeout=EXIT_AFTER_DISCONNECT)
            except subprocess.TimeoutExpired:
                status = None
        if status is None:
            self.unresponsive = True
            return QEMUError(
                f"{err}; QEMU (pid {proc.pid}) is still running but does not answer",
                argv=self.argv, output_tail=self.output_tail(),
            )  # fmt: skip
        return QEMUExited(f"QEMU died: {err}", argv=self.argv, status=status, output_tail=self.output_tail())

    # -- QMP ----------------------------------------------------------------------------------------

    def qmp(self, command: str, **args: object) -> object:
        """Run a QMP command and return its ``return`` value."""
        return self._monitor().cmd(command, **args)

    def unplug(self, timeout: float = 10.0) -> None:
        """Hot-unplug the virtio-9p device as libqos's qpci_unplug_acpi_device_test() does: QMP
        ``device_del``, the guest's ACPI eject of its slot, then the DEVICE_DELETED event.
        :class:`QEMUError` when the event does not come (QEMU wedged or the device stays)."""
        monitor = self._monitor()
        monitor.clear_events()
        monitor.cmd("device_del", id=DEVICE_ID)
        slot = int(self.config.pci_addr.split(".")[0], 16)
        deadline = time.monotonic() + timeout
        # as a guest's GPE handler does: read which slots are to go (PCI_DOWN), then eject; an eject
        # written before QEMU has marked the slot down is ignored
        # every qtest wait ends by the deadline too: a QEMU wedged in the unplug (a known bug) is
        # not given the connection's whole timeout on top of this one
        with self.qtest.timeout_at_most(timeout):
            while not self.qtest.inl(ACPI_PCIHP_DOWN) & (1 << slot):
                if time.monotonic() > deadline:
                    raise QEMUError(f"device_del did not mark slot {slot} for removal", argv=self.argv)
                time.sleep(0.001)
            self.qtest.outl(ACPI_PCIHP_EJECT, 1 << slot)
            while (left := deadline - time.monotonic()) > 0:
                try:
                    event = monitor.pull_event(wait=min(0.05, left))
                except TimeoutError:
                    # the device is finalized from an RCU callback whose event can sit until QEMU's
                    # main loop wakes up for something else: a qtest round trip wakes it
                    with self.qtest.timeout_at_most(deadline - time.monotonic()):
                        self.qtest.inl(ACPI_PCIHP_DOWN)
                    continue
                if event and event.get("event") == "DEVICE_DELETED" and event["data"].get("device") == DEVICE_ID:
                    return
        raise QEMUError(f"no DEVICE_DELETED event within {timeout} s after device_del", argv=self.argv,
                        output_tail=self.output_tail())  # fmt: skip

    def system_reset(self, timeout: float = 10.0) -> None:
        """QMP ``system_reset`` and wait for the RESET event, as qos-test does between cases."""
        monitor = self._monitor()
        monitor.clear_events()
        monitor.cmd("system_reset")
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            event = monitor.pull_event(wait=left)
            if event and event.get("event") == "RESET":
                return
        raise QEMUError(f"no RESET event within {timeout} s after system_reset", argv=self.argv)
