"""Expected trees: QEMU's synth test tree (hw/9pfs/9p-synth.c, built only under qtest).

The synth backend lists a directory's children newest first (QLIST_INSERT_HEAD), and every
directory it makes gets ``..`` then ``.`` first, so listings end with ``.``, ``..``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WALK_DEPTH = 16  # P9_MAXWELEM
READDIR_NFILES = 100


@dataclass(frozen=True)
class Node:
    name: str
    is_dir: bool
    children: tuple[Node, ...] = field(default=())

    def listing(self) -> list[str]:
        """Names in the order QEMU's synth readdir returns them."""
        return [child.name for child in reversed(self.children)] + [".", ".."]


def _walk_chain(depth: int) -> Node:
    node = Node(f"WALK{depth - 1}", True)
    for level in range(depth - 2, -1, -1):
        node = Node(f"WALK{level}", True, (node,))
    return node


READDIR_DIR = Node("ReadDirDir", True, tuple(Node(f"ReadDirFile{i}", False) for i in range(READDIR_NFILES)))

#: The root of the synth export, children in creation order.
ROOT = Node(
    "",
    True,
    (_walk_chain(WALK_DEPTH), Node("LOPEN", False), Node("WRITE", False), Node("FLUSH", False), READDIR_DIR),
)

WALK_PATH = [f"WALK{i}" for i in range(WALK_DEPTH)]
