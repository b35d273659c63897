"""A local case's host files travel in its reproducer: what snapshot_host() records,
restore_host() makes again, node by node (no QEMU)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.p9.trace import HOST_FILE_LIMIT, restore_host, snapshot_host


def describe(root: Path) -> dict[str, tuple[object, ...]]:
    found: dict[str, tuple[object, ...]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        content = path.read_bytes() if stat.S_ISREG(st.st_mode) else os.readlink(path) if path.is_symlink() else None
        xattrs = {} if path.is_symlink() else {n: os.getxattr(path, n) for n in os.listxattr(path)}
        found[str(path.relative_to(root))] = (
            st.st_mode,
            st.st_uid,
            st.st_gid,
            st.st_nlink,
            st.st_rdev,
            content,
            xattrs,
        )
    return found


def test_every_kind_of_node_comes_back(tmp_path: Path) -> None:
    original, copy = tmp_path / "a", tmp_path / "b"
    (original / "dir" / "inner").mkdir(parents=True)
    (original / "dir" / "inner" / "file").write_bytes(b"bytes\0and more")
    os.chmod(original / "dir" / "inner" / "file", 0o4750)
    os.setxattr(original / "dir" / "inner" / "file", "user.note", b"kept")
    os.link(original / "dir" / "inner" / "file", original / "alias")
    (original / "link").symlink_to("dir/inner/file")
    os.mkfifo(original / "fifo", 0o600)
    (original / "big").write_bytes(b"x" * (HOST_FILE_LIMIT + 1))
    if os.geteuid() == 0:
        os.mknod(original / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        os.chown(original / "dir", 1234, 4321)
    os.chmod(original / "dir", 0o555)  # read-only: its children are made before its mode
    atime = (original / "dir" / "inner" / "file").stat().st_atime_ns
    entries = snapshot_host(original)
    assert (original / "dir" / "inner" / "file").stat().st_atime_ns == atime  # read without touching atime
    copy.mkdir()
    restore_host(copy, entries)
    want, got = describe(original), describe(copy)
    assert got.pop("big")[5] == bytes(HOST_FILE_LIMIT + 1)  # too big: its size only, zeros
    want.pop("big")
    assert got == want
