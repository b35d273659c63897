"""Tstatfs: "get file system information" — the fields of statfs(2) on the export (diod
protocol.md)."""

from __future__ import annotations

import os

import pytest

from fixtures.case_path import case_path
from fixtures.devices import QemuUnderTest
from fixtures.place import Place
from harness.qemu import versions
from synth_tree import ROOT


def factor(msize: int, bsize: int) -> int:
    """QEMU's v9fs_fill_statfs reports blocks of bsize * ((msize - 24) // bsize), at least 1."""
    return max(1, (msize - 24) // bsize)


@case_path("statfs/basic", backends=["local"])
def test_statfs_matches_the_host(place: Place) -> None:
    """Block size and counts are the host filesystem's in QEMU's scaled units; inode count and name
    length are the host's; free counts are within what other processes may change meanwhile."""
    p9 = place.session
    reply = p9.statfs(place.fid)
    host = os.statvfs(place.host_path())
    k = factor(p9.msize, host.f_bsize)
    assert (reply.bsize, reply.blocks, reply.files, reply.namelen) == (
        host.f_bsize * k,
        host.f_blocks // k,
        host.f_files,
        host.f_namemax,
    )
    assert abs(reply.bfree - host.f_bfree // k) < 4096 and abs(reply.bavail - host.f_bavail // k) < 4096
    assert abs(reply.ffree - host.f_ffree) < 4096
    assert reply.type != 0


@pytest.mark.needs_synth_tree
@case_path("statfs/synth", backends=["synth"])
def test_statfs_synth(place: Place, qemu_under_test: QemuUnderTest) -> None:
    """The synth backend reports its own filesystem: type 0xABCD, 512-byte blocks (scaled), one
    inode per node of the tree (with max_xattr came stat/ and stat/xattr_count), NAME_MAX."""
    p9 = place.session
    reply = p9.statfs(place.fid)
    assert (reply.type, reply.bsize, reply.namelen) == (0xABCD, 512 * factor(p9.msize, 512), 255)
    stat_nodes = 2 if versions.has(qemu_under_test.probe.version, versions.SYNTH_XATTR_COUNT) else 0
    assert reply.files == ROOT.descendants() + stat_nodes  # synth_node_count: every node but the root
