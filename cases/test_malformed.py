"""Malformed requests, one case per catalogue entry (harness/p9/malformed.py, generated from the
message table). On every version: QEMU stays alive, the answer is one a server may give (an
Rlerror, a device error, or the frame's own reply type: never a crash, never another reply), and
the device serves a new session afterwards (after a reset where it asked for one). Then the answer
must be the one recorded on a QEMU with the same fixes for that request (malformed.CHANGED_BY names
them, harness/qemu/versions.py says which version has which; `python -m harness malformed-report
--record` records a version), so a change of behaviour shows on any release, of any stable branch."""

from __future__ import annotations

import pytest

from fixtures.case_path import case_path
from fixtures.devices import QemuUnderTest
from fixtures.pool import Device
from harness.p9 import malformed, wire
from harness.p9.session import Session

ENTRIES = {entry.name: entry for entry in malformed.catalogue()}


@pytest.mark.needs_synth_tree
@case_path("malformed/{entry}", backends=["synth"], entry=list(ENTRIES))
def test_malformed(p9: Session, device: Device, qemu_under_test: QemuUnderTest, entry: str) -> None:
    item = ENTRIES[entry]
    blocker = malformed.prepare(p9, item)
    outcome = malformed.run(p9, item)
    assert not malformed.died(outcome), f"{item.what}: QEMU {outcome}"
    assert device.alive()
    assert malformed.plausible(item, outcome), f"{item.what}: answered with {outcome}"
    if malformed.device_lost(outcome):
        device.reset()  # the device asked for one
    else:
        malformed.cleanup(p9, blocker, outcome)
    p9.close(check=False)  # the frame may have made or dropped fids the session cannot know of
    fresh = Session(device.channel)  # a new Tversion: the device serves requests again
    fresh.version()
    fresh.attach(0)
    assert fresh.getattr(0, wire.GETATTR_BASIC).qid.type == wire.QTDIR
    fresh.clunk(0)
    version = qemu_under_test.probe.version
    record = f"python -m harness malformed-report --record --qemu-binary {qemu_under_test.binary}"
    found = malformed.expected(entry, version, malformed.recordings())
    assert found is not None, (
        f"no recording of {entry} on a QEMU with the fixes {version} has for it "
        f"({malformed.changes_of(entry)}): {record}"
    )
    base_outcome, base = found
    wanted = malformed.as_seen_on(device.machine.config.transport, base_outcome)
    assert outcome == wanted, (
        f"{item.what}: QEMU {version} answers {outcome!r}; QEMU {base}, which has the same fixes for "
        f"this request, was recorded answering {wanted!r}; if that is the intended behaviour of this "
        f"version, record it: {record}"
    )
