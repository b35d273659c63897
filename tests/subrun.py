"""Run pytest on a case file of a test's own, in a subprocess, with the harness's plugin."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from fixtures.devices import QemuUnderTest

PROJECT = Path(__file__).resolve().parent.parent


def default_signals() -> None:
    """For ``preexec_fn``: the child starts with the default handling of the signals the fault
    tests send, whatever this process inherited (a background job of a non-interactive shell
    ignores SIGINT, and an ignored signal stays ignored across exec: Python then never raises
    KeyboardInterrupt). A test of a signal sets the disposition it tests."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


def run_pytest(
    tmp_path: Path, qemu: QemuUnderTest, *args: str, source: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """pytest on ``source`` in ``tmp_path``, which is also its TMPDIR, in a process group of its own."""
    (tmp_path / "test_case.py").write_text(source)
    env = {
        **os.environ,
        "TMPDIR": str(tmp_path),
        "PYTHONPATH": str(PROJECT),
        "QTEST_QEMU_BINARY": str(qemu.binary),
        **(env or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "fixtures.plugin", "-q", "--rootdir", str(tmp_path),
         "--basetemp", str(tmp_path / "base"), *args, str(tmp_path / "test_case.py")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, preexec_fn=default_signals,
    )  # fmt: skip


def table_rows(output: str) -> list[list[str]]:
    """The rows of the GitHub-style table a command printed (header and rule left out)."""
    lines = [line for line in output.splitlines() if line.startswith("|")]
    assert len(lines) >= 3 and set(lines[1]) <= set("|-: "), output
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


SHM = Path("/dev/shm")


def shm_files() -> set[str]:
    """What /dev/shm holds now (shared guest RAM is a memfd: it must never add a file there)."""
    return set(os.listdir(SHM)) if SHM.is_dir() else set()


def shares_guest_ram(qemu_pid: int) -> bool:
    """Whether QEMU ``qemu_pid`` runs on RAM the harness maps too (the memfd in its maps)."""
    return "memfd:v9p-guest-ram" in Path(f"/proc/{qemu_pid}/maps").read_text()
