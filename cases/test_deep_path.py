"""Paths longer than any single host path: QEMU's upstream local/deep_absolute_path. A guest can
build a tree whose absolute path exceeds 65535 bytes from 255-byte names (NAME_MAX); the server
must keep serving fids down there (no truncated path, no 16-bit length overflow)."""

from __future__ import annotations

import os

import pytest

from fixtures.case_path import case_path
from fixtures.place import Place
from harness.errors import P9Rlerror, QEMUExited
from harness.p9 import wire
from harness.qemu import versions
from synth_tree import NAME_MAX

#: 257 components of 255 bytes plus '/': 65,792 bytes, past 65,535.
DEPTH = 257


def level_name(level: int) -> str:
    return f"{level:03d}".ljust(NAME_MAX, "d")


@pytest.mark.slow
@pytest.mark.qemu_bug(
    fixed_in=versions.LONG_PATHS,
    reason="V9fsPath.size is uint16_t (fsdev/file-op-9p.h), so a path past 65535 bytes wraps: "
    "v9fs_path_copy() g_memdup()s the wrapped size, a path cut short with no NUL, and what is read past "
    "it is whatever the heap holds, so the deepest Tmkdir or Twalk gets ENOENT in some runs and works in "
    "others, at a rate that depends on the process's environment (7.2.22 replayed on fresh QEMUs: ENOENT in 20 "
    "of 20 in one checkout, 0 of 20 in another); an ASan build reports the heap-buffer-overflow (strlen) in every "
    "run (QEMU dies there); upstream added local/deep_absolute_path with the fix",
    raises=(P9Rlerror, QEMUExited),
    race=True,
    # a replay of a fixed commit takes them all (~2 s each); the sure verdict is an ASan build's
    attempts=10,
)
@case_path("deep_absolute_path", backends=["local"])
def test_deep_absolute_path(place: Place) -> None:
    """Tmkdir and Twalk one level at a time to 257 levels (65,792 bytes), then Tgetattr on the
    deepest fid: the qid Tmkdir returned, a directory, and the chain exists on the host."""
    assert path_bytes(DEPTH) > 65535
    build_and_check(place, DEPTH)


@pytest.mark.slow
@case_path("deep_path/below_64k", backends=["local"])
def test_deep_path_below_64k(place: Place) -> None:
    """The same just below 64 KiB (250 levels, 64,000 bytes plus the case directory): must work on
    every version, which pins a failure of the case above to the 16-bit boundary."""
    assert path_bytes(250) + 256 < 65535
    build_and_check(place, 250)


def path_bytes(depth: int) -> int:
    return sum(len(level_name(level)) + 1 for level in range(depth))


def build_and_check(place: Place, depth: int) -> None:
    p9 = place.session
    fid, qid = place.fid, None
    for level in range(depth):
        qid = p9.mkdir(fid, level_name(level), 0o700).qid
        deeper = p9.new_fid()
        (walked,) = p9.walk(fid, [level_name(level)], deeper).qids
        assert walked == qid
        if fid != place.fid:
            p9.clunk(fid)
        fid = deeper
    attr = p9.getattr(fid)
    assert attr.qid == qid and attr.qid.type == wire.QTDIR
    assert attr.mode & 0o170000 == 0o040000
    p9.clunk(fid)
    assert host_depth(place, depth) == depth


def host_depth(place: Place, depth: int) -> int:
    """How many levels of the chain exist on the host, followed with openat."""
    fd = os.open(place.host_path(), os.O_RDONLY | os.O_DIRECTORY)
    found = 0
    try:
        for level in range(depth):
            nxt = os.open(level_name(level), os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd, found = nxt, found + 1
    finally:
        os.close(fd)
    return found
