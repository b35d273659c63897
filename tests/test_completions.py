"""A reply always reaches the request it answers, whatever the caller waits for, in whatever order:
against a real QEMU, thousands of mixed batches, a random subset awaited in a random order."""

from __future__ import annotations

import os
import random
import time
from typing import Any

import pytest

from fixtures.devices import QemuUnderTest
from harness.p9 import wire
from harness.p9.messages import Rflush, Tclunk, Tflush, Tgetattr, Tstatfs, Twalk, Twrite
from harness.p9.session import Pending
from harness.p9.wire import Request, RMessage
from harness.qemu import provision
from harness.qemu.config import SynthFs
from harness.tools.connect import connect

SEED = 2026
ROUNDS = 2000


def test_replies_reach_their_requests_in_any_order_of_waiting(qemu_under_test: QemuUnderTest) -> None:
    rng = random.Random(SEED)
    config, _ = provision.usable_config(qemu_under_test.binary)
    with connect(config) as conn:
        session, fid, highest_tag = conn.session, 100, 0
        unawaited: list[tuple[Any, Pending[RMessage]]] = []
        for _ in range(ROUNDS):
            batch: list[tuple[Any, Pending[RMessage]]] = []
            with session.batch():
                for _ in range(rng.randint(1, 6)):
                    kind = rng.randrange(3)
                    fid += kind == 1
                    request: Request = (
                        Tgetattr(fid=0, request_mask=wire.GETATTR_BASIC), Twalk(fid=0, newfid=fid, wnames=[]),
                        Tstatfs(fid=0),
                    )[kind]  # fmt: skip
                    pending = session.send(request)
                    highest_tag = max(highest_tag, pending.tag)
                    batch.append((request, pending))
            awaited = rng.sample(batch, rng.randint(0, len(batch)))
            for request, pending in awaited:
                _check(request, pending)
            unawaited += [item for item in batch if item not in awaited]
        for request, pending in unawaited:  # answered long ago, settled by the session meanwhile
            _check(request, pending)
        assert highest_tag < 64, f"tags of settled requests were not reused: tag {highest_tag} in use"
        walked = {request.newfid for request, _ in unawaited if isinstance(request, Twalk)}
        assert walked <= session.fids, "a walk nobody waited for is not counted as a fid"
        for held in sorted(session.fids - {0}):
            session.rpc(Tclunk(fid=held))
        session.clunk(0)
        session.close()  # no tag, fid or completion left


def _check(request: Any, pending: Pending[RMessage]) -> None:
    reply = pending.wait()
    assert type(reply.message) is request.reply_class(), (request, reply.message)
    assert wire.peek_header(reply.frame)[2] == pending.tag, (request, pending.tag, reply.frame[:7].hex())


def test_collect_stops_at_a_silent_server_and_not_before(qemu_under_test: QemuUnderTest) -> None:
    """``collect(quiet=...)``: the replies that come are taken; a request the server holds (the
    synth FLUSH file's write, until flushed) is left once nothing has come for ``quiet`` seconds,
    long before ``grace``; without ``quiet`` the whole ``grace`` is waited."""
    config, found = provision.usable_config(qemu_under_test.binary, SynthFs())
    if not found.synth_tree:
        pytest.skip(f"{qemu_under_test.binary} has no synth test tree (no qtest accelerator): no FLUSH file")
    with connect(config) as conn:
        p9, channel = conn.session, conn.channel
        fid = p9.walk_fid(0, ["FLUSH"])
        p9.lopen(fid, os.O_WRONLY)
        with p9.batch():
            for _ in range(8):
                p9.send(Tgetattr(fid=0, request_mask=wire.GETATTR_BASIC))
            blocked = p9.send(Twrite(fid=fid, offset=0, data=b"\x01"))
        start = time.monotonic()
        assert channel.collect(grace=60.0, quiet=0.2) == 1  # the getattrs came, the write did not
        quiet_took = time.monotonic() - start
        assert 0.2 <= quiet_took < 30, quiet_took
        start = time.monotonic()
        assert channel.collect(grace=0.3) == 1
        assert time.monotonic() - start >= 0.3
        assert p9.rpc(Tflush(oldtag=blocked.tag)) == Rflush()  # the write ends with its flush
        assert channel.collect(grace=5.0, quiet=1.0) == 0
