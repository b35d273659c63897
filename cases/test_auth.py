"""Tauth: "afid ... for authentication"; a server that needs none refuses it (attach(5))."""

from __future__ import annotations

import errno

from fixtures.case_path import case_path
from fixtures.expect import expect_rlerror
from harness.p9.messages import Tauth
from harness.p9.session import Session


@case_path("auth/refused", backends=["synth", "local"])
def test_auth_refused(attached: Session) -> None:
    """QEMU needs no authentication: Tauth is refused (EOPNOTSUPP) and afid is not created."""
    with expect_rlerror(errno.EOPNOTSUPP):
        attached.rpc(Tauth(afid=50, uname="", aname="", n_uname=0))
    with expect_rlerror(errno.ENOENT):
        attached.getattr(50)
