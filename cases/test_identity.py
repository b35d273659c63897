"""Who a fid acts as: Tattach's n_uname becomes the fid's uid, every fid walked from it inherits it,
and what such a fid creates is owned by it: on the host itself under passthrough (and none, which
tries the same and ignores failures), in user.virtfs.uid under mapped-xattr, in the node's
.virtfs_metadata file under mapped-file. The group is the gid the request names. Two attaches with
different n_unames do not mix."""

from __future__ import annotations

import os
import stat

import pytest

from fixtures.case_path import case_path
from fixtures.mirror import mapped_attribute
from fixtures.model import SECURITY_MODELS
from fixtures.place import Place
from harness.p9 import wire
from harness.p9.messages import Tmknod
from harness.p9.session import Session

USER, GROUP = 1234, 4321
MODELS = list(SECURITY_MODELS)


def make(p9: Session, dfid: int, kind: str) -> None:
    """Create ``kind`` named after itself in the directory ``dfid`` names, asking for GROUP."""
    if kind == "lcreate":
        fid = p9.walk_fid(dfid, [])
        p9.lcreate(fid, kind, os.O_RDWR, 0o640, gid=GROUP)
        p9.clunk(fid)
    elif kind == "mkdir":
        p9.mkdir(dfid, kind, 0o750, gid=GROUP)
    elif kind == "symlink":
        p9.symlink(dfid, kind, "target", gid=GROUP)
    elif kind == "mknod":
        p9.rpc(Tmknod(dfid=dfid, name=kind, mode=stat.S_IFREG | 0o640, major=0, minor=0, gid=GROUP))


def owner(place: Place, model: str, name: str) -> tuple[int | None, int | None]:
    """The owner the security model stored for ``name``: the host's, or what a mapped model keeps
    (None: it keeps none)."""
    path = place.host_path(name)
    if not model.startswith("mapped"):
        st = path.lstat()
        return st.st_uid, st.st_gid
    return mapped_attribute(path, model, "uid"), mapped_attribute(path, model, "gid")


@case_path("identity/{security_model}/{kind}", backends=["local"], security_model=MODELS,
           kind=["lcreate", "mkdir", "symlink", "mknod"])  # fmt: skip
def test_created_node_belongs_to_the_attaching_user(place: Place, security_model: str, kind: str) -> None:
    """A node created through a fid of an attach with n_uname 1234 (walked twice from it) belongs
    to uid 1234 and the gid asked for, as the model stores owners; Tgetattr reports them; a node
    created through the root attach's fid belongs to root."""
    p9 = place.session
    p9.attach(100, uname="user", n_uname=USER)
    user_dir = p9.walk_fid(100, [place.host_path().name])  # the case's directory, as the user
    inner = p9.walk_fid(user_dir, [])  # and a clone of that: still the user
    make(p9, inner, kind)
    assert owner(place, security_model, kind) == (USER, GROUP)
    fid = p9.walk_fid(place.fid, [kind])
    attr = p9.getattr(fid)
    assert (attr.uid, attr.gid) == (USER, GROUP)
    p9.clunk(fid)
    os.rename(place.host_path(kind), place.host_path(f"{kind}-user"))
    make(p9, place.fid, kind)  # the root attach's fid: root
    assert owner(place, security_model, kind)[0] == 0
    for f in (inner, user_dir, 100):
        p9.clunk(f)


@pytest.mark.fsdev(security_model="passthrough")
@case_path("identity/dotu_create", backends=["local"], dialect=[wire.DOTU])
def test_dotu_create_belongs_to_the_attaching_user(place: Place, dialect: str) -> None:
    """9P2000.u's Tcreate of a file and a directory through an n_uname 1234 attach: owned by 1234
    (9P2000.u's Tcreate names no group: QEMU leaves the gid to the host)."""
    p9 = place.session
    p9.attach(100, uname="user", n_uname=USER)
    for name, perm in (("file", 0o640), ("dir", wire.DMDIR | 0o750)):
        fid = p9.walk_fid(100, [place.host_path().name])
        p9.create(fid, name, perm, wire.ORDWR if name == "file" else wire.OREAD)
        assert place.host_path(name).lstat().st_uid == USER
        assert p9.stat(fid).n_uid == USER
        p9.clunk(fid)
    p9.clunk(100)
