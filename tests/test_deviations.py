"""The tables' known-bug deviations (fixtures/deviations.py) on the model alone: what each says QEMU
answers, and which requests a table does not send because QEMU dies of them."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from fixtures.answers import OK, Err, Target
from fixtures.cells import Verdict
from fixtures.deviations import (
    MAPPED,
    METADATA_OF_NOTHING,
    READDIR_UNCHECKED,
    SPECIAL_OPENED,
    TABLE_BUGS,
    dotu_read_by_path,
    ftruncate_unwritable,
    metadata_of_nothing,
    mknod_any_type_answer,
    moved_from_bare_dir,
    readdir_unchecked,
    readdir_unchecked_kills,
    special_opened,
)
from fixtures.footprint import reads
from fixtures.known import deviating_bugs
from fixtures.model import NO_ID, RULES, SECURITY_MODELS, By, Export, Kind, Node, Server, Use
from fixtures.subjects import SPECIAL_OPENED_STEP, excluded
from harness.p9 import wire
from harness.p9.messages import (
    Tattach,
    Tgetattr,
    Tlcreate,
    Tlink,
    Tlopen,
    Tmknod,
    Topen,
    Tread,
    Treaddir,
    Treadlink,
    Trename,
    Trenameat,
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


def test_an_out_of_date_marker_is_named_by_the_bug_whose_answer_did_not_come() -> None:
    """A right answer where two table bugs apply, one of which would have answered the same (its
    answers are the model's): the marker out of date is the other's, and the tally names it."""
    from fixtures.cells import Tally, _tally
    from fixtures.known import Known

    same = Known(pytest.mark.qemu_bug(reason="a bug that answers as the model here").mark, "same")
    other = Known(pytest.mark.qemu_bug(reason="the bug that answers EINVAL").mark, "the bug that answers EINVAL")
    request = Tsetattr(fid=1, valid=wire.SETATTR_SIZE, size=3)
    verdict = Verdict("root/dir/setattr/size", request, Err(errno.EISDIR), Err(errno.EISDIR),
                      buggy=[(same, {Err(errno.EISDIR)}), (other, {Err(errno.EINVAL)})])  # fmt: skip
    assert verdict.outcome() == "unseen" and verdict.unseen_bugs() == [other]
    tally = Tally(1)
    _tally(tally, None, verdict)  # type: ignore[arg-type]  # an unseen cell's tally reads no cell
    assert tally.unseen[0].endswith(": the bug that answers EINVAL"), tally.unseen


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


def _specials(where: Path, version: str, security_model: str = "passthrough") -> Export:
    """A model of special nodes the host made (as fixtures/mirror.py reads them) in ``where``,
    each walked: fid 1 a FIFO, 2 a socket, and 3 a device ``where``/``null`` if one is there."""
    model = Export(Server(security_model, version=version))
    model.host_root = where
    assert model.apply(Tattach(fid=0, afid=NOFID, uname="", aname="", n_uname=0)) == OK
    os.mkfifo(where / "fifo")
    os.mknod(where / "sock", 0o600 | stat.S_IFSOCK)
    nodes = {"fifo": Kind.FIFO, "sock": Kind.SOCKET, "null": Kind.CHAR}
    for number, (name, kind) in enumerate(nodes.items(), 1):
        if (where / name).exists():
            model.root.entries[name] = Node(kind, 0o600, native=True)
            assert not isinstance(model.apply(Twalk(fid=0, newfid=number, wnames=[name])), Err)
    return model


def _opened(model: Export, fid: int) -> dict[int, object]:
    return {
        flags: special_opened(model, Tlopen(fid=fid, flags=flags)) for flags in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR)
    }


def test_a_special_file_before_the_cve_fix_opens_as_the_host_does(tmp_path: Path) -> None:
    """Before the CVE-2023-2861 fix QEMU opened a special node as the host's open(O_NONBLOCK)
    does, on the node itself: a FIFO for reading (for writing alone ENXIO: no reader), a socket
    never; a truncate by path then meets ftruncate(2)'s EINVAL, and a mapped model's Treadlink
    reads nothing. Where the host refuses too, the answer is the model's; QEMUs with the fix, and
    a model that does not see the host, are the model's."""
    model = _specials(tmp_path, "7.2.3")
    refused = {fid: model.peek(Tlopen(fid=fid, flags=os.O_RDONLY)) for fid in (1, 2)}
    assert refused == dict.fromkeys((1, 2), Err(errno.ENXIO))  # the model: a fixed QEMU's
    assert _opened(model, 1) == {os.O_RDONLY: OK, os.O_WRONLY: None, os.O_RDWR: OK}
    assert _opened(model, 2) == dict.fromkeys((os.O_RDONLY, os.O_WRONLY, os.O_RDWR))
    assert [special_opened(model, Tstatfs(fid=fid)) for fid in (1, 2)] == [OK, None]
    size = Tsetattr(fid=1, valid=wire.SETATTR_SIZE, mode=0, uid=NO_ID, gid=NO_ID, size=3,
                    atime_sec=0, atime_nsec=0, mtime_sec=0, mtime_nsec=0)  # fmt: skip
    assert special_opened(model, size) is None  # a FIFO for writing: ENXIO, the model's
    assert special_opened(model, Treadlink(fid=1)) is None  # passthrough reads a link: the model's EINVAL
    (tmp_path / "m").mkdir()
    mapped = _specials(tmp_path / "m", "7.2.3", "mapped-xattr")
    assert [special_opened(mapped, Treadlink(fid=fid)) for fid in (1, 2)] == [Target(""), None]
    model.host_root = None
    assert _opened(model, 1) == dict.fromkeys((os.O_RDONLY, os.O_WRONLY, os.O_RDWR))
    marks = [decorator.mark for decorator in TABLE_BUGS]
    on = {"message": "lopen", "security_model": "passthrough"}
    assert any(k.deviation is SPECIAL_OPENED for k in deviating_bugs(marks, on, "7.2.3"))
    assert any(k.deviation is SPECIAL_OPENED for k in deviating_bugs(marks, on, "8.0.2"))
    for fixed in ("7.2.4", "8.0.3", "8.1.0"):
        assert not any(k.deviation is SPECIAL_OPENED for k in deviating_bugs(marks, on, fixed))


def test_a_device_before_the_cve_fix_opens_as_the_host_does(tmp_path: Path) -> None:
    """/dev/null's numbers open any way, and a truncate by path of one is ftruncate(2)'s EINVAL;
    a number no driver has (240 is "local/experimental") is ENXIO, the model's."""
    try:
        os.mknod(tmp_path / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        os.mknod(tmp_path / "none", 0o600 | stat.S_IFBLK, os.makedev(240, 0))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD (root), as the tables' device states do")
    model = _specials(tmp_path, "7.2.3")
    assert _opened(model, 3) == dict.fromkeys((os.O_RDONLY, os.O_WRONLY, os.O_RDWR), OK)
    size = Tsetattr(fid=3, valid=wire.SETATTR_SIZE, mode=0, uid=NO_ID, gid=NO_ID, size=3,
                    atime_sec=0, atime_nsec=0, mtime_sec=0, mtime_nsec=0)  # fmt: skip
    assert special_opened(model, size) == Err(errno.EINVAL)
    model.root.entries["none"] = Node(Kind.BLOCK, 0o600, native=True)
    assert not isinstance(model.apply(Twalk(fid=0, newfid=4, wnames=["none"])), Err)
    assert _opened(model, 4) == dict.fromkeys((os.O_RDONLY, os.O_WRONLY, os.O_RDWR))


def test_an_opened_special_file_is_a_known_bug_s_step_before_the_cve_fix() -> None:
    """The states table excludes every open special file; on a QEMU without the CVE-2023-2861 fix
    building one may meet that bug's step (a Tlopen answered, where the model refuses it), which
    states/excluded takes as the bug's and no other difference."""

    def steps(version: str) -> dict[tuple[str, str], object]:
        return {(state.kind, state.opened): why.bug
                for state, why in excluded(Server("passthrough", version=version)).items()
                if state.made == "host" and state.since == "nothing" and state.opened != "walked"}  # fmt: skip

    before, after = steps("7.2.3"), steps("7.2.4")
    assert {key for key, step in before.items() if step is not None} == {
        (kind, opened) for kind in ("fifo", "char", "block") for opened in ("rdonly", "wronly", "rdwr")
    }
    assert set(before.values()) == {None, SPECIAL_OPENED_STEP} and set(after.values()) == {None}


def _mapped_file(host: Path, security_model: str = "mapped-file") -> Export:
    """A mapped-file model over ``host``: ``d/f`` and the directory ``e``, made on the host (no
    metadata), fid 1 on ``d/f``, 2 on ``e``, 3 on ``d``."""
    (host / "d").mkdir()
    (host / "d" / "f").write_bytes(b"data")
    (host / "e").mkdir()
    model = Export(Server(security_model))
    model.host_root = host
    d = model.root.entries["d"] = Node(Kind.DIR, 0o755, native=True)
    d.entries["f"] = Node(Kind.FILE, 0o644, b"data", native=True)
    model.root.entries["e"] = Node(Kind.DIR, 0o755, native=True)
    attach = Tattach(fid=0, afid=NOFID, uname="", aname="", n_uname=0)
    for step in (attach, Twalk(fid=0, newfid=1, wnames=["d", "f"]), Twalk(fid=0, newfid=2, wnames=["e"]),
                 Twalk(fid=0, newfid=3, wnames=["d"])):  # fmt: skip
        model.apply(step)
    assert set(model.fids) == {0, 1, 2, 3}
    return model


def test_a_move_out_of_a_directory_without_metadata_is_enoent(tmp_path: Path) -> None:
    """MOVED_FROM_BARE_DIR: a Trename, Trenameat or Tlink into another directory, out of one
    without .virtfs_metadata, answers ENOENT; within the directory, or once it has metadata, the
    model's answer."""
    model = _mapped_file(tmp_path)
    away = [Trename(fid=1, dfid=2, name="g"), Trenameat(olddirfid=3, oldname="f", newdirfid=2, newname="g"),
            Tlink(dfid=2, fid=1, name="g")]  # fmt: skip
    assert [moved_from_bare_dir(model, r) for r in away] == [Err(errno.ENOENT)] * 3
    assert moved_from_bare_dir(model, Trename(fid=1, dfid=3, name="g")) is None  # its own directory
    (tmp_path / "d" / ".virtfs_metadata").mkdir()
    assert [moved_from_bare_dir(model, r) for r in away] == [None] * 3
    (tmp_path / "d" / ".virtfs_metadata").rmdir()
    (tmp_path / "x").mkdir()
    xattr = _mapped_file(tmp_path / "x", "mapped-xattr")
    assert [moved_from_bare_dir(xattr, r) for r in away] == [None] * 3


def test_a_setattr_of_a_gone_node_writes_its_metadata(tmp_path: Path) -> None:
    """METADATA_OF_NOTHING: under mapped-file a Tsetattr of a mode or owner by a gone path
    answers as the rest of the request would (OK for the mode or owner alone), and says it
    writes metadata; an owner of -1 and -1 looks for the node (ENOENT, the model's own)."""
    model = _mapped_file(tmp_path)
    model.apply(Tunlinkat(dirfd=3, name="f", flags=0))

    def setattr(valid: int, **fields: int) -> Tsetattr:
        zero = dict.fromkeys(("uid", "gid", "size", "atime_sec", "atime_nsec", "mtime_sec", "mtime_nsec"), 0)
        return Tsetattr(fid=1, valid=valid, **{**zero, "mode": 0o600, **fields})

    assert model.peek(setattr(wire.SETATTR_MODE)) == Err(errno.ENOENT)
    assert metadata_of_nothing(model, setattr(wire.SETATTR_MODE)) == OK
    assert metadata_of_nothing(model, setattr(wire.SETATTR_UID | wire.SETATTR_CTIME)) == OK
    assert metadata_of_nothing(model, setattr(wire.SETATTR_UID, uid=NO_ID)) is None
    assert METADATA_OF_NOTHING.unmodelled is not None and METADATA_OF_NOTHING.unmodelled(model, setattr(1))
    (tmp_path / "x").mkdir()
    xattr = _mapped_file(tmp_path / "x", "mapped-xattr")
    xattr.apply(Tunlinkat(dirfd=3, name="f", flags=0))
    assert xattr.peek(setattr(wire.SETATTR_MODE)) == Err(errno.ENOENT)
    assert metadata_of_nothing(xattr, setattr(wire.SETATTR_MODE)) is None


def test_mapped_file_getattr_of_an_open_fid_goes_by_path(tmp_path: Path) -> None:
    """Under mapped-file Tgetattr of an open fid reaches its node by path (v9fs_co_fstat()'s
    fallback), and the descriptor only where the path names nothing: OK for an open file whose
    name is gone, ENOTDIR once its directory is a file; by descriptor elsewhere (OK either way)."""
    (tmp_path / "file").mkdir()
    (tmp_path / "xattr").mkdir()
    for model in (_mapped_file(tmp_path / "file", "mapped-file"), _mapped_file(tmp_path / "xattr", "mapped-xattr")):
        model.apply(Tlopen(fid=1, flags=os.O_RDONLY))
        model.apply(Tunlinkat(dirfd=3, name="f", flags=0))
        assert model.peek(Tgetattr(fid=1, request_mask=wire.GETATTR_BASIC)) == OK
        model.root.entries["d"] = Node(Kind.FILE, 0o644, native=True)  # the directory now a file
        mapped_file = model.server.security_model == "mapped-file"
        assert model.peek(Tgetattr(fid=1, request_mask=wire.GETATTR_BASIC)) == (
            Err(errno.ENOTDIR) if mapped_file else OK
        )
    assert RULES[Tsetattr].reach(Server("mapped-file")) is By.DESCRIPTOR_IF_OPEN


def test_a_host_directory_kept_as_a_file_opens_and_takes_nodes_as_the_host_s(tmp_path: Path) -> None:
    """Under mapped-file a name whose metadata says file while the host has a directory there
    (replaced on the host): it opens as the host's directory does, for reading only and not with
    O_TRUNC (EISDIR), and a Tmknod of a directory or symlink type in it makes a regular file
    (mknod-mapped-type) where a Tmknod in a file would be ENOTDIR."""
    model = _mapped_file(tmp_path)
    model.root.entries["x"] = Node(Kind.FILE, 0o644, host_kind=Kind.DIR)
    model.apply(Twalk(fid=0, newfid=4, wnames=["x"]))
    assert model.peek(Tlopen(fid=4, flags=os.O_RDONLY)) == OK
    assert [model.peek(Tlopen(fid=4, flags=flags)) for flags in (os.O_TRUNC, os.O_WRONLY, os.O_RDWR)] == [
        Err(errno.EISDIR)] * 3  # fmt: skip
    made = [Tmknod(dfid=4, name="n", mode=kind | 0o644, major=0, minor=0, gid=0)
            for kind in (stat.S_IFDIR, stat.S_IFLNK)]  # fmt: skip
    assert [model.peek(r) for r in made] == [Err(errno.EPERM), Err(errno.EINVAL)]
    assert [mknod_any_type_answer(model, r) for r in made] == [OK, OK]
    assert mknod_any_type_answer(model, Tmknod(dfid=1, name="n", mode=stat.S_IFDIR, major=0, minor=0, gid=0)) is None


def test_a_dotu_directory_read_by_a_gone_path_may_answer_its_error_at_any_offset() -> None:
    """DOTU_READ_BY_PATH: once an open directory's name is gone, a 9P2000.u Tread answers ENOENT
    at offset 0, and may (a stream that has entries left) past it, where the model lists the
    stream's entries."""
    model = Export(Server("passthrough", dialect=wire.DOTU))
    for step in (Tattach(fid=0, afid=NOFID, uname="", aname="", n_uname=0), Twalk(fid=0, newfid=1, wnames=[])):
        assert not isinstance(model.apply(step), Err), step
    model.root.entries["d"] = Node(Kind.DIR, 0o755)
    model.apply(Twalk(fid=0, newfid=2, wnames=["d"]))
    assert model.apply(Topen(fid=2, mode=0)) == OK
    model.root.entries["e"] = model.root.entries.pop("d")  # renamed on the host
    assert dotu_read_by_path(model, Tread(fid=2, offset=0, count=64)) == Err(errno.ENOENT)
    later = Tread(fid=2, offset=1, count=64)
    past = dotu_read_by_path(model, later)
    assert past is not None and past.admits(Err(errno.ENOENT)) and not model.peek(later).admits(Err(errno.ENOENT))


def test_a_size_and_ctime_on_a_read_only_fid_whose_name_is_gone_is_the_ftruncate_s_einval() -> None:
    """FTRUNCATE_UNWRITABLE: a size with a ctime beside it is the ftruncate() alone (a ctime is a
    touch by path only where it is all the request asks), so EINVAL; a ctime alone is ENOENT."""
    model = _model("10.1.0")
    for step in (Twalk(fid=0, newfid=7, wnames=["f"]), Tlopen(fid=7, flags=os.O_RDONLY),
                 Tunlinkat(dirfd=0, name="f", flags=0)):  # fmt: skip
        assert not isinstance(model.apply(step), Err), step
    zero = dict.fromkeys(("mode", "uid", "gid", "atime_sec", "atime_nsec", "mtime_sec", "mtime_nsec"), 0)
    sized = Tsetattr(fid=7, valid=wire.SETATTR_SIZE | wire.SETATTR_CTIME, size=3, **zero)
    assert ftruncate_unwritable(model, sized) == Err(errno.EINVAL)
    assert model.peek(sized.replaced(valid=wire.SETATTR_CTIME)) == Err(errno.ENOENT)


def test_the_mapped_models_are_those_the_model_calls_mapped() -> None:
    """MAPPED, the known bugs' literal, names every security model the model keeps metadata for."""
    assert tuple(model for model in SECURITY_MODELS if Server(model).mapped) == MAPPED
