"""Tflush: "the server should answer the flush message immediately ... If it recognizes oldtag
as the tag of a pending transaction, it should abort any pending response and discard that tag.
... if [the reply] is received before the Rflush, it is the reply to the original message"
(flush(5)). QEMU returns a flushed request's buffer with nothing written, then Rflush."""

from __future__ import annotations

import os

import pytest

from fixtures.case_path import case_path
from harness.p9.messages import Rflush, Rwrite, Tflush, Twrite
from harness.p9.session import Session


def open_flush_file(p9: Session) -> int:
    fid = p9.walk_fid(0, ["FLUSH"])
    p9.lopen(fid, os.O_WRONLY)
    return fid


@pytest.mark.needs_synth_tree
@case_path("flush/success", backends=["synth"])
def test_flush_success(attached: Session) -> None:
    """A write that blocks (first byte 1) is cancelled: its descriptor comes back with length 0
    before the Rflush, and Rflush carries the Tflush tag."""
    p9 = attached
    fid = open_flush_file(p9)
    write = p9.send(Twrite(fid=fid, offset=0, data=b"\x01"))
    flush = p9.send(Tflush(oldtag=write.tag))
    assert flush.tag != write.tag
    flushed, answer = write.wait(), flush.wait()
    assert (flushed.used_len, flushed.message) == (0, None)
    assert answer.message == Rflush() and answer.tag == flush.tag
    assert answer.used_len == 7
    assert flushed.order < answer.order, "Rflush came before the flushed request was returned"
    p9.clunk(fid)


@pytest.mark.needs_synth_tree
@case_path("flush/ignored", backends=["synth"])
def test_flush_ignored(attached: Session) -> None:
    """A write that completes at once (first byte 0) is answered normally, and its Rwrite comes
    before the Rflush."""
    p9 = attached
    fid = open_flush_file(p9)
    write = p9.send(Twrite(fid=fid, offset=0, data=b"\x00"))
    flush = p9.send(Tflush(oldtag=write.tag))
    written, answer = write.wait(), flush.wait()
    assert written.message == Rwrite(count=1)
    assert answer.message == Rflush()
    assert written.order < answer.order
    p9.clunk(fid)


@pytest.mark.needs_synth_tree
@case_path("flush/after_completion", backends=["synth"])
def test_flush_after_completion(attached: Session) -> None:
    """Flushing a tag whose request already finished gets a plain Rflush, and the tag works for
    the next request."""
    p9 = attached
    fid = open_flush_file(p9)
    write = p9.send(Twrite(fid=fid, offset=0, data=b"\x00"))
    assert write.result().count == 1
    old = write.tag
    assert p9.rpc(Tflush(oldtag=old)) == Rflush()
    again = p9.send(Twrite(fid=fid, offset=0, data=b"\x00"))
    assert again.tag == old and again.result().count == 1
    p9.clunk(fid)
