"""The tables' known-bug deviations (fixtures/deviations.py) on the model alone: what each says QEMU
answers, and which requests a table does not send because QEMU dies of them."""

from __future__ import annotations

import errno
import os

from fixtures.answers import OK, Err, Target
from fixtures.cells import Verdict
from fixtures.deviations import (
    READDIR_UNCHECKED,
    SPECIAL_OPENED,
    TABLE_BUGS,
    readdir_unchecked,
    readdir_unchecked_kills,
    special_opened,
)
from fixtures.footprint import reads
from fixtures.known import deviating_bugs
from fixtures.model import NO_ID, RULES, By, Export, Kind, Node, Server, Use
from fixtures.subjects import excluded
from harness.p9 import wire
from harness.p9.messages import (
    Tattach,
    Tgetattr,
    Tlcreate,
    Tlopen,
    Treaddir,
    Treadlink,
    Tsetattr,
    Tstatfs,
    Tunlinkat,
    Twalk,
    Twrite,
    Txattrcreate,
    Txattrwalk,
)
from harness.p9.wire import Request

NOFID = 0xFFFFFFFF


def _model(version: str = "10.0.13") -> Export:
    model = Export(Server("passthrough", version=version))
    steps: list[Request] = [
        Tattach(fid=0, afid=NOFID, uname="", aname="", n_uname=0),
        Twalk(fid=0, newfid=1, wnames=[]),
        Tlcreate(fid=1, name="f", flags=os.O_RDWR, mode=0o644, gid=0),  # 1: an open file
        Twalk(fid=0, newfid=2, wnames=["f"]),  # 2: walked, not opened
        Twalk(fid=0, newfid=3, wnames=[]),
        Tlopen(fid=3, flags=os.O_RDONLY | os.O_DIRECTORY),  # 3: an open directory
        Txattrwalk(fid=2, newfid=4, name=""),  # 4: an xattr read
        Twalk(fid=0, newfid=5, wnames=["f"]),
        Txattrcreate(fid=5, name="user.a", attr_size=4, flags=0),  # 5: an xattr create, nothing written
        Twalk(fid=0, newfid=6, wnames=["f"]),
        Txattrcreate(fid=6, name="user.b", attr_size=4, flags=0),
        Twrite(fid=6, offset=0, data=b"ab"),  # 6: an xattr create, written to
    ]
    for step in steps:
        assert not isinstance(model.apply(step), Err), step
    return model


def test_a_readdir_before_the_dir_fid_check_is_einval_or_kills_qemu() -> None:
    """Before READDIR_DIR_FID, v9fs_readdir() looked only for a directory stream in the fid's open
    state, a union: nothing there (walked, an xattr fid with nothing written) EINVAL; a file's
    descriptor or an xattr fid's count of bytes written, taken for a DIR*, SIGSEGV. An open
    directory is never the bug's."""
    model = _model()
    uses = {number: model.fids[number].use for number in range(1, 7)}
    assert uses == {1: Use.FILE, 2: Use.WALKED, 3: Use.DIR, 4: Use.XATTR, 5: Use.XATTR_NEW, 6: Use.XATTR_NEW}
    answered, kills = {}, set()
    for number in uses:
        request = Treaddir(fid=number, offset=0, count=4096)
        answered[number] = readdir_unchecked(model, request)
        if readdir_unchecked_kills(model, request):
            kills.add(number)
    assert answered == {1: None, 2: Err(errno.EINVAL), 3: None, 4: Err(errno.EINVAL), 5: Err(errno.EINVAL), 6: None}
    assert kills == {1, 6}
    assert model.peek(Treaddir(fid=3, offset=0, count=4096)) not in (OK, Err(errno.ENOTDIR))  # a listing


def test_a_getattr_before_the_open_fid_fix_goes_by_the_path() -> None:
    """Tgetattr of an open fid fstat()s its descriptor since GETATTR_OPEN_FID (9.2.0, 9.1.3, 8.2.9,
    7.2.16); before, it lstat()s the fid's path: the node whose fields its reply is checked against."""
    rule = RULES[Tgetattr]
    assert rule.reach(Server("passthrough", version="9.0.4")) is By.PATH
    assert rule.reach(Server("passthrough", version="9.1.3")) is By.DESCRIPTOR_IF_OPEN
    assert rule.reach(Server("passthrough", version="7.2.22")) is By.DESCRIPTOR_IF_OPEN


def test_the_readdir_bug_is_a_table_s_on_the_releases_without_its_fix() -> None:
    """The marker puts READDIR_UNCHECKED on a table's Treaddir cells on 8.1.5 (before 8.2.8), not
    on 9.0.4 (its backport) nor on another message; a verdict it kills QEMU in is that bug's."""
    marks = [decorator.mark for decorator in TABLE_BUGS]
    params = {"message": "readdir", "security_model": "passthrough"}
    found = deviating_bugs(marks, params, "8.1.5")
    assert [k.deviation for k in found if k.deviation is READDIR_UNCHECKED] == [READDIR_UNCHECKED]
    assert all(k.deviation is not READDIR_UNCHECKED for k in deviating_bugs(marks, params, "9.0.4"))
    assert all(
        k.deviation is not READDIR_UNCHECKED for k in deviating_bugs(marks, {**params, "message": "read"}, "8.1.5")
    )
    (bug,) = [k for k in found if k.deviation is READDIR_UNCHECKED]
    request = Treaddir(fid=1, offset=0, count=4096)
    verdict = Verdict("file/readdir", request, Err(errno.ENOTDIR), None, ["a known bug kills QEMU"], killer=bug)
    assert verdict.outcome() == "known" and verdict.bug() is bug
    assert "not sent (QEMU dies of it)" in str(verdict)
    assert Verdict("file/readdir", request, Err(errno.ENOTDIR), None, ["a known bug kills QEMU"]).outcome() == "wrong"


def test_a_getattr_of_an_unlinked_open_file_goes_by_version() -> None:
    """On 9.0.4 the Tgetattr of an open file whose name is gone looks its path up (ENOENT) and
    depends on that path; on 9.1.3 it stats the descriptor (its node's data)."""
    answered, reached = {}, {}
    for version in ("9.0.4", "9.1.3"):
        model = _model(version)
        assert model.apply(Tunlinkat(dirfd=0, name="f", flags=0)) == OK
        request = Tgetattr(fid=1, request_mask=0x7FF)
        answered[version] = model.peek(request)
        reached[version] = {kind for kind, _ in reads(model, request)} - {"fid"}
    assert answered == {"9.0.4": Err(errno.ENOENT), "9.1.3": OK}
    assert reached == {"9.0.4": {"path"}, "9.1.3": {"data"}}


def _specials(version: str, security_model: str = "passthrough") -> Export:
    """A model of the host's own special nodes (as fixtures/mirror.py reads them), each walked:
    fid 1 a FIFO, 2 /dev/null's numbers, 3 a block device no host has, 4 a socket."""
    model = Export(Server(security_model, version=version))
    assert model.apply(Tattach(fid=0, afid=NOFID, uname="", aname="", n_uname=0)) == OK
    nodes = {"fifo": (Kind.FIFO, 0), "null": (Kind.CHAR, os.makedev(1, 3)), "none": (Kind.BLOCK, os.makedev(240, 0)),
             "sock": (Kind.SOCKET, 0)}  # fmt: skip
    for number, (name, (kind, rdev)) in enumerate(nodes.items(), 1):
        model.root.entries[name] = Node(kind, 0o600, native=True, rdev=rdev)
        assert not isinstance(model.apply(Twalk(fid=0, newfid=number, wnames=[name])), Err)
    return model


def test_a_special_file_before_the_cve_fix_opens_as_the_host_does() -> None:
    """Before the CVE-2023-2861 fix QEMU opened a special node as the host's open(O_NONBLOCK)
    does: a FIFO for reading (for writing alone ENXIO: no reader), /dev/null any way, a device
    no host has and a socket never; a truncate by path then meets ftruncate(2)'s EINVAL, and a
    mapped model's Treadlink reads nothing. Where the host refuses too, the answer is the model's."""
    model = _specials("7.2.3")
    refused = {fid: model.peek(Tlopen(fid=fid, flags=os.O_RDONLY)) for fid in (1, 2, 3, 4)}
    assert refused == dict.fromkeys((1, 2, 3, 4), Err(errno.ENXIO))  # the model: a fixed QEMU's
    opened = {(fid, flags): special_opened(model, Tlopen(fid=fid, flags=flags))
              for fid in (1, 2, 3, 4) for flags in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR)}  # fmt: skip
    assert opened == {
        (1, os.O_RDONLY): OK, (1, os.O_WRONLY): None, (1, os.O_RDWR): OK,
        (2, os.O_RDONLY): OK, (2, os.O_WRONLY): OK, (2, os.O_RDWR): OK,
        **{(fid, flags): None for fid in (3, 4) for flags in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR)},
    }  # fmt: skip
    assert [special_opened(model, Tstatfs(fid=fid)) for fid in (1, 2, 3, 4)] == [OK, OK, None, None]
    size = Tsetattr(fid=2, valid=wire.SETATTR_SIZE, mode=0, uid=NO_ID, gid=NO_ID, size=3,
                    atime_sec=0, atime_nsec=0, mtime_sec=0, mtime_nsec=0)  # fmt: skip
    assert special_opened(model, size) == Err(errno.EINVAL)  # /dev/null opens O_WRONLY, then ftruncate()
    assert special_opened(model, size.replaced(fid=1)) is None  # a FIFO for writing: ENXIO as the model's
    assert special_opened(model, Treadlink(fid=1)) is None  # passthrough reads a link: the model's EINVAL
    mapped = _specials("7.2.3", "mapped-xattr")
    assert [special_opened(mapped, Treadlink(fid=fid)) for fid in (1, 2, 3, 4)] == [Target(""), Target(""), None, None]
    marks = [decorator.mark for decorator in TABLE_BUGS]
    on = {"message": "lopen", "security_model": "passthrough"}
    assert any(k.deviation is SPECIAL_OPENED for k in deviating_bugs(marks, on, "7.2.3"))
    assert any(k.deviation is SPECIAL_OPENED for k in deviating_bugs(marks, on, "8.0.2"))
    for fixed in ("7.2.4", "8.0.3", "8.1.0"):
        assert not any(k.deviation is SPECIAL_OPENED for k in deviating_bugs(marks, on, fixed))


def test_an_opened_special_file_is_a_known_bug_s_state_before_the_cve_fix() -> None:
    """The states table excludes every open special file; on a QEMU without the CVE-2023-2861 fix
    the ones the host opens are built all the same, which states/excluded takes as that bug's."""

    def bugs(version: str) -> set[tuple[str, str]]:
        return {(state.kind, state.opened) for state, why in excluded(Server("passthrough", version=version)).items()
                if why.bug and state.made == "host" and state.since == "nothing"}  # fmt: skip

    opened = {("fifo", "rdonly"), ("fifo", "rdwr"), ("char", "rdonly"), ("char", "wronly"), ("char", "rdwr")}
    assert bugs("7.2.3") == opened
    assert bugs("7.2.4") == set()
