"""QEMU's 9pfs trace events, as a developer enables them with ``-trace v9fs_*``: they name the
request and its fields, and (since 10.0) the walk's names and the open flags in words."""

from __future__ import annotations

import os
import re

import pytest

from fixtures.case_path import case_path
from fixtures.devices import QemuUnderTest
from fixtures.place import Place
from fixtures.pool import Device
from harness.qemu import versions


@pytest.mark.qemu_args("-trace", "enable=v9fs_walk", "-trace", "enable=v9fs_open", "-trace", "enable=v9fs_open_return")
@case_path("trace/events", backends=["local", "synth"])  # a QEMU of its own: its argv differs
def test_trace_events_describe_requests(place: Place, device: Device, qemu_under_test: QemuUnderTest) -> None:
    """QEMU's 9pfs trace events (what a developer enables with ``-trace v9fs_*``) describe the
    requests: Twalk's fids and name count (since 10.0 the names), Tlopen's mode (since 10.0 the
    open flags by name), Rlopen's qid."""
    p9 = place.session
    mark = device.machine.output_mark()
    newfid = p9.new_fid()
    p9.walk(place.fid, [], newfid)
    opened = p9.lopen(newfid, os.O_RDONLY | os.O_DIRECTORY)
    p9.clunk(newfid)
    out = device.machine.output_since(mark)
    version = qemu_under_test.probe.version
    named = versions.has(version, versions.TRACE_WALK_NAMES)  # each event's format changed in its own commit
    sep = "=" if named else " "
    assert re.search(rf"v9fs_walk tag{sep}\d+ id{sep}110 fid{sep}{place.fid} newfid{sep}{newfid} nwnames{sep}0", out), (
        out
    )
    if named:
        assert "wnames={}" in out, out
    sep = "=" if versions.has(version, versions.TRACE_OPEN_FLAGS) else " "
    opening = rf"v9fs_open tag{sep}\d+ id{sep}12 fid{sep}{newfid} mode{sep}{os.O_RDONLY | os.O_DIRECTORY}"
    assert re.search(opening, out), out
    q = opened.qid
    assert f"v9fs_open_return tag 0 id 12 qid={{type {q.type} version {q.version} path {q.path}}} iounit" in out, out


#: Tlopen flags -> the words QEMU's trace must print for them
FLAG_WORDS = {
    "O_RDONLY": (os.O_RDONLY, "RDONLY"),
    "O_WRONLY_O_TRUNC": (os.O_WRONLY | os.O_TRUNC, "WRONLY|TRUNC"),
    "O_RDWR_O_APPEND": (os.O_RDWR | os.O_APPEND, "RDWR|APPEND"),
    "O_RDONLY_O_NOFOLLOW_O_NOATIME": (os.O_RDONLY | os.O_NOFOLLOW | os.O_NOATIME, "RDONLY|NOFOLLOW|NOATIME"),
    "O_RDONLY_O_DIRECTORY": (os.O_RDONLY | os.O_DIRECTORY, "RDONLY|DIRECTORY"),
    "O_RDWR_O_SYNC": (os.O_RDWR | os.O_SYNC, "RDWR|DSYNC|SYNC"),
}


@pytest.mark.qemu_bug(
    fixed_in=(),
    when={"flags": "O_RDONLY_O_DIRECTORY"},
    reason="qemu_open_flags_tostr() tests flags & __O_TMPFILE, and glibc's __O_TMPFILE includes "
    "O_DIRECTORY: every directory open is traced as RDONLY|DIRECTORY|TMPFILE",
    upstream="trace-tmpfile",
)
@pytest.mark.qemu_feature("trace_open_flags")
@pytest.mark.qemu_args("-trace", "enable=v9fs_open")
@case_path("trace/open_flags/{flags}", backends=["local"], flags=list(FLAG_WORDS))
def test_trace_names_the_open_flags(place: Place, device: Device, flags: str) -> None:
    """v9fs_open's trace names exactly the flags QEMU opens with, no more, no fewer."""
    bits, words = FLAG_WORDS[flags]
    p9 = place.session
    target = [] if bits & os.O_DIRECTORY else ["f"]
    if target:
        place.host_path("f").write_bytes(b"x")
    mark = device.machine.output_mark()
    fid = p9.walk_fid(place.fid, target)
    p9.lopen(fid, bits)
    p9.clunk(fid)
    out = device.machine.output_since(mark)
    assert re.search(rf"v9fs_open tag=\d+ id=12 fid={fid} mode={bits}\(([A-Z|]+)\)", out), out
    printed = re.search(r"mode=\d+\(([A-Z|]+)\)", out)
    assert printed is not None and printed.group(1) == words, out
