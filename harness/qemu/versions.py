"""QEMU versions: which have a fix or a change, and which the expectations were made on.

A fix (or a change of behaviour) is named by the releases that first carry it, one per stable
branch where it was backported, and the mainline release (``x.y.0``) it went into:
``("10.0.12", "11.0.3", "11.1.0")``. A version has it when its own branch's release at or below
it carries it, or when it is at or above the mainline release (every later version has it).
So 10.2.2 lacks a fix of ``("10.0.12", "11.1.0")``, 10.0.13 and 11.1.50 (master) have it, and
an empty tuple (no fix known) is had by no version.

Each fix and change is a :class:`Change`: those releases, and the subject lines of the upstream
commits that make it. A build whose source the harness knows (a git commit, a Debian source
package's patches: harness/qemu/build.py ``history_of``) has a change also when its history holds
all of those subjects, whatever its number says: a stable branch between two releases, a
distribution's backport. The history only adds: a build never loses what its number gives it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence


class Change(tuple[str, ...]):
    """A fix or a change of behaviour: the releases that first carry it (the tuple itself, one per
    stable branch and the mainline one), and the subject lines of the upstream commits that make
    it (``subjects``: a backport keeps them)."""

    subjects: tuple[str, ...]
    #: the changes any one of which brings the behaviour (made by :func:`either`); () for one change
    alternatives: tuple[Change, ...]
    #: of a fix of a regression, the change that brought it: a QEMU without that one has no bug to fix
    regression_of: Change | None

    def __new__(cls, releases: tuple[str, ...], *subjects: str, regression_of: Change | None = None) -> Change:
        made = super().__new__(cls, releases)
        made.subjects, made.alternatives, made.regression_of = subjects, (), regression_of
        return made


@functools.cache  # the tables ask it of every cell: a version is parsed once a process
def parse(version: str) -> tuple[int, int, int]:
    """``10.0.13`` -> (10, 0, 13); ``11.1.50`` (a development snapshot) -> (11, 1, 50)."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]]
    major, minor, patch = [*parts, 0, 0, 0][:3]
    return major, minor, patch


def either(*changes: Change) -> Change:
    """A behaviour that each of ``changes`` brings on its own: a version has it when it has any of
    them, by its number (the first release of each branch among theirs) or by its source."""
    if len(changes) < 2:
        raise ValueError("either() of fewer than two changes: name the change itself")
    first: dict[tuple[int, int], str] = {}
    for release in (release for change in changes for release in change):
        branch = parse(release)[:2]
        if branch not in first or parse(release) < parse(first[branch]):
            first[branch] = release
    mainline = min((parse(r) for r in first.values() if parse(r)[2] == 0), default=None)
    kept = [r for r in first.values() if mainline is None or parse(r) <= mainline]  # later ones have it anyway
    made = Change(tuple(sorted(kept, key=parse)))
    made.alternatives = changes
    brought = {id(change.regression_of): change.regression_of for change in changes}
    if len(brought) > 1:
        raise ValueError("either() of fixes of regressions brought by different changes")
    made.regression_of = next(iter(brought.values()))
    return made


class Version(str):
    """A QEMU version as ``--version`` prints it (``11.0.3``), with the subject lines of the 9pfs
    commits its build's source holds (``history``; empty where the harness does not know its source).
    It compares and hashes as its number, and a string made from it is a plain one: one process
    tests one QEMU, and a report carries the number only."""

    history: frozenset[str]

    def __new__(cls, number: str, history: Iterable[str] = ()) -> Version:
        made = super().__new__(cls, number)
        made.history = frozenset(history)
        return made


#: The versions the suite's expectations were made on (known bugs, malformed outcomes).
KNOWN = ("7.2.22", "10.0.13", "11.1.50")

# Behaviour that changed by design, named by the releases that first have the new one.
#: the v9fs_walk trace event names the walk's names (``fid=1 ... wnames={a, b}``, "=" after each
#: field where it had a space): 0ad7cb925e
TRACE_WALK_NAMES = Change(("10.0.0",), "9pfs: improve v9fs_walk() tracing")
#: the v9fs_open trace event names the open flags (``mode=65536(RDONLY|DIRECTORY)``, "=" likewise): 9a0dd4b3e4
TRACE_OPEN_FLAGS = Change(("10.0.0",), "9pfs: improve v9fs_open() tracing")
#: the series QEMU's own xattr_limit cases came with: the max_xattr fsdev option, xattrs on synth
#: that pretend to work, and synth's stat/xattr_count (the limit itself came before them, in a
#: commit of its own: XATTR_FID_LIMIT): e6116a81f0, 0e3085ddc7, 7e42d569a6
MAX_XATTR = Change(
    ("10.0.12", "11.0.3", "11.1.0"),
    "hw/9pfs: add max_xattr option",
    "hw/9pfs: enable xattr (mockup) support for synth fs driver",
    "hw/9pfs: add xattr count query interface to fs synth driver",
)
#: the synth tree's stat/ directory and its stat/xattr_count file: 7e42d569a6
SYNTH_XATTR_COUNT = Change(
    ("10.0.12", "11.0.3", "11.1.0"), "hw/9pfs: add xattr count query interface to fs synth driver"
)
#: xattrs on synth pretend to work, and stat/xattr_count counts their fids: 0e3085ddc7, 7e42d569a6
SYNTH_XATTR = Change(
    ("10.0.12", "11.0.3", "11.1.0"),
    "hw/9pfs: enable xattr (mockup) support for synth fs driver",
    "hw/9pfs: add xattr count query interface to fs synth driver",
)
#: multidevs=remap is the default: qid.path is no longer the host inode number
REMAP_DEFAULT = Change(("10.0.0",), "9pfs: make multidevs=remap default")
#: paths longer than 64 KiB work (V9fsPath.size no longer uint16_t); local/deep_absolute_path came with it
LONG_PATHS = Change(
    ("10.0.11", "10.2.4", "11.0.2", "11.1.0"),
    "hw/9pfs: change V9fsPath.size to size_t and v9fs_path_sprintf() return type",
)
#: Tsetattr's size on a fid with an open handle goes to its descriptor (ftruncate): 0c798dd523
FD_TRUNCATE = Change(("10.1.0",), "9pfs: Introduce ftruncate file op")
#: Tsetattr's size and times on a fid with an open handle both go to its descriptor (ftruncate,
#: futimens): the model judges the two together (fixtures/deviations.py SETATTR_BY_PATH), so a
#: build with one of them is judged as having neither: 0c798dd523, 371a269ff8
FD_SETATTR = Change(("10.1.0",), "9pfs: Introduce ftruncate file op", "9pfs: Introduce futimens file op")
#: under a mapped security model, Treadlink of a symlink the host made reads it (readlinkat on
#: O_NOFOLLOW's ELOOP) instead of answering ELOOP: 22296f2db9
MAPPED_NATIVE_SYMLINK = Change(("11.0.0",), "9pfs: local: read native symlinks when security-model=mapped")

# Fixes, named by the releases that carry them. Known-bug markers (``qemu_bug(fixed_in=...)``) and
# the malformed catalogue's expected outcomes both read these: one rule decides what a version has.
#: Txattrwalk and Txattrcreate are refused (ENOSPC) while 1024 xattr fids are held (CVE-2026-8348;
#: MAX_XATTR's option, which came after it, sets the number; a backport may take the limit alone): 693b296b17
XATTR_FID_LIMIT = Change(("10.0.12", "11.0.3", "11.1.0"), "hw/9pfs: add xattr FID limit to prevent memory exhaustion")
#: openat_file() refuses a special file (ENXIO, "broken or compromised client"), so every request
#: that opens a FIFO or device node is refused: Tlopen, Topen, Tstatfs, Tsetattr's size (truncate),
#: Tlcreate or Tcreate of an existing name, Treadlink under a mapped model (CVE-2023-2861; before
#: it, the host's open decides: security/special_file, and fixtures/deviations.py SPECIAL_OPENED
#: for the tables): 10fad73a2b, b9d2887be4, f6b0de53fb
SPECIAL_FILES_REFUSED = Change(("7.2.4", "8.0.3", "8.1.0"), "9pfs: prevent opening special files (CVE-2023-2861)")
#: Tlock and Tgetlock check that the fid has an open handle (EBADF; on synth always EBADF): c3aa2491cd
LOCK_HANDLE_CHECK = Change(("10.0.12", "11.0.3", "11.1.0"), "hw/9pfs: fix invalid union access by v9fs_co_fstat()")
#: Tfsync and Twstat's sync path (every field "don't touch") check the same: 32cae47c33
FSYNC_HANDLE_CHECK = Change(("10.0.12", "11.0.3", "11.1.0"), "hw/9pfs: fix invalid union access by v9fs_co_fsync()")
#: local's descriptor of a fid that is neither an open file nor an open directory is -1 (EBADF),
#: not whatever the fid's open state held (0, or an xattr fid's count of bytes written so far): 75893c058b
LOCAL_FID_FD_CHECK = Change(("10.0.12", "11.0.3", "11.1.0"), "hw/9pfs/local: harden local_fid_fd() on FID types")
#: On local, either of its two fixes answers a lock on a fid with no open handle EBADF: the check
#: before the backend's fstat, or the backend's fstat of descriptor -1. A build may carry one
#: without the other (each went in as a commit of its own).
LOCK_HANDLE_CHECK_LOCAL = either(LOCK_HANDLE_CHECK, LOCAL_FID_FD_CHECK)
#: On local, the same of Tfsync and Twstat's sync path: the check, or fsync() of descriptor -1.
FSYNC_HANDLE_CHECK_LOCAL = either(FSYNC_HANDLE_CHECK, LOCAL_FID_FD_CHECK)
#: Tversion caps msize at the transport's limit: bb5ab96e35
MSIZE_CAP = Change(
    ("10.0.12", "11.0.3", "11.1.0"),
    "hw/9pfs: cap negotiated msize to transport limit",
    "9pfs/virtio: implement msize_limit callback",
)
#: Treaddir's count constrained to the reply buffer the driver gave, before the entries are
#: collected (CVE-2026-9238): 64c6c7e0df
READDIR_CAP = Change(
    ("10.0.12", "11.0.3", "11.1.0"),
    "hw/9pfs: cap Treaddir allocation (CVE-2026-9238)",
    "9pfs/virtio: implement response_buffer_size callback",
)
#: Twstat rename with a '/' in the new name is refused with ENOENT, not an assert: 7f5445e7e4
WSTAT_SLASH_CHECK = Change(
    ("10.0.11", "10.2.4", "11.0.2", "11.1.0"), "hw/9pfs: fix abort due to illegal name with Twstat rename"
)
#: Twstat rename to '.' or '..' is refused with EISDIR, as Trename and Trenameat do: 08750e31fc
#: (every stable branch took it together with 7f5445e7e4; a backport may not)
WSTAT_DOT_CHECK = Change(("10.0.11", "10.2.4", "11.0.2", "11.1.0"), "hw/9pfs: reject . and .. in Twstat rename")
#: Tgetattr on an fid with an open handle stats its fd, so it works after the name is unlinked
#: (GitLab #103; QEMU's local/use_after_unlink came with it): c81e7219e0
GETATTR_OPEN_FID = Change(("7.2.16", "8.2.9", "9.1.3", "9.2.0"), "9pfs: fix 'Tgetattr' after unlink")
#: Treaddir checks that the fid was opened as a directory: ENOTDIR with a "bad client" warning
#: (before: a file's descriptor was used as a DIR*, SIGSEGV; an unopened fid got EINVAL): 042b4ebfd2
READDIR_DIR_FID = Change(("7.2.15", "8.2.8", "9.0.4", "9.1.2", "9.2.0"), "9pfs: fix crash on 'Treaddir' request")
#: Tmknod of a FIFO or socket works again (regression of the CVE-2023-2861 fix): d06a9d843f
MKNOD_SPECIAL = Change(
    ("8.2.9", "9.1.3", "9.2.1", "10.0.0"),
    "9pfs: fix regression regarding CVE-2023-2861",
    regression_of=SPECIAL_FILES_REFUSED,
)
#: synth refuses Trenameat before the backend (EOPNOTSUPP, was synth_renameat's EPERM): b72d15f47c
SYNTH_RENAMEAT = Change(
    ("10.0.9", "10.1.5", "10.2.2", "11.0.0"),
    "hw/9pfs: fix missing EOPNOTSUPP on Twstat and Trenameat for fs synth driver",
)
#: 9P2000.u Topen/Tcreate with OTRUNC or OAPPEND honour readonly=on: a0414545a2
READONLY_DOTU_OPEN = Change(("10.0.13", "11.0.4", "11.1.0"), "hw/9pfs: fix O_TRUNC bypass on read-only export")
#: Treaddir's collection of entries (do_readdir_many, with its lstat() of each under
#: multidevs=remap) holds the read side of the rename lock, so a rename waits for it
#: (CVE-2026-48004): 5a8da7e979
READDIR_RENAME_LOCK = Change(
    ("10.0.11", "10.2.4", "11.0.2", "11.1.0"), "9pfs: fix missing rename lock in v9fs_co_readdir_many (CVE-2026-48004)"
)
#: unrealize drains the requests in flight before hot-unplug (the use-after-free fix; it brought a wedge): 210701c82e
UNPLUG_DRAIN = Change(
    ("10.0.13", "11.0.4", "11.1.0"), "hw/9pfs/virtio: drain in-flight PDUs before virtio-9p unrealize"
)


def has(version: str, releases: Sequence[str]) -> bool:
    """Whether ``version`` carries the fix or change that first shipped in ``releases``: by its
    number, or (a :class:`Version` with a history, ``releases`` a :class:`Change`) by its source."""
    have = parse(version)
    development = have[2] >= 50  # X.Y.50 and up: master between X.Y and X.Y+1, no stable branch
    for release in map(parse, releases):
        if release[:2] == have[:2] and have >= release and not development:
            return True  # its own stable branch has it
        if release[2] == 0 and have >= release:
            return True  # mainline: every later version has it
    return in_history(version, releases)  # (asked last: the tables ask has() of every cell)


def in_history(version: str, releases: Sequence[str]) -> bool:
    """Whether ``version``'s source holds every commit of the change ``releases`` (a change that
    names none, or a version whose source is not known: no); of a change made by :func:`either`,
    those of any one of its alternatives."""
    alternatives = getattr(releases, "alternatives", ())
    if alternatives:
        return any(in_history(version, alternative) for alternative in alternatives)
    subjects = getattr(releases, "subjects", ())
    return bool(subjects) and getattr(version, "history", frozenset()).issuperset(subjects)


def by_history(version: str, releases: Sequence[str]) -> bool:
    """Whether ``version`` has the change ``releases`` by its source alone (its number does not
    give it: a stable branch between releases, a backport)."""
    return in_history(version, releases) and not has(str(version), releases)


def beyond_number(version: str) -> dict[str, Change]:
    """The changes of this module that ``version`` has :func:`by_history`, by name."""
    return {name: change for name, change in CHANGES.items() if by_history(version, change)}


def in_part(version: str) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """The changes of this module of which ``version``'s source holds some commits but not all (a
    backport of one commit of several), where its number does not give them: by name, the
    commits it holds and those it lacks. The run treats such a build as lacking the change."""
    history: frozenset[str] = getattr(version, "history", frozenset())
    return {
        name: (
            tuple(s for s in change.subjects if s in history),
            tuple(s for s in change.subjects if s not in history),
        )
        for name, change in CHANGES.items()
        if history.intersection(change.subjects) and not has(version, change)
    }


def label(version: str) -> str:
    """``version`` as a table of runs names it: its number, the changes its source holds beyond it,
    and those it holds part of (``11.0.3 (+UNPLUG_DRAIN; part of FD_SETATTR)``), so that a release
    and a tree past it are told apart."""
    beyond, part = ", ".join(beyond_number(version)), ", ".join(in_part(version))
    said = "; ".join(([f"+{beyond}"] if beyond else []) + ([f"part of {part}"] if part else []))
    return f"{version} ({said})" if said else str(version)


def has_bug(version: str, fixed_in: Sequence[str], introduced_in: Sequence[str] = ()) -> bool:
    """Whether ``version`` has a known bug: it has what brought it (``introduced_in``, else the
    change ``fixed_in`` names as the one it is a regression of, else nothing: the bug is as old as
    the code) and not its fix."""
    introduced_in = brought_by(fixed_in, introduced_in)
    return (not introduced_in or has(version, introduced_in)) and not has(version, fixed_in)


def brought_by(fixed_in: Sequence[str], introduced_in: Sequence[str] = ()) -> Sequence[str]:
    """What brought a bug ``fixed_in`` fixes: ``introduced_in`` where a marker names it, else the
    change the fix names as the one it is a regression of (``Change.regression_of``), else () (an
    empty ``introduced_in`` is no answer: a fix of a regression is never of a bug as old as the code)."""
    return introduced_in or getattr(fixed_in, "regression_of", None) or ()


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


#: every change above, by name (not the ones :func:`either` makes of them: no commit of their own)
CHANGES = {
    name: value for name, value in dict(globals()).items() if isinstance(value, Change) and not value.alternatives
}
