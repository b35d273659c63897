"""Faults injected into a real QEMU: killed, stopped, and pytest runs that end badly.

These need the QEMU under test (``qemu_under_test``), like the cases, but check the harness.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.devices import QemuUnderTest
from fixtures.pool import MachinePool
from harness.errors import QEMUError, QEMUExited, QEMUStartError
from harness.p9.channel import Channel
from harness.p9.messages import Tattach, Twrite
from harness.p9.session import Session
from harness.qemu import versions
from harness.qemu.config import LocalFs, MachineConfig
from harness.qemu.machine import Machine
from harness.virtio.driver import Driver
from tests.subrun import run_pytest, shm_files

PROJECT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def no_file_in_dev_shm() -> Iterator[None]:
    """Whatever the fault, /dev/shm gains nothing: shared guest RAM is a memfd, never a file."""
    before = shm_files()
    yield
    assert shm_files() - before == set()


def config(qemu: QemuUnderTest, **kwargs: object) -> MachineConfig:
    return MachineConfig(**{"binary": qemu.binary, "accel": qemu.probe.accel, **kwargs})  # type: ignore[arg-type]


def test_killed_qemu_is_reported_with_status_and_stderr(qemu_under_test: QemuUnderTest) -> None:
    with Machine(config(qemu_under_test)) as machine:
        session = Session(Channel.of(machine))
        session.version()
        root = session.new_fid()
        session.attach(root)
        assert machine.pid is not None
        os.kill(machine.pid, signal.SIGKILL)
        with pytest.raises(QEMUExited) as info:
            session.getattr(root)
        text = str(info.value)
        assert "killed by SIGKILL (-9)" in text
        assert "argv: " + str(qemu_under_test.binary) in text
        assert any("Tgetattr(fid=0" in note for note in info.value.__notes__), "the error must name the request"
        assert info.value.crashed


def test_killed_while_a_request_is_in_flight(qemu_under_test: QemuUnderTest) -> None:
    with Machine(config(qemu_under_test)) as machine:
        session = Session(Channel.of(machine))
        session.version()
        session.attach(0)
        fid = session.walk_fid(0, ["FLUSH"])
        session.lopen(fid, 1)
        blocked = session.send(Twrite(fid=fid, offset=0, data=b"\x01"))  # blocks in the server
        assert machine.pid is not None
        os.kill(machine.pid, signal.SIGKILL)
        with pytest.raises(QEMUExited, match=r"killed by SIGKILL \(-9\)") as info:
            blocked.result()
        assert any("Twrite(fid=1, offset=0" in note for note in info.value.__notes__)


def test_killed_during_start_up(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """QEMU dies before it connects: QEMUStartError with the signal, and nothing left behind."""
    slow = tmp_path / "qemu-system-x86_64"
    slow.write_text(f'#!/bin/sh\nsleep 5\nexec {qemu_under_test.binary} "$@"\n')
    slow.chmod(0o755)
    machine = Machine(config(qemu_under_test, binary=slow), workdir=tmp_path)

    def kill_soon() -> None:
        deadline = time.monotonic() + 5
        while machine.pid is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        if machine.pid is not None:
            os.kill(machine.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_soon)
    killer.start()
    with pytest.raises(QEMUStartError, match="exited before connecting") as info:
        machine.launch()
    killer.join()
    assert info.value.status == -signal.SIGKILL
    assert [p.name for p in tmp_path.iterdir()] == ["qemu-system-x86_64"]  # its directory is gone


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"firmware_dirs": ()}, "could not load PC BIOS 'bios-256k.bin'", id="missing-firmware"),
        pytest.param({"fs": LocalFs(Path("/nonexistent/export"))}, "/nonexistent/export", id="export-missing"),
        pytest.param({"extra_args": ("-no-such-option",)}, "-no-such-option", id="bad-option"),
    ],
)
def test_qemu_refusing_to_start_is_quoted(
    qemu_under_test: QemuUnderTest, change: dict[str, object], message: str
) -> None:
    bad = config(qemu_under_test, **change)
    with pytest.raises(QEMUStartError) as info:
        Machine(bad).launch()
    assert message in info.value.output_tail, info.value.output_tail
    assert info.value.status == 1
    assert str(info.value).count("argv: " + str(qemu_under_test.binary)) == 1


def test_busy_socket_path_is_named(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    machine = Machine(config(qemu_under_test), workdir=tmp_path)
    (machine.log_path.parent / "qtest.sock").mkdir()  # something already holds the socket's name
    with pytest.raises(QEMUStartError, match="Address already in use") as info:
        machine.launch()
    assert info.value.argv == machine.argv
    assert not any(tmp_path.iterdir())
    assert machine.pid is None  # QEMU was never started


def test_pool_replaces_a_dead_qemu(qemu_under_test: QemuUnderTest) -> None:
    pool = MachinePool()
    try:
        first = pool.get(config(qemu_under_test))
        assert first.machine.pid is not None
        os.kill(first.machine.pid, signal.SIGKILL)
        first.machine._proc.wait()  # type: ignore[union-attr]
        second = pool.get(config(qemu_under_test))
        assert second is not first and second.alive() and pool.cpu.starts == 2
        session = Session(second.channel)
        assert session.version().msize == 8192
    finally:
        pool.close()


def test_stopped_qemu_times_out_naming_the_request_and_is_cleaned_up(qemu_under_test: QemuUnderTest) -> None:
    machine = Machine(config(qemu_under_test), qtest_timeout=0.5)
    machine.launch()
    try:
        session = Session(Channel.of(machine))
        session.version()
        assert machine.pid is not None
        os.kill(machine.pid, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(QEMUError, match="still running but does not answer") as info:
            session.rpc(Tattach(fid=0, afid=0xFFFFFFFF, uname="", aname="", n_uname=0))
        assert time.monotonic() - start < 5
        assert any("Tattach(fid=0" in note for note in info.value.__notes__), "the error must name the request"
        # a qtest timeout is reported at once: no second spent waiting for an exit that is not coming
        wedged_at = time.monotonic()
        with pytest.raises(QEMUError, match="still running but does not answer"):
            machine.qtest.query("endianness")
        assert time.monotonic() - wedged_at < machine.qtest.timeout + 0.5
    finally:
        start = time.monotonic()
        status = machine.shutdown()
    assert status is not None and not machine.is_running()
    assert time.monotonic() - start < 3


def _our_qemus(marker: str, *, probes: bool = False) -> list[int]:
    """QEMU processes whose working directory (their machine directory) lies below ``marker``;
    with ``probes`` also the short runs of ``provision.probe``, which work in ``marker`` itself."""
    out = subprocess.run(["pgrep", "-f", "qemu-system"], capture_output=True, text=True, check=False).stdout
    pids = []
    for pid in map(int, out.split()):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue  # gone meanwhile
        if cwd.startswith(marker + "/") or (probes and cwd == marker):
            pids.append(pid)
    return pids


CASE = textwrap.dedent(
    """
    import os, time
    from fixtures.case_path import case_path

    @case_path("fault/sleeper", backends=["synth", "local"])
    def test_sleeper(attached):
        attached.clunk(0)
        open(os.path.join(os.environ["TMPDIR"], f"sleeping-{os.getpid()}"), "w").close()
        time.sleep(float(os.environ.get("SLEEP", "60")))
    """
)


def _wait_for_sleepers(tmp_path: Path, count: int, proc: subprocess.Popen[str]) -> None:
    """Until ``count`` processes are in the middle of a case (QEMUs start ahead of the cases)."""
    deadline = time.monotonic() + 30
    while len(list(tmp_path.glob("sleeping-*"))) < count:
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "no case started"
        time.sleep(0.05)


def _leftovers(tmp_path: Path) -> list[str]:
    """Run directories, machine directories (sockets, QEMU output) and exports left in TMPDIR."""
    return sorted(str(p) for p in tmp_path.rglob("v9p-*"))


@pytest.mark.parametrize(
    ("args", "sig", "sleepers", "dead_pipe"),
    [
        pytest.param((), signal.SIGINT, 1, False, id="ctrl-c"),
        pytest.param((), signal.SIGINT, 1, True, id="ctrl-c-dead-pipe"),
        pytest.param((), signal.SIGTERM, 1, False, id="sigterm"),
        pytest.param((), signal.SIGHUP, 1, False, id="sighup"),
        pytest.param((), signal.SIGHUP, 1, True, id="sighup-dead-pipe"),
        pytest.param(("-n", "2"), signal.SIGINT, 2, False, id="ctrl-c-xdist"),
        pytest.param(("-n", "2"), signal.SIGINT, 2, True, id="ctrl-c-dead-pipe-xdist"),
        pytest.param(("-n", "2"), signal.SIGTERM, 2, False, id="sigterm-xdist"),
        pytest.param(("-n", "2"), signal.SIGKILL, 2, False, id="kill-9-xdist"),
        pytest.param(("ignoring",), signal.SIGINT, 1, False, id="ctrl-c-started-by-a-job-ignoring-it"),
    ],
)
def test_no_qemu_left_after_pytest_ends(
    tmp_path: Path, qemu_under_test: QemuUnderTest, args: tuple[str, ...], sig: signal.Signals, sleepers: int,
    dead_pipe: bool,
) -> None:  # fmt: skip
    """However pytest is stopped (Ctrl-C, SIGTERM, SIGHUP; with its output piped to a reader that
    is gone, as `pytest | tee log` after Ctrl-C), no QEMU and no run directory is left. The last
    is started as a background job of a non-interactive shell starts it, SIGINT ignored: the
    self-test gives the child the disposition it tests (tests/subrun.default_signals)."""
    if args == ("ignoring",):
        args, before = (), signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            proc = run_pytest(tmp_path, qemu_under_test, source=CASE)
        finally:
            signal.signal(signal.SIGINT, before)
    else:
        proc = run_pytest(tmp_path, qemu_under_test, *args, source=CASE)
    try:
        _wait_for_sleepers(tmp_path, sleepers, proc)
        if dead_pipe:
            assert proc.stdout is not None
            proc.stdout.close()  # the reader is gone: pytest's next write is EPIPE
        os.killpg(proc.pid, sig)  # the whole process group, as a terminal's Ctrl-C
        proc.wait(timeout=30) if dead_pipe else proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    _assert_no_qemu(tmp_path)
    if sig != signal.SIGKILL:  # after kill -9 of everything nobody is left to clean up
        assert _leftovers(tmp_path) == []


def test_a_second_sigterm_lets_the_teardown_the_first_began_go_on(capfd: pytest.CaptureFixture[str]) -> None:
    """The first SIGTERM (or SIGHUP) stops the run as Ctrl-C does; one more, while the run tears
    down (a second `kill`, a CI runner's cancel), is let go by with a line on stderr. Before, it
    raised in the middle of that teardown: killed twice mid-way through the posix family, the run
    stopped waiting for its workers and left its run directory behind."""
    from fixtures.plugin import _stop_like_ctrl_c

    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        signal.signal(signal.SIGTERM, _stop_like_ctrl_c)
        signal.signal(signal.SIGHUP, _stop_like_ctrl_c)
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.1)  # had either raised, the test would have ended here
        assert capfd.readouterr().err.count("already stopping; teardown goes on") == 2
    finally:
        for signum, handler in kept.items():
            signal.signal(signum, handler)


def test_a_killed_xdist_worker_leaves_nothing(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """One worker is SIGKILLed mid-case: its QEMU dies with it (PR_SET_PDEATHSIG) and the controller,
    which owns the run directory, removes that worker's sockets and exports at the end."""
    proc = run_pytest(
        tmp_path, qemu_under_test, "-n", "2", "--max-worker-restart", "0", source=CASE, env={"SLEEP": "3"}
    )
    try:
        _wait_for_sleepers(tmp_path, 2, proc)
        qemus = _our_qemus(str(tmp_path))
        assert qemus, "the QEMUs went away before a worker could be killed"
        status = Path(f"/proc/{qemus[0]}/status").read_text()
        worker = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        os.kill(worker, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "crashed" in out or "worker" in out, out
    _assert_no_qemu(tmp_path)
    assert _leftovers(tmp_path) == []


def _assert_no_qemu(tmp_path: Path) -> None:
    deadline = time.monotonic() + 5
    while _our_qemus(str(tmp_path), probes=True) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _our_qemus(str(tmp_path), probes=True) == []


KILLER = textwrap.dedent(
    """
    import os, signal
    from fixtures.case_path import case_path

    @case_path("fault/killed", backends=["synth"])
    def test_a_killed(attached, device):
        os.kill(device.machine.pid, signal.SIGKILL)
        attached.getattr(0)

    @case_path("fault/after", backends=["synth"])
    def test_b_after(attached, device):
        assert attached.getattr(0).qid.type == 0x80
    """
)


def test_case_after_a_killed_qemu_gets_a_fresh_one(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    proc = run_pytest(tmp_path, qemu_under_test, source=KILLER)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert "1 failed, 1 passed" in out
    assert "QEMUExited" in out and "killed by SIGKILL (-9)" in out
    assert "while sending Tgetattr(fid=0" in out or "while waiting for the reply to Tgetattr(fid=0" in out
    summary = next(line for line in out.splitlines() if line.startswith("| synth"))
    assert summary.split("|")[-2].strip() == "1", summary  # the "QEMU died" column
    # the crash is listed on its own, with the exit status and where its artefacts are
    crash = next(line for line in out.splitlines() if "test_a_killed" in line and line.startswith("|"))
    assert "killed by SIGKILL (-9)" in crash
    artefacts = Path(crash.split("|")[3].strip())
    assert artefacts.is_dir() and artefacts.is_relative_to(tmp_path / "v9p-artefacts")
    assert "Tgetattr(fid=0" in (artefacts / "9p-trace.txt").read_text()
    assert (
        "-accel qtest" in (artefacts / "argv.txt").read_text() or "-accel tcg" in (artefacts / "argv.txt").read_text()
    )
    assert (artefacts / "exit-status.txt").read_text().strip() == "killed by SIGKILL (-9)"
    assert (artefacts / "qemu-output.txt").exists()
    assert "test_b_after" not in out.split("QEMU died or hung during")[1]


def test_blocked_request_does_not_poison_the_next_case(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    source = textwrap.dedent(
        """
        import pytest
        from harness.errors import P9Timeout
        from harness.p9.messages import Twrite
        from fixtures.case_path import case_path

        @case_path("fault/blocked", backends=["synth"])
        def test_a_blocked(attached):
            fid = attached.walk_fid(0, ["FLUSH"])
            attached.lopen(fid, 1)
            with pytest.raises(P9Timeout, match=r"Twrite\\(fid=1, offset=0, data=b'\\\\x01'\\)"):
                attached.send(Twrite(fid=fid, offset=0, data=b"\\x01")).result(timeout=0.2)
            assert False, "leave the request in flight"

        @case_path("fault/next", backends=["synth"])
        def test_b_next(attached):
            assert attached.getattr(0).qid.type == 0x80
        """
    )
    proc = run_pytest(tmp_path, qemu_under_test, "--p9-timeout", "2", source=source)
    out, _ = proc.communicate(timeout=60)
    assert "1 failed, 1 passed" in out, out


def test_thousand_resets_stay_flat(qemu_under_test: QemuUnderTest) -> None:
    """1,000 consecutive per-test resets, each with a short session, in one QEMU: the harness's
    guest memory, file descriptors and threads end exactly where they started."""
    with Machine(config(qemu_under_test)) as machine:
        driver = Driver(machine.qtest, machine.config.transport)
        channel = Channel(driver, machine.output_tail)

        def one_case() -> None:
            channel.reset()
            session = Session(channel)
            session.version()
            session.attach(0)
            session.getattr(0)
            session.clunk(0)
            session.close()
            channel.check_idle()

        def measure() -> tuple[int, int, int, int]:
            fds = len(os.listdir("/proc/self/fd"))
            return driver.allocator.free_bytes, len(driver.allocator.allocated), fds, threading.active_count()

        for _ in range(20):  # warm-up: lazily created objects exist before the baseline
            one_case()
        before = measure()
        for _ in range(1000):
            one_case()
        assert measure() == before
        assert machine.is_running() and machine.exit_status is None


SANITIZED = textwrap.dedent(
    """
    import pytest
    from fixtures.case_path import case_path

    NAME = "x: runtime error: injected by the self-test"

    @pytest.mark.qemu_args("-trace", "enable=v9fs_walk")
    @case_path("sanitized", backends=["synth"])
    def test_a_sanitized(attached):
        # QEMU traces the walk's names (10.0 and later): a line that reads as a UBSan report
        from harness.p9.messages import Twalk
        attached.send(Twalk(fid=0, newfid=1, wnames=[NAME])).wait()  # ENOENT, traced all the same

    @case_path("clean", backends=["synth"])
    def test_b_clean(attached):
        attached.getattr(0)
    """
)


def test_sanitizer_report_fails_the_case(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """A sanitizer report in QEMU's output during a case that passed fails it, with the report in
    its artefacts; the next case is not blamed."""
    if not versions.has(qemu_under_test.probe.version, versions.TRACE_WALK_NAMES):
        pytest.skip(f"QEMU {qemu_under_test.probe.version} traces no walk names to inject a report with")
    proc = run_pytest(tmp_path, qemu_under_test, source=SANITIZED)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert "1 failed, 1 passed" in out, out
    assert "QEMU's sanitizer reported during this case" in out and "test_b_clean" not in out.split("FAILED")[-1]
    (report,) = (tmp_path / "v9p-artefacts").rglob("sanitizer.txt")
    assert "runtime error: injected by the self-test" in report.read_text()


FAILING = textwrap.dedent(
    """
    import errno
    from fixtures.case_path import case_path
    from fixtures.expect import expect_rlerror

    @case_path("fault/wrong", backends=["synth"])
    def test_wrong(attached):
        with expect_rlerror(errno.ENOENT):  # WALK0 exists
            attached.walk(0, ["WALK0"], 1)
    """
)


def test_old_artefacts_go_only_when_a_run_writes_new_ones(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """A run that runs nothing, or writes no evidence, leaves an earlier run's artefacts; the first
    one that writes removes them first and says so, with -q too."""
    yesterday = tmp_path / "v9p-artefacts" / "a-case-of-yesterday"
    yesterday.mkdir(parents=True)
    for args in (("--collect-only",), ("-k", "no_such_case"), ("-k", "sleeper and synth")):
        out, _ = run_pytest(tmp_path, qemu_under_test, *args, source=CASE, env={"SLEEP": "0"}).communicate(timeout=60)
        assert yesterday.is_dir(), (args, out)
        assert "removed" not in out, (args, out)
    out, _ = run_pytest(tmp_path, qemu_under_test, source=FAILING).communicate(timeout=60)
    assert "1 failed" in out, out
    assert "removed 1 case directories of an earlier run from v9p-artefacts" in out, out
    assert not yesterday.exists()
    assert list((tmp_path / "v9p-artefacts").rglob("reproducer.9p")), out


HUNG = textwrap.dedent(
    """
    import os, signal
    from fixtures.case_path import case_path
    from harness.p9.messages import Twrite
    from harness.p9.session import Session

    @case_path("fault/hung", backends=["synth"])
    def test_hung(device):
        p9 = Session(device.channel)  # a session of the case's own, not the fixture's
        p9.version(8192)
        p9.attach(0)
        fid = p9.walk_fid(0, ["FLUSH"])
        p9.lopen(fid, 1)
        p9.send(Twrite(fid=fid, offset=0, data=b"\\x01"))  # blocks in the server until flushed
        os.kill(device.machine.pid, signal.SIGSTOP)  # QEMU stops answering
        p9.getattr(0)
    """
)


def test_a_hang_leaves_its_evidence(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """A QEMU that stops answering gets what a crash gets: the case's 9P trace (of a session the
    case made itself too), the requests still outstanding named, a reproducer, QEMU's output; and
    it is killed."""
    out, _ = run_pytest(tmp_path, qemu_under_test, source=HUNG).communicate(timeout=120)
    assert "1 failed" in out, out
    assert "QEMU stopped answering" in out and "tag 0: Twrite(fid=1, offset=0, data=b'\\x01')" in out, out
    assert "QEMU died or hung during 1 case(s)" in out and "stopped answering, killed" in out, out
    (where,) = (tmp_path / "v9p-artefacts").iterdir()
    assert "Twrite(fid=1" in (where / "outstanding.txt").read_text()
    assert "Twalk(fid=0, newfid=1, wnames=['FLUSH'])" in (where / "9p-trace.txt").read_text()
    assert "# qemu-hung: stopped answering at request 6" in (where / "reproducer.9p").read_text()
    assert (where / "qemu-output.txt").exists() and (where / "argv.txt").exists()
    _assert_no_qemu(tmp_path)
