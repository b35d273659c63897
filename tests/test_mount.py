"""``python -m harness mount`` against the QEMU under test: what programs see through it, and that
every way it can end (Ctrl-C, SIGTERM, an unmount from outside, SIGKILL of the harness, QEMU
killed) leaves no mount, no hung process and no QEMU."""

from __future__ import annotations

import errno
import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.devices import QemuUnderTest
from fixtures.mount import REPO, Mount, MountError, cannot_mount, wait_unmounted
from harness.fuse.watcher import mounted
from harness.p9.trace import read_reproducer
from tests.subrun import shares_guest_ram, shm_files

pytestmark = pytest.mark.skipif(cannot_mount() is not None, reason=f"no FUSE mount here: {cannot_mount()}")


@pytest.fixture(autouse=True)
def no_file_in_dev_shm() -> Iterator[None]:
    """However a mount ends, /dev/shm gains nothing (its guest RAM is a memfd, never a file)."""
    before = shm_files()
    yield
    assert shm_files() - before == set()


@pytest.fixture
def export(tmp_path: Path) -> Path:
    directory = tmp_path / "export"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    return directory


@pytest.fixture
def mount(qemu_under_test: QemuUnderTest, export: Path, tmp_path: Path) -> Iterator[Mount]:
    with Mount(qemu_under_test.binary, export, tmp_path, trace_dir=tmp_path / "trace") as running:
        yield running
    assert running.status == 0, running.stderr()
    assert not running.defects()


def qemu_pid(mount: Mount) -> int:
    """The mount's QEMU, which runs on guest RAM shared with the harness (the default path)."""
    found = re.search(r"QEMU pid (\d+)", mount.banner)
    assert found, mount.banner
    assert shares_guest_ram(int(found.group(1)))
    return int(found.group(1))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose: it holds no file and answers nothing
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


def stat_returns(path: Path) -> subprocess.CompletedProcess[str]:
    """``stat PATH`` under a timeout: a stale FUSE mount hangs it (TimeoutExpired)."""
    return subprocess.run(["stat", str(path)], capture_output=True, text=True, timeout=10)


def rundir(qemu: int) -> Path:
    """The mount's own directory: QEMU runs in a directory inside it."""
    return Path(os.readlink(f"/proc/{qemu}/cwd")).parent


def gone(mount: Mount, qemu: int, directory: Path) -> None:
    """What every end must leave: no mount, a stat that returns, no QEMU, no directory."""
    assert not wait_unmounted(mount.path, 15.0), f"{mount.path} is still in /proc/mounts"
    stat_returns(mount.path)
    deadline = time.monotonic() + 10
    while (alive(qemu) or directory.exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(qemu), f"QEMU {qemu} outlived the mount"
    assert not directory.exists(), f"the mount's {directory} outlived it"


def test_programs_see_the_export(mount: Mount, export: Path) -> None:
    """Files, directories, links and attributes made on the mount are the export's, and back."""
    root = mount.path
    (root / "f").write_bytes(b"x" * 200_000)  # more than FUSE hands over in one write (128 KiB)
    (root / "d").mkdir(mode=0o750)
    os.symlink("f", root / "s")
    os.link(root / "f", root / "h")
    os.chmod(root / "f", 0o640)
    os.chown(root / "f", 1234, 5678)
    os.truncate(root / "h", 100_001)
    os.utime(root / "f", ns=(1_000_000_123, 2_000_000_456))
    assert sorted(os.listdir(root)) == sorted(os.listdir(export)) == ["d", "f", "h", "s"]
    host, seen = os.stat(export / "f"), os.stat(root / "f")
    assert (stat.S_IMODE(seen.st_mode), seen.st_uid, seen.st_gid, seen.st_nlink) == (0o640, 1234, 5678, 2)
    assert (stat.S_IMODE(host.st_mode), host.st_uid, host.st_gid, host.st_size) == (0o640, 1234, 5678, 100_001)
    assert (
        (seen.st_atime_ns, seen.st_mtime_ns) == (host.st_atime_ns, host.st_mtime_ns) == (1_000_000_123, 2_000_000_456)
    )
    assert os.stat(root / "h").st_ino == seen.st_ino != os.stat(root / "d").st_ino
    assert os.readlink(root / "s") == "f" and stat.S_IMODE(os.stat(export / "d").st_mode) == 0o750
    assert (root / "f").read_bytes() == b"x" * 100_001 == (export / "f").read_bytes()
    os.rename(root / "f", root / "d" / "g")
    assert (export / "d" / "g").exists() and not (export / "f").exists()
    with pytest.raises(OSError) as refused:
        os.rmdir(root / "d")
    assert refused.value.errno == errno.ENOTEMPTY
    vfs, host_vfs = os.statvfs(root), os.statvfs(export)  # QEMU counts in blocks of about msize
    assert 0 <= host_vfs.f_blocks * host_vfs.f_frsize - vfs.f_blocks * vfs.f_frsize < vfs.f_frsize
    assert (vfs.f_files, vfs.f_namemax) == (host_vfs.f_files, host_vfs.f_namemax)


def test_a_user_creates_as_that_user(mount: Mount, export: Path) -> None:
    """Each uid has its own Tattach: what nobody makes is nobody's, on the host too; the kernel
    refuses nobody what the attributes refuse."""
    os.chmod(mount.path, 0o777)
    script = f"mkdir {mount.path}/n && touch {mount.path}/n/f"
    made = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    host = os.stat(export / "n" / "f")
    assert (host.st_uid, host.st_gid) == (65534, 65534)
    os.chmod(export / "n", 0o755)
    os.chown(export / "n", 0, 0)
    refused = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "touch", f"{mount.path}/n/g"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "Permission denied" in refused.stderr
    assert not (export / "n" / "g").exists()


def test_the_trace_replays(mount: Mount, tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """A program's requests become a reproducer that replay sends to a fresh QEMU, all alike."""
    (mount.path / "a").write_text("hello")
    os.rename(mount.path / "a", mount.path / "b")
    assert (mount.path / "b").read_text() == "hello"
    mount.stop()
    header, steps = read_reproducer(tmp_path / "trace" / "reproducer.9p")
    assert header["backend"] == "local" and len(steps) > 10
    assert "Trenameat(" in (tmp_path / "trace" / "reproducer.9p").read_text()
    replayed = subprocess.run(
        [sys.executable, "-m", "harness", "replay", str(tmp_path / "trace" / "reproducer.9p"),
         "--qemu-binary", str(qemu_under_test.binary)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_a_trace_past_its_limit_is_refused_as_incomplete(
    qemu_under_test: QemuUnderTest, export: Path, tmp_path: Path
) -> None:
    """``--trace-limit 20`` on a longer conversation: the reproducer keeps its last records, says it
    lacks its start, and replay refuses it as incomplete (255), not as unreadable."""
    trace = tmp_path / "trace"
    with Mount(qemu_under_test.binary, export, tmp_path, trace_dir=trace, trace_limit=20) as running:
        for name in "abcde":
            (running.path / name).write_text(name)
        os.rename(running.path / "a", running.path / "z")
        assert running.stop() == 0, running.stderr()
    header, _ = read_reproducer(trace / "reproducer.9p")
    assert header["incomplete"] == "the mount kept its last 20 messages only (--trace-limit)", header
    replayed = subprocess.run(
        [sys.executable, "-m", "harness", "replay", str(trace / "reproducer.9p"),
         "--qemu-binary", str(qemu_under_test.binary)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert replayed.returncode == 255 and "it is incomplete (the mount kept its last 20" in replayed.stdout, (
        replayed.stdout + replayed.stderr
    )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_stopped_as_asked(qemu_under_test: QemuUnderTest, export: Path, tmp_path: Path, signum: int) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) or SIGTERM: exit 0, even
    with a process sitting in the mount."""
    with Mount(qemu_under_test.binary, export, tmp_path, new_group=True) as running:
        qemu = qemu_pid(running)
        directory = rundir(qemu)
        sitter = subprocess.Popen(["sleep", "60"], cwd=running.path)
        try:
            if signum == signal.SIGINT:
                os.killpg(running.pid, signal.SIGINT)
            status = running.stop(signum)
        finally:
            sitter.kill()
            sitter.wait()
    assert status == 0 and "from outside" not in running.stderr(), running.stderr()
    gone(running, qemu, directory)


def test_an_unmount_from_outside_ends_it(qemu_under_test: QemuUnderTest, export: Path, tmp_path: Path) -> None:
    """``fusermount3 -u`` (or ``umount``) as a user ends a FUSE mount: the harness stops as if
    asked (exit 0, saying why), writes its trace, and leaves nothing."""
    with Mount(qemu_under_test.binary, export, tmp_path, trace_dir=tmp_path / "trace") as running:
        qemu = qemu_pid(running)
        directory = rundir(qemu)
        (running.path / "f").write_text("made")
        subprocess.run(["fusermount3", "-u", str(running.path)], check=True, timeout=10)
        assert running.proc is not None
        try:
            status = running.proc.wait(10)  # on its own: no signal
        except subprocess.TimeoutExpired:
            pytest.fail(f"the mount ran on after its unmount: {running.stderr()}")
        running.stop()
    assert status == 0 and "unmounted from outside: stopping" in running.stderr(), running.stderr()
    assert (export / "f").read_text() == "made"
    header, steps = read_reproducer(tmp_path / "trace" / "reproducer.9p")
    assert "incomplete" not in header and steps, header
    gone(running, qemu, directory)


def test_stopped_the_moment_it_is_up(qemu_under_test: QemuUnderTest, export: Path, tmp_path: Path) -> None:
    """SIGTERM as soon as the banner is read (what the posix fixture does when a case skips):
    exit 0 and nothing left. The banner comes once every stop signal reaches the trio task."""
    with Mount(qemu_under_test.binary, export, tmp_path) as running:
        qemu = qemu_pid(running)
        directory = rundir(qemu)
        status = running.stop(signal.SIGTERM)
    assert status == 0, running.stderr()
    gone(running, qemu, directory)


def test_a_stop_signal_while_trio_starts_is_kept_for_it(capsys: pytest.CaptureFixture[str]) -> None:
    """A SIGTERM between the mount's set-up and the trio task that listens for it (trio's own
    start-up: raised there as KeyboardInterrupt it ended the mount with TrioInternalError, exit 1,
    in a posix run on 9.0.4) is noted, and acted on once the task listens: the banner, then one
    "unmounting", then the mount's tasks cancelled."""
    import trio

    from harness.tools import mount

    saved = {signum: signal.getsignal(signum) for signum in mount.STOP_SIGNALS}
    try:
        stops = mount.StopSignals()
        stops.starting()
        os.kill(os.getpid(), signal.SIGTERM)  # before trio.run: no receiver of trio's exists yet

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep, 60)  # the mount's serving task
                nursery.start_soon(stops.serving, nursery.cancel_scope, "mounted (test)")

        start = time.monotonic()
        trio.run(main)
        took = time.monotonic() - start
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert stops.noted == [signal.SIGTERM]
    assert took < 5, f"the early SIGTERM was not acted on ({took:.1f} s)"
    out, err = capsys.readouterr()
    assert (out, err) == ("mounted (test)\n", "SIGTERM: unmounting\n")


def test_harness_killed(qemu_under_test: QemuUnderTest, export: Path, tmp_path: Path) -> None:
    """SIGKILL of the harness: nothing of it runs, yet the watcher unmounts and QEMU dies with it."""
    with Mount(qemu_under_test.binary, export, tmp_path) as running:
        qemu = qemu_pid(running)
        directory = rundir(qemu)
        os.kill(running.pid, signal.SIGKILL)
        running.stop()
    assert running.status == -signal.SIGKILL
    gone(running, qemu, directory)


def test_qemu_killed(qemu_under_test: QemuUnderTest, export: Path, tmp_path: Path) -> None:
    """QEMU's death ends the mount with status 1 and the reason; nothing is left."""
    with Mount(qemu_under_test.binary, export, tmp_path) as running:
        qemu = qemu_pid(running)
        directory = rundir(qemu)
        (running.path / "f").write_text("before")
        os.kill(qemu, signal.SIGKILL)
        with pytest.raises(OSError):  # whatever comes first: EIO from the request, or no mount
            for _ in range(50):
                (running.path / "f").read_text()
                time.sleep(0.1)
        running.stop()
    assert running.status == 1
    assert "QEMU exited" in running.stderr() or "QEMU" in running.stderr()
    gone(running, qemu, directory)


def test_refuses_a_mounted_mountpoint(mount: Mount, qemu_under_test: QemuUnderTest) -> None:
    second = subprocess.run(
        [sys.executable, "-m", "harness", "mount", str(mount.path), "--qemu-binary", str(qemu_under_test.binary)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert second.returncode == 2 and "mounted already" in second.stderr
    assert mounted(mount.path)


def test_a_mount_that_cannot_start_says_why(export: Path, tmp_path: Path) -> None:
    broken = Mount(Path("/nonexistent/qemu"), export, tmp_path)
    with pytest.raises(MountError, match="did not come up"), broken:
        pass
    assert "/nonexistent/qemu" in broken.stderr()
    assert not mounted(broken.path) and not broken.path.exists()
