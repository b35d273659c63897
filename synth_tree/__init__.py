"""Expected trees, and the builders that materialise trees for the local backend.

:data:`ROOT` describes QEMU's synth test tree (hw/9pfs/9p-synth.c, built only under the qtest
accelerator). The synth backend lists a directory's children newest first (QLIST_INSERT_HEAD),
and every directory it makes gets ``..`` then ``.`` first, so listings end with ``.``, ``..``.

:func:`materialise` writes any :class:`Node` tree into a host directory, so the local backend
can be given the same shapes (a ReadDirDir of any size, the WALK chain, deep chains, long names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

WALK_DEPTH = 16  # P9_MAXWELEM
READDIR_NFILES = 100
NAME_MAX = 255


@dataclass(frozen=True)
class Node:
    name: str
    is_dir: bool
    children: tuple[Node, ...] = field(default=())

    def listing(self) -> list[str]:
        """Names in the order QEMU's synth readdir returns them."""
        return [child.name for child in reversed(self.children)] + [".", ".."]

    def names(self) -> set[str]:
        """The names any backend must list: children plus ``.`` and ``..``."""
        return {child.name for child in self.children} | {".", ".."}

    def descendants(self) -> int:
        """How many nodes lie below this one."""
        return sum(1 + child.descendants() for child in self.children)

    def child(self, name: str) -> Node:
        return next(c for c in self.children if c.name == name)


def chain(names: list[str]) -> Node:
    """Nested directories ``names[0]/names[1]/...``."""
    node = Node(names[-1], True)
    for name in reversed(names[:-1]):
        node = Node(name, True, (node,))
    return node


def readdir_dir(files: int = READDIR_NFILES, name: str = "ReadDirDir") -> Node:
    """A directory of ``files`` empty files named ReadDirFile0 … as QEMU's synth one."""
    return Node(name, True, tuple(Node(f"ReadDirFile{i}", False) for i in range(files)))


WALK_PATH = [f"WALK{i}" for i in range(WALK_DEPTH)]
READDIR_DIR = readdir_dir()

#: The root of the synth export, children in creation order.
ROOT = Node(
    "",
    True,
    (chain(WALK_PATH), Node("LOPEN", False), Node("WRITE", False), Node("FLUSH", False), READDIR_DIR),
)


def materialise(node: Node, parent: Path) -> Path:
    """Create ``node`` (and below) inside ``parent`` on the host; returns its path."""
    path = parent / node.name
    if node.is_dir:
        path.mkdir()
        for child in node.children:
            materialise(child, path)
    else:
        path.touch()
    return path
