"""What pjdfstest's checks come to on the mount, classified: the ``.t`` files, and each check that
fails for a reason that is not a server defect (docs/posix.md tabulates them with the reasons).

Classified on pjdfstest 85a8aea (the tarball's commit) against 7.2.22, 10.0.13 and master; 9.0.4 added
the known bug of unlink/14.t and stress-ng --seek.
"""

from __future__ import annotations

#: pjdfstest's test directories and how many ``.t`` files each has (00.t to NN.t)
PJDFSTEST_DIRS = {
    "chflags": 14, "chmod": 13, "chown": 11, "ftruncate": 15, "granular": 7, "link": 18, "mkdir": 13,
    "mkfifo": 13, "mknod": 12, "open": 27, "posix_fallocate": 1, "rename": 25, "rmdir": 16, "symlink": 13,
    "truncate": 15, "unlink": 15, "utimensat": 10,
}  # fmt: skip
PJDFSTEST_FILES = [f"{d}/{n:02d}" for d, count in PJDFSTEST_DIRS.items() for n in range(count)]
MODELS = ["passthrough", "mapped-xattr", "mapped-file"]


class PjdfstestFailed(AssertionError):
    """Checks of a ``.t`` failed that no classification explains."""


#: (``.t``, security model) -> {check number: why it fails through the mount}: differences of the
#: bridge, never of the server.
BRIDGE: dict[tuple[str, str], dict[int, str]] = {}


#: The .t files that make a FIFO, a socket or a device node on the way (most make every kind of
#: node): under passthrough, QEMU from the CVE-2023-2861 fix to the MKNOD_SPECIAL fix answers their
#: Tmknod ENXIO. Read off
#: 7.2.22's run, every failing check of each traced to that Tmknod.
MKNOD_PJDFSTEST = (
    "chmod/00", "chmod/01", "chmod/11", "chown/00", "chown/01", "chown/07", "link/00", "link/01", "link/10",
    "mkdir/01", "mkdir/10", "mkfifo/00", "mkfifo/01", "mkfifo/02", "mkfifo/03", "mkfifo/05", "mkfifo/06",
    "mkfifo/09", "mknod/00", "mknod/01", "mknod/02", "mknod/03", "mknod/05", "mknod/06", "mknod/08", "mknod/11",
    "open/01", "open/06", "open/17", "open/22", "open/24", "rename/00", "rename/09", "rename/10", "rename/12",
    "rename/13", "rename/14", "rename/20", "rename/23", "rmdir/01", "rmdir/06", "symlink/08", "unlink/00",
    "unlink/11", "utimensat/00",
)  # fmt: skip
MKNOD_REASON = (
    "the .t makes a FIFO, socket or device node with mkfifo(2)/mknod(2), and under passthrough QEMU answers "
    "the Tmknod ENXIO (the CVE-2023-2861 fix refused every special file; docs/reproducers/"
    "local_posix_pjdfstest_mkfifo_00_passthrough is mkfifo/00.t's conversation cut after its first mkfifo)"
)
#: The .t files and stress-ng stressors that ask for the attributes of a file they opened and then
#: unlinked: QEMU before the GETATTR_OPEN_FID fix answers that Tgetattr by the fid's path. Read off
#: 9.0.4's run.
GETATTR_PJDFSTEST = ("unlink/14",)
GETATTR_STRESSORS = ("seek",)
GETATTR_REASON = (
    "the program asks for the attributes of a file it opened and then unlinked (pjdfstest unlink/14.t's check "
    "4, an fstat(); stress-ng --seek unlinks its file at once, and lseek(SEEK_END) asks FUSE for the size), "
    "and QEMU answers the Tgetattr by the fid's path, which is gone: ENOENT (QEMU GitLab #103; "
    "local/unlinked_open_file/getattr is the same bug in one Tgetattr)"
)
#: The .t files that check a chmod(2) or chown(2) moved the ctime, and the one that counts a
#: directory's links: under mapped-file QEMU's known bugs mapped-file-ctime and mapped-file-nlink
#: (cases metadata/ctime/… and metadata/nlink/…). Read off master's run, each failing check one of
#: those (chmod/00.t's 64-84, chown/00.t's 38 ctime checks, rename/24.t's nlink checks 4, 8, 9).
CTIME_PJDFSTEST = ("chmod/00", "chown/00")
NLINK_PJDFSTEST = ("rename/24",)
