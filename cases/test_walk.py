"""Twalk: "nwqid is therefore either nwname or the index of the first elementwise walk that failed"
and "If the first element cannot be walked for any reason, Rerror is returned" (walk(5)).
"newfid ... is affected only if nwqid equals nwname" (walk(5))."""

from __future__ import annotations

import errno

import pytest

from fixtures.case_path import case_path
from fixtures.deviations import SYNTH_DOT_NAMES
from fixtures.expect import expect_rlerror
from fixtures.place import Place
from harness.errors import P9Rlerror
from harness.p9 import wire
from harness.p9.messages import Rwalk, Twalk
from harness.p9.session import Session
from synth_tree import WALK_PATH, chain


def assert_unused(p9: Session, fid: int) -> None:
    """The server holds no such fid: Tgetattr on it fails with ENOENT."""
    with expect_rlerror(errno.ENOENT):
        p9.getattr(fid, wire.GETATTR_BASIC)


@pytest.mark.needs_synth_tree
@case_path("walk/basic")
def test_walk_basic(place: Place) -> None:
    """All 16 names of the WALK chain in one Twalk: 16 directory qids, all different, and the new
    fid stands on the last of them."""
    p9 = place.session
    start = place.provide(chain(WALK_PATH))
    newfid = p9.new_fid()
    qids = p9.walk(start, WALK_PATH, newfid).qids
    assert len(qids) == wire.MAXWELEM
    assert all(q.type == wire.QTDIR for q in qids), qids
    assert len({q.path for q in qids}) == wire.MAXWELEM
    assert p9.getattr(newfid).qid == qids[-1]
    # the same chain one step at a time reaches the same qids
    fid = start
    for name, want in zip(WALK_PATH, qids, strict=True):
        step = p9.new_fid()
        (got,) = p9.walk(fid, [name], step).qids
        assert got == want, name
        if fid != start:
            p9.clunk(fid)
        fid = step
    p9.clunk(fid)
    p9.clunk(newfid)


@pytest.mark.needs_synth_tree
@case_path("walk/too_many_names")
def test_walk_17_names(place: Place) -> None:
    """nwname above MAXWELEM (16) is refused with EINVAL, and newfid is not created."""
    p9 = place.session
    start = place.provide(chain(WALK_PATH))
    with expect_rlerror(errno.EINVAL):
        p9.walk(start, [*WALK_PATH, "WALK16"], newfid=100)
    assert_unused(p9, 100)


@case_path("walk/no_slash")
def test_walk_no_slash(place: Place) -> None:
    """A name containing '/' is illegal: ENOENT, and newfid stays unused."""
    p9 = place.session
    with expect_rlerror(errno.ENOENT):
        p9.walk(place.fid, [" /"], newfid=100)
    assert_unused(p9, 100)


@case_path("walk/none")
def test_walk_none(attached: Session) -> None:
    """nwname = 0 clones the fid: no qid in Rwalk, and newfid is the same file as fid."""
    p9 = attached
    root_qid = p9.getattr(0).qid
    reply = p9.send(Twalk(fid=0, newfid=1, wnames=[])).wait()
    assert reply.message == Rwalk(qids=[])
    assert reply.used_len == wire.HEADER_SIZE + 2
    assert 1 in p9.fids  # the session saw the clone made
    assert p9.getattr(1).qid == root_qid
    p9.clunk(1)
    assert p9.getattr(0).qid == root_qid  # the original is untouched


@case_path("walk/dotdot_from_root")
def test_walk_dotdot_from_root(attached: Session) -> None:
    """'..' at the root of the export stays at the root (it never leaves the export)."""
    p9 = attached
    root_qid = p9.getattr(0).qid
    fid = p9.new_fid()
    qids = p9.walk(0, ["..", "..", ".."], fid).qids
    assert qids == [root_qid] * 3
    assert p9.getattr(fid).qid == root_qid
    p9.clunk(fid)


# walk(5): "The name '.' (dot), meaning the current directory, is not used in the protocol": no
# answer to a Twalk of '.' is wrong, so no case asks for one (the local backend walks it in place)
@pytest.mark.qemu_bug(**SYNTH_DOT_NAMES, when={"backend": "synth"}, raises=P9Rlerror)
@pytest.mark.needs_synth_tree
@case_path("walk/dotdot_from_below")
def test_walk_dotdot_from_below(place: Place, backend: str) -> None:
    """'..' from a directory below the export root is the directory above it (walk(5): "The name
    '..' (dot-dot) represents the parent directory"): the walk's one qid and the new fid's
    Tgetattr are that directory's."""
    p9 = place.session
    start = place.provide(chain(WALK_PATH))
    above = p9.walk_fid(start, WALK_PATH[:1])
    below = p9.walk_fid(above, WALK_PATH[1:2])
    wanted = p9.getattr(above).qid
    newfid = p9.new_fid()
    assert p9.walk(below, [".."], newfid).qids == [wanted]
    assert p9.getattr(newfid).qid == wanted
    for fid in (newfid, below, above):
        p9.clunk(fid)


@case_path("walk/non_existent")
def test_walk_non_existent(place: Place) -> None:
    """The first element fails: Rlerror ENOENT (not an empty Rwalk), newfid unused."""
    p9 = place.session
    with expect_rlerror(errno.ENOENT):
        p9.walk(place.fid, ["non-existent"], newfid=100)
    assert_unused(p9, 100)


@pytest.mark.needs_synth_tree
@case_path("walk/2nd_non_existent")
def test_walk_2nd_non_existent(place: Place) -> None:
    """A later element fails: Rwalk with the qids of the walked prefix; newfid is not created."""
    p9 = place.session
    start = place.provide(chain(WALK_PATH))
    start_qid = p9.getattr(start).qid
    walked = p9.new_fid()
    (first,) = p9.walk(start, ["WALK0"], walked).qids
    p9.clunk(walked)
    newfid = 100
    qids = p9.walk(start, ["WALK0", "non-existent", "WALK2"], newfid).qids
    assert qids == [first]
    assert first != start_qid and first.type == wire.QTDIR
    assert_unused(p9, newfid)
    # a partial walk deeper in the chain returns exactly the prefix it managed
    qids = p9.walk(start, [*WALK_PATH[:5], "nope", *WALK_PATH[6:]], 101).qids
    assert len(qids) == 5
    assert_unused(p9, 101)


@case_path("walk/name_{case}", case=["empty", "slash_only"])
def test_walk_illegal_names(place: Place, case: str) -> None:
    """An empty name and "/" are no names: ENOENT, newfid unused."""
    p9 = place.session
    with expect_rlerror(errno.ENOENT):
        p9.walk(place.fid, ["" if case == "empty" else "/"], newfid=100)
    assert_unused(p9, 100)
