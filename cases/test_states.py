"""Every request that takes a fid (fixtures/tables.py ``fid_ops``: each row of fixtures/model.py,
the fid in each of its fid fields) with that fid in every state it can be in (fixtures/subjects.py
``states``: what it names, how the node was made, whether and how it is open, and what happened
to the node or its directory since it was walked), under passthrough and mapped-xattr. One model
judges each (fixtures/cells.py): the exact errno, or a success with the host as the model says
and every reply field as its source says; a refusal leaves the slot exactly as it was and makes
no fid.

``states/{state}/{op}/{security_model}`` are a few states a case each (the fid never made,
clunked, on a file, open, an xattr fid, the file removed through 9P or on the host, open and
removed on the host, replaced by a directory on the host, on a directory, a symlink, a FIFO, the
export root); ``states/every/{op}/{security_model}`` runs every other state of the product in one
case (the cheap mode); ``--full-matrix`` makes every cell a case of its own. The cells of the
product that cannot exist are listed with why (docs/matrices.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from fixtures.case_path import Shown, case_path
from fixtures.cells import Cell, assert_cell, run_cells
from fixtures.deviations import NO_HANDLE_CHECK, READLINK_MAPPED, RENAME_LEFT_FIDS
from fixtures.devices import QemuUnderTest
from fixtures.known import deviating_bugs
from fixtures.mirror import Mirror
from fixtures.model import Server
from fixtures.place import Place
from fixtures.subjects import State, cannot, states
from fixtures.tables import Op, fid_ops
from harness.qemu import versions

MODELS = ["passthrough", "mapped-xattr"]
OPS: dict[str, Op] = {op.name: op for op in fid_ops()}
#: the states a case each (the rest: states/every/...)
SHOWN = [
    State("unknown"), State("clunked"), State("file"), State("file", opened="rdwr"), State("xattr_read"),
    State("file", since="removed_by_tunlinkat"), State("file", since="removed_on_host"),
    State("file", opened="rdwr", since="removed_on_host"), State("file", since="replaced_on_host_by_dir"),
    State("dir"), State("symlink"), State("fifo"), State("root"),
]  # fmt: skip
#: every state of the product on any server these cases run (what cannot exist on one: skipped there)
EVERY = states(Server("passthrough")) + [s for s in states(Server("mapped-xattr")) if s not in states(Server())]
RENAMED_BY_A_FID = ("renamed_by_trename", "renamed_by_twstat", "parent_renamed_by_trename", "parent_renamed_by_twstat")


@pytest.mark.qemu_bug(
    fixed_in=(),
    reason="under a mapped security model local_readlink() opens the node and reads it, whatever its kind: "
    "Treadlink of a regular file answers its content as a link target, of a directory EISDIR, of a FIFO ENXIO, "
    "where readlink(2) says EINVAL (v9fs_readlink() checks no kind either)",
    when={"op": "readlink", "security_model": "mapped-xattr"},
    deviation=READLINK_MAPPED,
    upstream="readlink-mapped",
)
@pytest.mark.qemu_bug(
    fixed_in=versions.FID_HANDLE_CHECK,
    reason="v9fs_fsync(), v9fs_lock() and v9fs_getlock() use the fid's descriptor without checking the fid is "
    "open: on local they run on fd 0 or -1 (fixed by 75893c058b: EBADF)",
    when={"op": ("fsync", "lock", "getlock")},
    deviation=NO_HANDLE_CHECK,
)
@pytest.mark.qemu_bug(
    fixed_in=(),
    race=True,
    reason="v9fs_complete_rename() (Trename, and Twstat's rename) moves the renaming fid's own path first and then "
    "compares every other fid with that moved path: the fids the hash table walks after it keep the old path, and "
    "a request on one answers ENOENT or reaches another node (which fids: the fid table's order)",
    when={"since": RENAMED_BY_A_FID},
    deviation=RENAME_LEFT_FIDS,
    upstream="rename-fid-paths",
)
@case_path("states/{state}/{op}/{security_model}", backends=["local"], state=Shown(SHOWN, EVERY), op=list(OPS),
           security_model=MODELS)  # fmt: skip
def test_operation_in_state(
    mirror: Mirror, place: Place, qemu_under_test: QemuUnderTest, state: State, op: str, security_model: str
) -> None:
    """Each request that takes a fid, on a fid in each state, as the model says."""
    why = cannot(state, mirror.model.server)
    if why is not None:
        pytest.skip(f"no fid is {state} on QEMU {qemu_under_test.probe.version} under {security_model}: {why}")
    params = {"state": state, "op": op, "security_model": security_model}
    marks = test_operation_in_state.pytestmark  # type: ignore[attr-defined]
    assert_cell(mirror, place.fid, Cell(state, OPS[op]), deviating_bugs(marks, params, qemu_under_test.probe.version))


@case_path("states/every/{op}/{security_model}", backends=["local"], op=Shown(list(OPS), []), security_model=MODELS)
def test_every_state(mirror: Mirror, place: Place, qemu_under_test: QemuUnderTest, op: str, security_model: str) -> None:
    """The request on a fid in every state not run as a case of its own (the cheap mode: one case,
    each state on a slot of its own), each judged as its own case would be."""
    server = mirror.model.server
    cells = [Cell(state, OPS[op]) for state in states(server) if state not in SHOWN]
    marks = list(test_operation_in_state.pytestmark)  # type: ignore[attr-defined]
    tally = run_cells(mirror, place.fid, cells, marks,
                      lambda cell: {"state": cell.state, "op": op, "security_model": security_model},
                      server.version)  # fmt: skip
    tally.conclude()
