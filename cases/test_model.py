"""Property-based sessions: hypothesis drives Tmkdir, Tlcreate, Twrite, Tread, Treaddir,
Tunlinkat and Trenameat (walking and clunking fids as it goes) on the local backend, against an
in-memory model of the tree, and checks every reply, error or not, against the model.

The default budget keeps the run short; ``--hypothesis-profile=long`` is for hunting. A failing
sequence is printed by hypothesis as a replayable script of rule calls, with the 9P trace of the
last steps in the report."""

from __future__ import annotations

import errno
import os
from typing import Any

from fixtures.case_path import case_path
from fixtures.place import Place
from harness.errors import P9Rlerror
from harness.p9 import wire
from harness.p9.messages import Trenameat
from harness.p9.session import Session

NAMES = ("a", "b", "c")
PROFILES = {
    "default": {"max_examples": 12, "stateful_step_count": 25},
    "long": {"max_examples": 500, "stateful_step_count": 80},
}


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

    def remove(self, path: tuple[str, ...]) -> None:
        for p in [p for p in self.nodes if p[: len(path)] == path]:
            del self.nodes[p]


def outcome(call: Any) -> int:
    """0 for success, else the Rlerror errno."""
    try:
        call()
    except P9Rlerror as err:
        return err.errno
    return 0


def build(session: Session, base: int, base_name: str) -> type:
    """The state machine class, made here so that hypothesis is imported only when this runs."""
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

    counter = iter(range(10**9))

    class SessionAgainstModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.model = Model()
            self.top = f"run{next(counter)}"
            session.mkdir(base, self.top)
            self.p9 = session

        def walk(self, path: tuple[str, ...]) -> int:
            fid = self.p9.walk_fid(base, [self.top, *path])
            return fid

        def in_dir(self, path: tuple[str, ...], action: Any) -> int:
            fid = self.walk(path)
            try:
                return outcome(lambda: action(fid))
            finally:
                if fid in self.p9.fids:
                    self.p9.clunk(fid)

        @rule(where=st.integers(0, 50), name=st.sampled_from(NAMES))
        def mkdir(self, where: int, name: str) -> None:
            parent = self.model.dirs()[where % len(self.model.dirs())]
            path = (*parent, name)
            got = self.in_dir(parent, lambda fid: self.p9.mkdir(fid, name, 0o755).qid)
            assert got == (errno.EEXIST if path in self.model.nodes else 0), f"Tmkdir {path}"
            if not got:
                self.model.nodes[path] = None

        @rule(where=st.integers(0, 50), name=st.sampled_from(NAMES), data=st.binary(max_size=300))
        def create(self, where: int, name: str, data: bytes) -> None:
            parent = self.model.dirs()[where % len(self.model.dirs())]
            path = (*parent, name)

            def action(fid: int) -> None:
                self.p9.lcreate(fid, name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                assert self.p9.write(fid, 0, data).count == len(data)

            got = self.in_dir(parent, action)
            assert got == (errno.EEXIST if path in self.model.nodes else 0), f"Tlcreate {path}"
            if not got:
                self.model.nodes[path] = data

        @precondition(lambda self: self.model.files())
        @rule(which=st.integers(0, 50), offset=st.integers(0, 400), data=st.binary(min_size=1, max_size=200))
        def write_and_read(self, which: int, offset: int, data: bytes) -> None:
            path = self.model.files()[which % len(self.model.files())]
            old = self.model.nodes[path] or b""
            want = old[:offset] + bytes(max(0, offset - len(old))) + data + old[offset + len(data) :]

            def action(fid: int) -> None:
                self.p9.lopen(fid, os.O_RDWR)
                assert self.p9.write(fid, offset, data).count == len(data)
                assert self.p9.read(fid, 0, 4096).data == want, f"content of {path}"

            assert self.in_dir(path, action) == 0
            self.model.nodes[path] = want

        @rule(where=st.integers(0, 50))
        def readdir(self, where: int) -> None:
            path = self.model.dirs()[where % len(self.model.dirs())]

            def action(fid: int) -> None:
                self.p9.lopen(fid, os.O_DIRECTORY)
                names = [e.name for reply in self.p9.readdir_all(fid) for e in reply.entries]
                assert sorted(names) == sorted([".", "..", *self.model.children(path)]), f"listing of {path}"

            assert self.in_dir(path, action) == 0

        @rule(where=st.integers(0, 50), name=st.sampled_from(NAMES), removedir=st.booleans())
        def unlinkat(self, where: int, name: str, removedir: bool) -> None:
            parent = self.model.dirs()[where % len(self.model.dirs())]
            path = (*parent, name)
            flags = wire.AT_REMOVEDIR if removedir else 0
            got = self.in_dir(parent, lambda fid: self.p9.unlinkat(fid, name, flags))
            if path not in self.model.nodes:
                want = errno.ENOENT
            elif self.model.nodes[path] is None:
                want = (errno.ENOTEMPTY if self.model.children(path) else 0) if removedir else errno.EISDIR
            else:
                want = errno.ENOTDIR if removedir else 0
            assert got == want, f"Tunlinkat {path} flags {flags:#x}"
            if not got:
                self.model.remove(path)

        @precondition(lambda self: self.model.files())
        @rule(which=st.integers(0, 50), where=st.integers(0, 50), name=st.sampled_from(NAMES))
        def renameat(self, which: int, where: int, name: str) -> None:
            source = self.model.files()[which % len(self.model.files())]
            target_dir = self.model.dirs()[where % len(self.model.dirs())]
            target = (*target_dir, name)
            old_dir, new_dir = self.walk(source[:-1]), self.walk(target_dir)
            got = outcome(
                lambda: self.p9.rpc(Trenameat(olddirfid=old_dir, oldname=source[-1], newdirfid=new_dir, newname=name))
            )
            self.p9.clunk(old_dir)
            self.p9.clunk(new_dir)
            if source == target:
                want = 0
            elif target in self.model.nodes and self.model.nodes[target] is None:
                # a directory in the way: rename(2) says EISDIR, or ENOTEMPTY when it is an
                # ancestor of the source (the kernel's "trap" check comes first)
                want = errno.ENOTEMPTY if source[: len(target)] == target else errno.EISDIR
            else:
                want = 0
            assert got == want, f"Trenameat {source} -> {target}"
            if not got and source != target:
                self.model.nodes[target] = self.model.nodes.pop(source)

        @invariant()
        def no_fid_left(self) -> None:
            assert self.p9.fids <= {0, base}, f"fids left open: {sorted(self.p9.fids)}"

    return SessionAgainstModel


@case_path("model/session", backends=["local"])
def test_session_against_a_model(place: Place, pytestconfig: Any) -> None:
    """Every reply of a random session agrees with the in-memory model of the tree."""
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    profile = PROFILES[pytestconfig.getoption("--hypothesis-profile", "default")]
    machine = build(place.session, place.fid, place.host_path().name)
    budget = settings(
        deadline=None,
        suppress_health_check=list(HealthCheck),
        max_examples=profile["max_examples"],
        stateful_step_count=profile["stateful_step_count"],
    )
    run_state_machine_as_test(machine, settings=budget)
