"""The state machine of the property-based sessions (``model/session`` in test_model.py).

Hypothesis drives Tmkdir, Tlcreate, Twrite, Tread, Treaddir, Tunlinkat and Trenameat (walking and
clunking fids as it goes) against an in-memory model of the tree, and checks every reply, error
or not, against the model. Its ``batch`` rule puts two or three of Tmkdir, Tunlinkat, Trenameat,
Twalk and Treaddir in flight in one kick, and its ``pairs`` rule two or three rows of the pairs'
table (fixtures/pairs.py) in a directory beside the tree; each checks that the replies are those of some serial
order of them (fixtures/oracle.py, the one oracle the concurrent family asks too), and that the
tree afterwards is that order's; hypothesis shrinks a failure to the smallest batch that shows it, and the case's
reproducer replays each batch in one kick as it was sent. A module of its own, imported when the
case runs: importing hypothesis costs ~0.3 s, which every pytest process would otherwise pay at
collection."""

from __future__ import annotations

import errno
import itertools
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, multiple, precondition, rule

from cases.model_tree import NAMES, RACY, BatchModel, BatchOp, Model, Sent, outcome, replies_of
from fixtures.batches import send_group
from fixtures.oracle import ANY, linearizations, serial_outcomes
from fixtures.pairs import PAIR_OPS, judge_group, relation, set_up
from fixtures.races import CreateRaceSeen, ListingRaceSeen, RaceLog, Stand, excuse
from harness.p9 import wire
from harness.p9.messages import Tmkdir, Treaddir, Trenameat, Tunlinkat, Twalk
from harness.p9.session import Session


class SessionAgainstModel(RuleBasedStateMachine):
    """Paths go into bundles when a rule makes them and stay there when the tree changes: a rule
    drawing one that was removed or replaced since checks what the server says about a stale path
    (a walk that stops short, ENOTDIR through a file, EISDIR on a directory), against the model."""

    dirs = Bundle("dirs")
    files = Bundle("files")

    def __init__(
        self,
        session: Session,
        base: int,
        top: str,
        remaps: bool = False,
        races: RaceLog | None = None,
        host: Path | None = None,
    ) -> None:
        super().__init__()
        self.p9, self.base, self.top = session, base, top
        #: qids remapped (multidevs=remap, the default since 10.0): a listing beside a remove may
        #: fail with the known race's ENOENT. The known races a batch shows go to ``races``.
        self.remaps, self.races = remaps, races if races is not None else RaceLog()
        self.model = Model()
        session.mkdir(base, top)
        #: where the ``pairs`` rule works: ``{top}.pairs`` beside the tree, on the host at
        #: ``host`` (the base directory's host path; no host, no rule)
        self.pairs_host = None if host is None else host / f"{top}.pairs"
        if self.pairs_host is not None:
            session.mkdir(base, self.pairs_host.name)

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

    @rule(
        ops=st.lists(
            st.one_of(
                st.builds(lambda d, n: BatchOp("mkdir", (*d, n)), dirs, st.sampled_from(NAMES)),
                st.builds(
                    lambda d, n, r: BatchOp("rmdir" if r else "unlink", (*d, n)),
                    dirs,
                    st.sampled_from(NAMES),
                    st.booleans(),
                ),
                st.builds(
                    lambda s, d, n: BatchOp("rename", s, (*d, n)), st.one_of(files, dirs), dirs, st.sampled_from(NAMES)
                ),
                st.builds(lambda p: BatchOp("walk", p), st.one_of(files, dirs)),
                st.just(BatchOp("readdir", ())),
            ),
            min_size=2,
            max_size=3,
        )
    )
    def batch(self, ops: list[BatchOp]) -> None:
        """Two or three requests in one kick; their replies, and the tree after them, are those of
        some serial order of them."""
        ops = [op for op in ops if op.path or op.kind in ("walk", "readdir")]  # the top is not renamed or removed
        assume(len(ops) >= 2)
        fid_paths: list[tuple[str, ...]] = []
        fids: list[int] = []
        uses: list[list[int]] = []
        try:
            for op in ops:
                uses.append([])
                for parent in op.parents:
                    fid = self.reach(parent)
                    assume(fid is not None)  # a parent gone before the batch: nothing to race
                    assert fid is not None
                    fids.append(fid)
                    fid_paths.append(parent)
                    uses[-1].append(len(fids) - 1)
            top = self.p9.walk_fid(self.base, [self.top])
            listing = self.p9.walk_fid(self.base, [self.top])
            self.p9.lopen(listing, os.O_DIRECTORY)
            requests = [
                self.request(op, [fids[i] for i in used], top, listing) for op, used in zip(ops, uses, strict=True)
            ]
            with self.p9.batch():
                pendings = [self.p9.send(request) for request in requests]
            answers = replies_of(pendings)
            # every listing and Tmkdir of a batch could have shown a known race: the reproducer's chances
            self.races.chance(*[p.wait().frame for op, p in zip(ops, pendings, strict=True) if op.kind in RACY])
        finally:
            for fid in sorted(self.p9.fids - {0, self.base}):
                self.p9.clunk(fid)
        sent = [Sent(op, tuple(used)) for op, used in zip(ops, uses, strict=True)]

        def start() -> BatchModel:
            return BatchModel(self.model, fid_paths)

        orders = linearizations(sent, answers, start)
        raced = False
        if not orders:  # a known race's answer stands for the one a serial order gives: noted, checked so
            excused = excuse(answers, self.stands(ops, answers), lambda read: bool(linearizations(sent, read, start)))
            if excused is not None:
                stand, answers = excused
                orders, raced = linearizations(sent, answers, start), True
                where = f"{ops[stand.at]} beside {', '.join(map(str, ops))}"
                self.races.saw(stand.race, where, pendings[stand.at].wait().frame)
        assert orders, (
            f"batch {[str(op) for op in ops]} answered {answers}, which no serial order gives "
            f"(serial orders: {sorted(str(got) for got in serial_outcomes(sent, start))})"
        )
        if not raced:
            self.model = self.settle([m.tree for m in orders])
            return
        # a raced Tmkdir may also have removed, by name, a directory another request made: the
        # tree is asked of the server wherever the batch or the orders could have left it
        self.model = orders[0].tree
        touched = {p for op in ops for p in (op.path, op.target) if p} | {p for m in orders for p in m.tree.nodes}
        for path in sorted(touched, key=len):  # parents first: below a missing parent nothing is
            found = self.look(path) if self.model.nodes.get(path[:-1], b"") is None else "absent"
            if isinstance(found, str):
                self.model.remove(path)
            else:
                self.model.nodes[path] = found

    @precondition(lambda self: self.pairs_host is not None)
    @rule(ops=st.lists(st.sampled_from(sorted(PAIR_OPS)), min_size=2, max_size=3), staggered=st.booleans())
    def pairs(self, ops: list[str], staggered: bool) -> None:
        """Two or three rows of the pairs' table (fixtures/pairs.py, the one concurrent/pairs and
        triples send) in flight together, in a directory of their own beside the tree, judged by
        the same judge (fixtures/pairs.judge_group): some serial order's answers, or a known race
        read as what it stands for (noted, as the batches' are)."""
        assume(any(relation(a, b) for a, b in itertools.combinations(ops, 2)))
        assert self.pairs_host is not None
        directory = self.p9.walk_fid(self.base, [self.pairs_host.name])
        frames = list[bytes]()
        try:
            fids = set_up(self.p9, directory, self.pairs_host)
            answers = send_group(self.p9, [PAIR_OPS[op].request(fids) for op in ops], staggered, frames)
        finally:
            for fid in sorted(self.p9.fids - {0, self.base}):
                self.p9.clunk(fid)
        failure = judge_group(ops, answers, frames, self.races, f"pairs {'+'.join(ops)}", remaps=self.remaps)
        assert failure is None, failure

    def stands(self, ops: list[BatchOp], answers: tuple[object, ...]) -> list[Stand]:
        """The answers of the known races (fixtures/races.py), each with the answer it stands for:
        a listing failed with ENOENT beside a remove where QEMU remaps (any listing), a Tmkdir
        answered ENOENT beside a remove of its name (it made the directory: 0)."""
        removed = {op.path for op in ops if op.kind in ("unlink", "rmdir", "rename")}
        return [
            Stand(at, (ANY,), ListingRaceSeen) if op.kind == "readdir" else Stand(at, (0,), CreateRaceSeen)
            for at, (op, answer) in enumerate(zip(ops, answers, strict=True))
            if answer == errno.ENOENT
            and ((op.kind == "readdir" and self.remaps and removed) or (op.kind == "mkdir" and op.path in removed))
        ]

    def request(self, op: BatchOp, fids: list[int], top: int, listing: int) -> Any:
        if op.kind == "mkdir":
            return Tmkdir(dfid=fids[0], name=op.path[-1], mode=0o755, gid=0)
        if op.kind in ("unlink", "rmdir"):
            return Tunlinkat(dirfd=fids[0], name=op.path[-1], flags=wire.AT_REMOVEDIR if op.kind == "rmdir" else 0)
        if op.kind == "rename":
            return Trenameat(olddirfid=fids[0], oldname=op.path[-1], newdirfid=fids[1], newname=op.target[-1])
        if op.kind == "walk":
            return Twalk(fid=top, newfid=self.p9.new_fid(), wnames=list(op.path))
        return Treaddir(fid=listing, offset=0, count=4000)

    def settle(self, candidates: list[Model]) -> Model:
        """The tree the server has, of the serial orders that answer as it did: where they
        differ (two renames that swap a name), the server is asked which it is."""
        distinct = {repr(sorted(m.nodes.items())): m for m in candidates}
        if len(distinct) == 1:
            return candidates[0]
        paths = sorted({p for m in distinct.values() for p in m.nodes})
        actual = {p: self.look(p) for p in paths}
        matching = [m for m in distinct.values() if all(m.nodes.get(p, "absent") == actual[p] for p in paths)]
        assert matching, f"the tree after the batch is no serial order's: {actual}"
        return matching[0]

    def look(self, path: tuple[str, ...]) -> bytes | str | None:
        """What the server has at ``path``: None for a directory, a file's bytes, or "absent"."""
        fid = self.p9.new_fid()
        qids = self.p9.walk(self.base, [self.top, *path], fid).qids
        if len(qids) != len(path) + 1:
            return "absent"
        try:
            if qids[-1].type & wire.QTDIR:
                return None
            self.p9.lopen(fid, os.O_RDONLY)
            return self.p9.read(fid, 0, 4096).data
        finally:
            self.p9.clunk(fid)

    @invariant()
    def no_fid_left(self) -> None:
        assert self.p9.fids <= {0, self.base}, f"fids left open: {sorted(self.p9.fids)}"
