"""Every request that takes a name, at every boundary a name can have (fixtures/tables.py
``NAME_OPS``: each name field of each row of fixtures/model.py, and ``BOUNDARIES``), in both
dialects, under every security model, judged by the model: the exact errno; on a refusal the
directory exactly as it was (path, kind, mode, owner, times, inode, bytes, xattrs) and the newfid
still free; on a success the host as the model has it (the node of its kind at exactly that
name, the directory's other names as they were) and the reply's qid that node's.
"""

from __future__ import annotations

import contextlib

import pytest

from fixtures.case_path import case_path
from fixtures.cells import assert_verdict, judge_request
from fixtures.expect import UnexpectedReply
from fixtures.mirror import Mirror
from fixtures.model import SECURITY_MODELS
from fixtures.subjects import Targets
from fixtures.tables import BOUNDARIES, NAME_OPS, NameOp
from harness.errors import QEMUExited
from harness.p9 import wire
from harness.qemu import versions

DOTL_OPS = [name for name, op in NAME_OPS.items() if op.dialect == wire.DOTL]
DOTU_OPS = [name for name, op in NAME_OPS.items() if op.dialect == wire.DOTU]


def check(mirror: Mirror, row: NameOp, boundary: str) -> None:
    """The case's directory holds the file ``f`` and the directory ``d``, and a file at the
    boundary's name where the row's request names an existing node (the model says which: the
    world in which a plain name succeeds) and the host can make one; the request with that name,
    judged by the model."""
    name = BOUNDARIES[boundary]
    host = mirror.path()
    (host / "f").write_bytes(b"content")
    (host / "d").mkdir()
    if row.names_existing(mirror.model.server):
        # a name the host cannot make ('', '.', a slash, too long, mapped-file's own)
        with contextlib.suppress(OSError):
            (host / name).write_bytes(b"at the name")
    mirror.learn(())
    targets = Targets(mirror, mirror.fid)
    assert_verdict(judge_request(mirror, row.op(name).request(targets), targets.free, ()))
    mirror.clunk_all({0, mirror.fid})


@pytest.mark.qemu_bug(
    fixed_in=versions.FSYNC_HANDLE_CHECK_LOCAL,
    reason="v9fs_wstat()'s sync path calls fsync on a fid with no open file, which on local runs on fd 0 (EINVAL) "
    "instead of refusing the fid with EBADF (fixed by either: 32cae47c33's check, or on local 75893c058b's "
    "descriptor -1)",
    raises=UnexpectedReply,
    when={"op": "dotu/wstat", "boundary": "empty"},
)
@pytest.mark.qemu_bug(
    fixed_in=versions.WSTAT_DOT_CHECK,
    reason="v9fs_wstat() renames to '.' or '..' unchecked: rename(2) onto the directory answers ENOTEMPTY, "
    "where every other rename says EISDIR (fixed by 08750e31fc)",
    raises=UnexpectedReply,
    when={"op": "dotu/wstat", "boundary": ("dot", "dotdot")},
)
@pytest.mark.qemu_bug(
    fixed_in=versions.WSTAT_SLASH_CHECK,
    reason="v9fs_wstat() passes a new name containing '/' to v9fs_complete_rename() unchecked; an assertion in "
    "the path code aborts QEMU (fixed by 7f5445e7e4: ENOENT)",
    raises=QEMUExited,
    when={"op": "dotu/wstat", "boundary": "slash"},
)
@case_path("names/{op}/{boundary}/{security_model}", backends=["local"], dialect=[wire.DOTU], op=DOTU_OPS,
           boundary=list(BOUNDARIES), security_model=list(SECURITY_MODELS))  # fmt: skip
def test_name_boundary_dotu(mirror: Mirror, dialect: str, op: str, boundary: str, security_model: str) -> None:
    """9P2000.u's requests that take a name, at each boundary, judged by the model."""
    check(mirror, NAME_OPS[op], boundary)


@case_path("names/{op}/{boundary}/{security_model}", backends=["local"], dialect=[wire.DOTL], op=DOTL_OPS,
           boundary=list(BOUNDARIES), security_model=list(SECURITY_MODELS))  # fmt: skip
def test_name_boundary(mirror: Mirror, dialect: str, op: str, boundary: str, security_model: str) -> None:
    """9P2000.L's requests that take a name, at each boundary, judged by the model."""
    check(mirror, NAME_OPS[op], boundary)
