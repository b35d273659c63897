"""Twrite: "count[4] ... the number of bytes written" (write(5)). QEMU's synth WRITE file takes one
byte per call; the server must loop until the whole count is written."""

from __future__ import annotations

import os

import pytest

from fixtures.case_path import case_path
from harness.p9 import wire
from harness.p9.session import Session

SIZES = [1, 4096, 8192 - wire.IOHDRSZ]


#: QEMU's case writes P9_MAX_SIZE / 2 bytes (libqos P9_MAX_SIZE is 4096).
QEMU_WRITE_COUNT = 2048


@pytest.mark.needs_synth_tree
@case_path("write/basic", backends=["synth"])
def test_write_basic(attached: Session) -> None:
    """As QEMU's case: 2048 zero bytes at offset 0, all reported written (the WRITE file takes one
    byte per call, so the server looped 2048 times)."""
    p9 = attached
    fid = p9.walk_fid(0, ["WRITE"])
    p9.lopen(fid, os.O_WRONLY)
    assert p9.write(fid, 0, bytes(QEMU_WRITE_COUNT)).count == QEMU_WRITE_COUNT
    p9.clunk(fid)


@pytest.mark.needs_synth_tree
@case_path("write/size_{size}", backends=["synth"], size=SIZES)
def test_write_sizes(attached: Session, size: int) -> None:
    """From one byte to the largest payload a message of msize holds, at an offset too."""
    p9 = attached
    fid = p9.walk_fid(0, ["WRITE"])
    p9.lopen(fid, os.O_WRONLY)
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert p9.write(fid, 0, data).count == size
    assert p9.write(fid, 12345, data).count == size
    p9.clunk(fid)
