"""What pjdfstest's checks come to on the mount, classified: the ``.t`` files, and each check that
fails for a reason that is not a server defect (docs/posix.md tabulates them with the reasons).

Classified on pjdfstest 85a8aea (the tarball's commit) against 7.2.22, 10.0.13 and master.
"""

from __future__ import annotations

#: pjdfstest's test directories and how many ``.t`` files each has (00.t to NN.t)
PJDFSTEST_DIRS = {
    "chflags": 14, "chmod": 13, "chown": 11, "ftruncate": 15, "granular": 7, "link": 18, "mkdir": 13,
    "mkfifo": 13, "mknod": 12, "open": 27, "posix_fallocate": 1, "rename": 25, "rmdir": 16, "symlink": 13,
    "truncate": 15, "unlink": 15, "utimensat": 10,
}  # fmt: skip
PJDFSTEST_FILES = [f"{d}/{n:02d}" for d, count in PJDFSTEST_DIRS.items() for n in range(count)]
MODELS = ["passthrough", "mapped-xattr"]


class PjdfstestFailed(AssertionError):
    """Checks of a ``.t`` failed that no classification explains."""


#: (``.t``, security model) -> {check number: why it fails through the mount}: differences of the
#: bridge, never of the server.
BRIDGE: dict[tuple[str, str], dict[int, str]] = {}
