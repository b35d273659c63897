"""Tflush of every kind of request in flight (fixtures/pairs.py's rows), alone and twice for one
tag, sent in the same kick as the request: ``concurrent/flush/{op}/{flushes}``.

flush(5): "the server should answer the flush message immediately ... If it recognizes oldtag as
the tag of a pending transaction, it should abort any pending response and discard that tag";
a reply received before the Rflush is the reply to the original request. So every Tflush is
answered Rflush; the request comes back before each Rflush, either with its reply (which must be
the model's, as if alone) or with nothing written (flushed); and the directory afterwards is the
model's with the request done, or, when it was flushed, with it done or not.
"""

from __future__ import annotations

from typing import Any

import pytest

from fixtures.batches import round_seeds
from fixtures.case_path import case_path
from fixtures.oracle import observed
from fixtures.pairs import PAIR_OPS, DirModel, fresh, set_up
from fixtures.place import Place
from harness.p9.messages import Rflush, Tflush
from harness.p9.session import Session

#: rounds per case: a share of --concurrent-rounds (30 -> 3)
SHARE = 0.1


def host_paths(place: Place) -> set[str]:
    """The paths the model knows of, as the host has them (the symlink l included)."""
    host = place.host_path()
    return {str(p.relative_to(host)) for p in host.rglob("*")} - {".virtfs_metadata"}


def content(place: Place, model: DirModel) -> bytes | None:
    """f's bytes where the model's f is a file the open fid still reads (None: not comparable)."""
    where = model.fids["Fo"]
    path = place.host_path(where) if where else None
    return path.read_bytes() if path is not None and path.is_file() and not path.is_symlink() else None


def one_round(p9: Session, place: Place, op: str, flushes: int, seed: int) -> None:
    fids = set_up(p9, place.fid, place.host_path())
    request = PAIR_OPS[op].request(fids)
    with p9.batch():
        pending = p9.send(request)
        flushing = [p9.send(Tflush(oldtag=pending.tag)) for _ in range(flushes)]
    done, answers = pending.wait(), [f.wait() for f in flushing]
    where = f"{op} with {flushes} Tflush (seed {seed})"
    for answer in answers:
        assert isinstance(answer.message, Rflush), f"{where}: a Tflush was answered {answer.message}"
        assert done.order < answer.order, f"{where}: an Rflush came before the request was returned"
    applied = fresh()
    alone = applied.apply(op)
    if done.used_len:  # answered: as if alone, and done
        assert observed(pending) == alone, f"{where}: answered {observed(pending)}, alone it answers {alone}"
        allowed = [applied]
    else:  # flushed: done or not
        allowed = [applied, fresh()]
    paths = host_paths(place)
    kept = [m for m in allowed if set(m.kinds) == paths and content(place, m) in (None, m.content)]
    assert kept, f"{where}: the directory holds {sorted(paths)}, the model {[sorted(m.kinds) for m in allowed]}"
    for fid in sorted(p9.fids - {0, place.fid}):
        p9.clunk(fid)


@case_path("concurrent/flush/{op}/{flushes}", backends=["local"], op=list(PAIR_OPS), flushes=["one", "two"])
def test_flush_of_each_request(place: Place, device: Any, request: pytest.FixtureRequest, op: str,
                               flushes: str) -> None:  # fmt: skip
    """The request and its Tflush (or two) in one kick: each Rflush after the request's return,
    the request answered as alone or flushed, the directory the model's."""
    for seed in round_seeds(request, SHARE):
        one_round(place.session, place, op, 1 if flushes == "one" else 2, seed)
        assert device.alive()
