"""The state machine of the property-based sessions (``model/session`` in test_model.py).

Hypothesis drives Tmkdir, Tlcreate, Twrite, Tread, Treaddir, Tunlinkat and Trenameat (walking and
clunking fids as it goes) against the model of the export (fixtures/model.py, kept in step by a
mirror: fixtures/mirror.py), and checks every reply, error or not, against what the model
answers. Its ``batch`` rule puts two or three of Tmkdir, Tunlinkat, Trenameat, Twalk and Treaddir
in flight in one kick, and its ``pairs`` rule two or three rows of the pairs' table
(fixtures/pairs.py) in a directory beside the tree; each is judged by the one judge
(fixtures/judge.py: some serial order's answers, a known race's reply read as what it stands
for), and the tree afterwards must be that order's; hypothesis shrinks a failure to the smallest
batch that shows it, and the case's reproducer replays each batch in one kick as it was sent. A
module of its own, imported when the case runs: importing hypothesis costs ~0.3 s, which every
pytest process would otherwise pay at collection."""

from __future__ import annotations

import itertools
import os
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, multiple, precondition, rule

from fixtures.answers import Answer, Err, Walked
from fixtures.batches import send_group
from fixtures.judge import judge_group
from fixtures.mirror import Mirror
from fixtures.model import Kind
from fixtures.pairs import PAIR_OPS, relation_of, set_up
from fixtures.races import RaceLog
from harness.p9 import wire
from harness.p9.messages import Tlcreate, Tlopen, Tmkdir, Tread, Treaddir, Trenameat, Tunlinkat, Twalk, Twrite
from harness.p9.wire import Request

NAMES = ("a", "b", "c")
#: a listing's count: every entry of a directory of the tree fits
LISTED = 8192 - wire.RREADDIR_HEADER


class SessionAgainstModel(RuleBasedStateMachine):
    """Paths go into bundles when a rule makes them and stay there when the tree changes: a rule
    drawing one that was removed or replaced since checks what the server says about a stale path
    (a walk that stops short, ENOTDIR through a file, EISDIR on a directory), against the model."""

    dirs = Bundle("dirs")
    files = Bundle("files")

    def __init__(self, mirror: Mirror, top: str, races: RaceLog | None = None, pairs: bool = True) -> None:
        super().__init__()
        self.mirror, self.top = mirror, top
        #: the known races a batch shows go to ``races``
        self.races = races if races is not None else RaceLog()
        self.expect(Tmkdir(dfid=mirror.fid, name=top, mode=0o755, gid=0))
        #: where the ``pairs`` rule works: ``{top}.pairs`` beside the tree (None: no rule)
        self.pairs_dir = f"{top}.pairs" if pairs else None
        if self.pairs_dir is not None:
            self.expect(Tmkdir(dfid=mirror.fid, name=self.pairs_dir, mode=0o755, gid=0))

    def expect(self, request: Request) -> Answer:
        """Send ``request``: its answer must be the model's (which the model then holds)."""
        want, got, _ = self.mirror.expect(request)
        assert got == want, f"{request}: answered {got!r}, the model says {want!r}"
        return got

    @initialize(target=dirs)
    def root(self) -> tuple[str, ...]:
        return ()

    def node(self, path: tuple[str, ...]) -> Kind | None:
        found = self.mirror.model.at((*self.mirror.top, self.top, *path))
        return found.kind if found is not None else None

    def reach(self, path: tuple[str, ...]) -> int | None:
        """A fid on ``path``, walked as the model says it walks; None when the walk stops short."""
        fid = self.mirror.session.new_fid()
        walked = self.expect(Twalk(fid=self.mirror.fid, newfid=fid, wnames=[self.top, *path]))
        return fid if walked == Walked(len(path) + 1) else None

    def at(self, path: tuple[str, ...], *requests: Any) -> Answer | None:
        """Each of ``requests(fid)`` on a fid walked to ``path`` in turn, as the model says, until
        one is refused: the last answer; None if the path cannot be reached."""
        fid = self.reach(path)
        if fid is None:
            return None
        answer: Answer | None = None
        try:
            for make in requests:
                answer = self.expect(make(fid))
                if isinstance(answer, Err):
                    break
        finally:
            self.mirror.clunk_all({0, self.mirror.fid})
        return answer

    @rule(target=dirs, parent=dirs, name=st.sampled_from(NAMES))
    def mkdir(self, parent: tuple[str, ...], name: str) -> Any:
        answer = self.at(parent, lambda fid: Tmkdir(dfid=fid, name=name, mode=0o755, gid=0))
        return (*parent, name) if answer is not None and not isinstance(answer, Err) else multiple()

    @rule(target=files, parent=dirs, name=st.sampled_from(NAMES), data=st.binary(max_size=300))
    def create(self, parent: tuple[str, ...], name: str, data: bytes) -> Any:
        answer = self.at(parent, lambda fid: Tlcreate(fid=fid, name=name, flags=os.O_RDWR | os.O_CREAT | os.O_EXCL,
                                                      mode=0o644, gid=0),
                         lambda fid: Twrite(fid=fid, offset=0, data=data))  # fmt: skip
        return (*parent, name) if answer is not None and not isinstance(answer, Err) else multiple()

    @rule(path=files, offset=st.integers(0, 400), data=st.binary(min_size=1, max_size=200))
    def write_and_read(self, path: tuple[str, ...], offset: int, data: bytes) -> None:
        """A file (or what is at its path now) opened, written and read back, as the model says:
        a directory there now opens as one and takes no write."""
        self.at(path, lambda fid: Tlopen(fid=fid, flags=os.O_RDWR if self.node(path) is not Kind.DIR else 0),
                lambda fid: Twrite(fid=fid, offset=offset, data=data),
                lambda fid: Tread(fid=fid, offset=0, count=4096))  # fmt: skip

    @rule(path=dirs)
    def readdir(self, path: tuple[str, ...]) -> None:
        self.at(path, lambda fid: Tlopen(fid=fid, flags=os.O_DIRECTORY),
                lambda fid: Treaddir(fid=fid, offset=0, count=LISTED))  # fmt: skip

    @rule(parent=dirs, name=st.sampled_from(NAMES), removedir=st.booleans())
    def unlinkat(self, parent: tuple[str, ...], name: str, removedir: bool) -> None:
        flags = wire.AT_REMOVEDIR if removedir else 0
        self.at(parent, lambda fid: Tunlinkat(dirfd=fid, name=name, flags=flags))

    @rule(target=files, source=files, target_dir=dirs, name=st.sampled_from(NAMES))
    def renameat(self, source: tuple[str, ...], target_dir: tuple[str, ...], name: str) -> Any:
        old_dir, new_dir = self.reach(source[:-1]), self.reach(target_dir)
        try:
            if old_dir is None or new_dir is None:
                return multiple()
            assume(self.node(source) is not Kind.DIR)  # a file, or gone
            answer = self.expect(Trenameat(olddirfid=old_dir, oldname=source[-1], newdirfid=new_dir, newname=name))
        finally:
            self.mirror.clunk_all({0, self.mirror.fid})
        return (*target_dir, name) if not isinstance(answer, Err) else multiple()

    @rule(
        ops=st.lists(
            st.one_of(
                st.tuples(st.just("mkdir"), dirs, st.sampled_from(NAMES)),
                st.tuples(st.sampled_from(["unlink", "rmdir"]), dirs, st.sampled_from(NAMES)),
                st.tuples(st.just("rename"), st.one_of(files, dirs), dirs, st.sampled_from(NAMES)),
                st.tuples(st.just("walk"), st.one_of(files, dirs)),
                st.tuples(st.just("readdir")),
            ),
            min_size=2,
            max_size=3,
        )
    )
    def batch(self, ops: list[tuple[Any, ...]]) -> None:
        """Two or three requests in one kick; their replies, and the tree after them, are those of
        some serial order of them."""
        ops = [op for op in ops if op[0] in ("walk", "readdir") or op[1] or op[0] == "mkdir"]  # the top stays
        assume(len(ops) >= 2)
        try:
            requests = [self.request(op) for op in ops]
            assume(all(request is not None for request in requests))
            sent = [request for request in requests if request is not None]
            start, frames = self.mirror.model.copy, list[bytes]()
            answers = send_group(self.mirror.session, sent, False, frames)
            ends, failure = judge_group(sent, answers, start, frames, self.races, f"batch {[str(r) for r in sent]}")
            assert failure is None, f"batch {failure}"
            self.settle(ends)
        finally:
            self.mirror.clunk_all({0, self.mirror.fid})

    def request(self, op: tuple[Any, ...]) -> Request | None:
        """The batch's request for a drawn ``op``, its fids walked first (None: a parent gone)."""
        kind = op[0]
        if kind == "walk":
            return Twalk(fid=self.mirror.fid, newfid=self.mirror.session.new_fid(), wnames=[self.top, *op[1]])
        if kind == "readdir":
            fid = self.reach(())
            assert fid is not None
            self.expect(Tlopen(fid=fid, flags=os.O_DIRECTORY))
            return Treaddir(fid=fid, offset=0, count=LISTED)
        path = (*op[1], op[2]) if kind != "rename" else op[1]
        parent = self.reach(path[:-1])
        if parent is None or not path:
            return None
        if kind == "mkdir":
            return Tmkdir(dfid=parent, name=path[-1], mode=0o755, gid=0)
        if kind in ("unlink", "rmdir"):
            return Tunlinkat(dirfd=parent, name=path[-1], flags=wire.AT_REMOVEDIR if kind == "rmdir" else 0)
        target = self.reach(op[2])
        if target is None:
            return None
        return Trenameat(olddirfid=parent, oldname=path[-1], newdirfid=target, newname=op[3])

    def settle(self, ends: list[Any]) -> None:
        """The model becomes the end of the serial order the host holds; where none does (a raced
        creation's clean-up removed, by name, another request's node), what the host holds."""
        agreeing = [end for end in ends if not self.mirror.disagreements_with(end, self.top)]
        self.mirror.model = agreeing[0] if agreeing else ends[0]
        if not agreeing:
            self.mirror.learn((self.top,))

    @precondition(lambda self: self.pairs_dir is not None)
    @rule(ops=st.lists(st.sampled_from(sorted(PAIR_OPS)), min_size=2, max_size=3), staggered=st.booleans())
    def pairs(self, ops: list[str], staggered: bool) -> None:
        """Two or three rows of the pairs' table (fixtures/pairs.py, the one concurrent/pairs and
        triples send) in flight together, in a directory of their own beside the tree, judged by
        the same judge: some serial order's answers, or a known race read as what it stands for
        (noted, as the batches' are)."""
        assume(any(relation_of(a, b) for a, b in itertools.combinations(ops, 2)))
        assert self.pairs_dir is not None
        try:
            directory = self.mirror.walk(self.mirror.fid, [self.pairs_dir])
            fids = set_up(self.mirror, directory, (self.pairs_dir,))
            requests = [PAIR_OPS[op].request(fids) for op in ops]
            start, frames = self.mirror.model.copy, list[bytes]()
            answers = send_group(self.mirror.session, requests, staggered, frames)
            ends, failure = judge_group(requests, answers, start, frames, self.races, f"pairs {'+'.join(ops)}")
            assert failure is None, failure
            self.mirror.model = ends[0]
        finally:
            self.mirror.clunk_all({0, self.mirror.fid})

    @invariant()
    def no_fid_left(self) -> None:
        assert self.mirror.session.fids <= {0, self.mirror.fid}, f"fids left open: {sorted(self.mirror.session.fids)}"
