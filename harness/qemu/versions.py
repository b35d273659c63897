"""QEMU versions: which have a fix or a change, and which the expectations were made on.

A fix (or a change of behaviour) is named by the releases that first carry it, one per stable
branch where it was backported, and the mainline release (``x.y.0``) it went into:
``("10.0.12", "11.0.3", "11.1.0")``. A version has it when its own branch's release at or below
it carries it, or when it is at or above the mainline release (every later version has it).
So 10.2.2 lacks a fix of ``("10.0.12", "11.1.0")``, 10.0.13 and 11.1.50 (master) have it, and
an empty tuple (no fix known) is had by no version.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

#: The versions the suite's expectations were made on (known bugs, malformed outcomes).
KNOWN = ("7.2.22", "10.0.13", "11.1.50")

# Behaviour that changed by design, named by the releases that first have the new one.
#: 9pfs trace events name open flags (v9fs_open "...(RDONLY|DIRECTORY)") and walk names
#: (v9fs_walk "wnames={a, b}"): 9a0dd4b3e4, 0ad7cb925e
TRACE_NAMES = ("10.0.0",)
#: the max_xattr fsdev option; the synth tree's stat/xattr_count; xattrs on synth pretend to work
MAX_XATTR = ("10.0.12", "11.0.3", "11.1.0")
#: multidevs=remap is the default: qid.path is no longer the host inode number
REMAP_DEFAULT = ("10.0.0",)
#: paths longer than 64 KiB work (V9fsPath.size no longer uint16_t); local/deep_absolute_path came with it
LONG_PATHS = ("10.0.11", "10.2.4", "11.0.2", "11.1.0")
#: Tsetattr size and times on an fid with an open handle go to its fd (ftruncate, futimens)
FD_SETATTR = ("10.1.0",)
#: under a mapped security model, Treadlink of a symlink the host made reads it (readlinkat on
#: O_NOFOLLOW's ELOOP) instead of answering ELOOP: 22296f2db9
MAPPED_NATIVE_SYMLINK = ("11.0.0",)

# Fixes, named by the releases that carry them. Known-bug markers (``qemu_bug(fixed_in=...)``) and
# the malformed catalogue's expected outcomes both read these: one rule decides what a version has.
#: Tlock, Tgetlock, Tfsync and Twstat's sync path check that the fid has an open handle (EBADF; on
#: synth always EBADF): c3aa2491cd, 32cae47c33, 75893c058b
FID_HANDLE_CHECK = ("10.0.12", "11.0.3", "11.1.0")
#: Tversion caps msize at the transport's limit: bb5ab96e35
MSIZE_CAP = ("10.0.12", "11.0.3", "11.1.0")
#: Treaddir's count constrained to the reply buffer the driver gave, before the entries are
#: collected (CVE-2026-9238): 64c6c7e0df
READDIR_CAP = ("10.0.12", "11.0.3", "11.1.0")
#: Twstat rename with a '/' in the new name is refused, not an assert (7f5445e7e4), and '.' or '..'
#: with EISDIR as Trename and Trenameat do (08750e31fc): every stable branch took the two together
WSTAT_NAME_CHECK = ("10.0.11", "10.2.4", "11.0.2", "11.1.0")
#: Tgetattr on an fid with an open handle stats its fd, so it works after the name is unlinked
#: (GitLab #103; QEMU's local/use_after_unlink came with it): c81e7219e0
GETATTR_OPEN_FID = ("7.2.16", "8.2.9", "9.1.3", "9.2.0")
#: Treaddir checks that the fid was opened as a directory: ENOTDIR with a "bad client" warning
#: (before: a file's descriptor was used as a DIR*, SIGSEGV; an unopened fid got EINVAL): 042b4ebfd2
READDIR_DIR_FID = ("7.2.15", "8.2.8", "9.0.4", "9.1.2", "9.2.0")
#: Tmknod of a FIFO or socket works again (regression of the CVE-2023-2861 fix): d06a9d843f
MKNOD_SPECIAL = ("8.2.9", "9.1.3", "9.2.1", "10.0.0")
#: synth refuses Trenameat before the backend (EOPNOTSUPP, was synth_renameat's EPERM): b72d15f47c
SYNTH_RENAMEAT = ("10.0.9", "10.1.5", "10.2.2", "11.0.0")
#: 9P2000.u Topen/Tcreate with OTRUNC or OAPPEND honour readonly=on: a0414545a2
READONLY_DOTU_OPEN = ("10.0.13", "11.0.4", "11.1.0")
#: Treaddir's collection of entries (do_readdir_many, with its lstat() of each under
#: multidevs=remap) holds the read side of the rename lock, so a rename waits for it
#: (CVE-2026-48004): 5a8da7e979
READDIR_RENAME_LOCK = ("10.0.11", "10.2.4", "11.0.2", "11.1.0")
#: unrealize drains the requests in flight before hot-unplug (the use-after-free fix; it brought a wedge): 210701c82e
UNPLUG_DRAIN = ("10.0.13", "11.0.4", "11.1.0")


@functools.cache  # the tables ask it of every cell: a version is parsed once a process
def parse(version: str) -> tuple[int, int, int]:
    """``10.0.13`` -> (10, 0, 13); ``11.1.50`` (a development snapshot) -> (11, 1, 50)."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]]
    major, minor, patch = [*parts, 0, 0, 0][:3]
    return major, minor, patch


def has(version: str, releases: Sequence[str]) -> bool:
    """Whether ``version`` carries the fix or change that first shipped in ``releases``."""
    have = parse(version)
    development = have[2] >= 50  # X.Y.50 and up: master between X.Y and X.Y+1, no stable branch
    for release in map(parse, releases):
        if release[:2] == have[:2] and have >= release and not development:
            return True  # its own stable branch has it
        if release[2] == 0 and have >= release:
            return True  # mainline: every later version has it
    return False


def has_bug(version: str, fixed_in: Sequence[str], introduced_in: Sequence[str] = ()) -> bool:
    """Whether ``version`` has a known bug: it has what brought it (always, when ``introduced_in``
    is empty: the bug is as old as the code) and not its fix."""
    return (not introduced_in or has(version, introduced_in)) and not has(version, fixed_in)


def nearest_known(version: str, known: Sequence[str] = KNOWN) -> str:
    """The known version whose expectations ``version`` gets: itself, else the newest known one at
    or below it (the oldest known one when it is older than all)."""
    if version in known:
        return version
    below = [k for k in known if parse(k) <= parse(version)]
    return max(below, key=parse) if below else min(known, key=parse)


def describe(releases: Sequence[str]) -> str:
    """``fixed in 10.0.12, 11.0.3, 11.1.0`` or ``no fix known``."""
    return f"fixed in {', '.join(releases)}" if releases else "no fix known"
