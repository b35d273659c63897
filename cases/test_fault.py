"""fault/: every request of the operation table with each host call QEMU makes for it failing in
turn (fixtures/faults.py). The calls are recorded from the QEMU under test first, so a release
that makes other calls gets its own cells; each cell is judged by one rule: the request fails with
the call's errno having changed nothing, or succeeds as the model says; then QEMU lives and the
same request, disarmed, is answered as the model says.

``fault/{op}/{security_model}`` runs every position of the request's calls, each with one of the
errnos its call can return (in turn, so a table meets them all), and a short transfer for preadv
and pwritev; under passthrough and mapped-xattr, and the creates under every security model
(fixtures/faults.py ``in_default_part``). ``--fault-all``: every errno at every position, under
every security model.
"""

from __future__ import annotations

import pytest

from fixtures.case_path import case_path
from fixtures.devices import QemuUnderTest
from fixtures.faults import (
    FINDINGS,
    ChangedAnyway,
    FaultKilledQEMU,
    FaultVerdict,
    LeftBehind,
    Row,
    WrongFields,
    cells,
    conclude,
    fault_name,
    judge,
    record,
    rows,
)
from fixtures.mirror import Mirror
from fixtures.place import Place
from fixtures.pool import Device
from harness.errors import QEMUExited
from harness.fault.control import Injector
from harness.qemu.config import SECURITY_MODELS

#: the requests that reach the host (fixtures/faults.py ``rows``)
OPS: dict[str, Row] = {row.name: row for row in rows()}


#: the requests whose coroutine makes a node and then stats it (v9fs_co_open2() and its kin)
MAKE_THEN_STAT = ("lcreate", "mkdir", "mknod", "symlink")
#: the requests that write a node's mapped-file metadata (local_set_mapped_file_attrat())
WRITE_METADATA = ("lcreate", "mkdir", "mknod", "symlink", "setattr/mode", "setattr/chown")


# the first marker that applies wins, the one nearest the function first: the crash (which ends the case)
# before the leftovers
@pytest.mark.qemu_bug(
    fixed_in=(),
    when={"op": MAKE_THEN_STAT},
    raises=LeftBehind,
    upstream="create-stat-leftover",
    reason="v9fs_co_open2(), v9fs_co_mkdir(), v9fs_co_mknod() and v9fs_co_symlink() make the node, then "
    "stat it: when that stat fails (a host call inside the backend's lstat), the request answers its errno "
    "and the node it made stays on the host; the client's retry then meets EEXIST",
)
@pytest.mark.qemu_bug(
    fixed_in=(),
    when={"security_model": "mapped-file", "op": WRITE_METADATA},
    raises=QEMUExited,
    upstream="mapped-file-fchmod-assert",
    reason="local_set_mapped_file_attrat() asserts that fchmod() of the metadata file it just opened succeeded: "
    "a host that refuses it aborts QEMU (SIGABRT) in a create or a chmod under security_model=mapped-file",
)
@pytest.mark.qemu_bug(
    fixed_in=(),
    when={"security_model": "mapped-xattr", "op": "setattr/chown"},
    raises=ChangedAnyway,
    upstream="mapped-xattr-partial-chown",
    reason="local_set_xattrat() stores the owner's uid and gid as two xattrs, one after the other: when the "
    "second lsetxattr() fails, Tsetattr answers its errno with the uid already changed",
)
@pytest.mark.qemu_bug(
    fixed_in=(),
    when={"security_model": "mapped-file", "op": ("unlinkat", "remove")},
    raises=ChangedAnyway,
    upstream="mapped-file-unlink-order",
    reason="local_unlinkat_common() removes a node's mapped-file metadata before the node: when the host "
    "refuses the node's unlinkat(), the request answers its errno and the node has lost its stored mode and owner",
)
@pytest.mark.qemu_bug(
    fixed_in=(),
    when={"security_model": ("mapped-xattr", "mapped-file"), "op": "getattr"},
    raises=WrongFields,
    upstream="mapped-metadata-read-errors",
    reason="local_lstat() keeps the host's uid, gid and mode whenever reading the stored ones fails, not only "
    "when they are absent: an lgetxattr() (mapped-xattr) or a metadata file (mapped-file) that cannot be read "
    "makes Tgetattr answer the host's mode 0600 for a file the client made 0644",
)
@pytest.mark.fault_injector
@case_path("fault/{op}/{security_model}", backends=["local"], op=list(OPS), security_model=list(SECURITY_MODELS))
def test_fault(mirror: Mirror, place: Place, device: Device, qemu_under_test: QemuUnderTest, op: str,
               security_model: str, pytestconfig: pytest.Config) -> None:  # fmt: skip
    """Each host call of the request failing in turn, judged by fixtures/faults.py's rule."""
    every = pytestconfig.getoption("--fault-all")
    injector, library = device.machine.injector, device.machine.config.injector
    assert injector is not None and library is not None
    assert Injector.loaded_in(device.machine.pid or 0, library), f"QEMU runs without {library}: see its output"
    calls, slot = record(mirror, injector, place.fid, OPS[op])
    if not calls:
        pytest.skip(f"{OPS[op].op.message.__name__} makes no host call on QEMU {qemu_under_test.probe.version}")
    wrong: list[FaultVerdict] = []
    only = pytestconfig.getoption("--fault-cell")
    chosen = [(index, fault) for index, fault in enumerate(cells(calls, slot, every, security_model, op), start=1)
              if not only or only in f"{op}/{fault_name(fault)}"]  # fmt: skip
    if not chosen:
        pytest.skip(f"--fault-cell {only!r} names none of {op}'s cells")
    try:
        for index, fault in chosen:
            verdict = judge(mirror, device.machine, place.fid, OPS[op], fault, index)
            if verdict.problems:
                wrong.append(verdict)
            if not device.machine.is_running():
                raise FaultKilledQEMU(f"{verdict}\n{device.machine.output_tail()}")
    except (QEMUExited, FaultKilledQEMU):
        # the cells judged before QEMU died: a problem of a kind no known bug names fails the case
        # rather than hide behind the crash's marker
        if any(kind not in FINDINGS for verdict in wrong for kind in verdict.kinds()):
            conclude(op, calls, wrong)
        raise
    conclude(op, calls, wrong)
