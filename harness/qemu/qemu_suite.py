"""QEMU's own C virtio-9p suite (tests/qtest/virtio-9p-test.c): its case names per version, and
how to run its qos-test binary beside ours on the same QEMU."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from harness.qemu import versions
from harness.qemu.provision import FIRMWARE_DIRS

#: The 27 cases of QEMU 7.2, by the names both suites use, in the order qos-test runs them.
QEMU_72_CASES = (
    *(f"synth/{name}" for name in (
        "config", "version/basic", "attach/basic", "walk/basic", "walk/no_slash", "walk/none",
        "walk/dotdot_from_root", "walk/non_existent", "walk/2nd_non_existent", "lopen/basic", "write/basic",
        "flush/success", "flush/ignored", "readdir/basic", "readdir/split_512", "readdir/split_256",
        "readdir/split_128",
    )),
    *(f"local/{name}" for name in (
        "config", "create_dir", "unlinkat_dir", "create_file", "unlinkat_file", "symlink_file",
        "unlinkat_symlink", "hardlink_file", "unlinkat_hardlink", "use_after_unlink",
    )),
)  # fmt: skip

XATTR_LIMIT_CASES = ("xattr_limit/default", "xattr_limit/custom", "xattr_limit/unlimited")


def qemu_cases(version: str) -> tuple[str, ...]:
    """The cases of QEMU ``version``'s own suite, in the order its qos-test runs them: 7.2's 27,
    and the 34 of versions with max_xattr and long paths (10.0.12, 11.1.0, master)."""
    synth = [name for name in QEMU_72_CASES if name.startswith("synth/")]
    local = [name for name in QEMU_72_CASES if name.startswith("local/")]
    if versions.has(version, versions.MAX_XATTR):
        synth += [f"synth/{name}" for name in XATTR_LIMIT_CASES]
    if versions.has(version, versions.LONG_PATHS):
        local.append("local/deep_absolute_path")
    if versions.has(version, versions.MAX_XATTR):
        local += [f"local/{name}" for name in XATTR_LIMIT_CASES]
    return (*synth, *local)


#: Where qos-test registers them on x86_64 pc.
QOS_PREFIX = "/x86_64/pc/i440FX-pcihost/pci-bus-pc/pci-bus/virtio-9p-pci/virtio-9p/virtio-9p-tests"
#: qos-test's machine has a default NIC, whose option ROM Debian ships in ipxe-qemu.
QOS_FIRMWARE_DIRS = (*FIRMWARE_DIRS, Path("/usr/lib/ipxe/qemu"))


@contextlib.contextmanager
def firmware_wrapper(binary: Path) -> Iterator[Path]:
    """A ``qemu-system-x86_64`` script that runs ``binary`` with the firmware directories, in a
    directory of its own that is removed after (with what a qos-test run left there: run it there).

    libqtest runs ``exec $QTEST_QEMU_BINARY ...`` and insists on the ``-system-<arch>`` name.
    """
    with tempfile.TemporaryDirectory(prefix="v9p-qos-", ignore_cleanup_errors=True) as directory:
        wrapper = Path(directory) / "qemu-system-x86_64"
        dirs = " ".join(f"-L {d}" for d in QOS_FIRMWARE_DIRS)
        wrapper.write_text(f'#!/bin/sh\nexec {binary} {dirs} "$@"\n')
        wrapper.chmod(0o755)
        yield wrapper
