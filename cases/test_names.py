"""Every request that takes a name, at every boundary a name can have (fixtures/operations.py:
the rows, the boundaries and the one oracle that judges them), in both dialects, under every
security model: the exact errno; on a refusal the directory exactly as it was (path, kind, mode,
owner, times, inode, bytes, xattrs) and the newfid still free; on a success the node of the
row's kind at exactly that name, the directory's other names as they were, and the reply's qid
of that kind.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from fixtures.case_path import case_path
from fixtures.expect import UnexpectedReply
from fixtures.operations import BOUNDARIES, DIR, FILE, LINK, MOVED, NAME_OPS, SYMLINK, Expected, NameOp, expected
from fixtures.place import Place
from fixtures.refusal import Targets, assert_refused
from harness.errors import QEMUExited
from harness.p9 import wire
from harness.p9.messages import Rwalk
from harness.qemu import versions

MODELS = ["passthrough", "mapped-xattr", "mapped-file", "none"]
DOTL_OPS = [name for name, op in NAME_OPS.items() if op.dialect == wire.DOTL]
DOTU_OPS = [name for name, op in NAME_OPS.items() if op.dialect == wire.DOTU]
#: the kind of node each row's success leaves, as lstat() and the qid show it
KINDS = {DIR: (stat.S_ISDIR, wire.QTDIR), FILE: (stat.S_ISREG, wire.QTFILE), LINK: (stat.S_ISREG, wire.QTFILE),
         SYMLINK: (stat.S_ISLNK, wire.QTSYMLINK)}  # fmt: skip


def populate(host: Path, op: NameOp, name: str, security_model: str) -> None:
    """The case's directory: the file ``f``, the directory ``d``, and the node the row needs at
    the name where the host can make one there (not mapped-file's own metadata directory)."""
    (host / "f").write_bytes(b"content")
    (host / "d").mkdir()
    reserved = security_model == "mapped-file" and name == BOUNDARIES["metadata"]
    if op.needs == FILE and name not in ("", ".", "..") and "/" not in name and len(name) <= 255 and not reserved:
        (host / name).write_bytes(b"at the name")


def check(place: Place, op: NameOp, boundary: str, security_model: str) -> None:
    """Send the row's request with the boundary's name; judge the reply and the host by the oracle."""
    p9, name = place.session, BOUNDARIES[boundary]
    populate(place.host_path(), op, name, security_model)
    names_before = listed(place, security_model)
    want = expected(op, boundary, security_model)
    request = op.request(Targets(place), name)
    if want.errno:
        assert_refused(place, request, want.errno)
    else:
        answer = p9.rpc(request)
        judge_success(place, op, name, want, names_before, answer, security_model)
    for fid in set(p9.fids) - {0, place.fid}:
        p9.clunk(fid)


def listed(place: Place, security_model: str) -> set[str]:
    """The names in the case's directory, mapped-file's own metadata directory aside."""
    names = {entry.name for entry in place.host_path().iterdir()}
    return names - {BOUNDARIES["metadata"]} if security_model == "mapped-file" else names


def judge_success(place: Place, op: NameOp, name: str, want: Expected, names_before: set[str], answer: object,
                  security_model: str) -> None:  # fmt: skip
    names_after = listed(place, security_model)
    assert names_after == (names_before - want.removed) | want.added, (
        f"{name[:20]!r}: the directory has {sorted(n[:20] for n in names_after)}, the oracle "
        f"{sorted(n[:20] for n in (names_before - want.removed) | want.added)}"
    )
    qid = getattr(answer, "qid", None)
    if op.makes is not None and name:
        is_kind, qid_type = KINDS[op.makes]
        if op.makes == SYMLINK and security_model.startswith("mapped"):
            is_kind = stat.S_ISREG  # a mapped model keeps a symlink as a file holding its target
        assert is_kind(place.host_path(name).lstat().st_mode), f"{name[:20]!r} is not a {op.makes}"
        if qid is not None:
            assert qid.type == qid_type, f"the reply's qid {qid} is not a {op.makes}'s"
    if op.moves and op.needs is not None:
        assert place.host_path(MOVED).read_bytes() == b"at the name"
    if isinstance(answer, Rwalk):
        assert len(answer.qids) == 1
        if name == ".":  # the directory itself: its own qid
            assert answer.qids[0] == place.session.getattr(place.fid).qid
        elif name == "..":  # the export root, the case directory's parent
            assert answer.qids[0] == place.session.getattr(0).qid
        else:
            assert answer.qids[0].type == wire.QTFILE


@pytest.mark.qemu_bug(
    fixed_in=versions.FID_HANDLE_CHECK,
    reason="v9fs_wstat()'s sync path calls fsync on a fid with no open file, which on local runs on fd 0 (EINVAL) "
    "instead of refusing the fid with EBADF (fixed by 75893c058b)",
    raises=UnexpectedReply,
    when={"op": "dotu/wstat", "boundary": "empty"},
)
@pytest.mark.qemu_bug(
    fixed_in=versions.WSTAT_NAME_CHECK,
    reason="v9fs_wstat() renames to '.' or '..' unchecked: rename(2) onto the directory answers ENOTEMPTY, "
    "where every other rename says EISDIR (fixed with the name check of 7f5445e7e4)",
    raises=UnexpectedReply,
    when={"op": "dotu/wstat", "boundary": ("dot", "dotdot")},
)
@pytest.mark.qemu_bug(
    fixed_in=versions.WSTAT_NAME_CHECK,
    reason="v9fs_wstat() passes a new name containing '/' to v9fs_complete_rename() unchecked; an assertion in "
    "the path code aborts QEMU (fixed by 7f5445e7e4: ENOENT)",
    raises=QEMUExited,
    when={"op": "dotu/wstat", "boundary": "slash"},
)
@case_path("names/{op}/{boundary}/{security_model}", backends=["local"], dialect=[wire.DOTU], op=DOTU_OPS,
           boundary=list(BOUNDARIES), security_model=MODELS)  # fmt: skip
def test_name_boundary_dotu(place: Place, dialect: str, op: str, boundary: str, security_model: str) -> None:
    """9P2000.u's requests that take a name, at each boundary, judged by the oracle."""
    check(place, NAME_OPS[op], boundary, security_model)


@case_path("names/{op}/{boundary}/{security_model}", backends=["local"], dialect=[wire.DOTL], op=DOTL_OPS,
           boundary=list(BOUNDARIES), security_model=MODELS)  # fmt: skip
def test_name_boundary(place: Place, dialect: str, op: str, boundary: str, security_model: str) -> None:
    """9P2000.L's requests that take a name, at each boundary, judged by the oracle."""
    check(place, NAME_OPS[op], boundary, security_model)
