"""The host file system under the local backend's exports: one without user xattrs (ramfs; tmpfs
before Linux 6.6) cannot hold a mapped-xattr export, and every front end says so instead of
judging a correct server by the EOPNOTSUPP it would answer. Each run is in a mount namespace of its
own (``unshare -m``) holding the ramfs, which goes away with it whatever happens to the run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.devices import QemuUnderTest
from harness.qemu.config import user_xattr_problem
from tests.subrun import PROJECT

REPRODUCER = PROJECT / "docs/reproducers/local_read_count_above_msize/reproducer.9p"
#: what the ramfs holds once the command ended: nothing, or the run left something behind
LEFT = "left:"


def _on_ramfs(tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    """``argv`` with TMPDIR on a fresh ramfs: its exit status, its output, and what it left there."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here (util-linux) to mount a ramfs in a namespace of its own")
    where = tmp_path / "ramfs"
    where.mkdir()
    script = f'mount -t ramfs v9p-test "$0" || exit 99; TMPDIR="$0" "$@"; rc=$?; echo {LEFT}; ls -A "$0"; exit $rc'
    done = subprocess.run(["unshare", "-m", "sh", "-c", script, str(where), *argv], cwd=PROJECT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    if done.returncode == 99:
        pytest.skip(f"cannot mount a ramfs here: {done.stderr.strip()}")
    out, _, left = done.stdout.rpartition(LEFT + "\n")
    return done.returncode, out + done.stderr, left.strip()


def test_a_file_system_with_user_xattrs_has_no_problem(tmp_path: Path) -> None:
    assert user_xattr_problem(tmp_path) is None
    assert list(tmp_path.iterdir()) == [], "the probe file is removed"


def test_the_suite_on_a_file_system_without_user_xattrs_is_a_usage_error(
    tmp_path: Path, qemu_under_test: QemuUnderTest
) -> None:
    """Said once, before any case (pytest's exit status 4), and the run's directory is removed."""
    status, out, left = _on_ramfs(tmp_path, sys.executable, "-m", "pytest", "cases/", "-q", "-p", "no:cacheprovider",
                                  "-k", "local/read/basic", "--qemu-binary", str(qemu_under_test.binary))  # fmt: skip
    assert status == 4, out
    assert "takes no user xattrs" in out and "Set TMPDIR" in out, out
    assert "passed" not in out and "failed" not in out, out
    assert left == "", f"left on the ramfs: {left}"


def test_replay_on_a_file_system_without_user_xattrs_judges_nothing(
    tmp_path: Path, qemu_under_test: QemuUnderTest
) -> None:
    """Exit 255, which stops a ``git bisect run``: every commit would be as untestable here."""
    status, out, left = _on_ramfs(tmp_path, sys.executable, "-m", "harness", "replay", str(REPRODUCER),
                                  "--qemu-binary", str(qemu_under_test.binary))  # fmt: skip
    assert status == 255, out
    assert "keeps mode and owner in user xattrs" in out and "takes no user xattrs" in out, out
    assert left == "", f"left on the ramfs: {left}"


def test_a_machine_exporting_such_a_directory_under_mapped_xattr_does_not_start(
    tmp_path: Path, qemu_under_test: QemuUnderTest
) -> None:
    """The rule under every tool (repl, mount, bench): QEMU is not started, and nothing is left."""
    program = (
        "import sys, tempfile\n"
        "from pathlib import Path\n"
        "from harness.errors import QEMUStartError\n"
        "from harness.qemu.config import LocalFs, MachineConfig\n"
        "from harness.qemu.machine import Machine\n"
        "export = Path(tempfile.mkdtemp())\n"
        "config = MachineConfig(binary=Path(sys.argv[1]), fs=LocalFs(export, security_model='mapped-xattr'))\n"
        "try:\n"
        "    Machine(config).launch()\n"
        "except QEMUStartError as err:\n"
        "    print(err)\n"
        "    export.rmdir()\n"
        "    sys.exit(3)\n"
    )
    status, out, left = _on_ramfs(tmp_path, sys.executable, "-c", program, str(qemu_under_test.binary))
    assert status == 3, out
    assert "keeps mode and owner in user xattrs" in out, out
    assert left == "", f"left on the ramfs: {left}"
