"""The state machine of the property-based sessions (``model/session`` in test_model.py).

Hypothesis drives Tmkdir, Tlcreate, Twrite, Tread, Treaddir, Tunlinkat and Trenameat (walking and
clunking fids as it goes) against an in-memory model of the tree, and checks every reply, error
or not, against the model. A module of its own, imported when the case runs: importing hypothesis
costs ~0.3 s, which every pytest process would otherwise pay at collection."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, multiple, rule

from harness.errors import P9Rlerror
from harness.p9 import wire
from harness.p9.messages import Trenameat
from harness.p9.session import Session

NAMES = ("a", "b", "c")


class Model:
    """The expected tree below one directory: path tuple -> None for a directory, bytes for a file."""

    def __init__(self) -> None:
        self.nodes: dict[tuple[str, ...], bytes | None] = {(): None}

    def dirs(self) -> list[tuple[str, ...]]:
        return sorted(path for path, value in self.nodes.items() if value is None)

    def files(self) -> list[tuple[str, ...]]:
        return sorted(path for path, value in self.nodes.items() if value is not None)

    def children(self, path: tuple[str, ...]) -> list[str]:
        return sorted(p[-1] for p in self.nodes if len(p) == len(path) + 1 and p[: len(path)] == path)

    def walkable(self, path: tuple[str, ...]) -> int:
        """How many names of ``path`` a Twalk gets through: it stops at the first one missing, and
        after a file (nothing is below a file)."""
        for depth in range(len(path)):
            if depth and self.nodes[path[:depth]] is not None:
                return depth
            if path[: depth + 1] not in self.nodes:
                return depth
        return len(path)

    def remove(self, path: tuple[str, ...]) -> None:
        for p in [p for p in self.nodes if p[: len(path)] == path]:
            del self.nodes[p]


def outcome(call: Callable[[], object]) -> int:
    """0 for success, else the Rlerror errno."""
    try:
        call()
    except P9Rlerror as err:
        return err.errno
    return 0


class SessionAgainstModel(RuleBasedStateMachine):
    """Paths go into bundles when a rule makes them and stay there when the tree changes: a rule
    drawing one that was removed or replaced since checks what the server says about a stale path
    (a walk that stops short, ENOTDIR through a file, EISDIR on a directory), against the model."""

    dirs = Bundle("dirs")
    files = Bundle("files")

    def __init__(self, session: Session, base: int, top: str) -> None:
        super().__init__()
        self.p9, self.base, self.top = session, base, top
        self.model = Model()
        session.mkdir(base, top)

    @initialize(target=dirs)
    def root(self) -> tuple[str, ...]:
        return ()

    def reach(self, path: tuple[str, ...]) -> int | None:
        """A fid on ``path``; None when the walk stops short, as the model says it must."""
        fid = self.p9.new_fid()
        qids = self.p9.walk(self.base, [self.top, *path], fid).qids
        want = 1 + self.model.walkable(path)
        assert len(qids) == want, f"Twalk {path}: {len(qids)} qids, the model says {want}"
        return fid if want == len(path) + 1 else None

    def at(self, path: tuple[str, ...], action: Callable[[int], object]) -> int | None:
        """``action(fid)`` on a fid walked to ``path``: 0 or its errno; None if unreachable."""
        fid = self.reach(path)
        if fid is None:
            return None
        try:
            return outcome(lambda: action(fid))
        finally:
            if fid in self.p9.fids:
                self.p9.clunk(fid)

    def expect_in(self, parent: tuple[str, ...], name: str) -> int | None:
        """What making ``name`` in ``parent`` must give: None if ``parent`` cannot be reached,
        ENOTDIR if it is a file now, EEXIST if the name is taken, else 0."""
        if self.model.walkable(parent) != len(parent):
            return None
        if self.model.nodes[parent] is not None:
            return errno.ENOTDIR
        return errno.EEXIST if (*parent, name) in self.model.nodes else 0

    @rule(target=dirs, parent=dirs, name=st.sampled_from(NAMES))
    def mkdir(self, parent: tuple[str, ...], name: str) -> Any:
        want = self.expect_in(parent, name)
        got = self.at(parent, lambda fid: self.p9.mkdir(fid, name, 0o755))
        assert got == want, f"Tmkdir {(*parent, name)}"
        if got != 0:
            return multiple()
        self.model.nodes[(*parent, name)] = None
        return (*parent, name)

    @rule(target=files, parent=dirs, name=st.sampled_from(NAMES), data=st.binary(max_size=300))
    def create(self, parent: tuple[str, ...], name: str, data: bytes) -> Any:
        def action(fid: int) -> None:
            self.p9.lcreate(fid, name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            assert self.p9.write(fid, 0, data).count == len(data)

        want = self.expect_in(parent, name)
        got = self.at(parent, action)
        assert got == want, f"Tlcreate {(*parent, name)}"
        if got != 0:
            return multiple()
        self.model.nodes[(*parent, name)] = data
        return (*parent, name)

    @rule(path=files, offset=st.integers(0, 400), data=st.binary(min_size=1, max_size=200))
    def write_and_read(self, path: tuple[str, ...], offset: int, data: bytes) -> None:
        old = self.model.nodes.get(path) or b""
        want = old[:offset] + bytes(max(0, offset - len(old))) + data + old[offset + len(data) :]

        def action(fid: int) -> None:
            self.p9.lopen(fid, os.O_RDWR)
            assert self.p9.write(fid, offset, data).count == len(data)
            assert self.p9.read(fid, 0, 4096).data == want, f"content of {path}"

        if path in self.model.nodes and self.model.nodes[path] is None:
            # a directory now: it is one to the server too (opening it for writing is the known
            # bug lopen/directory_for_writing pins, not this model's business)
            kind = self.at(path, lambda fid: self.check_directory(fid, path))
            assert kind == 0, f"Tgetattr of the directory {path}"
            return
        got = self.at(path, action)
        if self.model.walkable(path) != len(path):
            assert got is None, f"{path} is gone, yet the walk reached it"
        else:
            assert got == 0, f"write and read back {path}"
            self.model.nodes[path] = want

    def check_directory(self, fid: int, path: tuple[str, ...]) -> None:
        attr = self.p9.getattr(fid, wire.GETATTR_BASIC)
        assert attr.qid.type & wire.QTDIR and stat.S_ISDIR(attr.mode), f"{path}: {attr}"

    @rule(path=dirs)
    def readdir(self, path: tuple[str, ...]) -> None:
        def action(fid: int) -> None:
            self.p9.lopen(fid, os.O_DIRECTORY)
            names = [e.name for reply in self.p9.readdir_all(fid) for e in reply.entries]
            assert sorted(names) == sorted([".", "..", *self.model.children(path)]), f"listing of {path}"

        got = self.at(path, action)
        if self.model.walkable(path) != len(path):
            assert got is None
        else:
            assert got == (errno.ENOTDIR if self.model.nodes[path] is not None else 0), f"Tlopen O_DIRECTORY {path}"

    @rule(parent=dirs, name=st.sampled_from(NAMES), removedir=st.booleans())
    def unlinkat(self, parent: tuple[str, ...], name: str, removedir: bool) -> None:
        path = (*parent, name)
        flags = wire.AT_REMOVEDIR if removedir else 0
        got = self.at(parent, lambda fid: self.p9.unlinkat(fid, name, flags))
        if self.model.walkable(parent) != len(parent):
            want: int | None = None
        elif self.model.nodes[parent] is not None:
            want = errno.ENOTDIR
        elif path not in self.model.nodes:
            want = errno.ENOENT
        elif self.model.nodes[path] is None:
            want = (errno.ENOTEMPTY if self.model.children(path) else 0) if removedir else errno.EISDIR
        else:
            want = errno.ENOTDIR if removedir else 0
        assert got == want, f"Tunlinkat {path} flags {flags:#x}"
        if got == 0:
            self.model.remove(path)

    @rule(target=files, source=files, target_dir=dirs, name=st.sampled_from(NAMES))
    def renameat(self, source: tuple[str, ...], target_dir: tuple[str, ...], name: str) -> Any:
        target = (*target_dir, name)
        old_dir, new_dir = self.reach(source[:-1]), self.reach(target_dir)
        try:
            if old_dir is None or new_dir is None:
                return multiple()
            assume(self.model.nodes.get(source) is not None or source not in self.model.nodes)  # a file, or gone
            got = outcome(
                lambda: self.p9.rpc(Trenameat(olddirfid=old_dir, oldname=source[-1], newdirfid=new_dir, newname=name))
            )
        finally:
            for fid in (old_dir, new_dir):
                if fid is not None:
                    self.p9.clunk(fid)
        if self.model.nodes[source[:-1]] is not None or self.model.nodes[target_dir] is not None:
            want = errno.ENOTDIR
        elif source not in self.model.nodes:
            want = errno.ENOENT
        elif source == target:
            want = 0
        elif target in self.model.nodes and self.model.nodes[target] is None:
            # a directory in the way: rename(2) says EISDIR, or ENOTEMPTY when it is an
            # ancestor of the source (the kernel's "trap" check comes first)
            want = errno.ENOTEMPTY if source[: len(target)] == target else errno.EISDIR
        else:
            want = 0
        assert got == want, f"Trenameat {source} -> {target}"
        if got != 0:
            return multiple()
        if source != target:
            self.model.nodes[target] = self.model.nodes.pop(source)
        return target

    @invariant()
    def no_fid_left(self) -> None:
        assert self.p9.fids <= {0, self.base}, f"fids left open: {sorted(self.p9.fids)}"
