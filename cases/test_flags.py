"""Every flag, valid bit, mode bit and open mode a request takes (fixtures/tables.py ``flag_ops``,
derived from the wire table's :class:`~harness.p9.wire.Bits`: each value alone, with each mode
where the field has modes, each pair of bits where it has none, every bit, a bit with no meaning,
all 32), on the row's own example request and on a fid in each of the states that are a case of
their own in states/, under passthrough and mapped-xattr, judged by the model (fixtures/cells.py)
as states/ judges: the exact errno, a refusal changing nothing, a success as the model says.

``flags/{field}/{security_model}`` runs a field's every value in one case (the cheap mode);
``--full-matrix`` runs them on a fid in every state of states/ too.
"""

from __future__ import annotations

import collections

import pytest

from fixtures.case_path import case_path
from fixtures.cells import Cell, run_cells
from fixtures.deviations import table_bugs
from fixtures.devices import QemuUnderTest
from fixtures.mirror import Mirror
from fixtures.place import Place
from fixtures.subjects import EXAMPLE, MODELS, SHOWN, states
from fixtures.tables import Op, flag_ops

OPS = flag_ops()
#: a flags field of a row -> its values' ops (``lopen/flags`` -> O_RDONLY, O_WRONLY ...)
FIELDS: dict[str, dict[str, Op]] = collections.defaultdict(dict)
for _name, _op in OPS.items():
    FIELDS[_name.rsplit("/", 1)[0]][_name] = _op


@table_bugs
@case_path("flags/{field}/{security_model}", backends=["local"], field=list(FIELDS), security_model=list(MODELS))
def test_flags(mirror: Mirror, place: Place, qemu_under_test: QemuUnderTest, field: str, security_model: str,
               request: pytest.FixtureRequest) -> None:  # fmt: skip
    """Each value of the field on the row's example request, and on a fid in each state states/
    runs a case each (every state, with ``--full-matrix``)."""
    server = mirror.model.server
    every = request.config.getoption("--full-matrix")
    chosen = [state for state in (states(server) if every else SHOWN) if state in states(server)]
    cells = [Cell(EXAMPLE, op) for op in FIELDS[field].values()]
    for op in FIELDS[field].values():
        first = op.rule.fid_fields()[0] if op.rule.fid_fields() else None
        cells += [Cell(state, Op(op.message, first, op.changes, op.variant)) for state in chosen]
    marks = list(test_flags.pytestmark)  # type: ignore[attr-defined]  # (set by table_bugs)
    tally = run_cells(mirror, place.fid, cells, marks,
                      lambda cell: {"state": cell.state, "message": cell.op.name.split("/")[0],
                                    "security_model": security_model},
                      server.version)  # fmt: skip
    tally.conclude()

