"""QEMU's argv from typed configuration, and QMP on a real QEMU."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fixtures.devices import QemuUnderTest
from harness.p9.channel import Channel
from harness.p9.session import Session
from harness.qemu import machine, process, sanitizers
from harness.qemu.config import LocalFs, MachineConfig
from harness.qemu.machine import Machine
from harness.virtio.driver import Driver
from tests.subrun import run_pytest


def test_argv_for_local_legacy() -> None:
    config = MachineConfig(
        binary=Path("/q"),
        fs=LocalFs(Path("/tmp/a,b"), security_model="passthrough", multidevs="remap"),
        transport="legacy",
        ram_mib=256,
        ioeventfd=False,
    )
    argv = config.argv(Path("/s/qtest.sock"), Path("/s/qmp.sock"))
    assert argv[0] == "/q"
    assert argv[argv.index("-fsdev") + 1] == "local,id=fsdev0,path=/tmp/a,,b,security_model=passthrough,multidevs=remap"
    device = argv[argv.index("-device") + 1]
    assert device == "virtio-9p-pci,id=v9p0,fsdev=fsdev0,mount_tag=qtest,addr=04.0,disable-modern=on,ioeventfd=off"
    assert argv[argv.index("-m") + 1] == "256M"
    assert argv[argv.index("-qmp") + 1] == "unix:/s/qmp.sock" and "-mon" not in argv
    assert argv[-2:] == ["-accel", "qtest"]


def test_qemu_prints_no_deprecation_warning_for_our_argv(qemu_under_test: QemuUnderTest) -> None:
    """Whatever QEMU is under test, the options the harness starts it with are current there."""
    config = MachineConfig(binary=qemu_under_test.binary, accel=qemu_under_test.probe.accel)
    with Machine(config) as machine:
        machine.qmp("query-status")  # QMP greeted too: every connection the harness makes is up
        printed = machine.output_text()
    assert "deprecated" not in printed.lower(), printed


def test_degraded_accel_stops_the_vcpus() -> None:
    argv = MachineConfig(binary=Path("/q"), accel="tcg").argv(Path("/a"), Path("/b"))
    assert argv[-3:] == ["-accel", "tcg", "-S"]


def test_equal_configs_share_a_qemu() -> None:
    assert MachineConfig(binary=Path("/q")) == MachineConfig(binary=Path("/q"))
    assert hash(MachineConfig(binary=Path("/q"), transport="legacy")) != hash(MachineConfig(binary=Path("/q")))


def test_system_reset_waits_for_the_reset_event_and_the_device_comes_back(qemu_under_test: QemuUnderTest) -> None:
    config = MachineConfig(binary=qemu_under_test.binary, accel=qemu_under_test.probe.accel)
    with Machine(config) as machine:
        channel = Channel(Driver(machine.qtest, machine.config.transport))
        Session(channel).version()
        machine.system_reset()
        assert channel.driver.status() == 0  # the reset reached the device
        channel.reset()
        session = Session(channel)
        assert session.version().msize == 8192
        status = machine.qmp("query-status")
        assert isinstance(status, dict) and (status["status"], status["running"]) == ("running", True)


def test_fresh_qemu_marker_gives_a_process_of_its_own(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    source = textwrap.dedent(
        """
        import pytest
        from fixtures.case_path import case_path

        PIDS = []

        @case_path("a", backends=["synth"])
        def test_a_shared(device):
            PIDS.append(device.machine.pid)

        @pytest.mark.fresh_qemu
        @case_path("b", backends=["synth"])
        def test_b_fresh(device):
            PIDS.append(device.machine.pid)
            assert PIDS[0] != PIDS[1]

        @case_path("c", backends=["synth"])
        def test_c_shared_again(device):
            assert device.machine.pid == PIDS[0]
        """
    )
    proc = run_pytest(tmp_path, qemu_under_test, source=source)
    out, _ = proc.communicate(timeout=60)
    assert out.strip().splitlines()[-1].startswith("3 passed"), out


def test_the_shared_qemus_of_the_selected_cases_run_before_the_first_case(
    tmp_path: Path, qemu_under_test: QemuUnderTest
) -> None:
    """One QEMU per configuration the selected cases share is started when collection ends (all
    spawned, then each connected): none for a fresh_qemu case, none for a case not selected."""
    source = textwrap.dedent(
        """
        import os
        import pytest
        from fixtures.case_path import case_path

        @case_path("a", backends=["synth", "local"])
        def test_a(device, machine_pool):
            assert machine_pool.cpu.starts == int(os.environ["STARTED"])  # all, before the first case

        @pytest.mark.fresh_qemu
        @case_path("b", backends=["synth"])
        def test_b_fresh(device, machine_pool):
            assert machine_pool.cpu.starts == int(os.environ["STARTED"]) + 1  # its own QEMU counts too

        @pytest.mark.fsdev(security_model="none")
        @case_path("c", backends=["local"])
        def test_c_a_configuration_of_its_own(device, machine_pool):
            assert machine_pool.cpu.starts == int(os.environ["STARTED"]) + 1  # b's, and no start of its own
        """
    )
    for args, started, passed in ((), 3, 4), (("-k", "not own"), 2, 3):
        proc = run_pytest(tmp_path, qemu_under_test, *args, source=source, env={"STARTED": str(started)})
        out, _ = proc.communicate(timeout=60)
        assert out.strip().splitlines()[-1].startswith(f"{passed} passed"), out


def test_a_spawned_qemu_never_connected_stops_at_once(qemu_under_test: QemuUnderTest) -> None:
    """A start-up abandoned between spawn() and connect() (a run interrupted while the pool starts
    QEMUs ahead of the cases): nobody greeted QMP, so shutdown signals at once instead of asking
    QMP to quit and waiting out its timeout."""
    machine = Machine(MachineConfig(binary=qemu_under_test.binary, accel=qemu_under_test.probe.accel))
    machine.spawn()
    pid = machine.pid
    started = time.monotonic()
    assert machine.shutdown() in (0, -signal.SIGTERM)  # QEMU may have set up its SIGTERM handler by then
    assert time.monotonic() - started < 1.0
    assert not Path(f"/proc/{pid}").exists()


def test_clock_commands_on_the_qtest_accelerator(qemu_under_test: QemuUnderTest) -> None:
    """clock_step and clock_set move QEMU's virtual clock only under the qtest accelerator."""
    config = MachineConfig(binary=qemu_under_test.binary, accel=qemu_under_test.probe.accel)
    with Machine(config) as machine:
        qt = machine.qtest
        now = qt.clock_step(100)
        assert qt.clock_set(now + 1_000_000) == now + 1_000_000
        qt.writeq(0x200000, 0x1122334455667788)
        assert qt.readq(0x200000) == 0x1122334455667788
        assert qt.hexread(0x200000, 2) == b"\x88\x77"


ASAN = """some QEMU line
=================================================================
==4242==ERROR: AddressSanitizer: heap-use-after-free on address 0x602000000010 at pc 0x55 bp 0x7f sp 0x7f
READ of size 8 at 0x602000000010 thread T0
    #0 0x55d in v9fs_reset ../hw/9pfs/9p.c:4560
SUMMARY: AddressSanitizer: heap-use-after-free ../hw/9pfs/9p.c:4560 in v9fs_reset
==4242==ABORTING
"""
UBSAN = "qemu: warning\n../hw/9pfs/9p.c:1290:23: runtime error: left shift of 1 by 31 places\n    #0 0x1 in f\n"


#: The shape of a TSan report (the util/async.c one is what master's TSan build prints in every
#: run: QEMU core's, not the device's)
TSAN_CORE = """==================
WARNING: ThreadSanitizer: data race (pid=27270)
  Read of size 8 at 0x7b48000519b0 by thread T6:
    #0 aio_bh_enqueue ../src/qemu-11.1.50/util/async.c:95 (qemu-system-x86_64+0x9fd567)
  Previous atomic write of size 8 at 0x7b48000519b0 by main thread (mutexes: write M23):
    #0 aio_bh_poll ../src/qemu-11.1.50/util/async.c:188 (qemu-system-x86_64+0x9fd06c)
SUMMARY: ThreadSanitizer: data race ../src/qemu-11.1.50/util/async.c:95 in aio_bh_enqueue
==================
"""
TSAN_CORE_CALLED_BY_9P = TSAN_CORE.replace(
    "    #0 aio_bh_enqueue ../src/qemu-11.1.50/util/async.c:95 (qemu-system-x86_64+0x9fd567)\n",
    "    #0 aio_bh_enqueue ../src/qemu-11.1.50/util/async.c:95 (qemu-system-x86_64+0x9fd567)\n"
    "    #2 v9fs_walk ../src/qemu-11.1.50/hw/9pfs/9p.c:1988 (qemu-system-x86_64+0x3a76a7)\n",
)
TSAN_9P = """==================
WARNING: ThreadSanitizer: data race (pid=27271)
  Write of size 8 at 0x7b0c00001230 by thread T7:
    #0 v9fs_path_copy ../src/qemu-11.1.50/hw/9pfs/9p.c:212 (qemu-system-x86_64+0x5a1b2c)
  Previous read of size 8 at 0x7b0c00001230 by main thread:
    #0 v9fs_walk ../src/qemu-11.1.50/hw/9pfs/9p.c:1890 (qemu-system-x86_64+0x5a3c4d)
SUMMARY: ThreadSanitizer: data race ../src/qemu-11.1.50/hw/9pfs/9p.c:212 in v9fs_path_copy
==================
"""


TSAN_GUEST = """WARNING: ThreadSanitizer: data race (pid=27839)
  Write of size 1 at 0x7fe51270200b by thread T5:
    #0 preadv64 ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:1123
    #1 local_preadv ../src/qemu-11.1.50/hw/9pfs/9p-local.c:601 (qemu-system-x86_64+0x399db7)
  Previous read of size 8 at 0x7fe512702008 by main thread (mutexes: write M23):
    #3 qemu_ram_move ../src/qemu-11.1.50/system/physmem.c:3181 (qemu-system-x86_64+0x714fbd)
    #9 qtest_process_command ../src/qemu-11.1.50/system/qtest.c:610 (qemu-system-x86_64+0x72042c)
SUMMARY: ThreadSanitizer: data race ../src/qemu-11.1.50/hw/9pfs/9p-local.c:601 in local_preadv
"""


def test_a_tsan_report_counts_when_9pfs_is_in_it() -> None:
    """TSan reports of QEMU's core (util/async.c, whoever called it), or of 9pfs against qtest's own
    access to guest memory (the guest's part, ordered by the virtio ring), fail no 9p case; the
    first whose SUMMARY is in hw/9pfs/ or fsdev/ is the case's, from its WARNING line to its
    SUMMARY line."""
    assert sanitizers.sanitizer_report(TSAN_CORE) is None
    assert "v9fs_walk" in TSAN_CORE_CALLED_BY_9P and sanitizers.sanitizer_report(TSAN_CORE_CALLED_BY_9P) is None
    assert sanitizers.sanitizer_report(TSAN_GUEST) is None
    found = sanitizers.sanitizer_report("boot\n" + TSAN_CORE + TSAN_9P + TSAN_CORE)
    assert found is not None and found.startswith("WARNING: ThreadSanitizer: data race (pid=27271)")
    assert found.endswith("in v9fs_path_copy") and "util/async.c" not in found


def test_sanitizer_reports_are_found_whole() -> None:
    assert sanitizers.sanitizer_report("9p: degraded performance\nQEMU quit\n") is None
    asan = sanitizers.sanitizer_report(ASAN)
    assert asan is not None and asan.startswith("==4242==ERROR: AddressSanitizer: heap-use-after-free")
    assert asan.endswith("in v9fs_reset") and "#0 0x55d in v9fs_reset" in asan
    ubsan = sanitizers.sanitizer_report(UBSAN)
    assert ubsan is not None and ubsan.startswith("../hw/9pfs/9p.c:1290:23: runtime error: left shift")


def test_a_wedge_is_called_sooner_on_a_plain_build_than_on_a_sanitizer_build(
    qemu_under_test: QemuUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wedge_bound``: the plain bound on a build without a sanitizer runtime mapped, that times
    SANITIZER_SLOWDOWN where ASan or TSan is (read from the running QEMU's /proc maps)."""
    qemu = Machine(MachineConfig(binary=qemu_under_test.binary, accel=qemu_under_test.probe.accel))
    qemu.launch()
    try:
        seen = qemu.resources()
        assert qemu.wedge_bound(0.5) == (0.5 * machine.SANITIZER_SLOWDOWN if seen.sanitized else 0.5)
        monkeypatch.setattr(qemu, "resources", lambda: dataclasses.replace(seen, sanitized=True))
        assert qemu.wedge_bound(0.5) == 0.5 * machine.SANITIZER_SLOWDOWN > 0.5
    finally:
        qemu.shutdown()


def test_cpu_seconds_of_another_process_to_the_nanosecond_and_of_its_ended_threads() -> None:
    """A process's CPU time as the benches read QEMU's: finer than /proc's 10 ms ticks (a short
    row would read 0), and counting threads that have ended, as QEMU's thread pool's do."""
    busy = textwrap.dedent("""
        import threading, time
        def spin():
            end = time.process_time() + 0.15
            while time.process_time() < end:
                pass
        t = threading.Thread(target=spin)
        t.start()
        t.join()
        print("done", flush=True)
        input()
    """)
    child = subprocess.Popen([sys.executable, "-c", busy], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "done\n"  # its spinning thread has ended
        first = process.cpu_seconds(child.pid)
        assert first >= 0.15 and abs(first - process.proc_cpu_seconds(child.pid)) <= 0.03
        assert first != round(first, 2)  # nanoseconds, not ticks
    finally:
        child.kill()
        child.wait()
    assert process.cpu_seconds() == pytest.approx(time.process_time(), abs=0.01)


def test_a_machine_left_unstopped_leaves_no_directory(tmp_path: Path) -> None:
    """A Machine never stopped (its process ended by an uncaught KeyboardInterrupt) still has its
    directory removed when the interpreter exits."""
    script = textwrap.dedent(f"""
        from pathlib import Path
        from harness.qemu.config import MachineConfig
        from harness.qemu.machine import Machine
        kept = Machine(MachineConfig(binary=Path("/q")), workdir=Path({str(tmp_path)!r}))
        (kept._dir / "qemu.log").write_text("a log")
        raise KeyboardInterrupt
    """)
    ended = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=Path(__file__).parents[1]
    )
    assert "KeyboardInterrupt" in ended.stderr, ended.stderr
    assert list(tmp_path.iterdir()) == []
