"""The local backend under each security model (passthrough, mapped-xattr, mapped-file, none):
one round trip of the common operations, checked on the host as each model stores things, and
multidevs=remap across a mount point inside the export."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.case_path import case_path
from fixtures.devices import QemuUnderTest
from fixtures.expect import expect_rlerror
from fixtures.place import Place
from fixtures.pool import Device
from harness.p9 import wire
from harness.qemu import versions
from harness.qemu.config import SECURITY_MODELS

MODELS = list(SECURITY_MODELS)
MULTIDEVS_WARNING = "9p: Multiple devices detected in same VirtFS export"


@case_path("models/{security_model}/round_trip", backends=["local"], security_model=MODELS)
def test_round_trip(place: Place, security_model: str) -> None:
    """mkdir, lcreate, write, read, getattr, symlink, readlink, link, unlinkat: the answers and the
    host agree under every model (mapped models keep symlinks as files holding the target)."""
    p9 = place.session
    assert p9.mkdir(place.fid, "dir", 0o750).qid.type == wire.QTDIR
    dfid = p9.walk_fid(place.fid, ["dir"])
    p9.lcreate(dfid, "file", os.O_RDWR, 0o640)
    assert p9.write(dfid, 0, b"model data").count == 10
    assert p9.read(dfid, 0, 100).data == b"model data"
    assert place.host_path("dir", "file").read_bytes() == b"model data"
    attr = p9.getattr(dfid)
    assert stat.S_ISREG(attr.mode) and attr.size == 10
    if security_model != "none":  # "none" applies no mode of the client's
        assert stat.S_IMODE(attr.mode) == 0o640
    p9.clunk(dfid)
    dfid = p9.walk_fid(place.fid, ["dir"])
    p9.symlink(dfid, "link", "file")
    link = p9.walk_fid(dfid, ["link"])
    assert p9.readlink(link).target == "file"
    host_link = place.host_path("dir", "link")
    if security_model.startswith("mapped"):
        assert host_link.read_bytes() == b"file" and not host_link.is_symlink()
    else:
        assert os.readlink(host_link) == "file"
    target = p9.walk_fid(dfid, ["file"])
    p9.link(dfid, target, "hard")
    assert p9.getattr(target).nlink == 2
    for name in ("link", "hard", "file"):
        p9.unlinkat(dfid, name)
    assert sorted(os.listdir(place.host_path("dir"))) in ([], [".virtfs_metadata"])
    for fid in (link, target, dfid):
        p9.clunk(fid)


@contextlib.contextmanager
def tmpfs_at(path: Path) -> Iterator[None]:
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "v9p-test", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs inside the export here: {done.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=False)


@pytest.mark.fsdev(multidevs="remap")
@case_path("models/multidevs/remap", backends=["local"])
def test_multidevs_remap(place: Place, device: Device) -> None:
    """With a second filesystem mounted inside the export, multidevs=remap gives every file a qid
    path of its own (device and inode folded in), so equal inode numbers on two devices no longer
    collide; and QEMU does not warn."""
    p9 = place.session
    mark = device.machine.output_mark()
    with tmpfs_at(place.host_path("mnt")):
        place.host_path("mnt", "inner").write_bytes(b"")
        place.host_path("outer").write_bytes(b"")
        inner = p9.new_fid()
        walked = p9.walk(place.fid, ["mnt", "inner"], inner).qids
        inner_qid = walked[-1]
        outer = p9.new_fid()
        (outer_qid,) = p9.walk(place.fid, ["outer"], outer).qids
        mnt = p9.new_fid()
        (mnt_qid,) = p9.walk(place.fid, ["mnt"], mnt).qids
        paths = {inner_qid.path, outer_qid.path, mnt_qid.path}
        assert len(paths) == 3
        assert inner_qid.path != place.host_path("mnt", "inner").stat().st_ino  # remapped, not the raw inode
        for fid in (inner, outer, mnt):
            p9.clunk(fid)
    assert MULTIDEVS_WARNING not in device.machine.output_since(mark)


def across_a_mount(place: Place, device: Device) -> tuple[bool, bool]:
    """Walk to a file on a tmpfs mounted inside the export: (its qid.path is the raw host inode,
    QEMU warned about multiple devices)."""
    p9 = place.session
    mark = device.machine.output_mark()
    with tmpfs_at(place.host_path("mnt")):
        place.host_path("mnt", "inner").write_bytes(b"")
        inner = p9.new_fid()
        qids = p9.walk(place.fid, ["mnt", "inner"], inner).qids
        raw = qids[-1].path == place.host_path("mnt", "inner").stat().st_ino
        p9.clunk(inner)
    return raw, MULTIDEVS_WARNING in device.machine.output_since(mark)


@pytest.mark.fresh_qemu  # QEMU warns once per export
@pytest.mark.fsdev(multidevs="warn")
@case_path("models/multidevs/warn", backends=["local"])
def test_multidevs_warn(place: Place, device: Device) -> None:
    """With multidevs=warn (the default up to 9.2), crossing into another device inside the export
    is served with raw inode numbers as qid paths, and QEMU warns that qids may collide."""
    assert across_a_mount(place, device) == (True, True)


@pytest.mark.fresh_qemu  # QEMU warns once per export
@case_path("models/multidevs/default", backends=["local"])
def test_multidevs_default(place: Place, device: Device, qemu_under_test: QemuUnderTest) -> None:
    """No multidevs option: up to 9.2 that is warn (raw inode numbers, a warning); since 10.0 it is
    remap (qid paths of their own, no warning)."""
    remap = versions.has(qemu_under_test.probe.version, versions.REMAP_DEFAULT)
    raw, warned = across_a_mount(place, device)
    assert (raw, warned) == (not remap, not remap), f"raw inode {raw}, warned {warned}, remap default {remap}"


@pytest.mark.fresh_qemu  # QEMU reports the refusal once per process
@pytest.mark.fsdev(multidevs="forbid")
@case_path("models/multidevs/forbid", backends=["local"])
def test_multidevs_forbid(place: Place, device: Device) -> None:
    """multidevs=forbid: a walk that would cross into another device inside the export stops
    there (ENODEV for the first name on it, newfid not made), names on the export's own device
    still walk, and QEMU says why, once."""
    p9 = place.session
    mark = device.machine.output_mark()
    with tmpfs_at(place.host_path("mnt")):
        place.host_path("mnt", "inner").write_bytes(b"")
        place.host_path("outer").write_bytes(b"")
        newfid = p9.new_fid()
        with expect_rlerror(errno.ENODEV):
            p9.walk(place.fid, ["mnt", "inner"], newfid)
        assert newfid not in p9.fids
        outer = p9.walk_fid(place.fid, ["outer"])
        assert p9.getattr(outer).qid.path == place.host_path("outer").stat().st_ino
        p9.clunk(outer)
    output = device.machine.output_since(mark)
    assert output.count("multidevs=forbid") == 1, output
