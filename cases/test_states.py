"""Every request that takes a fid (fixtures/tables.py ``fid_ops``: each row of fixtures/model.py,
the fid in each of its fid fields) with that fid in every state it can be in (fixtures/subjects.py
``states``: what it names, how the node was made, whether and how it is open, and what happened
to the node or its directory since it was walked), under passthrough, mapped-xattr and mapped-file
(``--full-matrix``: none too). One model
judges each (fixtures/cells.py): the exact errno, or a success with the host as the model says
and every reply field as its source says; a refusal leaves the slot exactly as it was and makes
no fid.

``states/{state}/{op}/{security_model}`` are a few states a case each (the fid never made,
clunked, on a file, open, an xattr fid, the file removed through 9P or on the host, open and
removed on the host, replaced by a directory on the host, on a directory, a symlink, a FIFO, the
export root); ``states/every/{group}/{security_model}`` runs every other state of the product in one
case (the cheap mode); ``--full-matrix`` makes every cell a case of its own.
``states/every/dotu/{group}/{security_model}`` runs 9P2000.u's requests in every state, in the cheap
mode either way. The cells of the product that cannot exist are listed with why (docs/matrices.md)
and built as claims by ``states/excluded/{security_model}``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fixtures.case_path import Shown, case_path
from fixtures.cells import Cell, assert_cell, judge, run_cells
from fixtures.deviations import table_bugs
from fixtures.devices import QemuUnderTest
from fixtures.known import deviating_bugs
from fixtures.mirror import Mirror, SetUpDiffers
from fixtures.model import Server
from fixtures.place import Place
from fixtures.subjects import MODELS, OTHER_FIDS, SHOWN, State, build, cannot, excluded, renamed, states
from fixtures.tables import Op, fid_ops
from harness.p9 import wire
from harness.p9.messages import Tgetattr

OPS: dict[str, Op] = {op.name: op for op in fid_ops()}
#: every state of the product on any server these cases run (what cannot exist on one: skipped there)
EVERY = list(dict.fromkeys(state for model in MODELS.full for state in states(Server(model))))


@table_bugs
@case_path("states/{state}/{op}/{security_model}", backends=["local"], state=Shown(SHOWN, EVERY), op=list(OPS),
           security_model=MODELS)  # fmt: skip
def test_operation_in_state(mirror: Mirror, place: Place, qemu_under_test: QemuUnderTest, state: State, op: str,
                            security_model: str, pytestconfig: pytest.Config) -> None:  # fmt: skip
    """Each request that takes a fid, on a fid in each state, as the model says."""
    why = cannot(state, mirror.model.server)
    if why is not None:
        pytest.skip(f"no fid is {state} on QEMU {qemu_under_test.probe.version} under {security_model}: {why}")
    params = {"state": state, "op": op, "message": op.split("/")[0], "security_model": security_model}
    marks = test_operation_in_state.pytestmark  # type: ignore[attr-defined]
    known = deviating_bugs(marks, params, qemu_under_test.probe.version)
    assert_cell(mirror, place.fid, Cell(state, OPS[op]), known, pytestconfig.option.runxfail)


#: the groups of the cheap cases: the states of each node kind, and the other fids
GROUPS = [*sorted({state.kind for state in EVERY} - set(OTHER_FIDS)), "other"]


@case_path("states/every/{group}/{security_model}", backends=["local"], group=Shown(GROUPS, []),
           security_model=MODELS)  # fmt: skip
def test_every_state(mirror: Mirror, place: Place, qemu_under_test: QemuUnderTest, group: str,
                     security_model: str, pytestconfig: pytest.Config) -> None:  # fmt: skip
    """Every request on a fid in every state of the group not run as a case of its own (the cheap
    mode: one case, the requests of a state sharing its slot while they leave it as it was),
    each judged as its own case would be."""
    every_state(mirror, place, group, security_model, list(OPS.values()), lambda state: state not in SHOWN,
                pytestconfig.option.runxfail)  # fmt: skip


#: 9P2000.u's requests that take a fid (Tstat, Twstat, Topen, Tcreate and those it shares)
DOTU_OPS = fid_ops(wire.DOTU)


@case_path("states/every/dotu/{group}/{security_model}", backends=["local"], dialect=[wire.DOTU],
           group=Shown(GROUPS, GROUPS), security_model=MODELS)  # fmt: skip
def test_every_state_dotu(mirror: Mirror, place: Place, qemu_under_test: QemuUnderTest, dialect: str, group: str,
                          security_model: str, pytestconfig: pytest.Config) -> None:  # fmt: skip
    """9P2000.u's requests on a fid in every state of the group, in the cheap mode."""
    every_state(mirror, place, group, security_model, DOTU_OPS, lambda state: True, pytestconfig.option.runxfail)


def every_state(mirror: Mirror, place: Place, group: str, security_model: str, ops: list[Op],
                chosen_state: Callable[[State], bool], runxfail: bool) -> None:  # fmt: skip
    """The cells of ``ops`` on every chosen state of ``group``, judged in one case."""
    server = mirror.model.server
    chosen = [state for state in states(server) if chosen_state(state)
              and (state.kind == group or (group == "other" and state.kind in OTHER_FIDS))]  # fmt: skip
    cells = [Cell(state, op) for state in chosen for op in ops]
    marks = list(test_operation_in_state.pytestmark)  # type: ignore[attr-defined]
    tally = run_cells(mirror, place.fid, cells, marks,
                      lambda cell: {"state": cell.state, "op": cell.op.name, "message": cell.op.name.split("/")[0],
                                    "security_model": security_model},
                      server.version)  # fmt: skip
    tally.conclude(runxfail)


@table_bugs
@case_path("states/excluded/{security_model}", backends=["local"], security_model=MODELS)
def test_excluded_states(mirror: Mirror, place: Place, qemu_under_test: QemuUnderTest, security_model: str) -> None:
    """Every cell of the product the table says cannot exist (fixtures/subjects.py ``excluded``),
    built all the same, as a claim: building it meets a request the server refuses (as the model
    does), or it makes the state the reason names instead (its ``twin``: the same fid, as the
    model has it); then a Tgetattr of the fid, judged by the model."""
    server = mirror.model.server
    marks = list(test_excluded_states.pytestmark)  # type: ignore[attr-defined]  # (set by table_bugs)
    wrong = []
    for index, (state, why) in enumerate(excluded(server).items()):
        refusals = mirror.refusals
        try:
            slot = build(mirror, place.fid, f"s{index}", state, index)
        except SetUpDiffers as differs:  # a step the server answered otherwise: right only as a known bug's
            if differs.step != why.bug:
                wrong.append(f"{state}: {differs}" + (f" (the known bug's step: {why.bug})" if why.bug else ""))
            mirror.clunk_all({0, place.fid})
            for name in (f"s{index}", renamed(f"s{index}")):  # (a step of its history may have renamed it)
                mirror.forget(name)
            continue
        shape = fid_shape(mirror, slot.subject)
        twin_name = f"t{index}"
        if mirror.refusals == refusals:
            if why.twin is None:
                wrong.append(f"{state}: built, though excluded: {why}")
            else:
                twin = build(mirror, place.fid, twin_name, why.twin(state), index)
                twin_name = twin.name  # (a history may have renamed its directory, as the slot's)
                if fid_shape(mirror, twin.subject) != shape:
                    made = fid_shape(mirror, twin.subject)
                    wrong.append(f"{state}: built as {shape}, not as {why.twin(state)} ({made})")
        params = {"state": state, "message": "getattr", "security_model": security_model}
        verdict = judge(mirror, slot, Cell(state, GETATTR), deviating_bugs(marks, params, server.version))
        if verdict.outcome() == "wrong":
            wrong.append(str(verdict))
        mirror.clunk_all({0, place.fid})
        for name in (slot.name, twin_name):  # the model stays the size of one slot and its twin: the judges copy it
            mirror.forget(name)
    assert not wrong, f"{len(wrong)} excluded states:\n" + "\n".join(wrong[:40])


#: the cheap op on an excluded state
GETATTR = next(op for op in OPS.values() if op.message is Tgetattr)


def fid_shape(mirror: Mirror, fid: int) -> tuple[object, ...]:
    """A fid as the model has it, for "the same state": what it is, and the kind its node has on
    the host."""
    entry = mirror.model.fids.get(fid)
    if entry is None:
        return ("not held",)
    node = entry.node if entry.node is not None else mirror.model.at(entry.path)
    return entry.use, node.on_host(mirror.model.server) if node is not None else None
