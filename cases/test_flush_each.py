"""Tflush of every kind of request in flight (fixtures/pairs.py's rows), alone and twice for one
tag, sent in the same kick as the request: ``concurrent/flush/{op}/{flushes}``.

flush(5): "the server should answer the flush message immediately ... If it recognizes oldtag as
the tag of a pending transaction, it should abort any pending response and discard that tag";
a reply received before the Rflush is the reply to the original request. So every Tflush is
answered Rflush; the request comes back before each Rflush, either with its reply or with nothing
written (flushed); and the answers, the request's read as done or not done where it was flushed,
are some serial order's on the model of the export (fixtures/judge.py), which the host then holds.
"""

from __future__ import annotations

import pytest

from fixtures.answers import Answer, observed
from fixtures.batches import round_seeds
from fixtures.case_path import case_path
from fixtures.judge import judge_group
from fixtures.mirror import Mirror
from fixtures.pairs import PAIR_OPS, set_up
from fixtures.pool import Device
from harness.p9.messages import Rflush, Tflush

#: rounds per case: a share of --concurrent-rounds (30 -> 3)
SHARE = 0.1


def one_round(mirror: Mirror, op: str, flushes: int, seed: int) -> None:
    p9 = mirror.session
    fids = set_up(mirror, mirror.fid)
    start = mirror.model.copy
    request = PAIR_OPS[op].request(fids)
    with p9.batch():
        pending = p9.send(request)
        flushing = [p9.send(Tflush(oldtag=pending.tag)) for _ in range(flushes)]
    done, replies = pending.wait(), [f.wait() for f in flushing]
    where = f"{op} with {flushes} Tflush (seed {seed})"
    for reply in replies:
        assert isinstance(reply.message, Rflush), f"{where}: a Tflush was answered {reply.message}"
        assert done.order < reply.order, f"{where}: an Rflush came before the request was returned"
    answers: list[Answer] = [observed(pending)]
    ends, failure = judge_group([request], answers, start, where=where)
    assert failure is None, f"{where}: {failure}"
    agreeing = [end for end in ends if not mirror.disagreements_with(end)]
    assert agreeing, f"{where}: the directory on the host is no order's: {mirror.disagreements_with(ends[0])}"
    mirror.model = agreeing[0]
    mirror.clunk_all({0, mirror.fid})


@case_path("concurrent/flush/{op}/{flushes}", backends=["local"], op=list(PAIR_OPS), flushes=["one", "two"])
def test_flush_of_each_request(mirror: Mirror, device: Device, request: pytest.FixtureRequest, op: str,
                               flushes: str) -> None:  # fmt: skip
    """The request and its Tflush (or two) in one kick: each Rflush after the request's return,
    the request answered as alone or flushed, the directory the model's."""
    for seed in round_seeds(request, SHARE):
        one_round(mirror, op, 1 if flushes == "one" else 2, seed)
        assert device.alive()
