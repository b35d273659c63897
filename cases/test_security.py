"""Security: the guest must never reach the host outside the export, nor make QEMU open what it
must not. Each case names the CVE or bug it guards."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Any

import pytest

from fixtures.case_path import case_path
from fixtures.expect import UnexpectedReply, expect_rlerror
from fixtures.place import Place
from fixtures.pool import Device
from harness.errors import P9Rlerror
from harness.p9 import wire
from harness.p9.messages import Rlerror, Tmknod, Trenameat, Tsetattr
from harness.p9.session import Session
from harness.p9.wire import Request
from harness.qemu import versions
from harness.qemu.config import SECURITY_MODELS

SPECIAL_FILE_WARNING = "9p: broken or compromised client detected; attempt to open special file"


@case_path("security/dotdot_chain")
def test_dotdot_never_leaves_the_root(attached: Session, backend: str, local_export: Any) -> None:
    """'..' from the root, twenty times in one walk, gives the root's qid each time, also after
    the root's mtime changed (QEMU once compared the whole stat and let '..' out)."""
    p9 = attached
    root = p9.getattr(0).qid
    newfid = p9.new_fid()
    qids = p9.walk(0, [".."] * 16, newfid).qids
    assert qids == [root] * 16
    p9.clunk(newfid)
    if backend == "local":  # change the root's mtime, then again
        marker = local_export / f"mtime-changer-{os.getpid()}"
        marker.write_bytes(b"")
        marker.unlink()
        root = p9.getattr(0).qid
        newfid = p9.new_fid()
        qids = p9.walk(0, [".."] * 4, newfid).qids
        assert qids == [root] * 4
        assert p9.getattr(newfid).qid.path == root.path
        p9.clunk(newfid)


@case_path("security/dotdot_from_below", backends=["local"])
def test_dotdot_from_a_subdirectory(place: Place) -> None:
    """'..' from the case's directory is the export root, and one more '..' stays there."""
    p9 = place.session
    root = p9.getattr(0).qid
    newfid = p9.new_fid()
    qids = p9.walk(place.fid, ["..", ".."], newfid).qids
    assert [q.path for q in qids] == [root.path] * 2
    p9.clunk(newfid)


def host_state(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_mode, st.st_uid, st.st_mtime_ns


@case_path("security/symlink_escape/{security_model}/{target}", backends=["local"],
     security_model=["passthrough", "mapped-xattr", "mapped-file"], target=["root", "etc"])  # fmt: skip
def test_symlink_out_of_the_export(place: Place, security_model: str, target: str) -> None:
    """A symlink to / or /etc: Twalk does not follow it (the walk stops at the link), Tgetattr
    describes the link itself, and Tlopen/Tsetattr never touch the host target (passthrough:
    ELOOP; mapped models store the link as a file, so they act on that file)."""
    p9 = place.session
    where = "/" if target == "root" else "/etc"
    before = host_state(where)
    dfid = p9.walk_fid(place.fid, [])
    p9.symlink(dfid, "esc", where)
    p9.clunk(dfid)
    newfid = 500
    qids = p9.walk(place.fid, ["esc", "passwd"], newfid).qids
    assert len(qids) == 1 and qids[0].type == wire.QTSYMLINK
    assert newfid not in p9.fids
    link = p9.walk_fid(place.fid, ["esc"])
    assert stat.S_ISLNK(p9.getattr(link).mode)
    fields = {"uid": 0, "gid": 0, "size": 0, "atime_sec": 0, "atime_nsec": 0, "mtime_sec": 0, "mtime_nsec": 0}
    if security_model == "passthrough":
        with expect_rlerror(errno.ELOOP):
            p9.rpc(Tsetattr(fid=link, valid=0x1, mode=0o777, **fields))
        with expect_rlerror(errno.ELOOP):
            p9.lopen(link, os.O_RDONLY)
    else:
        p9.rpc(Tsetattr(fid=link, valid=0x1, mode=0o777, **fields))
        p9.lopen(link, os.O_RDONLY)
        assert p9.read(link, 0, 100).data == where.encode()  # the link file's content, not the target
    assert host_state(where) == before
    p9.clunk(link)


@pytest.mark.qemu_bug(
    fixed_in=versions.SPECIAL_FILES_REFUSED,
    reason="CVE-2023-2861: openat_file() opens whatever node the client names, a FIFO or a device of the host "
    "included (with O_NONBLOCK, so a FIFO opens at once)",
    raises=UnexpectedReply,
)
@pytest.mark.fresh_qemu  # QEMU warns once a process (warn_report_once): a shared one may have already
@case_path("security/special_file/{security_model}", backends=["local"],
     security_model=list(SECURITY_MODELS))  # fmt: skip
def test_host_fifo_is_not_opened(place: Place, device: Device, security_model: str) -> None:
    """CVE-2023-2861: a FIFO that exists on the host inside the export is refused at Tlopen with
    ENXIO at once (no blocking open), and QEMU says a client is broken or compromised."""
    p9 = place.session
    os.mkfifo(place.host_path("fifo"))
    fid = p9.walk_fid(place.fid, ["fifo"])
    mark = device.machine.output_mark()
    with expect_rlerror(errno.ENXIO):
        p9.lopen(fid, os.O_RDONLY)
    assert SPECIAL_FILE_WARNING in device.machine.output_since(mark)
    p9.clunk(fid)


@case_path(
    "security/mknod_nodes_stay_files/{security_model}",
    backends=["local"],
    security_model=["mapped-xattr", "mapped-file"],
)
def test_mknod_special_nodes_are_plain_files_on_the_host(place: Place, security_model: str) -> None:
    """With a mapped model, Tmknod of a FIFO or /dev/null's numbers makes only a regular host file
    (the type lives in metadata), so opening it reaches no host device."""
    p9 = place.session
    for name, mode, major, minor in (("fifo", stat.S_IFIFO, 0, 0), ("null", stat.S_IFCHR, 1, 3)):
        p9.rpc(Tmknod(dfid=place.fid, name=name, mode=mode | 0o600, major=major, minor=minor, gid=0))
        assert stat.S_ISREG(place.host_path(name).lstat().st_mode)
        fid = p9.walk_fid(place.fid, [name])
        assert stat.S_IFMT(p9.getattr(fid).mode) == mode
        p9.lopen(fid, os.O_RDWR)
        assert p9.write(fid, 0, b"not a device").count == 12
        p9.clunk(fid)


@pytest.mark.qemu_bug(
    fixed_in=versions.MKNOD_SPECIAL,
    reason="local_mknod() on passthrough creates the FIFO, then local_set_cred_passthrough() -> "
    "fchmodat_nofollow() opens it through openat_file(), which the CVE-2023-2861 fix makes refuse "
    "special files: Tmknod fails with ENXIO and the node is gone",
    raises=P9Rlerror,
)
@case_path("security/mknod_fifo_passthrough", backends=["local"], security_model=["passthrough"])
def test_mknod_fifo_on_passthrough(place: Place, security_model: str) -> None:
    """Making a FIFO is allowed (only opening one is refused): Tmknod succeeds and the host has it."""
    p9 = place.session
    p9.rpc(Tmknod(dfid=place.fid, name="fifo", mode=stat.S_IFIFO | 0o600, major=0, minor=0, gid=0))
    assert stat.S_ISFIFO(place.host_path("fifo").lstat().st_mode)


@case_path("security/virtfs_metadata/{operation}", backends=["local"], security_model=["mapped-file"],
     operation=["readdir", "walk", "mkdir", "lcreate", "symlink", "link", "mknod", "renameat"])  # fmt: skip
def test_mapped_file_metadata_is_out_of_reach(place: Place, security_model: str, operation: str) -> None:
    """With security_model=mapped-file QEMU keeps metadata in .virtfs_metadata directories: the
    client cannot list, walk to, or create that name by any request (EINVAL), and the metadata
    directory is as it was."""
    p9 = place.session
    p9.mkdir(place.fid, "sub")  # QEMU writes sub's metadata into .virtfs_metadata here
    assert place.host_path(".virtfs_metadata").is_dir()
    if operation == "readdir":
        fid = p9.walk_fid(place.fid, [])
        p9.lopen(fid, os.O_DIRECTORY)
        names = [entry.name for reply in p9.readdir_all(fid) for entry in reply.entries]
        assert sorted(names) == [".", "..", "sub"]
        p9.clunk(fid)
        return
    with expect_rlerror(errno.EINVAL):
        if operation == "walk":
            p9.walk(place.fid, [".virtfs_metadata"], 500)
        elif operation == "mkdir":
            p9.mkdir(place.fid, ".virtfs_metadata")
        elif operation == "symlink":
            p9.symlink(place.fid, ".virtfs_metadata", "sub")
        elif operation == "link":
            sub = p9.walk_fid(place.fid, ["sub"])
            try:
                p9.link(place.fid, sub, ".virtfs_metadata")
            finally:
                p9.clunk(sub)
        elif operation == "mknod":
            p9.rpc(Tmknod(dfid=place.fid, name=".virtfs_metadata", mode=stat.S_IFREG | 0o600, major=0, minor=0, gid=0))
        elif operation == "renameat":
            p9.rpc(Trenameat(olddirfid=place.fid, oldname="sub", newdirfid=place.fid, newname=".virtfs_metadata"))
        else:
            fid = p9.walk_fid(place.fid, [])
            try:
                p9.lcreate(fid, ".virtfs_metadata")
            finally:
                p9.clunk(fid)
    assert sorted(os.listdir(place.host_path(".virtfs_metadata"))) == ["sub"]
    assert place.host_path("sub").is_dir()


def empty_strings(message: type[Request], fid: int) -> Request:
    """``message`` with every string empty, every fid ``fid``, numbers 0, lists empty."""
    fields: dict[str, Any] = {}
    for name, codec in wire.field_codecs(message).items():
        kind = type(codec).__name__
        if isinstance(codec, wire.StringCodec):
            fields[name] = ""
        elif name in ("fid", "dfid", "dirfd", "olddirfid", "newdirfid"):
            fields[name] = fid
        elif name in ("newfid", "afid"):
            fields[name] = 900
        elif kind in ("FocusedSeq", "Prefixed"):
            fields[name] = [] if kind == "FocusedSeq" else b""
        else:
            fields[name] = 0
    return message(**fields)


STRING_MESSAGES = [
    m.NAME
    for m in wire.requests()
    if m.NAME != "Tversion" and any(isinstance(c, wire.StringCodec) for c in wire.field_codecs(m).values())
]


@case_path("security/empty_strings/{message}", backends=["local", "synth"], message=STRING_MESSAGES)
def test_empty_strings_do_not_crash(place: Place, device: Device, message: str) -> None:
    """CVE-2016-8578: every string field empty (name, target, uname, client_id ...): an answer,
    reply or Rlerror, and QEMU alive with a working session afterwards."""
    p9 = place.session
    scratch = p9.walk_fid(place.fid, [])
    if message in ("Tlock", "Tgetlock"):  # they need an open fid (see lock/unopened_fid for why)
        p9.lopen(scratch, os.O_DIRECTORY)
    request = wire.request(message)
    reply = p9.send(empty_strings(request, scratch)).wait()
    assert isinstance(reply.message, Rlerror | request.reply_class()), reply.message
    assert device.alive()
    assert p9.getattr(0).qid.type == wire.QTDIR
    for fid in list(p9.fids - {0, place.fid}):
        with contextlib.suppress(P9Rlerror):  # an xattr fid with an empty name fails to commit
            p9.clunk(fid)
