"""Tclunk: "the mapping ... between the fid and the file is removed" (clunk(5))."""

from __future__ import annotations

import errno

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from harness.p9.session import Session


@case_path("clunk/twice", backends=["synth", "local"])
def test_clunk_twice(attached: Session) -> None:
    """The second Tclunk of a fid finds nothing: ENOENT."""
    fid = attached.walk_fid(0, [])
    attached.clunk(fid)
    with expect_rlerror(errno.ENOENT):
        attached.clunk(fid)
