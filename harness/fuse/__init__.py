"""The export as a host filesystem: FUSE requests answered with 9P2000.L requests of our client,
so that any program on the host is a 9P client of the QEMU under test (``python -m harness mount``)."""

from __future__ import annotations

import os

from harness.errors import HarnessMisuse


def require_fuse() -> None:
    """Say what is missing before QEMU starts: the binding, the device, root."""
    try:
        import pyfuse3  # noqa: F401
        import trio  # noqa: F401
    except ImportError as err:
        raise HarnessMisuse(
            f"the mount needs pyfuse3 ({err}): Debian's libfuse3-dev and pkg-config, then "
            "`pip install -e '.[posix]'` (make venv does both)"
        ) from err
    if not os.path.exists("/dev/fuse"):
        raise HarnessMisuse("the mount needs /dev/fuse (modprobe fuse; in a container: --device /dev/fuse)")
    if os.geteuid() != 0:
        raise HarnessMisuse("the mount runs as root: it answers every uid's requests (allow_other) as v9fs does")
