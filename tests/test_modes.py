"""The README's other ways to run the cases keep working: ``--event-idx`` (every case with
VIRTIO_RING_F_EVENT_IDX) and ``--transport legacy`` (every case on the legacy interface). The full
runs take 20 s and 65 s; here the cases whose expectations depend on the mode run in each."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fixtures.devices import QemuUnderTest
from tests.subrun import PROJECT

#: interrupts (EVENT_IDX moves them to used_event), a malformed frame that ends in virtio_error()
#: (legacy has no NEEDS_RESET bit: the request goes unanswered), and the ring cases
SELECTION = "irq or malformed/Tstatfs or malformed/Tlopen/cut or ring/event_idx or ring/burst or version/basic"


@pytest.mark.parametrize("mode", [["--event-idx"], ["--transport", "legacy"]], ids=["event-idx", "legacy"])
def test_mode_runs_its_cases_green(qemu_under_test: QemuUnderTest, mode: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "cases/", "-q", "-k", SELECTION, *mode,
         "--qemu-binary", str(qemu_under_test.binary)],
        cwd=PROJECT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert " passed" in last and "failed" not in last and "error" not in last, last
