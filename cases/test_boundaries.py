"""Every field of every request at its boundaries (fixtures/tables.py ``boundary_ops``, derived
from the wire table: 0, 1, the largest value, the "don't touch" value, the values its declaration
names where the server's code turns — a time_t's sign, utimensat's UTIME_NOW, MAXWELEM names,
PATH_MAX — and those the session and the target make meaningful: a count at msize - 11 and one
over, an offset at and past the end of the file, data filling a request of msize and one byte
more), in both dialects, under every security model, on the row's example request, judged
by the model (fixtures/cells.py): the exact errno, a refusal changing nothing, a success leaving
the host as the model says (bytes, mode, owner, the times a request set) and every reply field as
its source says. The fids, flags and names a request takes are the other tables' (``ELSEWHERE``).

``boundaries/{field}/{security_model}`` runs a field's every value in one case (the cheap mode);
``--full-matrix`` runs each value on a fid in every state of states/ too.
"""

from __future__ import annotations

import pytest

from fixtures.case_path import case_path
from fixtures.cells import Cell, run_cells
from fixtures.deviations import READ_COUNT_ABOVE_MSIZE, table_bugs
from fixtures.devices import QemuUnderTest
from fixtures.mirror import Mirror
from fixtures.place import Place
from fixtures.subjects import EXAMPLE, FIELD_MODELS, states
from fixtures.tables import Op, boundary_ops, short
from harness.errors import DeviceNeedsReset
from harness.p9 import wire

DOTL = boundary_ops(wire.DOTL)
DOTU = {f"dotu/{field}": ops for field, ops in boundary_ops(wire.DOTU).items()}
FIELDS = DOTL | DOTU
#: the count past msize - 11 breaks the device (its values come last in the case)
READ_COUNTS = ("read/count", "dotu/read/count")


def check(
    mirror: Mirror, place: Place, field: str, security_model: str, config: pytest.Config, marks: list[pytest.Mark]
) -> None:
    """The field's every value on the row's example (and, with --full-matrix, on a fid in each state)."""
    every = config.getoption("--full-matrix")
    server = mirror.model.server
    ops = FIELDS[field].values()
    cells = [Cell(EXAMPLE, op) for op in ops]
    if every:
        for op in ops:
            first = op.rule.fid_fields()[0] if op.rule.fid_fields() else None
            cells += [Cell(state, Op(op.message, first, op.changes, op.variant, op.label))
                      for state in states(server)]  # fmt: skip
    tally = run_cells(mirror, place.fid, cells, marks,
                      lambda cell: {"state": cell.state, "message": short(cell.op.message),
                                    "security_model": security_model},
                      server.version)  # fmt: skip
    tally.conclude(config.option.runxfail)


@table_bugs
@pytest.mark.qemu_bug(**READ_COUNT_ABOVE_MSIZE, raises=DeviceNeedsReset, when={"field": READ_COUNTS})
@case_path("boundaries/{field}/{security_model}", backends=["local"], field=list(DOTL),
           security_model=list(FIELD_MODELS))  # fmt: skip
def test_boundary(mirror: Mirror, place: Place, qemu_under_test: QemuUnderTest, field: str, security_model: str,
                  request: pytest.FixtureRequest) -> None:  # fmt: skip
    """9P2000.L's requests: each boundary of the field, judged by the model."""
    marks = list(test_boundary.pytestmark)  # type: ignore[attr-defined]  # (set by table_bugs)
    check(mirror, place, field, security_model, request.config, marks)


@table_bugs
@pytest.mark.qemu_bug(**READ_COUNT_ABOVE_MSIZE, raises=DeviceNeedsReset, when={"field": READ_COUNTS})
@case_path("boundaries/{field}/{security_model}", backends=["local"], dialect=[wire.DOTU], field=list(DOTU),
           security_model=list(FIELD_MODELS))  # fmt: skip
def test_boundary_dotu(mirror: Mirror, place: Place, qemu_under_test: QemuUnderTest, dialect: str, field: str,
                       security_model: str, request: pytest.FixtureRequest) -> None:  # fmt: skip
    """9P2000.u's requests: each boundary of the field, judged by the model."""
    marks = list(test_boundary_dotu.pytestmark)  # type: ignore[attr-defined]  # (set by table_bugs)
    check(mirror, place, field, security_model, request.config, marks)
