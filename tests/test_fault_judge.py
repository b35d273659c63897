"""The fault family's judge (fixtures/faults.py ``verdict_of``) fed wrong answers: each way a
server can get an error path wrong is seen, and a right answer is not called wrong."""

from __future__ import annotations

import errno
import stat

import pytest

from fixtures.answers import Answer, Data, Err
from fixtures.faults import CHANGED, LEFT_BEHIND, Seen, expected, verdict_of
from fixtures.model import Export, Fid, Kind, Node, Server
from harness.fault.control import Fault
from harness.p9.messages import Tlopen, Tmkdir, Tread
from harness.p9.wire import Request

CONTENT = b"0123456789"
State = tuple[object, ...]
DIRECTORY: State = (stat.S_IFDIR | 0o755, 0, 0, 60, 1_000, 7, None, {})
FILE: State = (stat.S_IFREG | 0o644, 0, 0, len(CONTENT), 1_000, 8, CONTENT, {})
HOST: dict[str, State] = {".": DIRECTORY, "f": FILE}
MKDIR = Tmkdir(dfid=1, name="new", mode=0o750, gid=0)
FAULT = Fault("mkdirat", errno.EACCES)


def _model() -> Export:
    model = Export(Server("passthrough"))
    model.root.entries["top"] = Node(Kind.DIR, 0o755, native=True)
    model.root.entries["top"].entries["f"] = Node(Kind.FILE, 0o644, CONTENT, native=True)
    model.fids[1] = Fid(("top",))
    return model


def _judged(got: Answer, request: Request = MKDIR, fault: Fault = FAULT, host_after: dict[str, tuple[object, ...]]
            | None = None, fds_after: frozenset[int] = frozenset({3, 4}), alive: bool = True,
            disagreements: tuple[str, ...] = ()) -> list[str]:  # fmt: skip
    model = _model()
    seen = Seen(got, dict(HOST), dict(HOST if host_after is None else host_after), frozenset({3, 4}), fds_after, alive)
    return verdict_of(fault, expected(model, request, fault), seen, list(disagreements))


def test_the_calls_errno_with_nothing_changed_is_right() -> None:
    assert _judged(Err(errno.EACCES)) == []


def test_an_errno_replaced_by_eio_is_wrong() -> None:
    assert _judged(Err(errno.EIO)) == ["answered EIO, not EACCES or ok"]


def test_a_descriptor_kept_on_the_error_path_is_wrong() -> None:
    assert _judged(Err(errno.EACCES), fds_after=frozenset({3, 4, 9})) == [
        "refused, yet QEMU holds 1 descriptor(s) more"]  # fmt: skip


def test_a_half_made_node_is_wrong() -> None:
    made: dict[str, State] = {**HOST, "new": (stat.S_IFDIR | 0o750, 0, 0, 40, 2_000, 9, None, {})}
    assert _judged(Err(errno.EACCES), host_after=made) == [f"{LEFT_BEHIND}: new"]


def test_a_node_changed_by_a_refused_request_is_wrong_but_not_its_directorys_times() -> None:
    retimed: dict[str, State] = {**HOST, ".": (*DIRECTORY[:3], 80, 3_000, *DIRECTORY[5:])}
    assert _judged(Err(errno.EACCES), host_after=retimed) == []
    chowned: dict[str, State] = {**HOST, "f": (FILE[0], 1000, *FILE[2:])}
    assert _judged(Err(errno.EACCES), host_after=chowned) == [f"{CHANGED}: f"]


def test_a_dead_qemu_is_wrong_whatever_it_answered() -> None:
    assert _judged(Err(errno.EACCES), alive=False) == [f"QEMU died with {FAULT} armed"]


def test_a_success_as_the_model_says_is_right_and_the_host_must_then_agree() -> None:
    model_answer = _model().peek(MKDIR)
    assert _judged(model_answer) == []
    assert _judged(model_answer, disagreements=("new: not on the host",)) == ["host: new: not on the host"]


def _read_model() -> Export:
    model = _model()
    model.fids[2] = Fid(("top", "f"))
    model.apply(Tlopen(fid=2, flags=0))
    return model


@pytest.mark.parametrize(("got", "right"), [(Data(CONTENT[:3]), True), (Data(CONTENT), True),
                                            (Data(CONTENT[3:6]), False), (Data(bytes(3)), False),
                                            (Data(b""), False), (Err(errno.EIO), False)])  # fmt: skip
def test_a_short_read_answers_the_files_first_bytes_or_all_of_them(got: Answer, right: bool) -> None:
    read, fault = Tread(fid=2, offset=0, count=64), Fault("preadv", short=3)
    seen = Seen(got, dict(HOST), dict(HOST), frozenset(), frozenset(), True)
    assert (verdict_of(fault, expected(_read_model(), read, fault), seen, []) == []) is right


def test_a_wrong_field_is_checked_as_its_value_or_an_error() -> None:
    """A success whose field is the host's, not the node's, ends in a reproducer line replay reads
    back: the node's value, or an error (a refusal is right too)."""
    from harness.p9 import wire
    from harness.p9.messages import Rgetattr, Rlerror, Tgetattr
    from harness.p9.trace import Expectation, Step
    from harness.tools.replay import _differs

    wanted = Expectation(field="mode", equals=0o100644, or_error=True)
    assert Expectation.parse(wanted.line()) == wanted and wanted.line().endswith(", or an error")
    request = wire.encode(Tgetattr(fid=1, request_mask=wire.GETATTR_BASIC), 0)
    step = Step(request, None, wanted)
    error = wire.encode(Rlerror(ecode=errno.EIO), 0)
    assert _differs(step, error, True, False) is None
    fields: dict[str, int] = {name: 0 for name in Rgetattr.field_names() if name != "qid"}
    host = wire.encode(Rgetattr(**{**fields, "mode": 0o100600}, qid=wire.Qid(0, 0, 1)), 0)
    assert _differs(step, host, True, False) is not None
