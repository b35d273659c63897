"""The typed message table is what makes a case's mistakes type errors: mypy --strict, run on a
case with a misspelt request field and a wrong reply field, must reject both."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api

CASE = textwrap.dedent(
    """
    from harness.p9.messages import Twalk
    from harness.p9.session import Session


    def test_misspelt(p9: Session) -> None:
        reply = p9.rpc(Twalk(fid=0, newfid=1, wname=["a"]))
        assert reply.qid
        reply.qids = []
    """
)


def test_mypy_rejects_a_misspelt_field_a_wrong_reply_field_and_an_assignment(tmp_path: Path) -> None:
    case = tmp_path / "test_bad.py"
    case.write_text(CASE)
    out, err, status = api.run(["--strict", "--no-error-summary", str(case)])
    assert status == 1, out + err
    assert 'Unexpected keyword argument "wname" for "Twalk"; did you mean "wnames"?' in out
    assert '"Rwalk" has no attribute "qid"; maybe "qids"?' in out
    assert 'Property "qids" defined in "Rwalk" is read-only' in out
