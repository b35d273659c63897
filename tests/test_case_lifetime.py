"""What a case leaves behind once it is over: nothing of its 9P session. pytest keeps every item
to the end of the run; the plugin lets go of what the item's stash held for the case (session,
device, place, exception), or every session's history would stay to the end too."""

from __future__ import annotations

import textwrap
from pathlib import Path

from fixtures.devices import QemuUnderTest
from tests.subrun import run_pytest

CASES = textwrap.dedent(
    """
    import gc, weakref
    from fixtures.case_path import case_path

    GONE = []

    @case_path("lifetime/passes", backends=["synth"])
    def test_passes(attached):
        attached.getattr(0)
        GONE.append(weakref.ref(attached))

    @case_path("lifetime/fails", backends=["synth"])
    def test_fails(attached):
        GONE.append(weakref.ref(attached))
        assert attached.getattr(0).qid is None, "fails on purpose: its exception holds the session"

    @case_path("lifetime/after", backends=["synth"])
    def test_after(attached):
        gc.collect()
        assert len(GONE) == 2 and [ref() for ref in GONE] == [None, None], "a session outlived its case"
    """
)


def test_sessions_of_finished_cases_are_let_go(tmp_path: Path, qemu_under_test: QemuUnderTest) -> None:
    """The passing case's session and the failing one's (held by its traceback too) are freed
    before the next case: the third case finds both weak references dead."""
    proc = run_pytest(tmp_path, qemu_under_test, source=CASES)
    out, _ = proc.communicate(timeout=120)
    assert "fails on purpose" in out, out
    assert "1 failed, 2 passed" in out, out
