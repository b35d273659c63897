"""The model the property-based sessions check QEMU against (cases/model_session.py): a tree of
names, the errno each request gets in each state of it, and a batch of requests in flight applied
in one serial order (:class:`BatchModel`, which the one oracle, fixtures/oracle.py, asks). No
hypothesis here: the oracle's self-tests import it without paying for hypothesis."""

from __future__ import annotations

import copy
import errno
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import P9Rlerror
from harness.p9.messages import Rerror, Rlerror, Rreaddir, Rwalk

NAMES = ("a", "b", "c")
#: the batch requests a known race shows in (fixtures/races.py)
RACY = ("readdir", "mkdir")


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

    def parent_errno(self, parent: tuple[str, ...]) -> int | None:
        """ENOENT for a directory fid whose path is gone, ENOTDIR for one on a file, else None."""
        if parent not in self.nodes:
            return errno.ENOENT
        return errno.ENOTDIR if self.nodes[parent] is not None else None

    def unlink_errno(self, parent: tuple[str, ...], name: str, removedir: bool) -> int:
        """Tunlinkat(parent, name): 0 or the errno unlinkat(2) gives, the parent being reached."""
        path = (*parent, name)
        if (refused := self.parent_errno(parent)) is not None:
            return refused
        if path not in self.nodes:
            return errno.ENOENT
        if self.nodes[path] is None:
            return (errno.ENOTEMPTY if self.children(path) else 0) if removedir else errno.EISDIR
        return errno.ENOTDIR if removedir else 0

    def rename_errno(self, source: tuple[str, ...], target: tuple[str, ...]) -> int:
        """Trenameat(source -> target): 0 or the errno rename(2) gives (lookups first, then the
        kernel's "trap" checks, then the kinds of source and target)."""
        for parent in (source[:-1], target[:-1]):
            if (refused := self.parent_errno(parent)) is not None:
                return refused
        if source not in self.nodes:
            return errno.ENOENT
        if source == target:
            return 0
        if target[: len(source)] == source:
            return errno.EINVAL  # a directory into itself
        if source[: len(target)] == target:
            return errno.ENOTEMPTY  # onto an ancestor
        if target in self.nodes:
            if self.nodes[source] is None and self.nodes[target] is not None:
                return errno.ENOTDIR
            if self.nodes[source] is not None and self.nodes[target] is None:
                return errno.EISDIR
            if self.nodes[target] is None and self.children(target):
                return errno.ENOTEMPTY
        return 0

    def move(self, source: tuple[str, ...], target: tuple[str, ...]) -> None:
        """The tree after a rename that succeeded: the subtree at ``source`` now at ``target``."""
        if source == target:
            return
        self.remove(target)
        for p in sorted(p for p in self.nodes if p[: len(source)] == source):
            self.nodes[target + p[len(source) :]] = self.nodes.pop(p)


@dataclass(frozen=True)
class BatchOp:
    """One request of a batch. ``parents`` are the directories whose fids it is sent on, walked
    before the batch: a fid follows a rename of its path (v9fs_fix_fid_paths), so the model moves
    them too."""

    kind: str  # mkdir, unlink, rmdir, rename, walk, readdir
    path: tuple[str, ...]  # the node it makes, removes, moves or walks to; () for readdir
    target: tuple[str, ...] = ()  # rename's new path

    @property
    def parents(self) -> list[tuple[str, ...]]:
        if self.kind in ("mkdir", "unlink", "rmdir"):
            return [self.path[:-1]]
        if self.kind == "rename":
            return [self.path[:-1], self.target[:-1]]
        return []

    def __str__(self) -> str:
        to = f" -> {'/'.join(self.target)}" if self.kind == "rename" else ""
        return f"{self.kind} {'/'.join(self.path) or '.'}{to}"


@dataclass(frozen=True)
class Sent:
    """A request of a batch as the oracle runs it: its op and the indexes, in the batch's
    fid_paths, of the fids it was sent on."""

    op: BatchOp
    fids: tuple[int, ...]


class BatchModel:
    """The tree and the fids of one batch, as a serial server leaves them after each request."""

    def __init__(self, tree: Model, fid_paths: list[tuple[str, ...]]) -> None:
        self.tree, self.fid_paths = copy.deepcopy(tree), list(fid_paths)

    @staticmethod
    def reads(sent: Sent) -> bool:
        return sent.op.kind in ("walk", "readdir")

    def apply(self, sent: Sent) -> object:
        """What a serial server answers ``sent.op`` (sent on the fids at ``sent.fids`` in fid_paths)."""
        op, fids = sent.op, sent.fids
        nodes = self.tree.nodes
        if op.kind == "walk":  # from the top: ENOENT when no name walks, else how many did
            walked = self.tree.walkable(op.path)
            return ("qids", walked) if walked or not op.path else errno.ENOENT
        if op.kind == "readdir":
            return frozenset(self.tree.children(()))
        parent = self.fid_paths[fids[0]]
        if op.kind == "mkdir":
            name = op.path[-1]
            if (refused := self.tree.parent_errno(parent)) is not None:
                return refused
            if (*parent, name) in nodes:
                return errno.EEXIST
            nodes[(*parent, name)] = None
            return 0
        if op.kind in ("unlink", "rmdir"):
            got = self.tree.unlink_errno(parent, op.path[-1], op.kind == "rmdir")
            if got == 0:
                self.tree.remove((*parent, op.path[-1]))
            return got
        source, target = (*parent, op.path[-1]), (*self.fid_paths[fids[1]], op.target[-1])
        got = self.tree.rename_errno(source, target)
        if got == 0 and source != target:
            self.tree.move(source, target)
            n = len(source)
            self.fid_paths = [target + p[n:] if p[:n] == source else p for p in self.fid_paths]
        return got


def replies_of(pendings: Sequence[Any]) -> tuple[object, ...]:
    """Each reply as :meth:`BatchModel.apply` puts it: 0, an errno, ("qids", n), a set of names."""
    answers: list[object] = []
    for pending in pendings:
        message = pending.wait().message
        if isinstance(message, Rlerror | Rerror):
            answers.append(message.ecode if isinstance(message, Rlerror) else message.errno)
        elif isinstance(message, Rwalk):
            answers.append(("qids", len(message.qids)))
        elif isinstance(message, Rreaddir):
            answers.append(frozenset(e.name for e in message.entries) - {".", ".."})
        else:
            answers.append(0)
    return tuple(answers)


def outcome(call: Callable[[], object]) -> int:
    """0 for success, else the Rlerror errno."""
    try:
        call()
    except P9Rlerror as err:
        return err.errno
    return 0
