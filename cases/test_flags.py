"""Every flag, valid bit, mode bit and open mode a request takes (fixtures/tables.py ``flag_ops``,
derived from the wire table's :class:`~harness.p9.wire.Bits`: each value alone, with each mode
where the field has modes, each pair of bits where it has none, every bit, a bit with no meaning,
all 32), in both dialects, on the row's own example request and on a fid in each state of
fixtures/subjects.py ``FLAGGED`` (one of each thing a fid can be), under every security model,
judged by the model (fixtures/cells.py) as states/ judges: the exact errno, a
refusal changing nothing, a success as the model says.

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
from fixtures.subjects import EXAMPLE, FIELD_MODELS, FLAGGED, states
from fixtures.tables import Op, flag_ops, short
from harness.p9 import wire


def by_field(dialect: str, prefix: str = "") -> dict[str, dict[str, Op]]:
    """A flags field of a row -> its values' ops (``lopen/flags`` -> O_RDONLY, O_WRONLY ...)."""
    found: dict[str, dict[str, Op]] = collections.defaultdict(dict)
    for name, op in flag_ops(dialect).items():
        found[prefix + name.rsplit("/", 1)[0]][name] = op
    return found


DOTL = by_field(wire.DOTL)
DOTU = by_field(wire.DOTU, "dotu/")
FIELDS = DOTL | DOTU


def check(
    mirror: Mirror, place: Place, field: str, security_model: str, config: pytest.Config, marks: list[pytest.Mark]
) -> None:
    """Each value of the field on the row's example request, and on a fid in each state of
    ``FLAGGED`` (every state, ``every``)."""
    server = mirror.model.server
    every = config.getoption("--full-matrix")
    chosen = [state for state in (states(server) if every else FLAGGED) if state in states(server)]
    cells = [Cell(EXAMPLE, op) for op in FIELDS[field].values()]
    for op in FIELDS[field].values():
        first = op.rule.fid_fields()[0] if op.rule.fid_fields() else None
        cells += [Cell(state, Op(op.message, first, op.changes, op.variant)) for state in chosen]
    tally = run_cells(mirror, place.fid, cells, marks,
                      lambda cell: {"state": cell.state, "message": short(cell.op.message),
                                    "security_model": security_model},
                      server.version)  # fmt: skip
    tally.conclude(config.option.runxfail)


@table_bugs
@case_path("flags/{field}/{security_model}", backends=["local"], field=list(DOTL), security_model=list(FIELD_MODELS))
def test_flags(mirror: Mirror, place: Place, qemu_under_test: QemuUnderTest, field: str, security_model: str,
               request: pytest.FixtureRequest) -> None:  # fmt: skip
    """9P2000.L's flags fields: each value, judged by the model."""
    marks = list(test_flags.pytestmark)  # type: ignore[attr-defined]  # (set by table_bugs)
    check(mirror, place, field, security_model, request.config, marks)


@table_bugs
@case_path("flags/{field}/{security_model}", backends=["local"], dialect=[wire.DOTU], field=list(DOTU),
           security_model=list(FIELD_MODELS))  # fmt: skip
def test_flags_dotu(mirror: Mirror, place: Place, qemu_under_test: QemuUnderTest, dialect: str, field: str,
                    security_model: str, request: pytest.FixtureRequest) -> None:  # fmt: skip
    """9P2000.u's flags fields (Topen's and Tcreate's mode, Tcreate's perm): each value, judged by the model."""
    marks = list(test_flags_dotu.pytestmark)  # type: ignore[attr-defined]  # (set by table_bugs)
    check(mirror, place, field, security_model, request.config, marks)
